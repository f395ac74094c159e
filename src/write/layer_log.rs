//! The journal of an overlay mount's namespace.
//!
//! A writable mount commits each rename or deletion within a second, so its overlay can live in
//! memory: a crash loses at most a second of namespace changes. An overlay mount commits nothing
//! until the user asks, so its overlay *is* the user's work: which path holds which staged file,
//! which Hub files were moved or deleted, which directories exist only locally. Staged contents
//! survive on their own (see `staging`); this log makes the namespace over them survive unmount,
//! remount and `kill -9` as well.
//!
//! It is an append-only log rather than a snapshot rewritten on each change so that a change costs
//! one small write(2) and no fsync; durability points (unmount, `sync`) call [`LayerLog::sync`].
//! The overlay compacts it when it grows to several times its live entries.
//!
//! Format of `overlay.log`: UTF-8, one JSON object per line, each line ended by `\n`; replay
//! applies the lines in order and the last line for a path wins.
//! - `{"p":"a/b.txt","e":ENTRY}`: path `p` now holds ENTRY (whatever it held before is gone);
//! - `{"p":"a/b.txt","rm":true}`: path `p` has no entry.
//!
//! ENTRY is `{"File":{"id":7}}` (a staged file by its staging id), `"Dir"`, `"Gone"`,
//! `{"Special":{"hides":true}}` or `{"Moved":META}`, where META is
//! `{"remote_path":"x/y.bin","commit":"<sha>","size":12,"id":{"xet":"<hash>"},"sha256":"<hex>",`
//! `"last_commit":[secs,nanos]}` (`id` is one of `{"xet":…}`, `{"lfs":…}`, `{"git":…}`; `sha256` and `last_commit` are left out
//! when unknown; `last_commit` is seconds since the epoch, negative before 1970, plus
//! nanoseconds in 0..1e9 after them). A line cut short by a crash is always the last one, has no
//! `\n`, and is dropped when the log is opened.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::hub_client::{ContentId, FileMeta};

/// The log's file name in the layer's directory.
pub const LOG_NAME: &str = "overlay.log";
const TMP_NAME: &str = "overlay.log.tmp";
const NANOS_PER_SEC: u32 = 1_000_000_000;

/// One path's entry as the journal keeps it (a staged file by its id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Logged {
    File { id: u64 },
    Moved(LoggedMeta),
    Dir,
    Gone,
    Special { hides: bool },
}

/// A [`FileMeta`] in a serializable form. `From<&FileMeta>` and `TryFrom<LoggedMeta> for FileMeta`
/// are lossless; the only failure is a `last_commit` that no `SystemTime` can hold (never one
/// written by this log: [`LayerLog::open`] refuses such a line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedMeta {
    pub remote_path: String,
    pub commit: String,
    pub size: u64,
    pub id: LoggedId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// (seconds since the epoch, floor; nanoseconds after them, < 1e9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_commit: Option<(i64, u32)>,
}

/// A [`ContentId`]: `{"xet":"<hash>"}`, `{"lfs":"<sha256>"}` or `{"git":"<blob id>"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoggedId {
    Xet(String),
    Lfs(String),
    Git(String),
}

impl From<&FileMeta> for LoggedMeta {
    fn from(m: &FileMeta) -> LoggedMeta {
        LoggedMeta {
            remote_path: m.remote_path.clone(),
            commit: m.commit.to_string(),
            size: m.size,
            id: match &m.id {
                ContentId::Xet(h) => LoggedId::Xet(h.clone()),
                ContentId::Lfs(h) => LoggedId::Lfs(h.clone()),
                ContentId::Git(h) => LoggedId::Git(h.clone()),
            },
            sha256: m.sha256.clone(),
            last_commit: m.last_commit.map(to_epoch),
        }
    }
}

impl TryFrom<LoggedMeta> for FileMeta {
    type Error = io::Error;

    fn try_from(m: LoggedMeta) -> io::Result<FileMeta> {
        let last_commit = m.last_commit_time()?;
        Ok(m.with_time(last_commit))
    }
}

impl LoggedMeta {
    /// The `FileMeta`, for a `LoggedMeta` that [`LayerLog::open`] returned (it refuses a line whose
    /// `last_commit` no `SystemTime` holds, so this is exact). Of a hand-built one with such a time,
    /// the time is dropped; `FileMeta::try_from` refuses it instead.
    pub fn into_meta(self) -> FileMeta {
        let last_commit = self.last_commit_time().ok().flatten();
        self.with_time(last_commit)
    }

    fn with_time(self, last_commit: Option<SystemTime>) -> FileMeta {
        FileMeta {
            remote_path: self.remote_path,
            commit: self.commit.into(),
            size: self.size,
            id: match self.id {
                LoggedId::Xet(h) => ContentId::Xet(h),
                LoggedId::Lfs(h) => ContentId::Lfs(h),
                LoggedId::Git(h) => ContentId::Git(h),
            },
            sha256: self.sha256,
            last_commit,
        }
    }

    fn last_commit_time(&self) -> io::Result<Option<SystemTime>> {
        match self.last_commit {
            None => Ok(None),
            Some((s, n)) => from_epoch(s, n).map(Some).ok_or_else(|| {
                io::Error::new(
                    ErrorKind::InvalidData,
                    format!("last_commit [{s},{n}] is not a valid time"),
                )
            }),
        }
    }
}

/// `t` as (seconds since the epoch, rounded down; nanoseconds after them).
fn to_epoch(t: SystemTime) -> (i64, u32) {
    let (secs, nanos) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (i128::from(d.as_secs()), d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let secs = -i128::from(d.as_secs());
            match d.subsec_nanos() {
                0 => (secs, 0),
                n => (secs - 1, NANOS_PER_SEC - n),
            }
        }
    };
    // Out of range only where a SystemTime holds more than i64 seconds (no supported platform).
    let secs = i64::try_from(secs).unwrap_or(if secs < 0 { i64::MIN } else { i64::MAX });
    (secs, nanos)
}

fn from_epoch(secs: i64, nanos: u32) -> Option<SystemTime> {
    if nanos >= NANOS_PER_SEC {
        return None;
    }
    match u64::try_from(secs) {
        Ok(s) => UNIX_EPOCH.checked_add(Duration::new(s, nanos)),
        Err(_) => UNIX_EPOCH
            .checked_sub(Duration::from_secs(secs.unsigned_abs()))?
            .checked_add(Duration::from_nanos(u64::from(nanos))),
    }
}

/// A line as written.
#[derive(Serialize)]
struct LineOut<'a> {
    p: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    e: Option<&'a Logged>,
    #[serde(skip_serializing_if = "is_false")]
    rm: bool,
}

/// A line as read: exactly one of `e` and `rm: true`.
#[derive(Deserialize)]
struct LineIn {
    p: String,
    #[serde(default)]
    e: Option<Logged>,
    #[serde(default)]
    rm: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn encode(out: &mut Vec<u8>, line: &LineOut) -> io::Result<()> {
    serde_json::to_writer(&mut *out, line).map_err(io::Error::other)?;
    out.push(b'\n');
    Ok(())
}

/// The open end of the log.
struct Tail {
    file: File,
    /// Bytes of whole lines in the file.
    len: u64,
    lines: u64,
    /// A failed append may have left part of a line past `len`: cut before the next one.
    torn: bool,
}

/// The append-only journal of one overlay layer (see the module doc). Appends are serialized by
/// an inner lock; the overlay that owns it is locked anyway.
pub struct LayerLog {
    dir: PathBuf,
    tail: Mutex<Tail>,
}

impl LayerLog {
    /// Opens (creating) `dir/overlay.log` and replays it: returns the live entries by path.
    /// A torn last line (a crash mid-append) is ignored (and cut off the file); any other
    /// unreadable line is an error that names the file and line number.
    pub fn open(dir: &Path) -> io::Result<(LayerLog, BTreeMap<String, Logged>)> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(LOG_NAME);
        let (mut file, created) = match OpenOptions::new().read(true).append(true).create_new(true).open(&path) {
            Ok(f) => (f, true),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                (OpenOptions::new().read(true).append(true).open(&path)?, false)
            }
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let (live, len, lines) = replay(&bytes, &path)?;
        if len < bytes.len() as u64 {
            tracing::warn!(
                file = %path.display(),
                bytes = bytes.len() as u64 - len,
                "overlay journal: dropping a torn last line (a crash mid-append)"
            );
            file.set_len(len)?;
            file.sync_data()?;
        }
        if created {
            File::open(dir)?.sync_all()?;
        }
        remove_if_present(&dir.join(TMP_NAME))?;
        let tail = Tail {
            file,
            len,
            lines,
            torn: false,
        };
        let log = LayerLog {
            dir: dir.to_path_buf(),
            tail: Mutex::new(tail),
        };
        Ok((log, live))
    }

    /// Appends one line recording `path` → `e` (written at once with one write(2), not fsynced).
    pub fn set(&self, path: &str, e: &Logged) -> io::Result<()> {
        self.append(&LineOut {
            p: path,
            e: Some(e),
            rm: false,
        })
    }

    /// Appends one line recording that `path` has no entry.
    pub fn remove(&self, path: &str) -> io::Result<()> {
        self.append(&LineOut {
            p: path,
            e: None,
            rm: true,
        })
    }

    fn append(&self, line: &LineOut) -> io::Result<()> {
        let mut buf = Vec::with_capacity(64);
        encode(&mut buf, line)?;
        let mut t = self.tail.lock();
        if t.torn {
            let len = t.len;
            t.file.set_len(len)?;
            t.torn = false;
        }
        if let Err(e) = t.file.write_all(&buf) {
            // Part of the line may be in the file: every line after it would be unreadable.
            let len = t.len;
            t.torn = t.file.set_len(len).is_err();
            return Err(e);
        }
        t.len += buf.len() as u64;
        t.lines += 1;
        Ok(())
    }

    /// fsyncs the log.
    pub fn sync(&self) -> io::Result<()> {
        self.tail.lock().file.sync_data()
    }

    /// Rewrites the log as exactly `live` (a temp file, fsynced, renamed over the log, then the
    /// directory fsynced). Called by the overlay when the log has grown past 4 × live entries +
    /// 1024 lines. On an error before the rename the old log stays in use, whole.
    pub fn compact(&self, live: &[(String, Logged)]) -> io::Result<()> {
        let mut buf = Vec::with_capacity(live.len() * 48);
        for (p, e) in live {
            encode(
                &mut buf,
                &LineOut {
                    p,
                    e: Some(e),
                    rm: false,
                },
            )?;
        }
        let mut t = self.tail.lock();
        let tmp = self.dir.join(TMP_NAME);
        remove_if_present(&tmp)?;
        let mut file = OpenOptions::new().append(true).create_new(true).open(&tmp)?;
        file.write_all(&buf)?;
        file.sync_data()?;
        std::fs::rename(&tmp, self.dir.join(LOG_NAME))?;
        *t = Tail {
            file,
            len: buf.len() as u64,
            lines: live.len() as u64,
            torn: false,
        };
        drop(t);
        File::open(&self.dir)?.sync_all()
    }

    /// Lines in the file now.
    pub fn lines(&self) -> u64 {
        self.tail.lock().lines
    }
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Replays `bytes` (read from `path`): the live entries, the length of the whole lines and their
/// count. A last line without its `\n` is torn and left out.
fn replay(bytes: &[u8], path: &Path) -> io::Result<(BTreeMap<String, Logged>, u64, u64)> {
    let mut live = BTreeMap::new();
    let (mut pos, mut n) = (0usize, 0u64);
    while let Some(end) = bytes[pos..].iter().position(|&b| b == b'\n') {
        n += 1;
        let bad = |why: String| io::Error::new(ErrorKind::InvalidData, format!("{}: line {n}: {why}", path.display()));
        let line: LineIn = serde_json::from_slice(&bytes[pos..pos + end]).map_err(|e| bad(e.to_string()))?;
        match (line.e, line.rm) {
            (Some(e), false) => {
                if let Logged::Moved(m) = &e {
                    m.last_commit_time().map_err(|e| bad(e.to_string()))?;
                }
                live.insert(line.p, e);
            }
            (None, true) => {
                live.remove(&line.p);
            }
            _ => return Err(bad("needs exactly one of \"e\" and \"rm\":true".into())),
        }
        pos += end + 1;
    }
    Ok((live, pos as u64, n))
}

#[cfg(test)]
#[path = "layer_log_tests.rs"]
mod tests;
