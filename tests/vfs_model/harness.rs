//! Drives a writable VirtualFs the way the FUSE adapter does (the kernel's path walk included:
//! every component is looked up, symlinks are followed through readlink, and lookups are forgotten
//! when the operation is done) and compares every answer with the model.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use hubfs::hub_client::{HubClient, HubClientConfig, RepoRef, TreeEntry};
use hubfs::local_hub::LocalHub;
use hubfs::vfs::error::VfsError;
use hubfs::vfs::{
    Attr, Caller, Ino, Kind, NewNode, OpenMode, ROOT_INO, RenameFlags, SetAttr, TimeSet, VfsOptions, VirtualFs,
    WriteOptions,
};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::model::{
    Entry, MOUNT_GID, MOUNT_UID, Model, Node, Op, Res, SKIP, SetTime, Special, Target, Time, Who, chown_kill, join,
    payload,
};
use crate::walk::{self, Namespace, Ty, Walked};

/// Handles kept open at once; opening one more closes the oldest first.
const MAX_HANDLES: usize = 4;
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
        let hub = rt.block_on(LocalHub::start_temp(false)).expect("local hub");
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

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

/// What a creating operation passes on: the mode (`None`: the mount's default) and the caller.
fn new_node(mode: Option<u32>, who: Option<Who>) -> NewNode {
    NewNode {
        mode,
        caller: who.map(|w| Caller { uid: w.uid, gid: w.gid }),
    }
}

fn time_set(t: SetTime) -> Option<TimeSet> {
    match t {
        SetTime::Omit => None,
        SetTime::Now => Some(TimeSet::Now),
        SetTime::At(t) => Some(TimeSet::At(t)),
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

    fn step(&mut self, op: &Op) -> Result<(), String> {
        self.ops += 1;
        self.model.now = SystemTime::now();
        let r = self.apply(op);
        self.forget_lookups();
        r
    }

    /// The model said the kernel would answer this itself: nothing to run.
    fn skip<A>(&mut self, expected: &Res<A>) -> bool {
        let skip = matches!(expected, Err(SKIP));
        if skip {
            self.skipped += 1;
        }
        skip
    }

    fn apply(&mut self, op: &Op) -> Result<(), String> {
        if let Op::Remount = op {
            // No reference to the old VirtualFs may be alive here: its staging lock must go.
            return self.remount();
        }
        let vfs = self.vfs();
        match op {
            Op::Create {
                path,
                exclusive,
                truncate,
                mode,
                who,
            } => {
                self.make_room()?;
                let expected = self.model.create(path, *exclusive, *truncate, *mode, *who);
                if self.skip(&expected) {
                    return Ok(());
                }
                // O_EXCL: a last symlink is not followed; VirtualFs answers EEXIST for it.
                let actual = match self.walk(path, !exclusive) {
                    Ok(w) => self
                        .call(vfs.create_as(w.parent.ino, &w.name, *exclusive, *truncate, new_node(*mode, *who)))?
                        .map_err(|e| e.errno()),
                    Err(e) => Err(e),
                };
                if let Some((attr, fh)) = self.agree("create", &expected, actual)? {
                    self.handles.push((fh, attr.ino));
                    self.writable.push(true);
                    let want = self.model.content(*expected.as_ref().unwrap()).len() as u64;
                    if attr.size != want {
                        return Err(format!("create: size {} , model {want}", attr.size));
                    }
                }
            }
            Op::OpenWrite { path, truncate } => {
                self.make_room()?;
                let expected = self.model.open_write(path, *truncate);
                if self.skip(&expected) {
                    return Ok(());
                }
                let actual = match self.resolve(path, true) {
                    Ok(a) => {
                        let mode = OpenMode {
                            write: true,
                            truncate: *truncate,
                        };
                        self.call(vfs.open_with(a.ino, mode))?
                            .map(|(fh, _)| (fh, a.ino))
                            .map_err(|e| e.errno())
                    }
                    Err(e) => Err(e),
                };
                if let Some((fh, ino)) = self.agree("open for writing", &expected, actual)? {
                    // The handle keeps the final lookup, released at close.
                    let pos = self.lookups.iter().rposition(|i| *i == ino).unwrap();
                    self.lookups.remove(pos);
                    self.handles.push((fh, ino));
                    self.writable.push(true);
                }
            }
            Op::OpenRead { path } => {
                self.make_room()?;
                let expected = self.model.open_read(path);
                if self.skip(&expected) {
                    return Ok(());
                }
                let actual = match self.resolve(path, true) {
                    Ok(a) => self
                        .call(vfs.open_with(a.ino, OpenMode::default()))?
                        .map(|(fh, _)| (fh, a.ino))
                        .map_err(|e| e.errno()),
                    Err(e) => Err(e),
                };
                if let Some((fh, ino)) = self.agree("open for reading", &expected, actual)? {
                    let pos = self.lookups.iter().rposition(|i| *i == ino).unwrap();
                    self.lookups.remove(pos);
                    self.handles.push((fh, ino));
                    self.writable.push(false);
                }
            }
            Op::Write { h, offset, len, seed } => {
                let Some(s) = self.slot(*h) else {
                    self.skipped += 1;
                    return Ok(());
                };
                let data = payload(*len, *seed);
                if !self.writable[s] {
                    let r = vfs.write(self.handles[s].0, *offset, &data).map_err(|e| e.errno());
                    self.agree("write to a read-only handle", &Err::<(), _>(libc::EBADF), r)?;
                    return Ok(());
                }
                let n = vfs
                    .write(self.handles[s].0, *offset, &data)
                    .map_err(|e| format!("write: {e}"))?;
                if n as usize != data.len() {
                    return Err(format!("write returned {n}, wrote {}", data.len()));
                }
                let id = self.model.handles[s];
                self.model.write(id, *offset, &data);
            }
            Op::Truncate { target, size } => self.truncate(target, *size)?,
            Op::Read { target, offset, len } => self.read(target, *offset, *len)?,
            Op::Flush { h } | Op::Fsync { h } => {
                let Some(s) = self.slot(*h) else {
                    self.skipped += 1;
                    return Ok(());
                };
                let fh = self.handles[s].0;
                let r = match op {
                    Op::Flush { .. } => self.call(vfs.flush(fh))?,
                    _ => self.call(vfs.fsync(fh))?,
                };
                r.map_err(|e| format!("flush/fsync: {e}"))?;
            }
            Op::Close { h } => {
                let Some(s) = self.slot(*h) else {
                    self.skipped += 1;
                    return Ok(());
                };
                self.close(s)?;
            }
            Op::Rename {
                from,
                to,
                noreplace,
                exchange,
            } => self.rename(from, to, *noreplace, *exchange)?,
            Op::Unlink { path } | Op::Rmdir { path } => {
                let rmdir = matches!(op, Op::Rmdir { .. });
                let expected = if rmdir {
                    self.model.rmdir(path)
                } else {
                    self.model.unlink(path)
                };
                let actual = match self.walk(path, false) {
                    Ok(Walked { last: None, .. }) => Err(libc::ENOENT),
                    Ok(w) if rmdir => self.call(vfs.rmdir(w.parent.ino, &w.name))?.map_err(|e| e.errno()),
                    Ok(w) => self.call(vfs.unlink(w.parent.ino, &w.name))?.map_err(|e| e.errno()),
                    Err(e) => Err(e),
                };
                self.agree(if rmdir { "rmdir" } else { "unlink" }, &expected, actual)?;
            }
            Op::Mkdir { path, mode, who } => {
                let expected = self.model.mkdir(path, *mode, *who);
                // The kernel answers EEXIST itself; VirtualFs is asked anyway, as NFS would.
                let actual = match self.walk(path, false) {
                    Ok(w) => self
                        .call(vfs.mkdir_as(w.parent.ino, &w.name, new_node(*mode, *who)))?
                        .map_err(|e| e.errno()),
                    Err(e) => Err(e),
                };
                if let Some(a) = self.agree("mkdir", &expected, actual)? {
                    self.lookups.push(a.ino);
                    if a.kind != Kind::Dir {
                        return Err("mkdir: not a directory".into());
                    }
                }
            }
            Op::Readdir { path } => {
                let expected = self.model.readdir(path);
                let actual = match self.resolve(path, true) {
                    Ok(a) => self.list(a.ino),
                    Err(e) => Err(e),
                };
                if let Some(got) = self.agree("readdir", &expected, actual)? {
                    let (dir, _) = expected.unwrap();
                    self.same_listing(&dir, &got)?;
                }
            }
            Op::Stat { path } => {
                let expected = self.model.stat(path, true);
                let actual = self.resolve(path, true);
                if let Some(a) = self.agree("stat", &expected, actual)? {
                    let (p, e) = expected.unwrap();
                    self.same_attr(&p, &a, &e)?;
                }
            }
            Op::Chmod { path, mode } => {
                let expected = self.model.chmod(path, *mode);
                let req = SetAttr {
                    mode: Some(*mode),
                    ..SetAttr::default()
                };
                self.setattr("chmod", path, true, &expected, |_| req)?;
            }
            Op::Chown { path, uid, gid, follow } => {
                let expected = self.model.chown(path, *uid, *gid, *follow);
                // What the kernel sends a FUSE file system without handle_killpriv: the ids, and
                // the mode without setuid (and setgid with group execute) for a non-directory.
                let (uid, gid) = (*uid, *gid);
                self.setattr("chown", path, *follow, &expected, |a| SetAttr {
                    uid,
                    gid,
                    mode: if a.kind == Kind::Dir {
                        None
                    } else {
                        chown_kill(a.perm as u32)
                    },
                    ..SetAttr::default()
                })?;
            }
            Op::Utimens {
                path,
                atime,
                mtime,
                follow,
            } => {
                let expected = self.model.utimens(path, *mtime, *follow);
                let req = SetAttr {
                    atime: time_set(*atime),
                    mtime: time_set(*mtime),
                    ..SetAttr::default()
                };
                if let Some(a) = self.setattr("utimens", path, *follow, &expected, |_| req)?
                    && let SetTime::At(t) = atime
                    && a.atime != *t
                {
                    return Err(format!("utimens {path}: atime {:?}, set to {t:?}", a.atime));
                }
            }
            Op::Symlink { path, target, who } => {
                let expected = self.model.symlink(path, &target.0, *who);
                let node = new_node(None, *who);
                let actual = if target.0.is_empty() || target.0.len() > 4095 {
                    // The kernel refuses the target before it walks the path; so does VirtualFs.
                    self.call(vfs.symlink(ROOT_INO, split(path).1, &target.0, node))?
                        .map_err(|e| e.errno())
                } else {
                    match self.walk(path, false) {
                        Ok(w) => self
                            .call(vfs.symlink(w.parent.ino, &w.name, &target.0, node))?
                            .map_err(|e| e.errno()),
                        Err(e) => Err(e),
                    }
                };
                if let Some(a) = self.agree("symlink", &expected, actual)? {
                    self.lookups.push(a.ino);
                    if a.kind != Kind::Symlink || a.size != target.0.len() as u64 {
                        return Err(format!("symlink: made a {:?} of size {}", a.kind, a.size));
                    }
                }
            }
            Op::Mknod { path, kind, mode, who } => {
                let expected = self.model.mknod(path, *kind, *mode, *who);
                let (ty, rdev) = kind.mode_and_rdev();
                let actual = match self.walk(path, false) {
                    Ok(w) => self
                        .call(vfs.mknod(w.parent.ino, &w.name, ty | *mode, rdev, new_node(Some(*mode), *who)))?
                        .map_err(|e| e.errno()),
                    Err(e) => Err(e),
                };
                if let Some(a) = self.agree("mknod", &expected, actual)? {
                    self.lookups.push(a.ino);
                }
            }
            Op::Readlink { path } => {
                let expected = self.model.readlink(path);
                // The kernel answers EINVAL itself for what is not a symlink; VirtualFs is asked
                // anyway (NFS READLINK does).
                let actual = match self.resolve(path, false) {
                    Ok(a) => self.call(vfs.readlink(a.ino))?.map_err(|e| e.errno()),
                    Err(e) => Err(e),
                };
                if let Some(got) = self.agree("readlink", &expected, actual)?
                    && got != *expected.as_ref().unwrap()
                {
                    return Err(format!("readlink {path}: {got:?}, model {:?}", expected.unwrap()));
                }
            }
            Op::Link { from, to } => {
                let expected = self.model.link(from, to);
                // The kernel walks the source, then the new name's directory (a non-directory
                // there is handed to VirtualFs, which must say ENOTDIR itself, as NFS LINK needs),
                // and answers EEXIST itself; VirtualFs is asked anyway.
                let walked = (|| {
                    let src = self.resolve(from, false)?;
                    let dir = match to.rsplit_once('/') {
                        None => ROOT_INO,
                        Some((d, _)) => self.resolve(d, true)?.ino,
                    };
                    Ok((src.ino, dir))
                })();
                let actual = match walked {
                    Ok((src, dir)) => self.call(vfs.link(src, dir, split(to).1))?.map_err(|e| e.errno()),
                    Err(e) => Err(e),
                };
                if self.agree("link", &expected, actual)?.is_some() {
                    return Err("link: succeeded".into());
                }
            }
            Op::Pause => std::thread::sleep(SLACK + Duration::from_secs(1)),
            Op::Sync => self.call(vfs.sync_all())?.map_err(|e| format!("sync: {e}"))?,
            Op::Remount => unreachable!("handled above"),
        }
        Ok(())
    }

    /// chmod, chown, utimens: the kernel's walk, then setattr with what `req` makes of the
    /// attributes found; the reply must be the model's entry. Returns the reply.
    fn setattr(
        &mut self,
        what: &str,
        path: &str,
        follow: bool,
        expected: &Res<(String, Entry)>,
        req: impl FnOnce(&Attr) -> SetAttr,
    ) -> Result<Option<Attr>, String> {
        let vfs = self.vfs();
        let actual = match self.resolve(path, follow) {
            Ok(a) => self.call(vfs.setattr(a.ino, req(&a)))?.map_err(|e| e.errno()),
            Err(e) => Err(e),
        };
        let got = self.agree(what, expected, actual)?;
        if let (Some(a), Ok((p, e))) = (&got, expected) {
            self.same_attr(p, a, e).map_err(|e| format!("{what} reply: {e}"))?;
        }
        Ok(got)
    }

    /// Keeps at most MAX_HANDLES open: closes the oldest before opening another.
    fn make_room(&mut self) -> Result<(), String> {
        if self.handles.len() >= MAX_HANDLES {
            self.close(0)?;
        }
        Ok(())
    }

    /// close(): flush (which commits, close_waits) then release and the handle's lookup.
    fn close(&mut self, slot: usize) -> Result<(), String> {
        let vfs = self.vfs();
        let (fh, ino) = self.handles.remove(slot);
        self.writable.remove(slot);
        let flushed = self.call(vfs.flush(fh))?;
        vfs.release(fh);
        vfs.forget(ino, 1);
        self.model.close(slot);
        flushed.map_err(|e| format!("close: {e}"))
    }

    fn truncate(&mut self, target: &Target, size: u64) -> Result<(), String> {
        let vfs = self.vfs();
        match target {
            Target::Handle(h) => {
                let Some(s) = self.slot(*h) else {
                    self.skipped += 1;
                    return Ok(());
                };
                if !self.writable[s] {
                    // ftruncate of a read-only descriptor never reaches the filesystem.
                    self.skipped += 1;
                    return Ok(());
                }
                let (fh, ino) = self.handles[s];
                let req = SetAttr {
                    size: Some(size),
                    fh: Some(fh),
                    ..SetAttr::default()
                };
                let a = self
                    .call(vfs.setattr(ino, req))?
                    .map_err(|e| format!("ftruncate: {e}"))?;
                let id = self.model.handles[s];
                self.model.truncate_id(id, size);
                if a.size != size {
                    return Err(format!("ftruncate: size {} after truncating to {size}", a.size));
                }
            }
            Target::Path(path) => {
                let expected = self.model.truncate_path(path, size);
                let actual = match self.resolve(path, true) {
                    Ok(a) => {
                        let req = SetAttr {
                            size: Some(size),
                            ..SetAttr::default()
                        };
                        self.call(vfs.setattr(a.ino, req))?.map_err(|e| e.errno())
                    }
                    Err(e) => Err(e),
                };
                if let Some(a) = self.agree("truncate", &expected, actual)?
                    && a.size != size
                {
                    return Err(format!("truncate: size {} after truncating to {size}", a.size));
                }
            }
        }
        Ok(())
    }

    fn read(&mut self, target: &Target, offset: u64, len: u32) -> Result<(), String> {
        let vfs = self.vfs();
        match target {
            Target::Handle(h) => {
                let Some(s) = self.slot(*h) else {
                    self.skipped += 1;
                    return Ok(());
                };
                let got = self
                    .call(vfs.read(self.handles[s].0, offset, len))?
                    .map_err(|e| format!("read: {e}"))?;
                let want = self.model.read_id(self.model.handles[s], offset, len);
                if got[..] != want[..] {
                    return Err(format!(
                        "read at {offset}+{len}: {} bytes differ from the model's {}",
                        got.len(),
                        want.len()
                    ));
                }
            }
            Target::Path(path) => {
                let expected = self.model.read_path(path, offset, len);
                if self.skip(&expected) {
                    return Ok(());
                }
                let actual = match self.resolve(path, true) {
                    Ok(a) => self.read_path(a.ino, offset, len)?,
                    Err(e) => Err(e),
                };
                if let Some(got) = self.agree("read", &expected, actual)?
                    && got != *expected.as_ref().unwrap()
                {
                    return Err(format!(
                        "read of {path} at {offset}+{len}: bytes differ from the model's"
                    ));
                }
            }
        }
        Ok(())
    }

    /// open(O_RDONLY), pread, close.
    fn read_path(&mut self, ino: Ino, offset: u64, len: u32) -> Result<Result<Vec<u8>, i32>, String> {
        let vfs = self.vfs();
        let fh = match self.call(vfs.open_with(ino, OpenMode::default()))? {
            Ok((fh, _)) => fh,
            Err(e) => return Ok(Err(e.errno())),
        };
        let r = self.call(vfs.read(fh, offset, len))?;
        let flushed = self.call(vfs.flush(fh))?;
        vfs.release(fh);
        flushed.map_err(|e| format!("close after read: {e}"))?;
        Ok(r.map(|b| b.to_vec()).map_err(|e| e.errno()))
    }

    fn rename(&mut self, from: &str, to: &str, noreplace: bool, exchange: bool) -> Result<(), String> {
        let vfs = self.vfs();
        let expected = self.model.rename(from, to, noreplace, exchange);
        // The kernel resolves both parents, then looks up the source (and, to exchange, the target).
        let actual = (|| {
            let (fp, fname) = walk::walk_parent(self, from)?;
            let (tp, tname) = walk::walk_parent(self, to)?;
            self.lookup_in(fp.ino, &fname)?;
            if exchange {
                self.lookup_in(tp.ino, &tname)?;
            }
            Ok((fp.ino, fname, tp.ino, tname))
        })();
        let actual = match actual {
            Ok((fp, fname, tp, tname)) => {
                let flags = RenameFlags { noreplace, exchange };
                self.call(vfs.rename(fp, &fname, tp, &tname, flags))?
                    .map_err(|e: VfsError| e.errno())
            }
            Err(e) => Err(e),
        };
        self.agree("rename", &expected, actual)?;
        Ok(())
    }

    /// The entries of an open directory, without `.` and `..`.
    fn list(&mut self, ino: Ino) -> Result<Vec<(String, Attr)>, i32> {
        let vfs = self.vfs();
        let fh = self.w.rt.block_on(vfs.opendir(ino)).map_err(|e| e.errno())?;
        let entries = vfs.dir_entries(fh).map_err(|e| e.errno());
        vfs.releasedir(fh);
        Ok(entries?
            .iter()
            .filter(|e| e.name != "." && e.name != "..")
            .map(|e| (e.name.clone(), e.attr.clone()))
            .collect())
    }

    /// Everything the model knows of an entry, against its attributes: kind, size, device number,
    /// mode, owner, link count (of a directory a bound only: VirtualFs counts subdirectories only
    /// where it knows them), and the times (exact where set explicitly, else no earlier than the
    /// operation that set them).
    fn same_attr(&self, path: &str, a: &Attr, e: &Entry) -> Result<(), String> {
        let (kind, size, rdev) = match &e.node {
            Node::Dir => (Kind::Dir, None, 0),
            Node::File(id) => (Kind::File, Some(self.model.content(*id).len() as u64), 0),
            Node::Symlink(t) => (Kind::Symlink, Some(t.len() as u64), 0),
            Node::Special(Special::Fifo) => (Kind::Fifo, Some(0), 0),
            Node::Special(Special::Socket) => (Kind::Socket, Some(0), 0),
            Node::Special(Special::Char(r)) => (Kind::CharDevice, Some(0), *r),
            Node::Special(Special::Block(r)) => (Kind::BlockDevice, Some(0), *r),
        };
        let m = &e.meta;
        let mut diffs = Vec::new();
        if a.kind != kind {
            diffs.push(format!("kind {:?}, model {kind:?}", a.kind));
        }
        if let Some(size) = size
            && a.size != size
        {
            diffs.push(format!("size {}, model {size}", a.size));
        }
        if a.rdev != rdev {
            diffs.push(format!("rdev {:#x}, model {rdev:#x}", a.rdev));
        }
        if a.perm as u32 != m.mode {
            diffs.push(format!("mode {:o}, model {:o}", a.perm, m.mode));
        }
        if (a.uid, a.gid) != (m.uid, m.gid) {
            diffs.push(format!("owner {}:{}, model {}:{}", a.uid, a.gid, m.uid, m.gid));
        }
        if kind == Kind::Dir {
            // 2 + subdirectories, those of a Hub directory counted only while its listing is
            // cached: never more.
            let subdirs = self
                .model
                .children(path)
                .values()
                .filter(|e| e.node == Node::Dir)
                .count() as u32;
            if a.nlink < 2 || a.nlink > 2 + subdirs {
                diffs.push(format!("nlink {}, model 2 + {subdirs} subdirectories", a.nlink));
            }
        } else if a.nlink != 1 {
            diffs.push(format!("nlink {}", a.nlink));
        }
        for (name, got, want) in [("mtime", a.mtime, m.mtime), ("ctime", a.ctime, m.ctime)] {
            match want {
                Time::Exact(t) if got != t => diffs.push(format!("{name} {got:?}, set to {t:?}")),
                Time::After(t) if got + SLACK < t => diffs.push(format!("{name} {got:?}, before {t:?}")),
                _ => {}
            }
        }
        if diffs.is_empty() {
            Ok(())
        } else {
            Err(format!("/{path}: {}", diffs.join(", ")))
        }
    }

    fn same_listing(&self, dir: &str, got: &[(String, Attr)]) -> Result<(), String> {
        let want = self.model.children(dir);
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        let want_names: Vec<&str> = want.keys().map(String::as_str).collect();
        if names != want_names {
            return Err(format!("listing of /{dir}: {names:?}, model {want_names:?}"));
        }
        for (name, attr) in got {
            self.same_attr(&join(dir, name), attr, &want[name])?;
        }
        Ok(())
    }

    /// The whole tree through VirtualFs (listings, lookups, reads, readlinks) and every open
    /// handle.
    fn check(&mut self) -> Result<(), String> {
        let r = self
            .check_root()
            .and_then(|_| self.check_dir("", ROOT_INO))
            .and_then(|_| self.check_handles());
        self.forget_lookups();
        r
    }

    fn check_root(&mut self) -> Result<(), String> {
        let vfs = self.vfs();
        let a = self
            .call(vfs.getattr(ROOT_INO))?
            .map_err(|e| format!("getattr of the root: {e}"))?;
        self.same_attr("", &a, &self.model.entry("").unwrap())
    }

    fn check_dir(&mut self, dir: &str, ino: Ino) -> Result<(), String> {
        let got = self
            .list(ino)
            .map_err(|e| format!("listing /{dir}: {}", errno_name(e)))?;
        self.same_listing(dir, &got)?;
        for (name, _) in got {
            let path = join(dir, &name);
            let a = self
                .lookup_in(ino, &name)
                .map_err(|e| format!("lookup {path}: {}", errno_name(e)))?;
            let e = self.model.entry(&path).unwrap();
            self.same_attr(&path, &a, &e)?;
            match e.node {
                Node::Dir => self.check_dir(&path, a.ino)?,
                Node::File(id) => {
                    let want = self.model.content(id).to_vec();
                    let got = self
                        .read_path(a.ino, 0, want.len() as u32 + 16)?
                        .map_err(|e| format!("read {path}: {}", errno_name(e)))?;
                    if got != want {
                        return Err(format!(
                            "{path}: content differs ({} bytes, model {})",
                            got.len(),
                            want.len()
                        ));
                    }
                }
                Node::Symlink(want) => {
                    let vfs = self.vfs();
                    let got = self
                        .call(vfs.readlink(a.ino))?
                        .map_err(|e| format!("readlink {path}: {e}"))?;
                    if got != want {
                        return Err(format!("{path}: symlink to {got:?}, model {want:?}"));
                    }
                }
                Node::Special(_) => {}
            }
        }
        Ok(())
    }

    fn check_handles(&mut self) -> Result<(), String> {
        let vfs = self.vfs();
        for (s, (fh, ino)) in self.handles.clone().into_iter().enumerate() {
            let want = self.model.content(self.model.handles[s]).to_vec();
            let a = self
                .call(vfs.getattr_fh(ino, Some(fh)))?
                .map_err(|e| format!("fstat of handle {s}: {e}"))?;
            if a.size != want.len() as u64 || a.kind != Kind::File {
                return Err(format!(
                    "fstat of handle {s}: {:?} of size {}, model a file of {}",
                    a.kind,
                    a.size,
                    want.len()
                ));
            }
            let got = self
                .call(vfs.read(fh, 0, want.len() as u32 + 16))?
                .map_err(|e| format!("read through handle {s}: {e}"))?;
            if got[..] != want[..] {
                return Err(format!(
                    "handle {s}: content differs ({} bytes, model {})",
                    got.len(),
                    want.len()
                ));
            }
        }
        Ok(())
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
