//! The overlay: local changes to the namespace, laid over the mount's commit.
//!
//! The remote tree at a commit never changes; what a writable mount adds on top lives here, keyed by
//! mount-relative path: staged files, remote content moved to a new path, local directories and
//! whiteouts (a remote path that was deleted or moved away). A lookup asks the overlay first and
//! the commit's tree second; a listing merges the two. When a commit lands, the entries it carried
//! are removed and the new commit's tree shows them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

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

/// Lock order: the overlay is locked by its owner (VirtualFs) as a leaf; nothing else is locked
/// while it is held.
#[derive(Default)]
pub struct Overlay {
    entries: HashMap<String, Entry>,
    /// parent path → child name → present. Lets a listing find its overlay children without a scan.
    children: HashMap<String, BTreeMap<String, ()>>,
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

impl Overlay {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries.get(path)
    }

    pub fn set(&mut self, path: &str, e: Entry) {
        let (parent, name) = split(path);
        self.children
            .entry(parent.to_string())
            .or_default()
            .insert(name.to_string(), ());
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
        Some(e)
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
}
