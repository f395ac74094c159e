//! The data log: where a new small file's bytes live until it needs a data file of its own.
//!
//! A staged file used to get its `<id>.data` at create. On ext4 a create costs 0.2–1.4 ms (a new
//! inode, and the directory block it dirties, which the first fsync of every new file also
//! syncs), and a `cp -r` of thousands of small files spent most of its time there. A new file now
//! starts without one: its bytes are kept in memory and appended, as they are written, to one
//! shared `data.log` (no fsync per write; the sealer syncs it once per batch of quick closes, as
//! it does the opens log). The file moves to a data file of its own (it is *promoted*) when it
//! grows past [`LOGGED_MAX`], when the bytes held here would pass [`HELD_MAX`], or when something
//! needs the file itself: a durable seal (fsync, NFS COMMIT, a rename), a copy-up, a live upload,
//! an overlay's recovery.
//!
//! A crash of the mount loses nothing: the log is in the page cache. At the next start the log is
//! replayed and every file it still holds gets its `<id>.data` before anything else looks at the
//! staging directory, so recovery then goes as for any staged file (the opens log's entries, and
//! a quick close's check against the bytes after a power cut).
//!
//! Records: a 25-byte header (kind, id, offset, length, CRC-32 of header and payload), then the
//! payload. A torn or corrupt record ends the replay; nothing after it was acknowledged as durable.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

const LOG: &str = "data.log";
/// A file whose content would pass this size gets a data file: only small files gain from the
/// log, and what it holds is also held in memory.
pub(super) const LOGGED_MAX: u64 = super::quick::QUICK_CLOSE_MAX;
/// At most this many bytes of content are held in the log (and in memory) at once; new files
/// past it get data files at create. Within the memory budget's fixed part for the process (a
/// `cp -r` of small files has commits release them as it goes: 10,000 files of a few hundred
/// bytes hold about 3 MiB).
pub(super) const HELD_MAX: u64 = 16 << 20;
/// The log is rewritten with only what it still holds past this size, once that is under a
/// quarter of it.
const REWRITE_AT: u64 = 32 << 20;
const HEADER: usize = 25;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Kind {
    /// `len` bytes at `offset` (a create is a write of nothing at 0).
    Write = 1,
    /// The size became `offset`.
    Truncate = 2,
    /// The file has its own data file now, which is the truth from here on.
    Promoted = 3,
    /// Committed or discarded: nothing to bring back.
    Gone = 4,
}

impl Kind {
    fn of(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Write,
            2 => Kind::Truncate,
            3 => Kind::Promoted,
            4 => Kind::Gone,
            _ => return None,
        })
    }
}

fn record(kind: Kind, id: u64, offset: u64, payload: &[u8]) -> Vec<u8> {
    let mut r = Vec::with_capacity(HEADER + payload.len());
    r.push(kind as u8);
    r.extend_from_slice(&id.to_le_bytes());
    r.extend_from_slice(&offset.to_le_bytes());
    // Payloads are at most `LOGGED_MAX` bytes.
    r.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&r);
    h.update(payload);
    r.extend_from_slice(&h.finalize().to_le_bytes());
    r.extend_from_slice(payload);
    r
}

/// Lock order: a leaf (taken under a file's `logged` lock, never the other way).
pub(super) struct DataLog {
    path: PathBuf,
    inner: Mutex<Inner>,
}

struct Inner {
    file: File,
    /// Bytes in the log file.
    len: u64,
    /// The content of every file the log holds, by id.
    held: HashMap<u64, Vec<u8>>,
    /// Sum of `held`'s lengths.
    held_bytes: u64,
}

impl Inner {
    fn append(&mut self, kind: Kind, id: u64, offset: u64, payload: &[u8]) -> std::io::Result<()> {
        let r = record(kind, id, offset, payload);
        if let Err(e) = self.file.write_all(&r) {
            // A short append would leave a torn record that ends every later replay early.
            let _ = self.file.set_len(self.len);
            return Err(e);
        }
        self.len += r.len() as u64;
        Ok(())
    }
}

impl DataLog {
    /// Opens `dir`'s log. What the last run left in it is first given data files (`<id>.data`,
    /// fsynced with the directory), and the log emptied.
    pub(super) fn open(dir: &Path) -> std::io::Result<DataLog> {
        let path = dir.join(LOG);
        // A rewrite a crash interrupted: the log it was to replace is still whole.
        let _ = std::fs::remove_file(path.with_extension("log.tmp"));
        let left = replay(&path)?;
        if !left.is_empty() {
            for (id, bytes) in &left {
                let mut f = OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .write(true)
                    .open(dir.join(format!("{id}.data")))?;
                f.write_all(bytes)?;
                f.sync_data()?;
            }
            File::open(dir)?.sync_all()?;
            tracing::info!(files = left.len(), "staged small files restored from the data log");
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        file.set_len(0)?;
        file.sync_all()?;
        File::open(dir)?.sync_all()?;
        Ok(DataLog {
            path,
            inner: Mutex::new(Inner {
                file,
                len: 0,
                held: HashMap::new(),
                held_bytes: 0,
            }),
        })
    }

    /// Takes in new, empty file `id`; `false` when the log holds all it may (the caller gives it
    /// a data file).
    pub(super) fn adopt(&self, id: u64) -> std::io::Result<bool> {
        let mut inner = self.inner.lock();
        if inner.held_bytes >= HELD_MAX {
            return Ok(false);
        }
        inner.append(Kind::Write, id, 0, &[])?;
        inner.held.insert(id, Vec::new());
        Ok(true)
    }

    /// Whether the log holds `id`'s content.
    #[cfg(test)]
    pub(super) fn holds(&self, id: u64) -> bool {
        self.inner.lock().held.contains_key(&id)
    }

    /// Writes `data` at `offset` of `id`; `false` when the file would outgrow the log (the
    /// caller promotes it first).
    pub(super) fn write(&self, id: u64, offset: u64, data: &[u8]) -> std::io::Result<bool> {
        let end = offset + data.len() as u64;
        if end > LOGGED_MAX {
            return Ok(false);
        }
        let mut inner = self.inner.lock();
        let Some(old) = inner.held.get(&id).map(Vec::len) else {
            return Ok(false);
        };
        let grow = end.saturating_sub(old as u64);
        if inner.held_bytes + grow > HELD_MAX {
            return Ok(false);
        }
        inner.append(Kind::Write, id, offset, data)?;
        inner.held_bytes += grow;
        if let Some(v) = inner.held.get_mut(&id) {
            if v.len() < end as usize {
                v.resize(end as usize, 0);
            }
            v[offset as usize..end as usize].copy_from_slice(data);
        }
        self.rewrite_if_due(&mut inner);
        Ok(true)
    }

    /// Sets `id`'s size; `false` when it would outgrow the log.
    pub(super) fn truncate(&self, id: u64, size: u64) -> std::io::Result<bool> {
        if size > LOGGED_MAX {
            return Ok(false);
        }
        let mut inner = self.inner.lock();
        let Some(old) = inner.held.get(&id).map(|v| v.len() as u64) else {
            return Ok(false);
        };
        if size > old && inner.held_bytes + (size - old) > HELD_MAX {
            return Ok(false);
        }
        inner.append(Kind::Truncate, id, size, &[])?;
        inner.held_bytes = inner.held_bytes + size - old;
        if let Some(v) = inner.held.get_mut(&id) {
            v.resize(size as usize, 0);
        }
        Ok(true)
    }

    /// Copies `id`'s bytes at `offset` into `buf`; how many (0 past the end).
    pub(super) fn read(&self, id: u64, offset: u64, buf: &mut [u8]) -> usize {
        let inner = self.inner.lock();
        let Some(v) = inner.held.get(&id) else { return 0 };
        let Some(rest) = v.get(offset.min(v.len() as u64) as usize..) else {
            return 0;
        };
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        n
    }

    /// `id`'s whole content (for its promotion).
    pub(super) fn content(&self, id: u64) -> Vec<u8> {
        self.inner.lock().held.get(&id).cloned().unwrap_or_default()
    }

    /// `id` has a data file holding its content now: the log lets it go.
    pub(super) fn promoted(&self, id: u64) -> std::io::Result<()> {
        self.release(id, Kind::Promoted)
    }

    /// `id` is committed or discarded, and dropped: nothing of it is to come back after a crash.
    pub(super) fn forget(&self, id: u64) {
        if let Err(e) = self.release(id, Kind::Gone) {
            tracing::warn!(id, error = %e, "could not log a settled staged file");
        }
    }

    fn release(&self, id: u64, kind: Kind) -> std::io::Result<()> {
        let mut inner = self.inner.lock();
        let Some(v) = inner.held.remove(&id) else { return Ok(()) };
        inner.held_bytes -= v.len() as u64;
        inner.append(kind, id, 0, &[])?;
        self.rewrite_if_due(&mut inner);
        Ok(())
    }

    /// Makes every record appended so far durable.
    pub(super) fn sync(&self) -> std::io::Result<()> {
        // On a second descriptor, outside the lock, as the opens log does: a rewrite made since
        // was synced before it took the log's name.
        let file = self.inner.lock().file.try_clone()?;
        file.sync_data()
    }

    /// Past `REWRITE_AT`, with under a quarter of it still needed: a fresh log with one record
    /// per held file, synced before it takes the log's name (quick closes' bytes may be in it).
    fn rewrite_if_due(&self, inner: &mut Inner) {
        let needed = inner.held_bytes + (inner.held.len() * HEADER) as u64;
        if inner.len < REWRITE_AT || inner.len < 4 * needed {
            return;
        }
        if let Err(e) = self.rewrite(inner) {
            tracing::warn!(path = %self.path.display(), error = %e, "could not trim the data log");
        }
    }

    fn rewrite(&self, inner: &mut Inner) -> std::io::Result<()> {
        let tmp = self.path.with_extension("log.tmp");
        let mut body = Vec::new();
        for (id, v) in &inner.held {
            body.extend_from_slice(&record(Kind::Write, *id, 0, v));
        }
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&body)?;
            f.sync_data()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        inner.file = OpenOptions::new().append(true).open(&self.path)?;
        inner.len = body.len() as u64;
        Ok(())
    }
}

impl Drop for DataLog {
    /// Every file is gone by now (each holds the log): when none was left dirty, the log is
    /// emptied so that an empty staging directory looks empty (`instance::holds_state`).
    fn drop(&mut self) {
        let inner = self.inner.get_mut();
        if inner.held.is_empty()
            && let Err(e) = inner.file.set_len(0)
        {
            tracing::warn!(path = %self.path.display(), error = %e, "could not empty the data log");
        }
    }
}

/// The content of every file the log at `path` still holds.
fn replay(path: &Path) -> std::io::Result<HashMap<u64, Vec<u8>>> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => return Err(e),
    }
    let mut held: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut at = 0usize;
    while let Some(h) = bytes.get(at..at + HEADER) {
        let word = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or_default());
        let (id, offset) = (word(1), word(9));
        let len = u32::from_le_bytes(h[17..21].try_into().unwrap_or_default()) as usize;
        let crc = u32::from_le_bytes(h[21..25].try_into().unwrap_or_default());
        let Some(payload) = bytes.get(at + HEADER..at + HEADER + len) else {
            break;
        };
        let mut c = crc32fast::Hasher::new();
        c.update(&h[..21]);
        c.update(payload);
        let (Some(kind), true) = (Kind::of(h[0]), c.finalize() == crc) else {
            tracing::warn!(path = %path.display(), at, "the data log ends in a torn record; replayed up to it");
            break;
        };
        match kind {
            Kind::Write if offset + len as u64 <= LOGGED_MAX => {
                let v = held.entry(id).or_default();
                let end = offset as usize + len;
                if v.len() < end {
                    v.resize(end, 0);
                }
                v[offset as usize..end].copy_from_slice(payload);
            }
            Kind::Truncate if offset <= LOGGED_MAX => {
                if let Some(v) = held.get_mut(&id) {
                    v.resize(offset as usize, 0);
                }
            }
            Kind::Promoted | Kind::Gone => {
                held.remove(&id);
            }
            _ => {
                tracing::warn!(path = %path.display(), at, "the data log holds a record out of bounds; replayed up to it");
                break;
            }
        }
        at += HEADER + len;
    }
    Ok(held)
}

impl super::DirtyFile {
    /// The data file, made first from the log's bytes when the content lives there.
    pub(crate) fn disk(&self) -> std::io::Result<&File> {
        if let Some(f) = self.disk.get() {
            return Ok(f);
        }
        let _g = self.logged.lock();
        self.promote_locked()
    }

    /// `disk` with the `logged` lock held.
    fn promote_locked(&self) -> std::io::Result<&File> {
        if let Some(f) = self.disk.get() {
            return Ok(f);
        }
        let bytes = self.log.content(self.id);
        let file = match self.spares.take(&self.data_path) {
            Some(f) => f,
            None => OpenOptions::new()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true)
                .open(&self.data_path)?,
        };
        file.write_all_at(&bytes, 0)?;
        // The data file holds the content before the log lets it go.
        let file = self.disk.get_or_init(move || file);
        self.log.promoted(self.id)?;
        Ok(file)
    }

    /// Whether the content lives in the data log (no data file yet).
    pub(super) fn in_log(&self) -> bool {
        self.disk.get().is_none()
    }

    /// Reads at `offset` into `buf`, from the data file or the log; how many bytes (0 at the end).
    pub(super) fn read_some(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        if let Some(f) = self.disk.get() {
            return f.read_at(buf, offset);
        }
        let _g = self.logged.lock();
        match self.disk.get() {
            Some(f) => f.read_at(buf, offset),
            None => Ok(self.log.read(self.id, offset, buf)),
        }
    }

    /// Writes `data` at `offset`, to the log while the file fits there, else to its data file.
    pub(super) fn store_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
        if let Some(f) = self.disk.get() {
            return f.write_all_at(data, offset);
        }
        let _g = self.logged.lock();
        if self.disk.get().is_none() && self.log.write(self.id, offset, data)? {
            return Ok(());
        }
        self.promote_locked()?.write_all_at(data, offset)
    }

    /// Sets the stored size, in the log while the file fits there.
    pub(super) fn store_len(&self, size: u64) -> std::io::Result<()> {
        if let Some(f) = self.disk.get() {
            return f.set_len(size);
        }
        let _g = self.logged.lock();
        if self.disk.get().is_none() && self.log.truncate(self.id, size)? {
            return Ok(());
        }
        self.promote_locked()?.set_len(size)
    }

    /// The data file's path, made first if the content lives in the log (an overlay moves it).
    pub fn data_file(&self) -> std::io::Result<&Path> {
        self.disk()?;
        Ok(&self.data_path)
    }
}

#[cfg(test)]
#[path = "staging_datalog_tests.rs"]
mod tests;
