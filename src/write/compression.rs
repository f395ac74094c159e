//! Whether an upload's xorbs are compressed, decided from a sample of its files.

/// How an upload's xorbs are compressed. The crates' `auto` policy compresses every chunk (LZ4,
/// or LZ4 after byte grouping) and keeps the result only if it is smaller: on data that does not
/// compress (random bytes, zstd parquet, images, archives) that is a quarter of the mount's CPU
/// spent for nothing (measured: `SerializedXorbObject::from_xorb` was 28% of its samples while it
/// uploaded 4 x 64 MiB of random data, and RSS went from 105 to 170 MiB). A sample of the file
/// decides; the chunks stored are the same either way for data that does not compress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// The crates' `auto` policy. (The discriminants index `Uploader::sessions`.)
    Auto = 0,
    /// Policy `none`: chunks stored as they are.
    Off = 1,
}

/// Bytes per sample piece (about one chunk) and pieces per file for `Compression::of_file`.
const SAMPLE_PIECE: usize = 64 << 10;
const SAMPLE_PIECES: u64 = 4;

impl Compression {
    /// `Off` if no piece of the sample compresses by at least 2% with the scheme the crates would
    /// pick for it; `Auto` otherwise.
    pub fn of_pieces<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Compression {
        use xet_core_structures::xorb_object::CompressionScheme;
        let mut any = false;
        for piece in pieces {
            if piece.is_empty() {
                continue;
            }
            any = true;
            let scheme = CompressionScheme::choose_from_data(piece);
            match scheme.compress_from_slice(piece) {
                Ok(out) if out.len() * 100 < piece.len() * 98 => return Compression::Auto,
                Ok(_) => {}
                // The crates would fail the same way; let them report it.
                Err(_) => return Compression::Auto,
            }
        }
        if any { Compression::Off } else { Compression::Auto }
    }

    /// The choice for `len` bytes of `file`: `SAMPLE_PIECES` pieces spread over it (a small
    /// file whole).
    pub fn of_file(file: &std::fs::File, len: u64) -> std::io::Result<Compression> {
        let mut pieces = Vec::with_capacity(SAMPLE_PIECES as usize);
        for at in sample_offsets(len) {
            let mut buf = vec![0u8; SAMPLE_PIECE.min((len - at) as usize)];
            std::os::unix::fs::FileExt::read_exact_at(file, &mut buf, at)?;
            pieces.push(buf);
        }
        Ok(Compression::of_pieces(pieces.iter().map(|p| p.as_slice())))
    }

    pub fn of_bytes(bytes: &[u8]) -> Compression {
        Compression::of_pieces(sample_offsets(bytes.len() as u64).map(|at| {
            let at = at as usize;
            &bytes[at..(at + SAMPLE_PIECE).min(bytes.len())]
        }))
    }
}

/// Where the sample pieces of `len` bytes start: evenly spread, or only 0 for what one sample
/// covers whole.
fn sample_offsets(len: u64) -> impl Iterator<Item = u64> {
    let whole = len <= SAMPLE_PIECE as u64 * SAMPLE_PIECES;
    let pieces = if whole {
        len.div_ceil(SAMPLE_PIECE as u64)
    } else {
        SAMPLE_PIECES
    };
    (0..pieces).map(move |i| {
        if whole {
            i * SAMPLE_PIECE as u64
        } else {
            (len / SAMPLE_PIECES * i).min(len - SAMPLE_PIECE as u64)
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Bytes no compressor shrinks (a xorshift stream).
    pub(crate) fn noise(len: usize, mut x: u64) -> Vec<u8> {
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn json_rows(len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 64);
        let mut i = 0u64;
        while out.len() < len {
            out.extend_from_slice(format!("{{\"id\": {i}, \"text\": \"row {i} of the table\"}}\n").as_bytes());
            i += 1;
        }
        out.truncate(len);
        out
    }

    #[test]
    fn random_data_is_uploaded_without_compression_and_text_with_it() {
        assert_eq!(Compression::of_bytes(&noise(3 << 20, 7)), Compression::Off);
        assert_eq!(
            Compression::of_bytes(&noise(10_000, 9)),
            Compression::Off,
            "a small file whole"
        );
        assert_eq!(Compression::of_bytes(&json_rows(3 << 20)), Compression::Auto);
        assert_eq!(Compression::of_bytes(&json_rows(500)), Compression::Auto);
        assert_eq!(Compression::of_bytes(&[]), Compression::Auto, "nothing to judge by");
        // A safetensors-like file: a JSON header, then 16-bit floats whose high bytes repeat
        // (byte grouping makes them compress).
        let mut weights = json_rows(8 << 10);
        for (i, b) in noise(3 << 20, 3).into_iter().enumerate() {
            weights.push(if i % 2 == 1 { 0x3c | (b & 1) } else { b });
        }
        assert_eq!(Compression::of_bytes(&weights), Compression::Auto);
    }

    #[test]
    fn any_compressible_piece_of_the_sample_keeps_compression() {
        // Random, except its last quarter: the last piece of the sample lies there.
        let mut mixed = noise(4 << 20, 11);
        let tail = json_rows(1 << 20);
        mixed[3 << 20..].copy_from_slice(&tail);
        assert_eq!(Compression::of_bytes(&mixed), Compression::Auto);
        let offsets: Vec<u64> = sample_offsets(4 << 20).collect();
        assert_eq!(offsets, vec![0, 1 << 20, 2 << 20, 3 << 20]);
        let offsets: Vec<u64> = sample_offsets(100_000).collect();
        assert_eq!(offsets, vec![0, 65_536], "a small file is sampled whole");
        assert_eq!(sample_offsets(0).count(), 0);
        // The last piece never runs past the end.
        let len = (4u64 << 20) + 3;
        assert!(sample_offsets(len).all(|at| at + SAMPLE_PIECE as u64 <= len));
    }

    #[test]
    fn a_file_is_sampled_from_disk_like_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (random, text) = (dir.path().join("r"), dir.path().join("t"));
        std::fs::write(&random, noise(2 << 20, 5)).unwrap();
        std::fs::write(&text, json_rows(2 << 20)).unwrap();
        let of = |p: &std::path::Path| {
            let f = std::fs::File::open(p).unwrap();
            Compression::of_file(&f, f.metadata().unwrap().len()).unwrap()
        };
        assert_eq!(of(&random), Compression::Off);
        assert_eq!(of(&text), Compression::Auto);
    }
}
