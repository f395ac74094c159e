//! The overlay: local changes to the namespace, laid over the mount's commit.
//!
//! The remote tree at a commit never changes; what a writable mount adds on top lives here, keyed by
//! mount-relative path: staged files, remote content moved to a new path, local directories and
//! whiteouts (a remote path that was deleted or moved away). A lookup asks the overlay first and
//! the commit's tree second; a listing merges the two. When a commit lands, the entries it carried
//! are removed and the new commit's tree shows them.
//!
//! A writable mount keeps its overlay in memory only (it commits within a second); an overlay
//! mount, which commits nothing until asked, journals every change to a [`LayerLog`] so that the
//! overlay outlives the process.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::layer_log::{LayerLog, Logged};
use super::staging::DirtyFile;
use crate::hub_client::FileMeta;

#[derive(Clone)]
pub enum Entry {
    /// Content staged on local disk.
    File(Arc<DirtyFile>),
    /// Remote content under a new path (a rename of an unchanged file).
    Moved(FileMeta),
    /// A directory that exists locally (created, or the target of a rename).
    Dir,
    /// Hides the remote path: deleted or moved away.
    Gone,
    /// A symlink, FIFO, socket or device node: it exists only in the mount (the Hub stores regular
    /// files only; its details are in the metadata store). `hides`: the commit's tree still has a
    /// file here that must be deleted (the entry replaced it); the committer deletes it, then
    /// clears the flag.
    Special { hides: bool },
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Entry::File(d) => write!(f, "File(#{})", d.id()),
            Entry::Moved(m) => write!(f, "Moved({})", m.remote_path),
            Entry::Dir => f.write_str("Dir"),
            Entry::Gone => f.write_str("Gone"),
            Entry::Special { hides } => write!(f, "Special(hides: {hides})"),
        }
    }
}

impl From<&Entry> for Logged {
    fn from(e: &Entry) -> Logged {
        match e {
            Entry::File(d) => Logged::File { id: d.id() },
            Entry::Moved(m) => Logged::Moved(m.into()),
            Entry::Dir => Logged::Dir,
            Entry::Gone => Logged::Gone,
            Entry::Special { hides } => Logged::Special { hides: *hides },
        }
    }
}

/// The journal is compacted when it holds more lines than this many per live entry…
const COMPACT_FACTOR: u64 = 4;
/// …plus this many.
const COMPACT_SLACK: u64 = 1024;

/// Lock order: the overlay is locked by its owner (VirtualFs) as a leaf; nothing else is locked
/// while it is held (the journal's own lock is taken inside it).
#[derive(Default)]
pub struct Overlay {
    entries: HashMap<String, Entry>,
    /// parent path → child name → whether the child is a directory. Lets a listing find its
    /// overlay children, and a directory's `stat` count its subdirectories, without a scan.
    children: HashMap<String, BTreeMap<String, bool>>,
    /// The journal of an overlay mount; None for a writable mount.
    log: Option<Arc<LayerLog>>,
    /// Appends and compactions of the journal that failed.
    log_errors: u64,
    /// The journal's line count when a compaction last failed: the next try waits for
    /// `COMPACT_SLACK` more lines rather than rewriting the whole log on every change.
    compact_failed_at: Option<u64>,
}

/// See [`Overlay::child_dirs`].
pub struct ChildDirs<'a>(Option<&'a BTreeMap<String, bool>>);

impl ChildDirs<'_> {
    /// Overlay entries that are directories.
    pub fn count(&self) -> usize {
        self.0.map_or(0, |c| c.values().filter(|d| **d).count())
    }

    /// Whether the overlay has an entry named `name` (of any kind, a whiteout included).
    pub fn has(&self, name: &str) -> bool {
        self.0.is_some_and(|c| c.contains_key(name))
    }
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

impl Overlay {
    /// An empty overlay that journals every change to `log`.
    pub fn with_log(log: Arc<LayerLog>) -> Overlay {
        Overlay {
            log: Some(log),
            ..Overlay::default()
        }
    }

    /// Whether changes are journaled.
    pub fn journals(&self) -> bool {
        self.log.is_some()
    }

    /// The journal, if any (to fsync it without holding the overlay's lock).
    pub fn log(&self) -> Option<Arc<LayerLog>> {
        self.log.clone()
    }

    /// fsyncs the journal (a no-op without one).
    pub fn sync_log(&self) -> std::io::Result<()> {
        self.log.as_ref().map_or(Ok(()), |l| l.sync())
    }

    /// Journal appends and compactions that failed since the overlay was made (each was logged;
    /// the in-memory entries stayed right, a remount may miss those changes).
    pub fn log_errors(&self) -> u64 {
        self.log_errors
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries.get(path)
    }

    /// Sets `path`'s entry, journaled when the overlay has a journal.
    pub fn set(&mut self, path: &str, e: Entry) {
        let logged = self.log.is_some().then(|| Logged::from(&e));
        self.restore(path, e);
        if let Some(logged) = logged {
            self.journal(path, |log| log.set(path, &logged));
        }
    }

    /// Sets `path`'s entry without journaling it (rebuilding the overlay from a journal's replay).
    pub fn restore(&mut self, path: &str, e: Entry) {
        let (parent, name) = split(path);
        self.children
            .entry(parent.to_string())
            .or_default()
            .insert(name.to_string(), matches!(e, Entry::Dir));
        self.entries.insert(path.to_string(), e);
    }

    pub fn remove(&mut self, path: &str) -> Option<Entry> {
        let e = self.entries.remove(path)?;
        let (parent, name) = split(path);
        if let Some(c) = self.children.get_mut(parent) {
            c.remove(name);
            if c.is_empty() {
                self.children.remove(parent);
            }
        }
        if self.log.is_some() {
            self.journal(path, |log| log.remove(path));
        }
        Some(e)
    }

    /// Runs one append on the journal (if any), then compacts it once it has grown too long.
    /// Errors are logged and counted, never raised: the in-memory overlay is right either way.
    fn journal(&mut self, path: &str, append: impl FnOnce(&LayerLog) -> std::io::Result<()>) {
        let Some(log) = self.log.clone() else {
            return;
        };
        if let Err(e) = append(&log) {
            self.log_errors += 1;
            tracing::error!(path, error = %e, "overlay journal: append failed; a remount may miss this change");
        }
        let lines = log.lines();
        let live = self.entries.len() as u64;
        if lines <= COMPACT_FACTOR * live + COMPACT_SLACK
            || self.compact_failed_at.is_some_and(|at| lines < at + COMPACT_SLACK)
        {
            return;
        }
        let mut all: Vec<(String, Logged)> = self.entries.iter().map(|(p, e)| (p.clone(), e.into())).collect();
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        match log.compact(&all) {
            Ok(()) => self.compact_failed_at = None,
            Err(e) => {
                self.log_errors += 1;
                self.compact_failed_at = Some(lines);
                tracing::error!(lines, live, error = %e, "overlay journal: compaction failed");
            }
        }
    }

    /// Overlay entries directly under `dir`, by name.
    pub fn children(&self, dir: &str) -> Vec<(String, Entry)> {
        let Some(c) = self.children.get(dir) else {
            return Vec::new();
        };
        c.keys()
            .filter_map(|n| {
                let full = if dir.is_empty() {
                    n.clone()
                } else {
                    format!("{dir}/{n}")
                };
                self.entries.get(&full).map(|e| (n.clone(), e.clone()))
            })
            .collect()
    }

    /// How `dir`'s overlay entries bear on its subdirectory count: the directories among them,
    /// and for `name`, whether the overlay has an entry there at all (which then decides whether
    /// it is a directory). Allocates nothing: a directory's `stat` comes after every create in it.
    pub fn child_dirs(&self, dir: &str) -> ChildDirs<'_> {
        ChildDirs(self.children.get(dir))
    }

    /// Every entry at or below `dir` ("" = everything), with its path.
    pub fn subtree(&self, dir: &str) -> Vec<(String, Entry)> {
        let prefix = format!("{dir}/");
        self.entries
            .iter()
            .filter(|(p, _)| dir.is_empty() || p.as_str() == dir || p.starts_with(&prefix))
            .map(|(p, e)| (p.clone(), e.clone()))
            .collect()
    }

    /// Every entry (for a commit round or the status report).
    pub fn all(&self) -> Vec<(String, Entry)> {
        self.subtree("")
    }

    /// Every entry, borrowed (to count without copying paths).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Entry)> {
        self.entries.iter().map(|(p, e)| (p.as_str(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_index_follows_set_and_remove() {
        let mut o = Overlay::default();
        o.set("a", Entry::Dir);
        o.set("a/x", Entry::Gone);
        o.set("a/y", Entry::Dir);
        o.set("b", Entry::Gone);
        let names: Vec<String> = o.children("a").into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["x", "y"]);
        assert_eq!(o.children("").len(), 2);
        assert_eq!(o.subtree("a").len(), 3);
        o.remove("a/x");
        o.remove("a/y");
        assert!(o.children("a").is_empty());
        assert!(o.remove("a/zz").is_none());
        assert_eq!(o.len(), 2);
    }

    #[test]
    fn child_dirs_follow_an_entry_changing_kind() {
        let mut o = Overlay::default();
        o.set("a/d1", Entry::Dir);
        o.set("a/d2", Entry::Dir);
        o.set("a/gone", Entry::Gone);
        o.set("a/s", Entry::Special { hides: false });
        assert_eq!(o.child_dirs("a").count(), 2);
        assert!(o.child_dirs("a").has("gone"));
        assert!(!o.child_dirs("a").has("elsewhere"));
        // rmdir leaves a whiteout; a file made over it is not a directory either.
        o.set("a/d1", Entry::Gone);
        assert_eq!(o.child_dirs("a").count(), 1);
        o.set("a/gone", Entry::Dir);
        assert_eq!(o.child_dirs("a").count(), 2);
        o.remove("a/d2");
        assert_eq!(o.child_dirs("a").count(), 1);
        assert_eq!(o.child_dirs("nowhere").count(), 0);
    }

    fn moved() -> FileMeta {
        FileMeta {
            remote_path: "old/w.bin".into(),
            commit: "c0ffee".into(),
            size: 12,
            id: crate::hub_client::ContentId::Lfs("ab".repeat(32)),
            sha256: Some("ab".repeat(32)),
            last_commit: Some(std::time::UNIX_EPOCH - std::time::Duration::new(10, 5)),
        }
    }

    fn logged(o: &Overlay) -> BTreeMap<String, Logged> {
        o.all().into_iter().map(|(p, e)| (p, Logged::from(&e))).collect()
    }

    #[test]
    fn a_journaled_overlay_replays_the_same_entries() {
        let dir = tempfile::tempdir().unwrap();
        let staging = super::super::staging::StagingArea::open(&dir.path().join("staging")).unwrap();
        let staged = Arc::new(staging.create("a/new.txt").unwrap());
        let (log, live) = LayerLog::open(dir.path()).unwrap();
        assert!(live.is_empty());
        let mut o = Overlay::with_log(Arc::new(log));
        assert!(o.journals() && !Overlay::default().journals());
        o.set("a", Entry::Dir);
        o.set("a/new.txt", Entry::File(staged.clone()));
        o.set("a/w.bin", Entry::Moved(moved()));
        o.set("old", Entry::Gone);
        o.set("link", Entry::Special { hides: true });
        o.set("tmp", Entry::Dir);
        o.remove("tmp");
        o.set("link", Entry::Special { hides: false });
        // Neither journaled: no entry to remove, and a restore.
        assert!(o.remove("nothing").is_none());
        o.restore("restored", Entry::Dir);
        o.sync_log().unwrap();
        assert_eq!(o.log_errors(), 0);

        let (log, live) = LayerLog::open(dir.path()).unwrap();
        assert_eq!(log.lines(), 8);
        let mut want = logged(&o);
        want.remove("restored");
        assert_eq!(live, want);
        assert_eq!(live["a/new.txt"], Logged::File { id: staged.id() });
        let Logged::Moved(m) = live["a/w.bin"].clone() else {
            panic!("not moved");
        };
        assert_eq!(FileMeta::try_from(m).unwrap(), moved());
    }

    #[test]
    fn a_journaled_overlay_compacts_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = LayerLog::open(dir.path()).unwrap();
        let log = Arc::new(log);
        let mut o = Overlay::with_log(log.clone());
        o.set("keep", Entry::Dir);
        for i in 0..2000 {
            o.set("churn", Entry::Special { hides: i % 2 == 0 });
        }
        o.remove("churn");
        o.set("last", Entry::Gone);
        assert!(log.lines() <= 4 * 2 + 1024, "{} lines", log.lines());
        drop(o);
        drop(log);
        let (_, live) = LayerLog::open(dir.path()).unwrap();
        let want = BTreeMap::from([("keep".to_string(), Logged::Dir), ("last".to_string(), Logged::Gone)]);
        assert_eq!(live, want);
    }

    #[test]
    fn without_a_journal_sync_is_a_no_op() {
        let mut o = Overlay::default();
        o.set("a", Entry::Dir);
        o.remove("a");
        o.sync_log().unwrap();
        assert_eq!(o.log_errors(), 0);
    }
}
