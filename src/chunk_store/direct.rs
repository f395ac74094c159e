//! Writing disk-tier blocks around the page cache (`O_DIRECT`).
//!
//! A block fetched for a reader is already in memory twice over (the chunk store's buffer and, once
//! served, the FUSE file's page cache). Written to its cache file through the page cache, it would
//! take a third copy of the same bytes in memory, and the kernel's copy into page-cache folios and
//! the later writeback cost the mount more CPU than the rest of the read path (a profile of a cold
//! read had 67% of its samples there). `O_DIRECT` moves the bytes from our memory to the device.
//!
//! `O_DIRECT` wants the buffer's address, the file offset and the length aligned to the device's
//! block size. Pooled block buffers start aligned (`buffer_pool`), so their whole pages are written
//! and read in place; the last partial page of a block, and any block not in a pooled buffer, go
//! through an aligned scratch buffer, `CHUNK` bytes at a time, padded with zeros, and the file is
//! cut to its real length afterwards. Filesystems that refuse `O_DIRECT` (tmpfs, some overlays) get the
//! buffered write, and the caller then drops the pages it wrote.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use parking_lot::Mutex;

use crate::chunk_store::buffer_pool::{ALIGN, PooledBuf};

/// Bytes written per `pwrite`: large enough for the device to stream, small enough that the
/// scratch buffers stay a few MiB in all.
const CHUNK: usize = 1 << 20;

/// Idle scratch buffers kept (one per concurrent disk writer).
const MAX_IDLE: usize = 4;

/// A window (`CHUNK` bytes, or a join's `COPY_CHUNK`) aligned to `ALIGN`, inside an allocation
/// `ALIGN` bytes larger (the allocator does not promise the alignment, the window's offset makes
/// it).
struct Scratch {
    buf: Vec<u8>,
    /// Where the aligned window starts in `buf`.
    start: usize,
}

impl Scratch {
    /// `None` when the allocation fails (the caller then reports out-of-memory instead of aborting).
    fn new() -> Option<Scratch> {
        Scratch::with_len(CHUNK)
    }

    fn with_len(len: usize) -> Option<Scratch> {
        let mut buf = Vec::new();
        buf.try_reserve_exact(len + ALIGN).ok()?;
        // Zeroed once, so the window is initialised bytes.
        buf.resize(len + ALIGN, 0);
        let base = buf.as_ptr() as usize;
        let start = base.next_multiple_of(ALIGN) - base;
        Some(Scratch { buf, start })
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + CHUNK]
    }
}

static IDLE: Mutex<Vec<Scratch>> = Mutex::new(Vec::new());

/// Writes `data` to a new file at `path` with `O_DIRECT`. `Ok(false)`: the filesystem does not do
/// `O_DIRECT` (nothing was left behind; write it buffered instead).
pub(super) fn write_new(path: &Path, data: &[u8]) -> std::io::Result<bool> {
    let Some(file) = create(path)? else {
        return Ok(false);
    };
    let Some(mut scratch) = IDLE.lock().pop().or_else(Scratch::new) else {
        let _ = std::fs::remove_file(path);
        return Err(std::io::Error::from(std::io::ErrorKind::OutOfMemory));
    };
    let r = write_chunks(&file, data, &mut scratch);
    {
        let mut idle = IDLE.lock();
        if idle.len() < MAX_IDLE {
            idle.push(scratch);
        }
    }
    match r {
        Ok(()) => Ok(true),
        Err(e) => {
            drop(file);
            let _ = std::fs::remove_file(path);
            // A device or filesystem that takes the open but not the alignment: buffered instead.
            if e.raw_os_error() == Some(libc::EINVAL) {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}

fn write_chunks(file: &File, data: &[u8], scratch: &mut Scratch) -> std::io::Result<()> {
    let mut off = 0usize;
    if (data.as_ptr() as usize).is_multiple_of(ALIGN) {
        // A pooled block buffer starts aligned: its whole pages go straight to the device, and
        // only the last partial page through the scratch buffer.
        off = data.len() - data.len() % ALIGN;
        if off > 0 {
            file.write_all_at(&data[..off], 0)?;
        }
    }
    let buf = scratch.as_mut_slice();
    while off < data.len() {
        let n = CHUNK.min(data.len() - off);
        buf[..n].copy_from_slice(&data[off..off + n]);
        let padded = n.next_multiple_of(ALIGN);
        buf[n..padded].fill(0);
        file.write_all_at(&buf[..padded], off as u64)?;
        off += n;
    }
    if !data.len().is_multiple_of(ALIGN) {
        file.set_len(data.len() as u64)?;
    }
    Ok(())
}

/// Writes `data` to a new file at `path` through the page cache, then asks the kernel to write the
/// pages out and drop them (the fallback where `O_DIRECT` is refused).
pub(super) fn write_new_buffered(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(path)?;
    f.write_all(data)?;
    // Best effort: pages still dirty are skipped by DONTNEED; the write-out request makes most of
    // them clean first.
    let _ = crate::util::linux::write_out(&f);
    drop_pages(&f);
    Ok(())
}

/// Reads `len` bytes at `offset` (a multiple of 4 KiB) of the file at `path` with `O_DIRECT` into
/// `out`, which must be empty. `Ok(false)`: the filesystem does not do `O_DIRECT`, or `out` cannot
/// take the read in place (nothing was read).
pub(super) fn read_at(path: &Path, offset: u64, len: usize, out: &mut PooledBuf) -> std::io::Result<bool> {
    let room = len.next_multiple_of(ALIGN);
    if !out.is_empty()
        || out.spare() < room
        || !(out.as_ref().as_ptr() as usize).is_multiple_of(ALIGN)
        || !offset.is_multiple_of(ALIGN as u64)
    {
        return Ok(false);
    }
    let Some(file) = open_read(path)? else {
        return Ok(false);
    };
    match out.pread_from(&file, offset, len, room) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && out.is_empty() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Bytes a join moves per read and write: large enough for the device to stream.
const COPY_CHUNK: usize = 4 << 20;

/// Joins copying at once. Each holds a `COPY_CHUNK` buffer outside the memory budget, and joins
/// start one per closed file: a hundred files closing at once would otherwise take a hundred
/// buffers. The copies are bound by the disk, so more at once would not finish sooner.
const COPIES_AT_ONCE: usize = 2;

static COPIES: Mutex<usize> = Mutex::new(0);
static COPY_DONE: parking_lot::Condvar = parking_lot::Condvar::new();

/// Opens `path` as `opts` say, with `O_DIRECT`; `None`: the filesystem does not do it (nothing
/// was created).
fn open_direct(opts: &mut std::fs::OpenOptions, path: &Path) -> std::io::Result<Option<File>> {
    match opts.custom_flags(libc::O_DIRECT).open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Opens `path` for reading with `O_DIRECT`; `None`: the filesystem does not do it.
pub(super) fn open_read(path: &Path) -> std::io::Result<Option<File>> {
    open_direct(std::fs::OpenOptions::new().read(true), path)
}

/// Creates `path` (it must not exist) for writing with `O_DIRECT`; `None`: the filesystem does
/// not do it (nothing was created).
pub(super) fn create(path: &Path) -> std::io::Result<Option<File>> {
    open_direct(std::fs::OpenOptions::new().write(true).create_new(true), path)
}

/// A buffer for copies between `O_DIRECT` files: `COPY_CHUNK` bytes aligned to `ALIGN`. At most
/// `COPIES_AT_ONCE` exist at a time; dropping one lets the next copy start.
pub(super) struct CopyBuf(Scratch, usize);

impl CopyBuf {
    /// Waits until fewer than `COPIES_AT_ONCE` copies run (blocking: join threads only). `None`
    /// when the allocation fails.
    pub(super) fn new() -> Option<CopyBuf> {
        let mut running = COPIES.lock();
        while *running >= COPIES_AT_ONCE {
            COPY_DONE.wait(&mut running);
        }
        *running += 1;
        drop(running);
        let buf = Scratch::with_len(COPY_CHUNK).map(|s| CopyBuf(s, COPY_CHUNK));
        if buf.is_none() {
            copy_ended();
        }
        buf
    }
}

impl Drop for CopyBuf {
    fn drop(&mut self) {
        copy_ended();
    }
}

fn copy_ended() {
    *COPIES.lock() -= 1;
    COPY_DONE.notify_one();
}

/// Copies the first `len` bytes of `src` into `out` at `at` (a multiple of `ALIGN`), both opened
/// with `O_DIRECT`, through `buf`. Neither file's bytes pass through the page cache, and no page
/// is copied by the CPU: a join of a 512 MiB file through the page cache cost the mount
/// 0.65–1.05 CPU-seconds and churned a GiB of page cache beside the reader that had just read it.
/// A last partial page is written padded with zeros: the caller cuts `out` to its length.
pub(super) fn copy_at(src: &File, len: u64, out: &File, at: u64, buf: &mut CopyBuf) -> std::io::Result<()> {
    let CopyBuf(scratch, cap) = buf;
    let window = &mut scratch.buf[scratch.start..scratch.start + *cap];
    let mut off = 0u64;
    while off < len {
        let want = (*cap as u64).min(len - off) as usize;
        let padded = want.next_multiple_of(ALIGN);
        let mut got = 0usize;
        while got < want {
            match src.read_at(&mut window[got..padded], off + got as u64) {
                Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof)),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        window[want..padded].fill(0);
        out.write_all_at(&window[..padded], at + off)?;
        off += want as u64;
    }
    Ok(())
}

/// Drops the page-cache pages of `file` (after a block was read from it into memory, where the
/// chunk store and the FUSE page cache hold it from then on).
pub(super) fn drop_pages(file: &File) {
    // Best effort: a filesystem that ignores the advice keeps its pages.
    let _ = rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_two_copies_hold_a_buffer_at_once() {
        let a = CopyBuf::new().unwrap();
        let b = CopyBuf::new().unwrap();
        let got = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let third = std::thread::spawn({
            let got = got.clone();
            move || {
                let c = CopyBuf::new().unwrap();
                got.store(true, std::sync::atomic::Ordering::SeqCst);
                drop(c);
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!got.load(std::sync::atomic::Ordering::SeqCst), "a third copy waits");
        drop(a);
        third.join().unwrap();
        assert!(got.load(std::sync::atomic::Ordering::SeqCst));
        drop(b);
    }

    #[test]
    fn odd_lengths_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        for (i, len) in [0usize, 1, 4095, 4096, 4097, CHUNK, CHUNK + 123, 3 * CHUNK - 1]
            .into_iter()
            .enumerate()
        {
            let data: Vec<u8> = (0..len).map(|k| (k * 31 + i) as u8).collect();
            let p = dir.path().join(format!("b{i}"));
            let direct = write_new(&p, &data).unwrap();
            if !direct {
                write_new_buffered(&p, &data).unwrap();
            }
            assert_eq!(std::fs::read(&p).unwrap(), data, "length {len} (direct: {direct})");
            let pool = crate::chunk_store::buffer_pool::BufferPool::new(3 * CHUNK, 1);
            let mut back = pool.acquire(len);
            if read_at(&p, 0, len, &mut back).unwrap() {
                assert_eq!(back.as_ref(), &data[..], "length {len} read back with O_DIRECT");
            }
            // From an aligned pooled buffer: pages in place, the tail through the scratch buffer.
            let mut src = pool.acquire(len);
            src.extend_from_slice(&data);
            let p2 = dir.path().join(format!("a{i}"));
            if write_new(&p2, src.as_ref()).unwrap() {
                assert_eq!(
                    std::fs::read(&p2).unwrap(),
                    data,
                    "length {len} written from a pooled buffer"
                );
            }
        }
        let p = dir.path().join("buffered");
        write_new_buffered(&p, b"abc").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"abc");
        assert!(write_new(&p, b"x").is_err(), "an existing file is not overwritten");
    }
}
