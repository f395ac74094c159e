//! The committer of a writable mount: group commits of staged files and namespace changes.
//!
//! One task runs commit rounds. A round takes every change that is ready (closed dirty files, files
//! someone is waiting on, moves and deletions), uploads what needs uploading, and sends one commit
//! with `parentCommit` set to the commit the mount shows. Closes that arrive while a round is in
//! flight wait for the next one, so a `cp -r` of many files makes a handful of commits.
//!
//! A 412 (the branch moved) is re-based: if no touched path changed on the Hub since our parent,
//! the commit is retried on the new head; if every touched path already holds our content, our
//! own earlier attempt landed; otherwise the conflicting files fail with an error and stay staged
//! (held) until they are written again. Other failures are retried in the background with backoff,
//! and the callers waiting in close()/fsync() get the error at once.
//!
//! This file holds the `Writer` (staging, overlay, committer state) and how the write path hands it
//! work and waits for it; `round` is one commit round, `schedule` decides when rounds run, and
//! `status` is what `hubfs status` shows.

mod ahead;
mod aliases;
mod bucket;
mod budget;
mod follow;
mod layer;
mod publish;
mod round;
mod schedule;
mod status;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{Notify, oneshot};

use super::VirtualFs;
use super::error::{VfsError, VfsResult};
use crate::hub_client::{HubClient, HubClientError, RepoInfo, RepoRef};
use crate::write::instance;
use crate::write::metadata::MetaStore;
use crate::write::overlay::{Entry, Overlay};
use crate::write::staging::{DirtyFile, Phase, StagingArea};
use crate::write::upload::Uploader;
pub use budget::BudgetSpec;
pub use layer::{Change, ChangeKind, OverlayOptions};
pub use publish::{PublishOptions, Published};
pub use status::{Counters, DirtyReport, StatusReport};

/// Settings of a writable mount.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// Root of staging directories (one per repo and branch below it).
    pub staging_root: PathBuf,
    /// Commit title; `{summary}` is replaced by what the commit does, `{count}` by its size.
    pub commit_message: String,
    /// Base deadline of one upload session (plus time for the bytes at a slow rate).
    pub upload_timeout: Duration,
    /// A background commit starts once no new close (or namespace change) arrived for this long…
    pub quiet_period: Duration,
    /// …or once the oldest pending change has waited this long, whichever comes first…
    pub max_batch_delay: Duration,
    /// …or, when set, as soon as a whole commit's worth of changes is ready and the commit budget
    /// has commits to spare (off with `--commit-every`, which promises one commit per period).
    pub early_full_commits: bool,
    /// Where this mount writes its status file for `hubfs status` (`None`: no file).
    pub status_dir: Option<PathBuf>,
    /// What close() (and fsync) wait for.
    pub close: CloseMode,
    /// This mount's share of the repo's commit budget (`None`: commit whenever there is work).
    pub commit_budget: Option<BudgetSpec>,
    /// `--posix strict`: refuse what the Hub cannot store (modes, owners, symlinks, special files)
    /// with EPERM instead of keeping it in the mount.
    pub posix_strict: bool,
    /// Writable only by default (a bucket mounted without `--write`): a token that may not write
    /// gives a read-only mount instead of an error.
    pub unless_refused: bool,
    /// An overlay mount (`--overlay`): changes stay in a local layer until `hubfs overlay commit`.
    pub overlay: Option<OverlayOptions>,
    /// Uploads at close running at once in the background, and xorb uploads at once per Xet
    /// session (at most 2); each holds up to a 64 MiB xorb in memory, so the mount sizes it from
    /// its memory budget (see `uploads_for_budget`).
    pub background_uploads: usize,
}

/// Background uploads for a memory budget of `limit` bytes: one under 384 MiB, two under 768 MiB
/// (the default budget is 512 MiB), three from there.
pub fn uploads_for_budget(limit: u64) -> usize {
    match limit >> 20 {
        0..384 => 1,
        384..768 => 2,
        _ => 3,
    }
}

/// What close() waits for on a writable mount (`--close`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseMode {
    /// The Hub commit holding the file (close reports commit errors; spends a commit per close
    /// when closes come one by one). fsync commits too.
    Commit,
    /// The file is durable in the local journal and, if the Hub stores it through LFS/Xet, its
    /// content is uploaded; the commit follows, grouped with others. fsync does the same.
    Upload,
    /// The file is durable in the local journal; upload and commit follow, grouped.
    Stage,
    /// An overlay mount: the file is durable in the local layer, and nothing leaves the machine
    /// until `hubfs overlay commit`.
    Keep,
}

/// Files at least this large are uploaded at close (`CloseMode::Upload`); smaller ones are mostly
/// sent inline in the commit, and one preupload call for the whole commit decides for them.
pub const UPLOAD_AHEAD_MIN: u64 = 1 << 20;

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            staging_root: super::default_cache_dir().join("staging"),
            commit_message: "hubfs: {summary}".into(),
            upload_timeout: Duration::from_secs(120),
            quiet_period: Duration::from_millis(500),
            max_batch_delay: Duration::from_secs(5),
            early_full_commits: true,
            status_dir: None,
            close: CloseMode::Commit,
            commit_budget: None,
            posix_strict: false,
            unless_refused: false,
            overlay: None,
            background_uploads: 1,
        }
    }
}

type Reply = Result<(), Arc<VfsError>>;

/// Someone in close()/fsync() waiting for a file (or, with `file: None`, for the next round).
struct Waiter {
    file: Option<Arc<DirtyFile>>,
    generation: u64,
    tx: oneshot::Sender<Reply>,
}

/// Lock order: `overlay` → (DirtyFile state, a leaf); `waiters`, `rate_limited`, `next_title`,
/// `budget`, `budget_wait` and the status fields are leaves and never held together with the overlay.
pub(crate) struct Writer {
    pub staging: StagingArea,
    pub overlay: Mutex<Overlay>,
    pub uploader: Uploader,
    pub branch: String,
    pub(super) opts: WriteOptions,
    kick: Arc<Notify>,
    /// When the last background change came (the committer's debounce reads it).
    quiet: schedule::Quiet,
    waiters: Mutex<Vec<Waiter>>,
    last_commit: Mutex<Option<String>>,
    last_error: Mutex<Option<String>>,
    counters: Mutex<Counters>,
    /// Files whose commit conflicted with a change on the Hub: kept staged until written again.
    held: Mutex<HashSet<u64>>,
    pub mountpoint: Mutex<Option<PathBuf>>,
    repo_id: String,
    /// The Hub refused a commit with 429 and a wait (its commit rate limit): no commit is sent
    /// before this instant; the wall-clock time is what `hubfs status` shows.
    rate_limited: Mutex<Option<(tokio::time::Instant, chrono::DateTime<chrono::Utc>)>>,
    /// A title for the next commit, set by `hubfs commit -m` (cleared once a commit lands).
    next_title: Mutex<Option<String>>,
    /// Spent by every commit; rounds wait for it (see `budget`).
    budget: Mutex<Option<budget::CommitBudget>>,
    /// When the committer waits for the budget: until when (for `hubfs status`).
    budget_wait: Mutex<Option<chrono::DateTime<chrono::Utc>>>,
    /// Stopping (unmount, SIGTERM): what is left is committed without waiting for the mount's
    /// budget (the Hub's own limit still applies), so that an unmount leaves nothing staged.
    draining: std::sync::atomic::AtomicBool,
    /// Modes, owners, times and special files kept by the mount (`write::metadata`).
    pub(super) meta: MetaStore,
    /// The metadata version the status file last showed.
    status_meta_version: std::sync::atomic::AtomicU64,
    /// The repo folder the mount shows ("" for the whole repo): overlay paths are below it.
    subfolder: String,
    /// Uploads started at close that outlive it (`--close stage`): see `ahead`.
    ahead: ahead::AheadUploads,
    /// An overlay mount's layer: its record and publishing state (`None` on a writable mount).
    pub(super) layer: Option<layer::LayerState>,
    /// Held by a commit round from start to end, the drop of its landed files included (after
    /// its waiters are answered, see `round`); `drain` takes it once its commits are done, so
    /// that the mount stops only after the staged copies of committed files are gone. Taken
    /// before any other lock of the writer; never taken by a round's own callees.
    rounds: tokio::sync::Mutex<()>,
}

/// `hubs/<endpoint>/kind/ns/name/branch`, each part made safe as one directory name: local state
/// belongs to one Hub (see `write::instance`).
fn staging_dir(root: &Path, endpoint: &str, repo: &RepoRef, branch: &str) -> PathBuf {
    root.join(instance::HUBS_DIR)
        .join(instance::endpoint_key(endpoint))
        .join(legacy_staging_dir(Path::new(""), repo, branch))
}

/// `kind/ns/name/branch`: where versions before endpoint keys kept a repo's staging dir.
fn legacy_staging_dir(root: &Path, repo: &RepoRef, branch: &str) -> PathBuf {
    let safe = |s: &str| crate::util::urlenc::encode_segment(s);
    root.join(repo.kind.plural())
        .join(safe(&repo.namespace))
        .join(safe(&repo.name))
        .join(safe(branch))
}

fn staging_error(dir: &Path, e: impl std::fmt::Display) -> VfsError {
    VfsError::Cache(format!(
        "cannot use staging dir {}: {e} (pass --cache-dir DIR on a writable disk)",
        dir.display()
    ))
}

/// Whether the repo still knows `commit`, the head an earlier mount saw: the test of last resort
/// when the Hub sends neither `_id` nor `createdAt`.
async fn commit_known(client: &HubClient, repo: &RepoRef, commit: &str) -> VfsResult<instance::Verdict> {
    match client.repo_info(repo, commit).await {
        Ok(_) => Ok(instance::Verdict::Same),
        Err(HubClientError::RevisionNotFound { .. } | HubClientError::NotFound { .. }) => Ok(instance::Verdict::Other(
            format!("commit {commit}, which it last saw, is not in the repo's history"),
        )),
        Err(e) => Err(VfsError::Remote(e)),
    }
}

/// A staging dir in the layout of versions before endpoint keys: nothing says which Hub or repo
/// instance it belongs to, so it is never adopted. One holding state is moved to quarantine, an
/// empty one removed. Failures are logged and leave it where it is.
fn set_aside_legacy(root: &Path, repo: &RepoRef, branch: &str) {
    let dir = legacy_staging_dir(root, repo, branch);
    if !dir.is_dir() {
        return;
    }
    // Its lock: a mount of an older version may still be using it.
    let staging = match StagingArea::open(&dir) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "left an old-layout staging dir alone");
            return;
        }
    };
    if !instance::holds_state(&dir) {
        drop(staging);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::debug!(dir = %dir.display(), error = %e, "could not remove an empty old-layout staging dir");
        }
        return;
    }
    match instance::quarantine(root, &dir) {
        Ok(to) => tracing::warn!(
            repo = %repo,
            moved_to = %to.display(),
            "a staging dir from an older hubfs (it does not say which Hub it belongs to) was set aside: \
             its staged files and local-only entries are not shown or committed (they stay there for you)"
        ),
        Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "could not set aside an old-layout staging dir"),
    }
}

impl Writer {
    /// Opens the staging dir of `repo` at `revision` on this Hub, after checking it belongs to the
    /// repo instance `info` describes (else it is moved aside: `instance::quarantine`).
    pub async fn open(
        client: &HubClient,
        repo: &RepoRef,
        revision: &str,
        info: &RepoInfo,
        subfolder: Option<&str>,
        opts: &WriteOptions,
    ) -> VfsResult<Writer> {
        if super::is_commit_id(revision) && opts.overlay.is_none() {
            return Err(VfsError::Invalid(
                "a writable mount needs a branch (a commit id cannot move): mount @main or another branch",
            ));
        }
        let root = &opts.staging_root;
        let dir = match opts.overlay.as_ref().and_then(|o| o.upper.clone()) {
            Some(upper) => upper,
            None => {
                if opts.overlay.is_none() {
                    set_aside_legacy(root, repo, revision);
                }
                staging_dir(root, client.endpoint(), repo, revision)
            }
        };
        let staging = StagingArea::open(&dir).map_err(|e| staging_error(&dir, e))?;
        let now = instance::Instance {
            endpoint: client.endpoint().to_string(),
            repo: format!("{}/{}/{}", repo.kind.plural(), repo.namespace, repo.name),
            id: info.instance_id.clone(),
            created_at: info.created_at.clone(),
            commit: (!repo.is_bucket()).then(|| info.sha.clone()),
        };
        let verdict = match instance::read(&dir) {
            Ok(None) if !instance::holds_state(&dir) => instance::Verdict::Same,
            Ok(None) => instance::Verdict::Other("it has no record of the repo it belongs to".into()),
            Ok(Some(old)) => match instance::compare(&old, &now) {
                instance::Verdict::AskCommit(c) => commit_known(client, repo, &c).await?,
                v => v,
            },
            Err(e) => instance::Verdict::Other(format!("its record cannot be read ({e})")),
        };
        let staging = match verdict {
            instance::Verdict::Other(why) if instance::holds_state(&dir) => {
                // Moved while its lock is held, so no other mount can be using it.
                let to = instance::quarantine(root, &dir).map_err(|e| staging_error(&dir, e))?;
                drop(staging);
                tracing::warn!(
                    repo = %repo,
                    moved_to = %to.display(),
                    reason = %why,
                    "local state of another instance of this repo was set aside: its staged files and \
                     local-only entries are not shown or committed (they stay there for you)"
                );
                StagingArea::open(&dir).map_err(|e| staging_error(&dir, e))?
            }
            _ => staging,
        };
        instance::write(&dir, &now).map_err(|e| staging_error(&dir, e))?;
        let meta = MetaStore::open(&dir)
            .map_err(|e| VfsError::Cache(format!("cannot read the metadata log in {}: {e}", dir.display())))?;
        let uploader = Uploader::new(
            client.clone(),
            repo.clone(),
            revision.to_string(),
            opts.upload_timeout,
            opts.background_uploads,
        )
        .map_err(|e| VfsError::Xet(e.to_string()))?;
        let (overlay, layer) = match &opts.overlay {
            Some(o) => {
                let (overlay, state) = layer::open(client, repo, revision, info, subfolder, &dir, o, &staging).await?;
                (overlay, Some(state))
            }
            None => (Overlay::default(), None),
        };
        let w = Writer {
            overlay: Mutex::new(overlay),
            uploader,
            branch: revision.to_string(),
            opts: opts.clone(),
            kick: Arc::new(Notify::new()),
            quiet: schedule::Quiet::new(),
            rounds: tokio::sync::Mutex::new(()),
            waiters: Mutex::new(Vec::new()),
            last_commit: Mutex::new(None),
            last_error: Mutex::new(None),
            counters: Mutex::new(Counters::default()),
            held: Mutex::new(HashSet::new()),
            mountpoint: Mutex::new(None),
            repo_id: repo.to_string(),
            rate_limited: Mutex::new(None),
            next_title: Mutex::new(None),
            // A bucket has no commits and no commit budget: every round is one batch request.
            budget: Mutex::new(
                opts.commit_budget
                    .filter(|_| !repo.is_bucket())
                    .map(|b| budget::CommitBudget::new(b, tokio::time::Instant::now())),
            ),
            budget_wait: Mutex::new(None),
            draining: std::sync::atomic::AtomicBool::new(false),
            meta,
            status_meta_version: std::sync::atomic::AtomicU64::new(u64::MAX),
            staging,
            subfolder: subfolder.unwrap_or("").trim_matches('/').to_string(),
            ahead: ahead::AheadUploads::new(opts.background_uploads),
            layer,
        };
        if w.layer.is_none() {
            w.recover(subfolder.unwrap_or("").trim_matches('/'))?;
        }
        Ok(w)
    }

    /// Staged files of an earlier run: closed ones go back into the overlay (the committer uploads
    /// them); ones that were still open are moved to `recovered/` and left for a person to check.
    fn recover(&self, subfolder: &str) -> VfsResult<()> {
        let found = self.staging.recover()?;
        let mut overlay = self.overlay.lock();
        for r in found {
            let repo_path = r.file.repo_path();
            let rel = if subfolder.is_empty() {
                Some(repo_path.as_str())
            } else {
                repo_path.strip_prefix(subfolder).and_then(|p| p.strip_prefix('/'))
            };
            match (r.phase, rel) {
                (Phase::Closed, Some(rel)) => {
                    tracing::info!(path = %repo_path, size = r.file.size(), "recovered a closed file; it will be committed");
                    overlay.set(rel, Entry::File(Arc::new(r.file)));
                }
                (Phase::Closed, None) => {
                    tracing::warn!(path = %repo_path, "staged file outside the mounted folder left for a mount of its folder");
                    std::mem::forget(r.file);
                }
                (Phase::Open, _) => {
                    let dest = self.staging.dir().join("recovered").join(&repo_path);
                    if let Some(parent) = dest.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::rename(r.file.data_file()?, &dest)?;
                    r.file.discard();
                    tracing::warn!(
                        path = %repo_path,
                        saved = %dest.display(),
                        "a file was still open when hubfs stopped; its bytes are saved, not uploaded"
                    );
                }
            }
        }
        Ok(())
    }

    /// Records a 429 from the commit endpoint that asked for `wait`.
    fn set_rate_limited(&self, wait: Duration) {
        // A 429 without a usable wait still pauses commits briefly rather than retrying at once.
        let wait = wait.max(Duration::from_secs(1));
        let until = tokio::time::Instant::now() + wait;
        let wall = chrono::Utc::now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX);
        tracing::warn!(
            wait_secs = wait.as_secs(),
            until = %wall.format("%Y-%m-%d %H:%M:%S UTC"),
            "the Hub's commit rate limit was reached; commits wait, files stay staged"
        );
        *self.rate_limited.lock() = Some((until, wall));
    }

    /// Until when commits must wait for the Hub's rate limit (`None`: they need not).
    fn rate_limited_until(&self) -> Option<(tokio::time::Instant, chrono::DateTime<chrono::Utc>)> {
        let mut g = self.rate_limited.lock();
        match *g {
            Some((until, _)) if until > tokio::time::Instant::now() => *g,
            Some(_) => {
                *g = None;
                None
            }
            None => None,
        }
    }

    /// Answers everyone waiting for a commit with the rate limit (they keep their data staged).
    fn refuse_waiters(&self, wall: chrono::DateTime<chrono::Utc>) {
        let waiters: Vec<Waiter> = std::mem::take(&mut *self.waiters.lock());
        if waiters.is_empty() {
            return;
        }
        let e = Arc::new(VfsError::Commit {
            msg: format!(
                "the Hub's commit rate limit was reached; commits resume at {} (the file stays staged and is \
                 committed then)",
                wall.format("%H:%M:%S UTC")
            ),
            errno: libc::EIO,
        });
        for wt in waiters {
            let _ = wt.tx.send(Err(e.clone()));
        }
    }

    /// Whether a background round has something to do.
    fn has_ready_work(&self) -> bool {
        let held = self.held.lock().clone();
        let o = self.overlay.lock();
        o.iter().any(|(path, e)| match e {
            Entry::File(d) if d.writers() == 0 && !held.contains(&d.id()) && self.orphan_alias(&o, path, d) => true,
            Entry::File(d) => d.is_dirty() && d.writers() == 0 && !held.contains(&d.id()),
            Entry::Moved(_) | Entry::Gone => true,
            Entry::Special { hides } => *hides,
            Entry::Dir => false,
        })
    }
}

impl Writer {
    /// A background change (a close, a rename, a deletion): the committer's debounce takes it
    /// into account, and the committer is woken only when it is not debouncing already.
    pub(super) fn note_change(&self) {
        if self.quiet.note() {
            self.kick.notify_one();
        }
    }
}

impl Writer {
    /// Whether a whole commit's worth of changes is ready while the budget has commits to spare
    /// ([`budget::CommitBudget::early_cap`]): a long stream of closes (a `cp -r` of thousands of
    /// files) then commits as it goes instead of after its last close, and the round's work
    /// (snapshots, the Hub's commit) overlaps the copy. The number of commits does not change: a
    /// round never carries more than the cap, so the same changes would take the same commits
    /// later.
    fn full_batch_ready(&self) -> bool {
        if !self.opts.early_full_commits {
            return false;
        }
        let cap = match self.budget.lock().as_mut() {
            Some(b) => match b.early_cap(tokio::time::Instant::now()) {
                Some(cap) => cap,
                None => return false,
            },
            None => round::MAX_CHANGES_PER_COMMIT,
        };
        let held = self.held.lock().clone();
        let o = self.overlay.lock();
        let (mut changes, mut small) = (0usize, 0u64);
        for (_, e) in o.iter() {
            match e {
                Entry::File(d) if d.writers() == 0 && d.is_dirty() && !held.contains(&d.id()) => {
                    changes += 1;
                    let size = d.size();
                    if size < round::INLINE_CANDIDATE_MAX {
                        small += size;
                    }
                }
                Entry::Moved(_) | Entry::Gone => changes += 1,
                _ => {}
            }
            if changes >= cap || small > round::SMALL_BYTES_PER_COMMIT {
                return true;
            }
        }
        false
    }

    /// Whether `path`'s entry is a name of a hard link showing a clean copy staged under another
    /// name that no longer holds it: the Hub may still need this name's commit (`aliases`).
    fn orphan_alias(&self, o: &Overlay, path: &str, d: &Arc<DirtyFile>) -> bool {
        let primary = d.repo_path();
        let own = if self.subfolder.is_empty() {
            path.to_string()
        } else {
            format!("{}/{path}", self.subfolder)
        };
        if d.is_dirty() || primary == own {
            return false;
        }
        let at = if self.subfolder.is_empty() {
            Some(primary.as_str())
        } else {
            primary.strip_prefix(&self.subfolder).and_then(|p| p.strip_prefix('/'))
        };
        !matches!(at.and_then(|p| o.get(p)), Some(Entry::File(x)) if Arc::ptr_eq(x, d))
    }
}

impl VirtualFs {
    /// Asks for `file`'s current content to be committed and waits for the answer.
    pub(crate) async fn commit_file(&self, file: &Arc<DirtyFile>) -> VfsResult<()> {
        let Some(w) = &self.writer else {
            return Err(VfsError::ReadOnly);
        };
        if !file.is_dirty() {
            return Ok(());
        }
        if let Some(e) = file.error()
            && w.held.lock().contains(&file.id())
        {
            return Err(VfsError::Commit {
                msg: e,
                errno: libc::EIO,
            });
        }
        let (tx, rx) = oneshot::channel();
        w.waiters.lock().push(Waiter {
            file: Some(file.clone()),
            generation: file.generation(),
            tx,
        });
        w.kick.notify_one();
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(VfsError::Shared(e)),
            Err(_) => Err(VfsError::Io("the committer stopped".into())),
        }
    }

    /// Commits everything that is ready now and waits for that round (unmount, `sync`).
    pub async fn sync_all(&self) -> VfsResult<()> {
        let Some(w) = &self.writer else { return Ok(()) };
        let (tx, rx) = oneshot::channel();
        w.waiters.lock().push(Waiter {
            file: None,
            generation: 0,
            tx,
        });
        w.kick.notify_one();
        match rx.await {
            Ok(r) => r.map_err(VfsError::Shared),
            Err(_) => Err(VfsError::Io("the committer stopped".into())),
        }
    }

    /// Until when the Hub's commit rate limit holds commits back (UTC), if it does now.
    pub fn rate_limited_until(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.writer.as_ref()?.rate_limited_until().map(|(_, wall)| wall)
    }

    /// Until when the next commit waits for this mount's commit budget (UTC), if it does now.
    pub fn budget_wait_until(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        let w = self.writer.as_ref()?;
        let t = (*w.budget_wait.lock())?;
        (t > chrono::Utc::now()).then_some(t)
    }

    /// The title of the next commit instead of `--commit-message` (`hubfs commit -m`).
    pub fn set_next_commit_title(&self, title: Option<String>) {
        if let Some(w) = &self.writer {
            *w.next_title.lock() = title;
        }
    }

    /// The last commit this mount made, if any.
    pub fn last_commit(&self) -> Option<String> {
        self.writer.as_ref()?.last_commit.lock().clone()
    }

    /// Changes not on the Hub yet: dirty files plus pending renames and deletions.
    pub fn pending_changes(&self) -> usize {
        self.status_report()
            .map(|r| r.dirty.len() + r.pending_namespace_changes)
            .unwrap_or(0)
    }

    /// Commits what is pending, for at most `limit` (unmount, SIGTERM). Whatever is left stays
    /// staged for the next mount. Returns the number of files still dirty.
    pub async fn drain(&self, limit: Duration) -> usize {
        let Some(w) = &self.writer else { return 0 };
        if w.layer.is_some() {
            // An overlay commits nothing by itself: its layer stays for the next mount.
            self.sync_layer();
            return 0;
        }
        w.draining.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Err(e) = w.meta.sync() {
            tracing::warn!(error = %e, "could not make the metadata log durable");
        }
        let deadline = Instant::now() + limit;
        while w.has_ready_work() && Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.sync_all()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "commit during shutdown failed; data stays staged");
                    break;
                }
                Err(_) => break,
            }
        }
        // The last round may still be dropping its committed files' staged copies (a round still
        // under way past the deadline is left to the process's end, as before).
        let left = deadline.saturating_duration_since(Instant::now());
        drop(tokio::time::timeout(left, w.rounds.lock()).await);
        // Files closed quickly and still staged are made durable before the mount goes (the
        // background sealer may not have reached them).
        let unsealed: Vec<Arc<DirtyFile>> = w
            .overlay
            .lock()
            .all()
            .into_iter()
            .filter_map(|(_, e)| match e {
                Entry::File(d) if d.needs_seal() => Some(d),
                _ => None,
            })
            .collect();
        // Each file on its own: one that fails leaves the others to be sealed.
        let sealed = tokio::task::spawn_blocking(move || {
            for d in unsealed {
                if let Err(e) = d.seal() {
                    tracing::warn!(path = %d.repo_path(), error = %e, "could not make a staged file durable");
                }
            }
        })
        .await;
        if let Err(e) = sealed {
            tracing::warn!(error = %e, "sealing staged files at unmount stopped");
        }
        if let Err(e) = w.meta.sync() {
            tracing::warn!(error = %e, "could not make the metadata log durable");
        }
        let left = self.status().dirty.len();
        if left > 0 {
            tracing::warn!(files = left, dir = %w.staging.dir().display(), "files left staged for the next mount");
        }
        left
    }

    /// A held (conflicting) file was written again: its new content may be committed.
    pub(crate) fn unhold(&self, file: &DirtyFile) {
        if let Some(w) = &self.writer
            && w.held.lock().remove(&file.id())
        {
            file.set_error(None);
        }
    }

    /// What close() waits for.
    pub(crate) fn close_mode(&self) -> CloseMode {
        self.writer.as_ref().map_or(CloseMode::Commit, |w| w.opts.close)
    }

    /// A write handle closed: commit in the background whatever its flush did not.
    pub(crate) fn writer_closed(&self, file: &Arc<DirtyFile>) {
        let quick = super::write::quick_close(self.close_mode());
        let removed = file.remove_writer(quick);
        self.follow_closed(file);
        match removed {
            Ok(true) => {
                if let Some(w) = &self.writer {
                    w.staging.seal_later(file);
                }
            }
            Ok(false) => {}
            Err(e) => tracing::error!(path = %file.repo_path(), error = %e, "could not journal a closed file"),
        }
        let Some(w) = &self.writer else { return };
        if file.is_dirty() {
            w.note_change();
            return;
        }
        // Clean and closed: the mount's commit has this content, so the overlay entry (and, once
        // the last handle goes, the staged copy and its journal entry) can go. The writer count is
        // read under the overlay lock: see `writer_opened`.
        if let Some(path) = self.mount_path(&file.repo_path()) {
            let linked = self.group_of(&path).is_some();
            let mut o = w.overlay.lock();
            if file.writers() == 0 && matches!(o.get(&path), Some(Entry::File(d)) if Arc::ptr_eq(d, file)) {
                o.remove(&path);
                if linked {
                    // The other names of a hard link showing this copy settle in a round
                    // (`aliases`).
                    w.kick.notify_one();
                }
            }
        }
    }

    /// After a writer was added to `file`, found at `path`: the release of an earlier handle may
    /// have dropped the clean file from the overlay in between (the kernel sends RELEASE after
    /// close(2) returns, so it can arrive after the next open). Put it back, else its new content
    /// would never be committed and close() would wait forever.
    pub(crate) fn writer_opened(&self, path: &str, file: &Arc<DirtyFile>) {
        let Some(w) = &self.writer else { return };
        let mut o = w.overlay.lock();
        if o.get(path).is_none() && !file.is_discarded() {
            o.set(path, Entry::File(file.clone()));
        }
    }

    /// The mount-relative path of a repo path (`None` outside a subfolder mount's folder).
    pub(super) fn mount_path(&self, repo_path: &str) -> Option<String> {
        if self.subfolder.is_empty() {
            return Some(repo_path.to_string());
        }
        repo_path
            .strip_prefix(&self.subfolder)
            .and_then(|p| p.strip_prefix('/'))
            .map(str::to_string)
    }

    /// Wakes the committer for a background round (namespace change, truncate).
    pub(crate) fn kick(&self) {
        if let Some(w) = &self.writer {
            w.note_change();
        }
    }
}
