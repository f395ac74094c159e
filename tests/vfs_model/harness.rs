//! Drives a writable VirtualFs the way the FUSE adapter does (the kernel's path walk included:
//! every component is looked up, symlinks are followed through readlink, and lookups are forgotten
//! when the operation is done) and compares every answer with the model.
//!
//! This file holds the world (one runtime and one local Hub for a whole test), a case's setup,
//! plumbing and end; `harness_apply.rs` runs each operation on both sides, `harness_check.rs`
//! compares the whole tree and the open handles with the model after each step.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use hubfs::hub_client::{HubClient, HubClientConfig, RepoRef, TreeEntry};
use hubfs::local_hub::LocalHub;
use hubfs::vfs::{Attr, Ino, Kind, ROOT_INO, VfsOptions, VirtualFs, WriteOptions};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::model::{MOUNT_GID, MOUNT_UID, Model, Res};
use crate::ops::Op;
use crate::walk::{self, Namespace, Ty, Walked};

#[path = "harness_apply.rs"]
mod apply;
#[path = "harness_check.rs"]
mod check;

/// Deadline of one VirtualFs call: a hang fails the case instead of the whole run.
const CALL_DEADLINE: Duration = Duration::from_secs(60);
/// How far before the start of the operation that set it a "now" time may be: a staged file's
/// time comes from the kernel's coarse clock, a commit's from the Hub, in whole seconds.
const SLACK: Duration = Duration::from_secs(2);

/// Totals over every case of a run, for the summary line.
#[derive(Default, Debug)]
pub struct Stats {
    pub cases: u64,
    pub ops: u64,
    pub skipped: u64,
    pub remounts: u64,
    /// How often each operation succeeded (0) or failed with each errno, as the model said.
    pub outcomes: BTreeMap<(String, i32), u64>,
}

impl Stats {
    /// Whether `op` (any operation: `"*"`) ever had outcome `code` (0: success).
    pub fn saw(&self, op: &str, code: i32) -> bool {
        self.outcomes.keys().any(|(o, c)| (op == "*" || o == op) && *c == code)
    }

    pub fn outcome_names(&self) -> String {
        let mut by_op: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for ((op, code), n) in &self.outcomes {
            let name = if *code == 0 { "ok" } else { errno_name(*code) };
            by_op.entry(op).or_default().push(format!("{name}x{n}"));
        }
        by_op
            .iter()
            .map(|(op, v)| format!("{op}: {}", v.join(" ")))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

pub fn errno_name(e: i32) -> &'static str {
    match e {
        libc::ENOENT => "ENOENT",
        libc::EEXIST => "EEXIST",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::EINVAL => "EINVAL",
        libc::EBADF => "EBADF",
        libc::EIO => "EIO",
        libc::EPERM => "EPERM",
        libc::ELOOP => "ELOOP",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::EROFS => "EROFS",
        libc::ENOSPC => "ENOSPC",
        _ => "other",
    }
}

/// One tokio runtime and one local Hub for a whole test; a fresh repo per case.
pub struct World {
    pub rt: tokio::runtime::Runtime,
    pub hub: LocalHub,
    cache: tempfile::TempDir,
    next_repo: AtomicU32,
    pub stats: Mutex<Stats>,
}

impl World {
    pub fn new() -> World {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(3)
            .enable_all()
            .build()
            .unwrap();
        // Hundreds of cases share this Hub, each on a repo of its own, within minutes: more api
        // calls than a window allows one user. The model checks semantics, not the budget.
        let hub = rt
            .block_on(LocalHub::start_temp_with(false, |c| {
                c.request_windows = hubfs::local_hub::RequestWindows::off()
            }))
            .expect("local hub");
        World {
            rt,
            hub,
            cache: tempfile::tempdir().unwrap(),
            next_repo: AtomicU32::new(0),
            stats: Mutex::new(Stats::default()),
        }
    }

    fn client(&self) -> HubClient {
        HubClient::new(HubClientConfig {
            endpoint: self.hub.endpoint().to_string(),
            token: self.hub.write_token(),
            timeout: Duration::from_secs(20),
            max_retries: 1,
            patience: std::time::Duration::ZERO,
            ..HubClientConfig::default()
        })
        .unwrap()
    }

    fn opts(&self) -> VfsOptions {
        VfsOptions {
            uid: MOUNT_UID,
            gid: MOUNT_GID,
            cache_dir: Some(self.cache.path().join("content")),
            disk_cache_bytes: 256 << 20,
            write: Some(WriteOptions {
                staging_root: self.cache.path().join("staging"),
                upload_timeout: Duration::from_secs(30),
                quiet_period: Duration::from_millis(100),
                max_batch_delay: Duration::from_millis(500),
                close: hubfs::vfs::CloseMode::Commit,
                ..WriteOptions::default()
            }),
            ..VfsOptions::default()
        }
    }

    /// A new empty dataset repo on the local Hub.
    fn new_repo(&self) -> RepoRef {
        let name = format!("model-{}", self.next_repo.fetch_add(1, Ordering::Relaxed));
        let token = self.hub.write_token().unwrap();
        let url = format!("{}/api/repos/create", self.hub.endpoint());
        self.rt.block_on(async {
            let r = reqwest::Client::new()
                .post(url)
                .bearer_auth(token)
                .json(&serde_json::json!({"name": name, "organization": "local", "type": "dataset"}))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "create repo: {}", r.status());
        });
        RepoRef::dataset(&format!("local/{name}")).unwrap()
    }

    /// Runs one sequence on a fresh repo: every step checked, then the Hub's side at the end.
    pub fn run_case(&self, ops: &[Op]) -> Result<(), String> {
        let mut case = Case::open(self)?;
        let mut result = Ok(());
        for (i, op) in ops.iter().enumerate() {
            if let Err(e) = case.step(op).and_then(|_| case.check()) {
                result = Err(format!("step {i} {op:?}: {e}"));
                break;
            }
        }
        if result.is_ok() {
            result = case.finish();
        }
        let mut s = self.stats.lock();
        s.cases += 1;
        s.ops += case.ops;
        s.skipped += case.skipped;
        s.remounts += case.remounts;
        for (k, n) in &case.outcomes {
            *s.outcomes.entry(k.clone()).or_default() += n;
        }
        result
    }
}

/// The kernel's walk over VirtualFs: each component a counted lookup, each symlink a readlink.
impl Namespace for Case<'_> {
    type Id = Attr;

    fn root(&mut self) -> Attr {
        let vfs = self.vfs();
        self.w.rt.block_on(vfs.getattr(ROOT_INO)).expect("getattr of the root")
    }

    fn lookup(&mut self, dir: &Attr, name: &str) -> Result<(Attr, Ty), i32> {
        let a = self.lookup_in(dir.ino, name)?;
        let ty = match a.kind {
            Kind::Dir => Ty::Dir,
            Kind::File => Ty::File,
            Kind::Symlink => Ty::Symlink,
            _ => Ty::Other,
        };
        Ok((a, ty))
    }

    fn readlink(&mut self, link: &Attr) -> Result<String, i32> {
        let vfs = self.vfs();
        self.w.rt.block_on(vfs.readlink(link.ino)).map_err(|e| e.errno())
    }
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

struct Case<'w> {
    w: &'w World,
    repo: RepoRef,
    vfs: Option<Arc<VirtualFs>>,
    model: Model,
    /// (fh, ino) per open handle, in the model's slot order; each holds one lookup of its inode.
    handles: Vec<(u64, Ino)>,
    /// Whether each handle was opened for writing.
    writable: Vec<bool>,
    /// Lookups made by the current operation, forgotten when it ends (as the kernel would).
    lookups: Vec<Ino>,
    ops: u64,
    skipped: u64,
    remounts: u64,
    outcomes: BTreeMap<(String, i32), u64>,
}

impl<'w> Case<'w> {
    fn open(w: &'w World) -> Result<Case<'w>, String> {
        let repo = w.new_repo();
        let mut c = Case {
            w,
            repo,
            vfs: None,
            model: Model::default(),
            handles: Vec::new(),
            writable: Vec::new(),
            lookups: Vec::new(),
            ops: 0,
            skipped: 0,
            remounts: 0,
            outcomes: BTreeMap::new(),
        };
        c.mount()?;
        for (path, content) in c.hub_files()? {
            c.model.seed_file(&path, content);
        }
        Ok(c)
    }

    /// Opens the VirtualFs on the case's repo, staging and cache dirs (retrying while the previous
    /// instance's committer still holds the staging lock).
    fn mount(&mut self) -> Result<(), String> {
        let mut last = String::new();
        for _ in 0..50 {
            let fs = self.w.rt.block_on(VirtualFs::new(
                self.w.client(),
                self.repo.clone(),
                "main",
                None,
                self.w.opts(),
            ));
            match fs {
                Ok(fs) => {
                    let fs = Arc::new(fs);
                    fs.start_committer(self.w.rt.handle());
                    self.vfs = Some(fs);
                    return Ok(());
                }
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!("remount failed: {last}"))
    }

    fn vfs(&self) -> Arc<VirtualFs> {
        self.vfs.clone().expect("mounted")
    }

    fn call<F: Future>(&self, f: F) -> Result<F::Output, String> {
        self.w
            .rt
            .block_on(async { tokio::time::timeout(CALL_DEADLINE, f).await })
            .map_err(|_| format!("a VirtualFs call hung for {CALL_DEADLINE:?}"))
    }

    /// Compares an answer with the model's: the same success, or the same errno.
    fn agree<A, B>(&mut self, what: &str, expected: &Res<A>, actual: Result<B, i32>) -> Result<Option<B>, String>
    where
        A: std::fmt::Debug,
    {
        match (expected, actual) {
            (Ok(_), Ok(b)) => {
                *self.outcomes.entry((what.to_string(), 0)).or_default() += 1;
                Ok(Some(b))
            }
            (Err(e), Err(a)) if *e == a => {
                *self.outcomes.entry((what.to_string(), a)).or_default() += 1;
                Ok(None)
            }
            (Err(e), Err(a)) => Err(format!("{what}: expected {}, got {}", errno_name(*e), errno_name(a))),
            (Err(e), Ok(_)) => Err(format!("{what}: expected {}, got success", errno_name(*e))),
            (Ok(x), Err(a)) => Err(format!("{what}: expected success ({x:?}), got {}", errno_name(a))),
        }
    }

    /// One lookup, counted (and forgotten when the operation ends).
    fn lookup_in(&mut self, parent: Ino, name: &str) -> Result<Attr, i32> {
        let vfs = self.vfs();
        let r = self.w.rt.block_on(vfs.lookup(parent, name)).map_err(|e| e.errno())?;
        self.lookups.push(r.ino);
        Ok(r)
    }

    /// The kernel's walk to `path` (see `walk`).
    fn walk(&mut self, path: &str, follow: bool) -> Result<Walked<Attr>, i32> {
        walk::walk(self, path, follow)
    }

    /// The kernel's walk to what `path` leads to: its attributes (ENOENT if nothing is there).
    fn resolve(&mut self, path: &str, follow: bool) -> Result<Attr, i32> {
        self.walk(path, follow)?.last.map(|(a, _)| a).ok_or(libc::ENOENT)
    }

    /// Forgets the current operation's lookups.
    fn forget_lookups(&mut self) {
        let lookups = std::mem::take(&mut self.lookups);
        if let Some(vfs) = &self.vfs {
            for ino in lookups {
                vfs.forget(ino, 1);
            }
        }
    }

    fn slot(&self, h: usize) -> Option<usize> {
        (!self.handles.is_empty()).then(|| h % self.handles.len())
    }

    /// Closes every handle and commits what is pending.
    fn settle(&mut self) -> Result<(), String> {
        while !self.handles.is_empty() {
            self.close(0)?;
        }
        let vfs = self.vfs();
        let left = self.call(vfs.drain(Duration::from_secs(50)))?;
        if left > 0 {
            return Err(format!("{left} file(s) still dirty after the drain"));
        }
        Ok(())
    }

    /// Everything is committed and the VirtualFs dropped, then a new one opened on the same
    /// staging dir: the check after this step compares modes, owners, times, symlinks and special
    /// files with what they were.
    fn remount(&mut self) -> Result<(), String> {
        self.settle()?;
        self.vfs = None;
        self.model.remount();
        self.remounts += 1;
        self.mount()
    }

    /// Every file at the branch head, read from the Hub (not through VirtualFs).
    fn hub_files(&self) -> Result<BTreeMap<String, Vec<u8>>, String> {
        let client = self.w.client();
        let repo = self.repo.clone();
        let got = self.call(async {
            let head = client.repo_info(&repo, "main").await?.sha;
            let mut out = BTreeMap::new();
            for e in client.list_tree_recursive(&repo, &head, "").await? {
                if let TreeEntry::File { path, size, .. } = e {
                    let body = client.read_range(&repo, &head, &path, 0, size).await?;
                    if body.len() as u64 != size {
                        return Ok(Err(format!("{path}: the Hub served {} bytes of {size}", body.len())));
                    }
                    out.insert(path, body.to_vec());
                }
            }
            Ok::<_, hubfs::hub_client::HubClientError>(Ok(out))
        })?;
        got.map_err(|e| format!("reading the Hub: {e}"))?
    }

    /// End of a case: everything committed, and the Hub's files are the model's regular files, byte
    /// for byte (no symlink or special file there).
    fn finish(&mut self) -> Result<(), String> {
        self.settle()?;
        let sums = |m: BTreeMap<String, Vec<u8>>| -> BTreeMap<String, String> {
            m.into_iter().map(|(p, c)| (p, sha(&c))).collect()
        };
        let want = sums(self.model.file_contents());
        let got = sums(self.hub_files()?);
        if got != want {
            return Err(format!("the Hub holds {got:?}, the model {want:?}"));
        }
        Ok(())
    }
}
