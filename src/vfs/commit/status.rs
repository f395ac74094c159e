//! What `hubfs status` shows: the mount's status report, the status file that command reads, and
//! the dirty-path queries tests and shutdown use.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::vfs::VirtualFs;
use crate::write::overlay::Entry;

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Counters {
    pub commits: u64,
    pub files_committed: u64,
    pub failed_rounds: u64,
}

/// What `hubfs status` shows for a mount.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReport {
    pub pid: u32,
    pub repo: String,
    pub branch: String,
    pub mountpoint: Option<String>,
    pub last_commit: Option<String>,
    pub last_error: Option<String>,
    pub counters: Counters,
    pub bytes_uploaded: u64,
    /// Files written but not yet committed: (repo path, size, open for writing, error).
    pub dirty: Vec<DirtyReport>,
    /// Deletions and moves waiting for a commit.
    pub pending_namespace_changes: usize,
    pub staging_dir: String,
    /// The Hub's commit rate limit was reached: no commit before this time (RFC 3339, UTC).
    #[serde(default)]
    pub rate_limited_until: Option<String>,
    /// This mount's commit budget (`N/SECONDS`), if it has one.
    #[serde(default)]
    pub commit_budget: Option<String>,
    /// Commits this mount made within the budget's window.
    #[serde(default)]
    pub commits_in_window: Option<usize>,
    /// The next commit waits for the budget until then (RFC 3339, UTC).
    #[serde(default)]
    pub budget_wait_until: Option<String>,
    /// Symlinks, FIFOs, sockets and device nodes: they exist only in the mount.
    #[serde(default)]
    pub local_only_entries: usize,
    /// Files and directories whose mode or owner the mount keeps and the Hub never sees.
    #[serde(default)]
    pub metadata_changes: usize,
    /// Names that are hard links of another (groups of two or more): one file in the mount, each
    /// name its own file on the Hub.
    #[serde(default)]
    pub hard_links: usize,
    /// The ids entries show by default (what `metadata_changes` compares owners with).
    #[serde(default)]
    pub uid: u32,
    #[serde(default)]
    pub gid: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DirtyReport {
    pub path: String,
    pub size: u64,
    pub open: bool,
    pub error: Option<String>,
}

impl VirtualFs {
    /// Records where the mount is, for `hubfs status`.
    pub fn set_mountpoint(&self, dir: &Path) {
        if let Some(w) = &self.writer {
            *w.mountpoint.lock() = Some(dir.to_path_buf());
            self.write_status();
        }
    }

    /// When the least recently written file still waiting for a commit was last written (metrics:
    /// how long the oldest change has waited, at least).
    pub fn oldest_dirty_mtime(&self) -> Option<std::time::SystemTime> {
        let w = self.writer.as_ref()?;
        let all = w.overlay.lock().all();
        all.into_iter()
            .filter_map(|(_, e)| match e {
                Entry::File(d) if d.is_dirty() => Some(d.mtime()),
                _ => None,
            })
            .min()
    }

    /// The state of a writable mount (`None` when read-only).
    /// Where the mount's memory is (`hubfs status`).
    pub fn memory_report(&self) -> crate::chunk_store::MemoryReport {
        self.reader.store.memory_report()
    }

    pub fn status_report(&self) -> Option<StatusReport> {
        self.writer.as_ref().map(|_| self.status())
    }

    pub(super) fn status(&self) -> StatusReport {
        let Some(w) = &self.writer else {
            unreachable!("status of a read-only mount is never asked: status_report checks")
        };
        let mut dirty = Vec::new();
        let mut ns = 0;
        for (_, e) in w.overlay.lock().all() {
            match e {
                Entry::File(d) if d.is_dirty() => dirty.push(DirtyReport {
                    path: d.repo_path(),
                    size: d.size(),
                    open: d.writers() > 0,
                    error: d.error(),
                }),
                Entry::Moved(_) | Entry::Gone | Entry::Special { hides: true } => ns += 1,
                _ => {}
            }
        }
        dirty.sort_by(|a, b| a.path.cmp(&b.path));
        // The names of a link group share one staged copy: listed once, by the name it is staged as.
        dirty.dedup_by(|a, b| a.path == b.path);
        // One statement per lock: a guard taken inside the struct literal below would live until
        // its end, and a second `lock()` there would deadlock.
        let (local_only_entries, metadata_changes) = w.meta.summary(self.opts.uid, self.opts.gid);
        let hard_links = w.meta.linked_names();
        let (commit_budget, commits_in_window) = match w.budget.lock().as_mut() {
            Some(b) => (Some(b.spec().to_string()), Some(b.used(tokio::time::Instant::now()))),
            None => (None, None),
        };
        StatusReport {
            pid: std::process::id(),
            repo: w.repo_id.clone(),
            branch: w.branch.clone(),
            mountpoint: w.mountpoint.lock().as_ref().map(|p| p.display().to_string()),
            last_commit: w.last_commit.lock().clone(),
            last_error: w.last_error.lock().clone(),
            counters: w.counters.lock().clone(),
            bytes_uploaded: w
                .uploader
                .stats
                .bytes_uploaded
                .load(std::sync::atomic::Ordering::Relaxed),
            dirty,
            pending_namespace_changes: ns,
            staging_dir: w.staging.dir().display().to_string(),
            rate_limited_until: w
                .rate_limited_until()
                .map(|(_, wall)| wall.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            commit_budget,
            commits_in_window,
            budget_wait_until: w
                .budget_wait
                .lock()
                .filter(|t| *t > chrono::Utc::now())
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            local_only_entries,
            metadata_changes,
            hard_links,
            uid: self.opts.uid,
            gid: self.opts.gid,
        }
    }

    /// Writes the status file (atomically) where `hubfs status` looks for it.
    pub(super) fn write_status(&self) {
        let Some(w) = &self.writer else { return };
        let Some(dir) = &w.opts.status_dir else { return };
        w.status_meta_version
            .store(w.meta.version(), std::sync::atomic::Ordering::Relaxed);
        let report = self.status();
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(dir)?;
            let path = dir.join(format!("{}.json", report.pid));
            let tmp = dir.join(format!(".{}.json.tmp", report.pid));
            std::fs::write(&tmp, serde_json::to_vec_pretty(&report).map_err(std::io::Error::other)?)?;
            std::fs::rename(tmp, path)
        };
        if let Err(e) = write() {
            tracing::debug!(error = %e, "could not write the status file");
        }
    }

    /// Rewrites the status file if local metadata changed since it was written (its counts).
    pub(super) fn refresh_status(&self) {
        if let Some(w) = &self.writer
            && w.status_meta_version.load(std::sync::atomic::Ordering::Relaxed) != w.meta.version()
        {
            self.write_status();
        }
    }

    /// Removes this mount's status file (unmount).
    pub fn remove_status(&self) {
        if let Some(w) = &self.writer
            && let Some(dir) = &w.opts.status_dir
        {
            let _ = std::fs::remove_file(dir.join(format!("{}.json", std::process::id())));
        }
    }

    /// Files that are dirty right now (tests, status).
    pub fn dirty_paths(&self) -> Vec<String> {
        self.status_report()
            .map(|r| r.dirty.into_iter().map(|d| d.path).collect())
            .unwrap_or_default()
    }

    /// Whether `path` (mount-relative) is only local so far.
    pub fn is_staged(&self, path: &str) -> bool {
        self.writer
            .as_ref()
            .is_some_and(|w| matches!(w.overlay.lock().get(path), Some(Entry::File(d)) if d.is_dirty()))
    }
}
