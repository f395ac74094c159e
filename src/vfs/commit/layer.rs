//! An overlay mount's layer: a writable mount whose changes stay on local disk until the user
//! publishes them (`publish`), and that never moves off its commit while mounted.
//!
//! The layer is a staging directory like a writable mount's, plus a journal of its namespace
//! (`write::layer_log`: which path holds which staged file, moved Hub files, local folders,
//! whiteouts) and a record of what it lies over (`write::layer`). A writable mount can keep its
//! namespace in memory because it commits it within seconds; a layer may live for weeks, across
//! unmounts and crashes, so every namespace change is journaled as it happens.
//!
//! When a remount finds the branch moved, the layer moves to the new head; a path the layer changed
//! whose Hub version changed too is recorded as a conflict: shown by `diff`, refused by `publish`
//! until reset or `--force`d, never dropped.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::{Writer, staging_error};
use crate::hub_client::{HubClient, RepoInfo, RepoRef};
use crate::vfs::error::{VfsError, VfsResult};
use crate::vfs::{Forget, Node, VirtualFs};
use crate::write::layer::{self as record, LayerRecord};
use crate::write::layer_log::{LayerLog, Logged};
use crate::write::overlay::{Entry, Overlay};
use crate::write::staging::{DirtyFile, Phase, StagingArea};

/// Settings of an overlay mount.
#[derive(Debug, Clone, Default)]
pub struct OverlayOptions {
    /// The layer's directory (`--overlay UPPER`); `None`: below the staging root, keyed by Hub,
    /// repo and revision.
    pub upper: Option<PathBuf>,
    /// Reopened by `hubfs overlay` without a mount: stay on the layer's commit rather than move
    /// to the revision's head (only a mount moves a layer).
    pub keep_base: bool,
    /// The mountpoint to record for `hubfs overlay DIR`.
    pub mountpoint: Option<PathBuf>,
}

/// Lock order: `record` is a leaf; `publishing` is taken before the overlay and never while any
/// sync lock is held.
pub(crate) struct LayerState {
    pub(super) dir: PathBuf,
    pub(super) record: Mutex<LayerRecord>,
    /// One publish (or reset) at a time.
    pub(super) publishing: tokio::sync::Mutex<()>,
}

impl LayerState {
    pub(super) fn save(&self) -> VfsResult<()> {
        let rec = self.record.lock().clone();
        record::write(&self.dir, &rec).map_err(|e| staging_error(&self.dir, e))
    }
}

/// What changed at one path, as `hubfs overlay diff` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    Renamed,
    /// Kept by the layer only: the Hub stores regular files, not symlinks or empty folders.
    Local,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub kind: ChangeKind,
    pub path: String,
    /// A rename's (or copy's) source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Size in the layer (none for a deletion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Size on the Hub at the layer's commit (none where the Hub has no file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub_size: Option<u64>,
    /// The Hub's version changed too since the change was made (see the module doc).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub conflict: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Opens the layer in `dir`: replays its journal over the staged files, and moves it to `info`'s
/// commit unless `o.keep_base` (recording conflicts).
#[allow(clippy::too_many_arguments)]
pub(super) async fn open(
    client: &HubClient,
    repo: &RepoRef,
    revision: &str,
    info: &RepoInfo,
    subfolder: Option<&str>,
    dir: &Path,
    o: &OverlayOptions,
    staging: &StagingArea,
) -> VfsResult<(Overlay, LayerState)> {
    if subfolder.is_some_and(|s| !s.trim_matches('/').is_empty()) {
        return Err(VfsError::Invalid(
            "an overlay lies over a whole repo: mount it without a subfolder",
        ));
    }
    if repo.is_bucket() {
        return Err(VfsError::Invalid(
            "a bucket is writable as it is: mount it without --overlay",
        ));
    }
    let (log, logged) = LayerLog::open(dir).map_err(|e| staging_error(dir, e))?;
    let mut overlay = Overlay::with_log(Arc::new(log));
    let mut files: HashMap<u64, Arc<DirtyFile>> = HashMap::new();
    for r in staging.recover()? {
        if r.phase == Phase::Open {
            // Open when the mount stopped: what was written is the file's content, as on a local
            // disk after a crash.
            r.file.seal()?;
        }
        files.insert(r.file.id(), Arc::new(r.file));
    }
    let mut named = HashSet::new();
    for (path, l) in logged {
        let e = match l {
            Logged::File { id } => match files.get(&id) {
                Some(f) => {
                    named.insert(id);
                    Entry::File(f.clone())
                }
                None => {
                    tracing::warn!(path = %path, id, "the layer's journal names a staged file that is gone; dropped");
                    continue;
                }
            },
            Logged::Moved(m) => Entry::Moved(m.into_meta()),
            Logged::Dir => Entry::Dir,
            Logged::Gone => Entry::Gone,
            Logged::Special { hides } => Entry::Special { hides },
        };
        overlay.restore(&path, e);
    }
    // Staged before its journal line was written (a crash in between): back at its own path when
    // that is free, else saved aside for a person.
    for (id, f) in files {
        if named.contains(&id) {
            continue;
        }
        let path = f.repo_path();
        if overlay.get(&path).is_none() {
            overlay.set(&path, Entry::File(f));
        } else {
            let dest = staging.dir().join("recovered").join(&path);
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::rename(f.data_file()?, &dest)?;
            f.discard();
            tracing::warn!(path = %path, saved = %dest.display(), "a staged file the journal does not name was saved aside");
        }
    }
    let old = record::read(dir).map_err(|e| staging_error(dir, e))?;
    let head = info.sha.clone();
    let (base, mut conflicts) = match &old {
        Some(r) if o.keep_base => (r.base.clone(), r.conflicts.clone()),
        Some(r) if r.base != head && !overlay.is_empty() => {
            let mut c = r.conflicts.clone();
            let found = changed_between(client, repo, &r.base, &head, &touched(&overlay)).await;
            if !found.is_empty() {
                tracing::warn!(
                    paths = %found.join(", "),
                    "changed both in the layer and on the Hub since the layer's commit; the layer's versions \
                     are kept (`hubfs overlay diff` marks them)"
                );
            }
            c.extend(found);
            (head, c)
        }
        Some(r) => (head, r.conflicts.clone()),
        None => (head, Vec::new()),
    };
    conflicts.sort();
    conflicts.dedup();
    let rec = LayerRecord {
        endpoint: client.endpoint().to_string(),
        repo: repo.to_string(),
        revision: revision.to_string(),
        base,
        mountpoint: o
            .mountpoint
            .as_ref()
            .map(|m| m.display().to_string())
            .or(old.and_then(|r| r.mountpoint)),
        conflicts,
    };
    record::write(dir, &rec).map_err(|e| staging_error(dir, e))?;
    let state = LayerState {
        dir: dir.to_path_buf(),
        record: Mutex::new(rec),
        publishing: tokio::sync::Mutex::new(()),
    };
    Ok((overlay, state))
}

/// Paths whose Hub version the layer's entries depend on.
fn touched(o: &Overlay) -> Vec<String> {
    let mut out = BTreeSet::new();
    for (path, e) in o.all() {
        match e {
            Entry::File(_) | Entry::Gone | Entry::Special { hides: true } => {
                out.insert(path);
            }
            Entry::Moved(m) => {
                out.insert(path);
                out.insert(m.remote_path.clone());
            }
            Entry::Dir | Entry::Special { hides: false } => {}
        }
    }
    out.into_iter().collect()
}

/// The paths among `paths` whose Hub entry differs between two commits. If the Hub cannot say,
/// every path counts as changed: a conflict too many is a question, one too few a lost change.
async fn changed_between(client: &HubClient, repo: &RepoRef, old: &str, new: &str, paths: &[String]) -> Vec<String> {
    if paths.is_empty() {
        return Vec::new();
    }
    let at = |commit: String| async move {
        client.paths_info(repo, &commit, paths).await.map(|v| {
            v.into_iter()
                .map(|e| (e.path().to_string(), e.oid().to_string()))
                .collect::<HashMap<String, String>>()
        })
    };
    match (at(old.to_string()).await, at(new.to_string()).await) {
        (Ok(a), Ok(b)) => paths.iter().filter(|p| a.get(*p) != b.get(*p)).cloned().collect(),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(error = %e, "could not compare the layer's paths across commits; all marked as conflicts");
            paths.to_vec()
        }
    }
}

impl Writer {
    /// The commit an overlay lies over (`None`: not an overlay).
    pub(crate) fn layer_base(&self) -> Option<String> {
        Some(self.layer.as_ref()?.record.lock().base.clone())
    }
}

impl VirtualFs {
    /// Whether this is an overlay mount (`--overlay`).
    pub fn is_overlay(&self) -> bool {
        self.writer.as_ref().is_some_and(|w| w.layer.is_some())
    }

    /// Whether commit rounds run on their own (a writable mount; not an overlay).
    pub(crate) fn rounds_run(&self) -> bool {
        self.writer.as_ref().is_some_and(|w| w.layer.is_none())
    }

    /// The overlay's layer directory and record.
    pub fn layer_record(&self) -> Option<(PathBuf, LayerRecord)> {
        let l = self.writer.as_ref()?.layer.as_ref()?;
        Some((l.dir.clone(), l.record.lock().clone()))
    }

    /// Makes the layer's journal and metadata durable (close, fsync, unmount).
    pub(crate) fn sync_layer(&self) {
        let Some(w) = &self.writer else { return };
        let log = w.overlay.lock().log();
        if let Some(log) = log
            && let Err(e) = log.sync()
        {
            tracing::warn!(error = %e, "could not make the layer's journal durable");
        }
        if let Err(e) = w.meta.sync() {
            tracing::warn!(error = %e, "could not make the metadata log durable");
        }
    }

    /// A Hub file at `path` in `commit`, if there is one.
    pub(super) async fn hub_file(&self, commit: &str, path: &str) -> VfsResult<Option<crate::vfs::remote::FileMeta>> {
        Ok(match self.node_at(commit, path).await? {
            Some(Node::File(m)) => Some(m),
            _ => None,
        })
    }

    /// Hub files a layer entry lies over without a whiteout of their own: a local folder (or a
    /// file below one) where the commit has a file. Publishing deletes them.
    pub(super) async fn covered_files(&self, commit: &str, entries: &[(String, Entry)]) -> VfsResult<Vec<String>> {
        let mut out = BTreeSet::new();
        for (path, e) in entries {
            if matches!(e, Entry::Gone) {
                continue;
            }
            let mut p = path.as_str();
            let mut first = true;
            loop {
                // A file at the entry's own path is replaced by a File/Moved/Special entry (a
                // commit op or `hides`), only a Dir entry covers it.
                if (!first || matches!(e, Entry::Dir)) && self.hub_file(commit, p).await?.is_some() {
                    out.insert(p.to_string());
                }
                first = false;
                match p.rsplit_once('/') {
                    Some((parent, _)) => p = parent,
                    None => break,
                }
            }
        }
        Ok(out.into_iter().collect())
    }

    /// What the layer changes against its commit (`hubfs overlay diff`).
    pub async fn layer_changes(&self) -> VfsResult<Vec<Change>> {
        let Some(layer) = self.writer.as_ref().and_then(|w| w.layer.as_ref()) else {
            return Err(VfsError::Invalid("not an overlay mount"));
        };
        let w = self.writer.as_ref().ok_or(VfsError::ReadOnly)?;
        let base = self.commit().await?;
        let conflicts: HashSet<String> = layer.record.lock().conflicts.iter().cloned().collect();
        let mut entries = w.overlay.lock().all();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let gones: HashSet<&str> = entries
            .iter()
            .filter(|(_, e)| matches!(e, Entry::Gone))
            .map(|(p, _)| p.as_str())
            .collect();
        let mut renamed_from = HashSet::new();
        let mut out = Vec::new();
        let change = |kind, path: &str| Change {
            kind,
            path: path.to_string(),
            from: None,
            size: None,
            hub_size: None,
            conflict: conflicts.contains(path),
            note: None,
        };
        for (path, e) in &entries {
            match e {
                Entry::File(d) => {
                    if !d.is_dirty() && d.repo_path() == self.remote_path(path) {
                        continue;
                    }
                    let hub = self.hub_file(&base, path).await?;
                    let kind = if hub.is_some() {
                        ChangeKind::Modified
                    } else {
                        ChangeKind::Added
                    };
                    out.push(Change {
                        size: Some(d.size()),
                        hub_size: hub.map(|m| m.size),
                        ..change(kind, path)
                    });
                }
                Entry::Moved(m) => {
                    let hub = self.hub_file(&base, path).await?;
                    let mut c = Change {
                        from: Some(m.remote_path.clone()),
                        size: Some(m.size),
                        hub_size: hub.map(|h| h.size),
                        ..change(ChangeKind::Renamed, path)
                    };
                    if gones.contains(m.remote_path.as_str()) && renamed_from.insert(m.remote_path.clone()) {
                        c.conflict |= conflicts.contains(&m.remote_path);
                    } else {
                        c.kind = ChangeKind::Added;
                        c.note = Some(format!("a copy of {}", m.remote_path));
                    }
                    out.push(c);
                }
                Entry::Special { hides } => {
                    let hub = if *hides {
                        self.hub_file(&base, path).await?
                    } else {
                        None
                    };
                    let what = match w.meta.get(&self.remote_path(path)).and_then(|m| m.special) {
                        Some(crate::write::metadata::Special::Symlink { target }) => format!("symlink to {target}"),
                        Some(crate::write::metadata::Special::Fifo) => "FIFO".into(),
                        Some(crate::write::metadata::Special::Socket) => "socket".into(),
                        Some(_) => "device node".into(),
                        None => "special file".into(),
                    };
                    let note = match hub {
                        Some(_) => format!("{what}, kept locally (the Hub file it replaced is deleted)"),
                        None => format!("{what}, kept locally (the Hub stores regular files only)"),
                    };
                    out.push(Change {
                        hub_size: hub.map(|h| h.size),
                        note: Some(note),
                        ..change(ChangeKind::Local, path)
                    });
                }
                Entry::Dir => {
                    let prefix = format!("{path}/");
                    let has_files = entries.iter().any(|(p, e)| {
                        p.starts_with(&prefix) && matches!(e, Entry::File(_) | Entry::Moved(_) | Entry::Special { .. })
                    });
                    if has_files || matches!(self.node_at(&base, path).await?, Some(Node::Dir)) {
                        continue;
                    }
                    out.push(Change {
                        note: Some("empty folder, kept locally (the Hub stores no folders)".into()),
                        ..change(ChangeKind::Local, path)
                    });
                }
                Entry::Gone => {}
            }
        }
        for (path, e) in &entries {
            if matches!(e, Entry::Gone)
                && !renamed_from.contains(path)
                && let Some(hub) = self.hub_file(&base, path).await?
            {
                out.push(Change {
                    hub_size: Some(hub.size),
                    ..change(ChangeKind::Deleted, path)
                });
            }
        }
        for path in self.covered_files(&base, &entries).await? {
            if let Some(hub) = self.hub_file(&base, &path).await? {
                out.push(Change {
                    hub_size: Some(hub.size),
                    note: Some("replaced by a folder".into()),
                    ..change(ChangeKind::Deleted, &path)
                });
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path).then(a.kind.cmp(&b.kind)));
        Ok(out)
    }

    /// Drops the layer's changes at and below `paths` (all of them when empty): the Hub's version
    /// shows again. Returns how many entries were dropped.
    pub async fn layer_reset(&self, paths: &[String]) -> VfsResult<usize> {
        let Some(layer) = self.writer.as_ref().and_then(|w| w.layer.as_ref()) else {
            return Err(VfsError::Invalid("not an overlay mount"));
        };
        let w = self.writer.as_ref().ok_or(VfsError::ReadOnly)?;
        let _one = layer.publishing.lock().await;
        let roots: Vec<String> = paths.iter().map(|p| p.trim_matches('/').to_string()).collect();
        let all = roots.is_empty() || roots.iter().any(|r| r.is_empty());
        let mut dropped: Vec<(String, Entry)> = Vec::new();
        {
            let mut o = w.overlay.lock();
            let mut picked: HashMap<String, Entry> = HashMap::new();
            if all {
                picked.extend(o.all());
            } else {
                for r in &roots {
                    picked.extend(o.subtree(r));
                }
                // A rename reset whole: its source shows again too.
                let sources: Vec<String> = picked
                    .values()
                    .filter_map(|e| match e {
                        Entry::Moved(m) => Some(m.remote_path.clone()),
                        _ => None,
                    })
                    .collect();
                for s in sources {
                    if let Some(Entry::Gone) = o.get(&s) {
                        picked.insert(s, Entry::Gone);
                    }
                }
            }
            if let Some((p, _)) = picked
                .iter()
                .find(|(_, e)| matches!(e, Entry::File(d) if d.writers() > 0))
            {
                return Err(VfsError::Commit {
                    msg: format!("{p} is open for writing; close it first"),
                    errno: libc::EBUSY,
                });
            }
            for (p, e) in picked {
                o.remove(&p);
                if let Entry::File(d) = &e {
                    d.discard();
                }
                dropped.push((p, e));
            }
        }
        // Modes, times and symlinks kept for those paths go with them.
        let records: Vec<String> = w.meta.all().into_iter().map(|(p, _)| p).collect();
        for p in records {
            let mount_path = self.mount_path(&p).unwrap_or_default();
            if all
                || roots
                    .iter()
                    .any(|r| mount_path == *r || mount_path.starts_with(&format!("{r}/")))
            {
                w.meta.remove_tree(&p);
            }
        }
        {
            let mut rec = layer.record.lock();
            rec.conflicts
                .retain(|c| !all && !roots.iter().any(|r| c == r || c.starts_with(&format!("{r}/"))));
        }
        layer.save()?;
        self.sync_layer();
        let mut forget: Vec<String> = dropped.iter().map(|(p, _)| p.clone()).collect();
        forget.extend(roots.iter().filter(|r| !r.is_empty()).cloned());
        self.forget_paths(&forget);
        Ok(dropped.len())
    }

    /// Tells the frontend's kernel cache to forget `paths` (their entries, attributes and pages,
    /// and their folders' listings): they changed behind its back.
    pub(super) fn forget_paths(&self, paths: &[String]) {
        let Some(f) = self.invalidator.get() else { return };
        let mut parents = BTreeSet::new();
        for p in paths {
            let (parent, name) = p.rsplit_once('/').unwrap_or(("", p.as_str()));
            let pino = self.inodes.ino_for(parent, 0);
            f(Forget::Entry { parent: pino, name });
            f(Forget::Inode(self.inodes.ino_for(p, 0)));
            parents.insert(pino);
        }
        for pino in parents {
            f(Forget::Inode(pino));
        }
    }
}
