//! Local metadata: what a writable mount keeps that the Hub cannot store (modes, owners, times,
//! symlinks, FIFOs, sockets and device nodes), per repo path.
//!
//! Kept in memory and in an append-only log (`metadata.log`) in the staging directory, so a remount
//! of the same repo, branch and cache dir shows the same modes, times and symlinks, and a file whose
//! staged copy was dropped after its commit keeps them. Each change appends one JSON line; the log is
//! replayed at startup and rewritten compactly when it has grown well past the live records.
//! Lines are written at once (a crash of the process loses nothing) and fsynced by `sync`, which the
//! mount calls where it makes staged content durable (close, fsync, unmount). A write's mtime is
//! kept in memory and logged at the file's next seal, not once per write.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// An entry that exists only in the mount: the Hub stores regular files only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase")]
pub enum Special {
    Symlink { target: String },
    Fifo,
    Socket,
    Char { rdev: u32 },
    Block { rdev: u32 },
}

/// A point in time as seconds and nanoseconds since the epoch (negative seconds allowed: `touch -d
/// 1960-01-01` is valid on a local disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Stamp {
    pub s: i64,
    pub n: u32,
}

impl Stamp {
    pub fn now() -> Stamp {
        Stamp::from(SystemTime::now())
    }
}

impl From<SystemTime> for Stamp {
    fn from(t: SystemTime) -> Stamp {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Stamp {
                s: d.as_secs() as i64,
                n: d.subsec_nanos(),
            },
            Err(e) => {
                let d = e.duration();
                let (s, n) = (d.as_secs() as i64, d.subsec_nanos());
                if n == 0 {
                    Stamp { s: -s, n: 0 }
                } else {
                    Stamp {
                        s: -s - 1,
                        n: 1_000_000_000 - n,
                    }
                }
            }
        }
    }
}

impl From<Stamp> for SystemTime {
    fn from(t: Stamp) -> SystemTime {
        if t.s >= 0 {
            UNIX_EPOCH + Duration::new(t.s as u64, t.n)
        } else {
            UNIX_EPOCH - Duration::from_secs(t.s.unsigned_abs()) + Duration::from_nanos(t.n as u64)
        }
    }
}

/// What the mount shows for one path beyond what the Hub has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// A directory's record (kept apart so a file replacing a directory never inherits its mode).
    #[serde(default)]
    pub dir: bool,
    /// Permission bits with setuid, setgid and sticky (`0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: Stamp,
    pub mtime: Stamp,
    pub ctime: Stamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub special: Option<Special>,
    /// The hard-link group this name belongs to (its inode number in the mount): every name of a
    /// group has the same record, kept equal by `MetaStore::set` and `touch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<u64>,
}

/// One line of the log.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Line {
    /// `path` has this record now.
    Set { p: String, m: Meta },
    /// `path` and everything below it have no record.
    Del { p: String },
    /// The records of `from` and everything below it move to `to` (any there are replaced).
    Mv { from: String, to: String },
}

const LOG_NAME: &str = "metadata.log";

/// The log is rewritten when it holds this many lines more than twice the live records.
const COMPACT_SLACK: usize = 10_000;

/// Lock order: `inner` is a leaf: nothing else is locked while it is held.
pub struct MetaStore {
    inner: Mutex<Inner>,
}

struct Inner {
    /// Ordered, so the records below a directory are one range (renames, removals).
    map: BTreeMap<String, Meta>,
    /// Paths whose in-memory record is newer than the log (a write's mtime).
    unsaved: HashSet<String>,
    log: Option<File>,
    path: Option<PathBuf>,
    lines: usize,
    /// The last write to the log failed: the next sync reports it.
    error: Option<String>,
    /// Bumped by every change that adds, removes or moves a record (not by a write's times).
    version: u64,
    /// Hard-link group → the paths whose records name it (an index of `Meta::link`).
    groups: HashMap<u64, BTreeSet<String>>,
}

/// Whether a regular file's or directory's record shows a mode or owner the Hub's defaults do not
/// (0644 files, 0755 directories, the mount's ids). Special files are counted on their own.
pub fn differs(m: &Meta, uid: u32, gid: u32) -> bool {
    let default_mode = if m.dir { 0o755 } else { 0o644 };
    m.special.is_none() && (m.mode != default_mode || m.uid != uid || m.gid != gid)
}

/// The records of the log in `dir` as a mount would see them, read without opening it for writing
/// (`hubfs status --verbose` reads a running mount's log).
pub fn read_log(dir: &Path) -> std::io::Result<Vec<(String, Meta)>> {
    let mut inner = Inner::empty(None);
    let f = match File::open(dir.join(LOG_NAME)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    for line in BufReader::new(f).split(b'\n') {
        if let Ok(l) = serde_json::from_slice::<Line>(&line?) {
            inner.apply(l);
        }
    }
    Ok(inner.map.into_iter().collect())
}

fn moved(path: &str, from: &str, to: &str) -> String {
    if path == from {
        to.to_string()
    } else if from.is_empty() {
        format!("{to}/{path}")
    } else if to.is_empty() {
        path[from.len() + 1..].to_string()
    } else {
        format!("{to}{}", &path[from.len()..])
    }
}

impl Inner {
    fn empty(path: Option<PathBuf>) -> Inner {
        Inner {
            map: BTreeMap::new(),
            unsaved: HashSet::new(),
            log: None,
            path,
            lines: 0,
            error: None,
            version: 0,
            groups: HashMap::new(),
        }
    }

    /// Sets a record, keeping the link index.
    fn put(&mut self, p: String, m: Meta) {
        if let Some(g) = m.link {
            self.groups.entry(g).or_default().insert(p.clone());
        }
        if let Some(old) = self.map.insert(p.clone(), m)
            && let Some(g) = old.link
            && self.map.get(&p).and_then(|m| m.link) != Some(g)
        {
            self.unindex(g, &p);
        }
    }

    /// Removes a record, keeping the link index.
    fn take(&mut self, p: &str) -> Option<Meta> {
        let m = self.map.remove(p)?;
        if let Some(g) = m.link {
            self.unindex(g, p);
        }
        Some(m)
    }

    fn unindex(&mut self, g: u64, p: &str) {
        if let Some(set) = self.groups.get_mut(&g) {
            set.remove(p);
            if set.is_empty() {
                self.groups.remove(&g);
            }
        }
    }

    fn apply(&mut self, line: Line) {
        match line {
            Line::Set { p, m } => self.put(p, m),
            Line::Del { p } => self.remove_tree(&p),
            Line::Mv { from, to } => {
                self.remove_tree(&to);
                for k in self.subtree_keys(&from) {
                    if let Some(m) = self.take(&k) {
                        self.put(moved(&k, &from, &to), m);
                    }
                    if self.unsaved.remove(&k) {
                        self.unsaved.insert(moved(&k, &from, &to));
                    }
                }
            }
        }
    }

    fn flush_unsaved(&mut self) {
        if self.unsaved.is_empty() {
            return;
        }
        let mut unsaved: Vec<String> = self.unsaved.drain().collect();
        unsaved.sort();
        for p in unsaved {
            if let Some(m) = self.map.get(&p).cloned() {
                self.append(&Line::Set { p, m });
            }
        }
    }

    fn remove_tree(&mut self, root: &str) {
        for k in self.subtree_keys(root) {
            self.take(&k);
            self.unsaved.remove(&k);
        }
    }

    /// `root` and every path below it that has a record (`""`: all of them).
    fn subtree_keys(&self, root: &str) -> Vec<String> {
        if root.is_empty() {
            return self.map.keys().cloned().collect();
        }
        // Paths below `root` sort between "root/" and "root0" ('0' follows '/').
        let below = self
            .map
            .range::<str, _>((
                std::ops::Bound::Excluded(format!("{root}/").as_str()),
                std::ops::Bound::Excluded(format!("{root}0").as_str()),
            ))
            .map(|(k, _)| k.clone());
        self.map
            .get_key_value(root)
            .map(|(k, _)| k.clone())
            .into_iter()
            .chain(below)
            .collect()
    }

    fn append(&mut self, line: &Line) {
        self.version += 1;
        let Some(log) = &mut self.log else { return };
        let mut text = match serde_json::to_string(line) {
            Ok(t) => t,
            Err(e) => {
                self.error = Some(e.to_string());
                return;
            }
        };
        text.push('\n');
        if let Err(e) = log.write_all(text.as_bytes()) {
            tracing::warn!(error = %e, "could not append to the metadata log");
            self.error = Some(e.to_string());
        }
        self.lines += 1;
        if self.lines > 2 * self.map.len() + COMPACT_SLACK
            && let Err(e) = self.compact()
        {
            tracing::warn!(error = %e, "could not compact the metadata log");
        }
    }

    /// Rewrites the log as one `Set` per live record (temporary file, fsync, rename).
    fn compact(&mut self) -> std::io::Result<()> {
        let Some(path) = self.path.clone() else { return Ok(()) };
        let tmp = path.with_extension("log.tmp");
        let mut out = std::io::BufWriter::new(File::create(&tmp)?);
        for k in self.map.keys() {
            let line = Line::Set {
                p: k.clone(),
                m: self.map[k].clone(),
            };
            serde_json::to_writer(&mut out, &line)?;
            out.write_all(b"\n")?;
        }
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        self.log = Some(OpenOptions::new().append(true).open(&path)?);
        self.lines = self.map.len();
        self.unsaved.clear();
        Ok(())
    }
}

impl MetaStore {
    /// A store kept in memory only (read-only mounts have nothing to keep; tests).
    pub fn in_memory() -> MetaStore {
        MetaStore {
            inner: Mutex::new(Inner::empty(None)),
        }
    }

    /// Opens (creating) the log in `dir` and replays it. A line that cannot be parsed (a torn last
    /// line after a crash) is skipped with a warning; the log is then compacted so it parses again.
    pub fn open(dir: &Path) -> std::io::Result<MetaStore> {
        let path = dir.join(LOG_NAME);
        let mut inner = Inner::empty(Some(path.clone()));
        let mut bad = 0usize;
        match File::open(&path) {
            Ok(f) => {
                for line in BufReader::new(f).split(b'\n') {
                    let line = line?;
                    if line.is_empty() {
                        continue;
                    }
                    match serde_json::from_slice::<Line>(&line) {
                        Ok(l) => {
                            inner.apply(l);
                            inner.lines += 1;
                        }
                        Err(e) => {
                            bad += 1;
                            tracing::warn!(error = %e, "skipped an unreadable line of the metadata log");
                        }
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        inner.log = Some(OpenOptions::new().create(true).append(true).open(&path)?);
        if bad > 0 {
            inner.compact()?;
        }
        Ok(MetaStore {
            inner: Mutex::new(inner),
        })
    }

    pub fn get(&self, path: &str) -> Option<Meta> {
        self.inner.lock().map.get(path).cloned()
    }

    /// Sets `path`'s record and logs it.
    /// Sets `path`'s record and logs it. A record that names a link group is set on every name of
    /// the group (one inode, one set of attributes).
    pub fn set(&self, path: &str, m: Meta) {
        let mut g = self.inner.lock();
        let mut paths = vec![path.to_string()];
        if let Some(id) = m.link {
            paths.extend(g.groups.get(&id).into_iter().flatten().filter(|p| *p != path).cloned());
        }
        for p in paths {
            g.unsaved.remove(&p);
            let line = Line::Set {
                p: p.clone(),
                m: m.clone(),
            };
            g.put(p, m.clone());
            g.append(&line);
        }
    }

    /// Changes `path`'s record in memory only (a write's times); logged by `save` or `sync`.
    /// Returns false when `path` has no record. The other names of its link group follow.
    pub fn touch(&self, path: &str, f: impl FnOnce(&mut Meta)) -> bool {
        let mut g = self.inner.lock();
        let Some(m) = g.map.get_mut(path) else { return false };
        f(m);
        let m = m.clone();
        let others: Vec<String> = match m.link {
            Some(id) => g
                .groups
                .get(&id)
                .into_iter()
                .flatten()
                .filter(|p| *p != path)
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        for p in others.into_iter().chain(std::iter::once(path.to_string())) {
            if let Some(r) = g.map.get_mut(&p) {
                *r = m.clone();
            }
            if !g.unsaved.contains(&p) {
                g.unsaved.insert(p);
            }
        }
        true
    }

    /// Makes `new` a second name of `existing` (which must have a record): both records name link
    /// group `id` (kept if `existing` is in one already). Returns the group.
    pub fn link(&self, existing: &str, new: &str, id: u64) -> Option<u64> {
        let mut g = self.inner.lock();
        let mut m = g.map.get(existing)?.clone();
        let id = *m.link.get_or_insert(id);
        for p in [existing, new] {
            g.unsaved.remove(p);
            let line = Line::Set {
                p: p.to_string(),
                m: m.clone(),
            };
            g.put(p.to_string(), m.clone());
            g.append(&line);
        }
        Some(id)
    }

    /// The link group `path` belongs to.
    pub fn link_of(&self, path: &str) -> Option<u64> {
        self.inner.lock().map.get(path).and_then(|m| m.link)
    }

    /// The names (repo paths) of link group `id`, sorted.
    pub fn members(&self, id: u64) -> Vec<String> {
        let g = self.inner.lock();
        g.groups
            .get(&id)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// How many names link group `id` has.
    pub fn link_count(&self, id: u64) -> usize {
        self.inner.lock().groups.get(&id).map_or(0, |s| s.len())
    }

    /// Every link group with its names.
    pub fn groups(&self) -> Vec<(u64, Vec<String>)> {
        let g = self.inner.lock();
        let mut v: Vec<(u64, Vec<String>)> = g
            .groups
            .iter()
            .map(|(id, s)| (*id, s.iter().cloned().collect()))
            .collect();
        v.sort();
        v
    }

    /// Takes `path` out of its link group (its record stays, as a file of its own).
    pub fn unlink_member(&self, path: &str) {
        let mut g = self.inner.lock();
        let Some(mut m) = g.map.get(path).cloned() else { return };
        if m.link.take().is_none() {
            return;
        }
        let line = Line::Set {
            p: path.to_string(),
            m: m.clone(),
        };
        g.put(path.to_string(), m);
        g.append(&line);
    }

    /// Logs every record changed in memory only (times moved by writes and by entries coming and
    /// going), without an fsync: a close calls it, so a killed process loses only the times of
    /// files still open.
    pub fn flush(&self) {
        let mut g = self.inner.lock();
        g.flush_unsaved();
    }

    /// Removes the records of `path` and everything below it.
    pub fn remove_tree(&self, path: &str) {
        let mut g = self.inner.lock();
        if g.subtree_keys(path).is_empty() {
            return;
        }
        let line = Line::Del { p: path.to_string() };
        g.apply(Line::Del { p: path.to_string() });
        g.append(&line);
    }

    /// Moves the records of `from` and everything below it to `to`.
    pub fn rename(&self, from: &str, to: &str) {
        let mut g = self.inner.lock();
        let line = Line::Mv {
            from: from.to_string(),
            to: to.to_string(),
        };
        g.append(&line);
        g.apply(line);
    }

    /// Logs every unsaved record and fsyncs the log.
    pub fn sync(&self) -> std::io::Result<()> {
        let mut g = self.inner.lock();
        g.flush_unsaved();
        if let Some(e) = g.error.take() {
            return Err(std::io::Error::other(format!("metadata log: {e}")));
        }
        match &g.log {
            Some(f) => f.sync_data(),
            None => Ok(()),
        }
    }

    /// Every record (path, record), sorted by path.
    pub fn all(&self) -> Vec<(String, Meta)> {
        let g = self.inner.lock();
        g.map.iter().map(|(k, m)| (k.clone(), m.clone())).collect()
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map.len()
    }

    /// Changes so far (see `Inner::version`): lets the status file be rewritten only when needed.
    pub fn version(&self) -> u64 {
        self.inner.lock().version
    }

    /// How many entries exist only in the mount, and how many records differ from what the Hub
    /// shows in mode or owner (`uid`/`gid`: the mount's own ids), without copying the records.
    pub fn summary(&self, uid: u32, gid: u32) -> (usize, usize) {
        let g = self.inner.lock();
        let specials = g.map.values().filter(|m| m.special.is_some()).count();
        let changed = g.map.values().filter(|m| differs(m, uid, gid)).count();
        (specials, changed)
    }

    /// Names in link groups of two or more (`hubfs status`).
    pub fn linked_names(&self) -> usize {
        let g = self.inner.lock();
        g.groups.values().filter(|s| s.len() > 1).map(|s| s.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(mode: u32) -> Meta {
        Meta {
            dir: false,
            mode,
            uid: 1,
            gid: 2,
            atime: Stamp { s: 10, n: 1 },
            mtime: Stamp { s: 20, n: 2 },
            ctime: Stamp { s: 30, n: 3 },
            special: None,
            link: None,
        }
    }

    #[test]
    fn stamps_round_trip_before_and_after_the_epoch() {
        for t in [
            UNIX_EPOCH + Duration::new(1_700_000_000, 123),
            UNIX_EPOCH - Duration::new(5, 250_000_000),
            UNIX_EPOCH - Duration::from_secs(7),
            UNIX_EPOCH,
        ] {
            assert_eq!(SystemTime::from(Stamp::from(t)), t);
        }
        assert_eq!(
            Stamp::from(UNIX_EPOCH - Duration::new(5, 250_000_000)),
            Stamp { s: -6, n: 750_000_000 }
        );
    }

    #[test]
    fn replay_gives_the_same_records_after_sets_moves_and_deletes() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = MetaStore::open(dir.path()).unwrap();
            s.set("a", meta(0o755));
            s.set("a/x", meta(0o600));
            s.set(
                "a/l",
                Meta {
                    special: Some(Special::Symlink { target: "x".into() }),
                    ..meta(0o777)
                },
            );
            s.set("ab", meta(0o644));
            s.rename("a", "b");
            s.set("c", meta(0o640));
            s.remove_tree("c");
            assert!(s.touch("b/x", |m| m.mtime = Stamp { s: 99, n: 0 }));
            s.sync().unwrap();
        }
        let s = MetaStore::open(dir.path()).unwrap();
        let all = s.all();
        let paths: Vec<&str> = all.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["ab", "b", "b/l", "b/x"]);
        assert_eq!(s.get("b/x").unwrap().mtime, Stamp { s: 99, n: 0 });
        assert_eq!(
            s.get("b/l").unwrap().special,
            Some(Special::Symlink { target: "x".into() })
        );
    }

    #[test]
    fn link_groups_share_one_record_and_survive_replay_moves_and_removals() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = MetaStore::open(dir.path()).unwrap();
            s.set("a", meta(0o600));
            assert_eq!(s.link("a", "d/b", 77), Some(77));
            assert_eq!(s.link("d/b", "c", 99), Some(77), "a group keeps its number");
            assert_eq!(s.members(77), ["a", "c", "d/b"]);
            // Every name's record changes together.
            s.set(
                "c",
                Meta {
                    link: Some(77),
                    ..meta(0o640)
                },
            );
            assert!(s.touch("a", |m| m.mtime = Stamp { s: 5, n: 0 }));
            for p in ["a", "c", "d/b"] {
                let m = s.get(p).unwrap();
                assert_eq!(
                    (m.mode, m.mtime, m.link),
                    (0o640, Stamp { s: 5, n: 0 }, Some(77)),
                    "{p}"
                );
            }
            s.rename("d", "e");
            s.remove_tree("a");
            s.sync().unwrap();
        }
        let s = MetaStore::open(dir.path()).unwrap();
        assert_eq!(s.members(77), ["c", "e/b"]);
        assert_eq!(s.link_count(77), 2);
        assert_eq!(s.linked_names(), 2);
        assert_eq!(s.get("e/b").unwrap().mtime, Stamp { s: 5, n: 0 });
        // A new record at a name takes it out of its group; so does unlink_member.
        s.set("c", meta(0o644));
        assert_eq!(s.members(77), ["e/b"]);
        s.unlink_member("e/b");
        assert!(s.groups().is_empty());
        assert_eq!(s.get("e/b").unwrap().mode, 0o640, "the record stays");
        assert_eq!(
            s.link("nothing", "x", 1),
            None,
            "a name without a record cannot be linked"
        );
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_the_log_repaired() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = MetaStore::open(dir.path()).unwrap();
            s.set("a", meta(0o600));
            s.sync().unwrap();
        }
        let mut f = OpenOptions::new().append(true).open(dir.path().join(LOG_NAME)).unwrap();
        f.write_all(b"{\"op\":\"set\",\"p\":\"b\",\"m\":{\"mo").unwrap();
        drop(f);
        let s = MetaStore::open(dir.path()).unwrap();
        assert_eq!(s.get("a").unwrap().mode, 0o600);
        assert!(s.get("b").is_none());
        s.set("c", meta(0o644));
        drop(s);
        let s = MetaStore::open(dir.path()).unwrap();
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn moves_and_removals_take_exactly_a_path_and_what_is_below_it() {
        let s = MetaStore::in_memory();
        s.set("x", meta(0o600));
        s.set("y", meta(0o644));
        s.set("y/z", meta(0o644));
        s.rename("x", "y");
        assert_eq!(s.get("y").unwrap().mode, 0o600);
        assert!(s.get("y/z").is_none());
        assert_eq!(moved("a/b", "a", "c/d"), "c/d/b");
        s.set("a", meta(0o600));
        s.set("a/b", meta(0o600));
        s.set("a.x", meta(0o600));
        s.set("ab", meta(0o600));
        s.set("a0", meta(0o600));
        s.remove_tree("a");
        let left: Vec<String> = s.all().into_iter().map(|(p, _)| p).collect();
        assert_eq!(left, ["a.x", "a0", "ab", "y"], "only a and what is below it");
    }
}
