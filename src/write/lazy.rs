//! A staged copy of a Hub file that holds only the bytes written to it (an overlay's copy-up).
//!
//! Copying a Hub file whole into staging when it is first opened for writing costs its full size on
//! local disk and in downloads, however little is changed: a 4 KiB edit of a 512 MiB weight file.
//! So an overlay's staged file can keep a *base*: the Hub file it was opened from. Its data file is
//! sparse; `written` says which byte ranges the data file holds, and every other byte below `limit`
//! (the base's size, lowered by truncates) is the base's. Readers splice the two (`missing`); the
//! whole content is fetched only when it must leave the machine (publishing), and then the file
//! stops being lazy.
//!
//! The state survives a crash: `<id>.base` names the base (written once, before the file is
//! visible) and `<id>.ext` logs every write and truncate as a fixed 17-byte record, appended with
//! one `write(2)` after the data itself, so a replay never claims bytes the data file lacks.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::layer_log::LoggedMeta;
use super::staging::DirtyFile;
use crate::hub_client::FileMeta;

/// What the base is: the Hub file and the commit it was read at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    pub meta: FileMeta,
    pub commit: String,
}

#[derive(Serialize, Deserialize)]
struct BaseFile {
    meta: LoggedMeta,
    commit: String,
}

const WRITE: u8 = b'w';
const TRUNCATE: u8 = b't';
const RECORD: usize = 17;

/// The byte ranges a lazy file holds, and its log.
pub struct Lazy {
    pub base: Base,
    /// Bytes below this offset that were not written are the base's.
    limit: u64,
    /// start → end of each range the data file holds (disjoint, not adjacent).
    written: BTreeMap<u64, u64>,
    ext: File,
    base_path: PathBuf,
    ext_path: PathBuf,
}

fn paths(data_path: &Path) -> (PathBuf, PathBuf) {
    (data_path.with_extension("base"), data_path.with_extension("ext"))
}

impl Lazy {
    /// Starts a lazy file beside `data_path` over `base`.
    pub fn create(data_path: &Path, base: Base) -> std::io::Result<Lazy> {
        let (base_path, ext_path) = paths(data_path);
        let body = serde_json::to_vec(&BaseFile {
            meta: LoggedMeta::from(&base.meta),
            commit: base.commit.clone(),
        })
        .map_err(std::io::Error::other)?;
        let mut f = File::create(&base_path)?;
        f.write_all(&body)?;
        f.sync_data()?;
        // (Staged file ids are never reused: a log left here would be of no other file.)
        let ext = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&ext_path)?;
        ext.set_len(0)?;
        Ok(Lazy {
            limit: base.meta.size,
            base,
            written: BTreeMap::new(),
            ext,
            base_path,
            ext_path,
        })
    }

    /// The lazy state of the staged file at `data_path`, if it has one (after a restart).
    pub fn open(data_path: &Path) -> std::io::Result<Option<Lazy>> {
        let (base_path, ext_path) = paths(data_path);
        let body = match std::fs::read(&base_path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let b: BaseFile = serde_json::from_slice(&body)
            .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, format!("{}: {e}", base_path.display())))?;
        let meta = FileMeta::try_from(b.meta)?;
        let mut ext = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&ext_path)?;
        let mut raw = Vec::new();
        ext.read_to_end(&mut raw)?;
        let mut lazy = Lazy {
            limit: meta.size,
            base: Base { meta, commit: b.commit },
            written: BTreeMap::new(),
            ext,
            base_path,
            ext_path,
        };
        // A torn last record (a crash mid-append) is ignored: its data write may not have landed.
        for rec in raw.chunks_exact(RECORD) {
            let a = u64::from_le_bytes(rec[1..9].try_into().unwrap_or_default());
            let b = u64::from_le_bytes(rec[9..17].try_into().unwrap_or_default());
            match rec[0] {
                WRITE => lazy.apply_write(a, b),
                TRUNCATE => lazy.apply_truncate(a),
                other => {
                    return Err(std::io::Error::new(
                        ErrorKind::InvalidData,
                        format!("{}: unknown record {other}", lazy.ext_path.display()),
                    ));
                }
            }
        }
        Ok(Some(lazy))
    }

    fn append(&mut self, kind: u8, a: u64, b: u64) -> std::io::Result<()> {
        let mut rec = [0u8; RECORD];
        rec[0] = kind;
        rec[1..9].copy_from_slice(&a.to_le_bytes());
        rec[9..17].copy_from_slice(&b.to_le_bytes());
        self.ext.write_all(&rec)
    }

    fn apply_write(&mut self, start: u64, end: u64) {
        if end <= start {
            return;
        }
        let (mut s, mut e) = (start, end);
        // Merge every range that overlaps or touches [s, e).
        let overlapping: Vec<(u64, u64)> = self
            .written
            .range(..=e)
            .rev()
            .take_while(|(_, end)| **end >= s)
            .map(|(a, b)| (*a, *b))
            .collect();
        for (a, b) in overlapping {
            self.written.remove(&a);
            s = s.min(a);
            e = e.max(b);
        }
        self.written.insert(s, e);
    }

    fn apply_truncate(&mut self, size: u64) {
        self.limit = self.limit.min(size);
        let cut: Vec<(u64, u64)> = self
            .written
            .range(..)
            .filter(|(_, e)| **e > size)
            .map(|(a, b)| (*a, *b))
            .collect();
        for (a, _) in cut {
            self.written.remove(&a);
            if a < size {
                self.written.insert(a, size);
            }
        }
    }

    /// The data file now holds `[offset, offset + len)` (call after the data write).
    pub fn note_write(&mut self, offset: u64, len: u64) -> std::io::Result<()> {
        if len == 0 || offset >= self.limit {
            // Past the base's bytes everything is the data file's anyway.
            return Ok(());
        }
        self.append(WRITE, offset, offset + len)?;
        self.apply_write(offset, offset + len);
        Ok(())
    }

    /// The file was cut (or grown) to `size`.
    pub fn note_truncate(&mut self, size: u64) -> std::io::Result<()> {
        if size >= self.limit {
            return Ok(());
        }
        self.append(TRUNCATE, size, 0)?;
        self.apply_truncate(size);
        Ok(())
    }

    /// The parts of `[offset, offset + len)` that are the base's, not yet in the data file.
    pub fn missing(&self, offset: u64, len: u64) -> Vec<(u64, u64)> {
        let end = (offset + len).min(self.limit);
        let mut out = Vec::new();
        let mut at = offset;
        if at >= end {
            return out;
        }
        // A range starting before `offset` may cover it.
        if let Some((_, e)) = self.written.range(..=at).next_back()
            && *e > at
        {
            at = *e;
        }
        for (s, e) in self.written.range(at..) {
            if at >= end {
                break;
            }
            if *s >= end {
                break;
            }
            if *s > at {
                out.push((at, *s));
            }
            at = at.max(*e);
        }
        if at < end {
            out.push((at, end));
        }
        out
    }

    /// Bytes the data file holds below the base's size (what copy-up stored).
    pub fn stored(&self) -> u64 {
        self.written
            .iter()
            .map(|(s, e)| e.min(&self.limit).saturating_sub(*s))
            .sum()
    }

    /// The file holds every byte now (filled before an upload): forget the base for good.
    pub fn finish(self) -> std::io::Result<()> {
        for p in [&self.base_path, &self.ext_path] {
            match std::fs::remove_file(p) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Removes the files of the lazy state beside `data_path` (the staged file is gone).
    pub fn remove_files(data_path: &Path) {
        let (b, e) = paths(data_path);
        let _ = std::fs::remove_file(b);
        let _ = std::fs::remove_file(e);
    }
}

impl DirtyFile {
    /// Makes this staged copy of a Hub file hold only what is written to it from now on: the rest
    /// reads from `base` (`write::lazy`). Called on a new, empty staged file.
    pub fn set_base(&self, base: Base) -> std::io::Result<()> {
        let size = base.meta.size;
        let file = self.disk()?;
        let lazy = Lazy::create(self.data_path(), base)?;
        let mut s = self.st.lock();
        file.set_len(size)?;
        s.size = size;
        *self.lazy.lock() = Some(lazy);
        Ok(())
    }

    /// The Hub file the bytes not written yet come from, if this is a copy-up.
    pub fn base(&self) -> Option<Base> {
        self.lazy.lock().as_ref().map(|l| l.base.clone())
    }

    /// The parts of `[offset, offset + len)` still to be read from the base.
    pub fn missing(&self, offset: u64, len: u64) -> Vec<(u64, u64)> {
        self.lazy
            .lock()
            .as_ref()
            .map(|l| l.missing(offset, len))
            .unwrap_or_default()
    }

    /// Bytes a copy-up holds of its base's range (`None`: not a copy-up).
    pub fn stored(&self) -> Option<u64> {
        self.lazy.lock().as_ref().map(Lazy::stored)
    }

    /// Puts the base's bytes `data` at `offset`, where nothing was written since they were asked
    /// for (a newer write wins). Not a change of content: the generation stays.
    pub fn fill_at(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let mut lazy = self.lazy.lock();
        let Some(l) = lazy.as_mut() else { return Ok(()) };
        for (s, e) in l.missing(offset, data.len() as u64) {
            let part = &data[(s - offset) as usize..(e - offset) as usize];
            self.disk()?.write_all_at(part, s)?;
            l.note_write(s, e - s)?;
        }
        Ok(())
    }

    /// A copy-up whose every byte is now local stops being one.
    pub fn finish_copy_up(&self) -> std::io::Result<bool> {
        let size = self.size();
        let mut lazy = self.lazy.lock();
        match lazy.as_ref() {
            Some(l) if l.missing(0, size).is_empty() => {
                self.disk()?.sync_data()?;
                if let Some(l) = lazy.take() {
                    l.finish()?;
                }
                Ok(true)
            }
            Some(_) => Ok(false),
            None => Ok(true),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::hub_client::ContentId;

    fn base(size: u64) -> Base {
        Base {
            meta: FileMeta {
                remote_path: "w.bin".into(),
                commit: Arc::from("c".repeat(40)),
                size,
                id: ContentId::Xet("ab".repeat(32)),
                sha256: Some("cd".repeat(32)),
                last_commit: None,
            },
            commit: "c".repeat(40),
        }
    }

    /// A model of the file: per byte, whether it comes from the base.
    fn model_missing(from_base: &[bool], offset: u64, len: u64) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        let end = (offset + len).min(from_base.len() as u64);
        for i in offset..end {
            if from_base[i as usize] {
                match out.last_mut() {
                    Some((_, e)) if *e == i => *e = i + 1,
                    _ => out.push((i, i + 1)),
                }
            }
        }
        out
    }

    #[test]
    fn missing_ranges_follow_writes_and_truncates_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("1.data");
        let size = 4096u64;
        let mut lazy = Lazy::create(&data, base(size)).unwrap();
        let mut from_base = vec![true; size as usize];
        let mut limit = size;
        let mut seed = 7u64;
        let mut next = |m: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for step in 0..400 {
            if next(10) == 0 {
                let s = next(size + 512);
                lazy.note_truncate(s).unwrap();
                for (i, b) in from_base.iter_mut().enumerate() {
                    if i as u64 >= s.min(limit) {
                        *b = false;
                    }
                }
                limit = limit.min(s);
            } else {
                let (off, len) = (next(size + 256), next(300));
                lazy.note_write(off, len).unwrap();
                for i in off..(off + len).min(size) {
                    from_base[i as usize] = false;
                }
            }
            let (off, len) = (next(size), next(2000));
            assert_eq!(
                lazy.missing(off, len),
                model_missing(&from_base, off, len),
                "step {step}"
            );
        }
        let stored = lazy.stored();
        drop(lazy);
        let again = Lazy::open(&data).unwrap().unwrap();
        assert_eq!(again.stored(), stored);
        assert_eq!(again.missing(0, size), model_missing(&from_base, 0, size));
        assert_eq!(again.base, base(size));
        again.finish().unwrap();
        assert!(Lazy::open(&data).unwrap().is_none());
    }

    #[test]
    fn a_torn_last_record_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("2.data");
        let mut lazy = Lazy::create(&data, base(100)).unwrap();
        lazy.note_write(10, 5).unwrap();
        drop(lazy);
        let mut f = OpenOptions::new().append(true).open(dir.path().join("2.ext")).unwrap();
        f.write_all(&[WRITE, 1, 2, 3]).unwrap();
        let again = Lazy::open(&data).unwrap().unwrap();
        assert_eq!(again.missing(0, 100), [(0, 10), (15, 100)]);
    }
}
