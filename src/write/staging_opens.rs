//! The opens log: where a new staged file's journal entries go until it has an entry file.
//!
//! Every new file used to get its own entry file at create (a create and a rename in the staging
//! directory), replaced by the closed entry at close. On some disks a create costs most of a
//! millisecond, so a `cp -r` of small files paid for three per file. A new file's open entry is
//! now one line appended to `opened.log` (no fsync: an open entry never was), and so is its first
//! closed entry when the close is quick (`staging/quick.rs`: the line carries the content's check,
//! and the sealer fsyncs the log once for a whole batch of such closes). A durable closed entry
//! (fsync, a large file, a rename) creates the file's `.meta`, which wins over the log from then
//! on. A file discarded while the log speaks for it gets a `gone` line, so that a crash never
//! revives it.
//!
//! The log keeps only what a crash needs: files that have no entry file yet. It is rewritten when
//! it grows well past that (and at each start, with what the last run left); a rewrite is fsynced
//! before it replaces the log, since sealed closed entries live in it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::quick::Check;

const LOG: &str = "opened.log";
/// The log is rewritten past this size when at least half of it is lines no longer needed.
const REWRITE_AT: u64 = 4 << 20;

#[derive(Serialize, Deserialize)]
struct Line {
    id: u64,
    #[serde(default)]
    path: String,
    /// A quick close: the file is closed at `path` if its data holds this check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    check: Option<Check>,
    /// Discarded: whatever the log said of `id` before no longer holds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    gone: bool,
}

/// What the log says of a file: open at a path, or closed there with a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Logged {
    pub(super) path: String,
    pub(super) check: Option<Check>,
}

/// Lock order: a leaf (taken under a file's journal lock).
pub(super) struct OpensLog {
    path: PathBuf,
    inner: Mutex<Inner>,
}

struct Inner {
    file: File,
    bytes: u64,
    /// Files whose only entry is in the log, by id.
    open: HashMap<u64, Logged>,
    /// About the bytes a rewrite of `open` would take.
    needed: u64,
}

/// About the bytes of one line for `path`.
fn line_len(path: &str) -> u64 {
    path.len() as u64 + 64
}

impl OpensLog {
    /// Opens `dir`'s log: what the last run left for files whose data is still there is kept,
    /// the rest dropped.
    pub(super) fn open(dir: &Path) -> std::io::Result<OpensLog> {
        let path = dir.join(LOG);
        // A rewrite a crash interrupted: the log it was to replace is still whole.
        let _ = std::fs::remove_file(path.with_extension("log.tmp"));
        let mut open = HashMap::new();
        match File::open(&path) {
            Ok(f) => {
                for line in std::io::BufReader::new(f).lines() {
                    // A torn last line (a crash mid-append) is skipped like any unreadable one.
                    match serde_json::from_str::<Line>(&line?) {
                        Ok(l) if l.gone => {
                            open.remove(&l.id);
                        }
                        Ok(l) => {
                            open.insert(
                                l.id,
                                Logged {
                                    path: l.path,
                                    check: l.check,
                                },
                            );
                        }
                        Err(_) => {}
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // Kept while the data is there: an entry file torn by a crash as it was first written is
        // unreadable, and the log's line then stands for it (a readable one wins).
        open.retain(|id, _| dir.join(format!("{id}.data")).exists());
        let (file, bytes) = rewrite(&path, &open)?;
        let needed = open.values().map(|l| line_len(&l.path)).sum();
        Ok(OpensLog {
            path,
            inner: Mutex::new(Inner {
                file,
                bytes,
                open,
                needed,
            }),
        })
    }

    /// `id` is open at `path` (appended; the last line for an id wins).
    pub(super) fn note_open(&self, id: u64, path: &str) -> std::io::Result<()> {
        self.append(id, path, None)
    }

    /// `id` is closed at `path` with content `check` (a quick close; durable once the log is
    /// synced, see [`OpensLog::sync`]).
    pub(super) fn note_closed(&self, id: u64, path: &str, check: Check) -> std::io::Result<()> {
        self.append(id, path, Some(check))
    }

    fn append(&self, id: u64, path: &str, check: Option<Check>) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(&Line {
            id,
            path: path.to_string(),
            check,
            gone: false,
        })
        .map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut inner = self.inner.lock();
        inner.file.write_all(&line)?;
        inner.bytes += line.len() as u64;
        let logged = Logged {
            path: path.to_string(),
            check,
        };
        if let Some(old) = inner.open.insert(id, logged) {
            inner.needed -= line_len(&old.path);
        }
        inner.needed += line_len(path);
        if inner.bytes > REWRITE_AT && inner.bytes > 2 * inner.needed {
            let (file, bytes) = rewrite(&self.path, &inner.open)?;
            inner.file = file;
            inner.bytes = bytes;
        }
        Ok(())
    }

    /// `id` has an entry file now, or its data is gone: the log no longer speaks for it.
    pub(super) fn note_settled(&self, id: u64) {
        let mut inner = self.inner.lock();
        if let Some(old) = inner.open.remove(&id) {
            inner.needed -= line_len(&old.path);
        }
    }

    /// `id` was discarded (unlinked) while its data stays for open handles: a `gone` line, so
    /// that a crash before the data is deleted does not bring it back as open or closed.
    pub(super) fn note_gone(&self, id: u64) {
        let mut inner = self.inner.lock();
        let Some(old) = inner.open.remove(&id) else { return };
        inner.needed -= line_len(&old.path);
        let mut line = match serde_json::to_vec(&Line {
            id,
            path: String::new(),
            check: None,
            gone: true,
        }) {
            Ok(l) => l,
            Err(_) => return,
        };
        line.push(b'\n');
        match inner.file.write_all(&line) {
            Ok(()) => inner.bytes += line.len() as u64,
            Err(e) => tracing::warn!(id, error = %e, "could not log a discarded staged file"),
        }
    }

    /// What the log says of `id` (a file left without an entry file by a crash).
    pub(super) fn entry_of(&self, id: u64) -> Option<Logged> {
        self.inner.lock().open.get(&id).cloned()
    }

    /// Where the log says `id` was open or closed.
    pub(super) fn path_of(&self, id: u64) -> Option<String> {
        self.inner.lock().open.get(&id).map(|l| l.path.clone())
    }

    /// Makes every line appended so far durable (with the staging directory's fsync, which the
    /// caller does after: the log's own name, after a rewrite).
    pub(super) fn sync(&self) -> std::io::Result<()> {
        // On a second descriptor, outside the lock: creates and closes keep appending meanwhile.
        // Lines appended before this call are in this file, or in a rewrite made since, which
        // was synced before it took the log's name.
        let file = self.inner.lock().file.try_clone()?;
        file.sync_data()
    }
}

impl Drop for OpensLog {
    /// A clean stop leaves the log holding only files still open (usually none), so that an
    /// empty staging directory looks empty (`instance::holds_state`).
    fn drop(&mut self) {
        let inner = self.inner.get_mut();
        if let Err(e) = rewrite(&self.path, &inner.open) {
            tracing::warn!(path = %self.path.display(), error = %e, "could not trim the opens log");
        }
    }
}

/// Writes `open` as a fresh log in place of `path` (written aside, then renamed over it), and
/// returns it opened for appending.
fn rewrite(path: &Path, open: &HashMap<u64, Logged>) -> std::io::Result<(File, u64)> {
    let tmp = path.with_extension("log.tmp");
    let mut body = Vec::new();
    let mut ids: Vec<&u64> = open.keys().collect();
    ids.sort_unstable();
    for id in ids {
        serde_json::to_writer(
            &mut body,
            &Line {
                id: *id,
                path: open[id].path.clone(),
                check: open[id].check,
                gone: false,
            },
        )
        .map_err(std::io::Error::other)?;
        body.push(b'\n');
    }
    {
        let mut f = File::create(&tmp)?;
        f.write_all(&body)?;
        // Sealed closed entries may be in it: whole on disk before it replaces the old log.
        if open.values().any(|l| l.check.is_some()) {
            f.sync_data()?;
        }
    }
    std::fs::rename(&tmp, path)?;
    let file = OpenOptions::new().append(true).open(path)?;
    Ok((file, body.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The log keeps what a crash needs and no more: it is rewritten once mostly settled lines
    /// fill it, and a line torn by a crash mid-append is skipped at the next start.
    #[test]
    fn the_log_is_trimmed_and_survives_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let log = OpensLog::open(d).unwrap();
        let path = "rows/part-000/row-00001.json";
        // About 6 MiB of lines in all.
        for id in 1..=120_000u64 {
            log.note_open(id, path).unwrap();
            if id != 7 {
                log.note_settled(id);
            }
        }
        let size = std::fs::metadata(d.join(LOG)).unwrap().len();
        assert!(size < 2 << 20, "not rewritten: {size} bytes");
        assert_eq!(log.path_of(7).as_deref(), Some(path));
        std::mem::forget(log); // a crash
        // File 7 is still open (its data is there, no entry file); a line was torn mid-append.
        std::fs::write(d.join("7.data"), b"x").unwrap();
        std::fs::write(d.join("8.data"), b"y").unwrap();
        let mut f = OpenOptions::new().append(true).open(d.join(LOG)).unwrap();
        f.write_all(b"{\"id\":8,\"pa").unwrap();
        let log = OpensLog::open(d).unwrap();
        assert_eq!(log.path_of(7).as_deref(), Some(path));
        assert_eq!(log.path_of(8), None);
        assert_eq!(log.path_of(9), None, "settled before the crash, no data");
        drop(log);
        let kept = std::fs::read_to_string(d.join(LOG)).unwrap();
        assert_eq!(kept.lines().count(), 1, "{kept}");
        // An entry file torn as it was first written: the log still speaks for the file.
        std::fs::write(d.join("7.meta"), b"{\"pa").unwrap();
        let log = OpensLog::open(d).unwrap();
        assert_eq!(log.path_of(7).as_deref(), Some(path));
    }
}
