//! Drives a writable VirtualFs the way the FUSE adapter does (the kernel's path walk included:
//! every component is looked up, and lookups are forgotten when the operation is done) and compares
//! every answer with the model.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use hubfs::hub_client::{HubClient, HubClientConfig, RepoRef, TreeEntry};
use hubfs::local_hub::LocalHub;
use hubfs::vfs::error::VfsError;
use hubfs::vfs::{Attr, Ino, Kind, OpenMode, ROOT_INO, RenameFlags, SetAttr, VfsOptions, VirtualFs, WriteOptions};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::model::{Model, Node, Op, Res, Target, payload};

/// Handles kept open at once; opening one more closes the oldest first.
const MAX_HANDLES: usize = 4;
/// Deadline of one VirtualFs call: a hang fails the case instead of the whole run.
const CALL_DEADLINE: Duration = Duration::from_secs(60);

/// Totals over every case of a run, for the summary line.
#[derive(Default, Debug)]
pub struct Stats {
    pub cases: u64,
    pub ops: u64,
    pub skipped: u64,
    pub remounts: u64,
    pub errnos: BTreeMap<i32, u64>,
}

impl Stats {
    pub fn errno_names(&self) -> String {
        self.errnos
            .iter()
            .map(|(e, n)| format!("{}x{n}", errno_name(*e)))
            .collect::<Vec<_>>()
            .join(" ")
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
        for (e, n) in &case.errnos {
            *s.errnos.entry(*e).or_default() += n;
        }
        result
    }
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
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
    errnos: BTreeMap<i32, u64>,
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
            errnos: BTreeMap::new(),
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
            (Ok(_), Ok(b)) => Ok(Some(b)),
            (Err(e), Err(a)) if *e == a => {
                *self.errnos.entry(a).or_default() += 1;
                Ok(None)
            }
            (Err(e), Err(a)) => Err(format!("{what}: expected {}, got {}", errno_name(*e), errno_name(a))),
            (Err(e), Ok(_)) => Err(format!("{what}: expected {}, got success", errno_name(*e))),
            (Ok(x), Err(a)) => Err(format!("{what}: expected success ({x:?}), got {}", errno_name(a))),
        }
    }

    fn lookup(&mut self, parent: Ino, name: &str) -> Result<Attr, i32> {
        let vfs = self.vfs();
        let r = self.w.rt.block_on(vfs.lookup(parent, name)).map_err(|e| e.errno())?;
        self.lookups.push(r.ino);
        Ok(r)
    }

    /// The kernel's walk to the parent directory of `path`.
    fn parent(&mut self, path: &str) -> Result<Ino, i32> {
        let (parent, _) = split(path);
        if parent.is_empty() {
            return Ok(ROOT_INO);
        }
        let a = self.resolve(parent)?;
        // The walk goes through it: it must be a directory.
        if a.kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        Ok(a.ino)
    }

    /// The kernel's walk to `path` itself.
    fn resolve(&mut self, path: &str) -> Result<Attr, i32> {
        let mut ino = ROOT_INO;
        let mut attr = None;
        for part in path.split('/') {
            let a = self.lookup(ino, part)?;
            ino = a.ino;
            attr = Some(a);
        }
        attr.ok_or(libc::ENOENT)
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
        let r = self.apply(op);
        self.forget_lookups();
        r
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
            } => {
                self.make_room()?;
                let expected = self.model.create(path, *exclusive, *truncate);
                let actual = match self.parent(path) {
                    Ok(p) => self
                        .call(vfs.create(p, split(path).1, *exclusive, *truncate))?
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
                let actual = match self.resolve(path) {
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
                let actual = match self.resolve(path) {
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
                let actual = match self.parent(path).and_then(|p| self.resolve(path).map(|_| p)) {
                    Ok(p) if rmdir => self.call(vfs.rmdir(p, split(path).1))?.map_err(|e| e.errno()),
                    Ok(p) => self.call(vfs.unlink(p, split(path).1))?.map_err(|e| e.errno()),
                    Err(e) => Err(e),
                };
                self.agree(if rmdir { "rmdir" } else { "unlink" }, &expected, actual)?;
            }
            Op::Mkdir { path } => {
                let expected = self.model.mkdir(path);
                let actual = match self.parent(path) {
                    Ok(p) => self.call(vfs.mkdir(p, split(path).1))?.map_err(|e| e.errno()),
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
                let actual = match self.ino_of(path) {
                    Ok(ino) => self.list(ino),
                    Err(e) => Err(e),
                };
                if let Some(got) = self.agree("readdir", &expected, actual)? {
                    self.same_listing(path, &got)?;
                }
            }
            Op::Stat { path } => {
                let expected = self.model.resolve(path);
                let actual = self.resolve(path);
                if let Some(a) = self.agree("stat", &expected, actual)? {
                    self.same_attr(path, &a, expected.unwrap())?;
                }
            }
            Op::Sync => self.call(vfs.sync_all())?.map_err(|e| format!("sync: {e}"))?,
            Op::Remount => unreachable!("handled above"),
        }
        Ok(())
    }

    fn ino_of(&mut self, path: &str) -> Result<Ino, i32> {
        if path.is_empty() {
            Ok(ROOT_INO)
        } else {
            Ok(self.resolve(path)?.ino)
        }
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
                let actual = match self.resolve(path) {
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
                let actual = match self.resolve(path) {
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
            let fp = self.parent(from)?;
            let tp = self.parent(to)?;
            self.lookup(fp, split(from).1)?;
            if exchange {
                self.lookup(tp, split(to).1)?;
            }
            Ok((fp, tp))
        })();
        let actual = match actual {
            Ok((fp, tp)) => {
                let flags = RenameFlags { noreplace, exchange };
                self.call(vfs.rename(fp, split(from).1, tp, split(to).1, flags))?
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

    fn same_attr(&self, path: &str, a: &Attr, node: Node) -> Result<(), String> {
        match node {
            Node::Dir if a.kind == Kind::Dir => Ok(()),
            Node::File(id) if a.kind == Kind::File => {
                let want = self.model.content(id).len() as u64;
                if a.size == want {
                    Ok(())
                } else {
                    Err(format!("{path}: size {}, model {want}", a.size))
                }
            }
            _ => Err(format!("{path}: kind {:?}, model {node:?}", a.kind)),
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
            let path = if dir.is_empty() {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            self.same_attr(&path, attr, want[name])?;
        }
        Ok(())
    }

    /// The whole tree through VirtualFs (listings, lookups, reads) and every open handle.
    fn check(&mut self) -> Result<(), String> {
        let r = self.check_dir("", ROOT_INO).and_then(|_| self.check_handles());
        self.forget_lookups();
        r
    }

    fn check_dir(&mut self, dir: &str, ino: Ino) -> Result<(), String> {
        let got = self
            .list(ino)
            .map_err(|e| format!("listing /{dir}: {}", errno_name(e)))?;
        self.same_listing(dir, &got)?;
        for (name, _) in got {
            let path = if dir.is_empty() {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            let a = self
                .lookup(ino, &name)
                .map_err(|e| format!("lookup {path}: {}", errno_name(e)))?;
            let node = self.model.get(&path).unwrap();
            self.same_attr(&path, &a, node)?;
            match node {
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
            if a.size != want.len() as u64 {
                return Err(format!("fstat of handle {s}: size {}, model {}", a.size, want.len()));
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

    /// End of a case: everything committed, and the Hub's files are the model's, byte for byte.
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
