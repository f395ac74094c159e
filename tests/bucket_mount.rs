//! Bucket mounts as people run them: the built binary (`hubfs mount buckets/…`, `hubfs serve-nfs
//! buckets/…`) as a separate process against a local Hub, every outcome checked through the Hub's
//! bucket API (the tree, each file's bytes and mtime).

mod common;

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use hubfs::local_hub::LocalHub;
use nfs3_client::nfs3_types::nfs3::{self, Nfs3Result, diropargs3, filename3, nfsstat3};
use nfs3_client::nfs3_types::xdr_codec::Opaque;
use serde_json::Value;

const WRITE: &str = "hf_local_write";
const READ: &str = "hf_local_read";

struct World {
    rt: tokio::runtime::Runtime,
    _hub: LocalHub,
    ep: String,
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let hub = rt.block_on(LocalHub::start_temp(false)).unwrap();
        let ep = hub.endpoint().to_string();
        World {
            rt,
            _hub: hub,
            ep,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn create_bucket(&self, name: &str) {
        let r = self.rt.block_on(async {
            common::client()
                .post(format!("{}/api/buckets/local/{name}", self.ep))
                .header("authorization", common::bearer(WRITE))
                .json(&serde_json::json!({}))
                .send()
                .await
                .unwrap()
        });
        assert!(r.status().is_success(), "create bucket: {}", r.status());
    }

    /// The bucket's files: path → (size, mtime as the Hub says it).
    fn files(&self, name: &str) -> BTreeMap<String, (u64, String)> {
        self.rt.block_on(async {
            let mut url = format!("{}/api/buckets/local/{name}/tree?recursive=true", self.ep);
            let mut out = BTreeMap::new();
            loop {
                let r = common::client()
                    .get(&url)
                    .header("authorization", common::bearer(WRITE))
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success(), "tree: {}", r.status());
                let next = r
                    .headers()
                    .get("link")
                    .and_then(|l| l.to_str().ok())
                    .and_then(|l| l.split_once('<'))
                    .and_then(|(_, rest)| rest.split_once('>'))
                    .map(|(u, _)| u.to_string());
                let page: Vec<Value> = r.json().await.unwrap();
                for e in page {
                    if e["type"] == "file" {
                        out.insert(
                            e["path"].as_str().unwrap().to_string(),
                            (
                                e["size"].as_u64().unwrap(),
                                e["mtime"].as_str().unwrap_or("").to_string(),
                            ),
                        );
                    }
                }
                match next {
                    Some(n) => url = n,
                    None => return out,
                }
            }
        })
    }

    /// A file's bytes as the Hub serves them (`/resolve/`, redirects followed).
    fn bytes(&self, name: &str, path: &str) -> Vec<u8> {
        self.rt.block_on(async {
            let r = reqwest::Client::new()
                .get(format!("{}/buckets/local/{name}/resolve/{path}", self.ep))
                .header("authorization", common::bearer(WRITE))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "resolve {path}: {}", r.status());
            r.bytes().await.unwrap().to_vec()
        })
    }

    fn hubfs(&self, token: &str) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hubfs"));
        c.env("HF_ENDPOINT", &self.ep)
            .env("HF_TOKEN", token)
            .env("HF_HOME", self.dir.path().join("hf-home"))
            .env("HUBFS_RUNTIME_DIR", self.dir.path().join("run"))
            .stdin(Stdio::null());
        c
    }

    /// `hubfs mount SPEC DIR ARGS…` in the foreground; returns once it printed `mounted `.
    fn mount(&self, spec: &str, at: &str, token: &str, args: &[&str]) -> Mount {
        let mnt = self.dir.path().join(at);
        std::fs::create_dir_all(&mnt).unwrap();
        let err_path = self.dir.path().join(format!("{at}.err"));
        let mut child = self
            .hubfs(token)
            .arg("mount")
            .arg(spec)
            .arg(&mnt)
            .arg("--cache-dir")
            .arg(self.dir.path().join(format!("{at}-cache")))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(&err_path).unwrap()))
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().and_then(|l| l.ok()).unwrap_or_default();
        assert!(
            first.starts_with("mounted "),
            "mount {spec}: {first:?}; stderr: {}",
            std::fs::read_to_string(&err_path).unwrap_or_default()
        );
        Mount {
            child,
            dir: mnt,
            line: first,
            stderr: err_path,
        }
    }
}

struct Mount {
    child: Child,
    dir: PathBuf,
    line: String,
    stderr: PathBuf,
}

impl Mount {
    fn p(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// `hubfs sync DIR`: returns once everything written is on the Hub.
    fn sync(&self, w: &World) {
        let o = w.hubfs(WRITE).arg("sync").arg(&self.dir).output().unwrap();
        assert!(
            o.status.success(),
            "hubfs sync: {}{}; mount stderr: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            std::fs::read_to_string(&self.stderr).unwrap_or_default()
        );
    }

    fn unmount(mut self, w: &World) {
        let o = w.hubfs(WRITE).arg("unmount").arg(&self.dir).output().unwrap();
        assert!(o.status.success(), "unmount: {}", String::from_utf8_lossy(&o.stderr));
        let _ = self.child.wait();
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn pseudo(len: usize, seed: u64) -> Vec<u8> {
    common::bytes(len, seed)
}

/// 2020-01-02T03:04:05.678Z.
fn fixed_time() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(1_577_934_245_678)
}

fn ms_of(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .unwrap_or_else(|e| panic!("mtime {rfc3339:?}: {e}"))
        .timestamp_millis()
}

#[test]
fn fuse_bucket_mount_writes_renames_deletes_and_keeps_mtimes() {
    let w = World::new();
    w.create_bucket("b1");
    let m = w.mount("buckets/local/b1", "m1", WRITE, &[]);
    assert!(m.line.contains("buckets/local/b1"), "{}", m.line);
    let viewer = w.mount(
        "hf://buckets/local/b1",
        "viewer",
        READ,
        &["--metadata-ttl", "1s", "--read-only"],
    );

    let big = pseudo(3 << 20, 7);
    std::fs::write(m.p("a.txt"), b"hello").unwrap();
    std::fs::create_dir_all(m.p("data")).unwrap();
    std::fs::write(m.p("data/big.bin"), &big).unwrap();
    std::fs::write(m.p("empty"), b"").unwrap();
    std::fs::create_dir_all(m.p("dir/sub")).unwrap();
    std::fs::write(m.p("dir/sub/x.txt"), b"x").unwrap();
    m.sync(&w);
    let files = w.files("b1");
    let sizes: Vec<(&str, u64)> = files.iter().map(|(p, (s, _))| (p.as_str(), *s)).collect();
    assert_eq!(
        sizes,
        vec![
            ("a.txt", 5),
            ("data/big.bin", 3 << 20),
            ("dir/sub/x.txt", 1),
            ("empty", 0)
        ]
    );
    assert_eq!(
        common::sha256_hex(&w.bytes("b1", "data/big.bin")),
        common::sha256_hex(&big)
    );
    assert_eq!(w.bytes("b1", "a.txt"), b"hello");

    // Overwrite, rename a file, rename a directory, delete, set an mtime on a committed file.
    std::fs::write(m.p("a.txt"), b"hello again").unwrap();
    std::fs::rename(m.p("dir/sub/x.txt"), m.p("moved.txt")).unwrap();
    std::fs::rename(m.p("data"), m.p("data2")).unwrap();
    std::fs::remove_file(m.p("empty")).unwrap();
    std::fs::File::options()
        .write(true)
        .open(m.p("moved.txt"))
        .unwrap()
        .set_modified(fixed_time())
        .unwrap();
    m.sync(&w);
    let files = w.files("b1");
    let paths: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(paths, vec!["a.txt", "data2/big.bin", "moved.txt"]);
    assert_eq!(w.bytes("b1", "a.txt"), b"hello again");
    assert_eq!(w.bytes("b1", "moved.txt"), b"x");
    assert_eq!(
        common::sha256_hex(&w.bytes("b1", "data2/big.bin")),
        common::sha256_hex(&big),
        "a renamed directory's file keeps its bytes"
    );
    assert_eq!(
        ms_of(&files["moved.txt"].1),
        1_577_934_245_678,
        "the bucket keeps the mtime set through the mount"
    );
    // The mount shows the Hub's mtime (a fresh mount reads it from the bucket's tree).
    let meta = std::fs::metadata(m.p("moved.txt")).unwrap();
    assert_eq!(meta.modified().unwrap(), fixed_time());

    // Another mount sees the changes once its metadata TTL passed (it polls the bucket's state).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got = std::fs::read(viewer.p("a.txt")).unwrap_or_default();
        let moved = viewer.p("moved.txt").exists();
        if got == b"hello again" && moved && !viewer.p("empty").exists() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the read-only mount still shows {:?}, moved.txt {moved}",
            String::from_utf8_lossy(&got)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(std::fs::read(viewer.p("data2/big.bin")).unwrap(), big);
    let e = std::fs::write(viewer.p("nope.txt"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "--read-only: {e}");
    viewer.unmount(&w);

    // A remount of the same bucket shows exactly the Hub's tree.
    m.unmount(&w);
    let again = w.mount("buckets/local/b1", "m1", WRITE, &[]);
    assert_eq!(std::fs::read(again.p("a.txt")).unwrap(), b"hello again");
    assert_eq!(
        std::fs::metadata(again.p("moved.txt")).unwrap().modified().unwrap(),
        fixed_time()
    );
    let mut names: Vec<String> = std::fs::read_dir(again.p(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    // `dir` was made with mkdir: the mount keeps directories it made (empty now) across remounts.
    assert_eq!(names, vec!["a.txt", "data2", "dir", "moved.txt"]);
    again.unmount(&w);
}

/// Hard links on a bucket mount (the binary, as users run it): one inode, a write through one name
/// read through the other, both names in the bucket with the same bytes, and the link kept across a
/// remount with the same cache dir.
#[test]
fn fuse_bucket_mount_hard_links() {
    use std::os::unix::fs::MetadataExt;
    let w = World::new();
    w.create_bucket("links");
    let m = w.mount("buckets/local/links", "ml", WRITE, &[]);
    let big = pseudo(2 << 20, 3);
    std::fs::write(m.p("a.bin"), &big).unwrap();
    std::fs::create_dir_all(m.p("d")).unwrap();
    std::fs::hard_link(m.p("a.bin"), m.p("d/b.bin")).unwrap();
    let (a, b) = (
        std::fs::metadata(m.p("a.bin")).unwrap(),
        std::fs::metadata(m.p("d/b.bin")).unwrap(),
    );
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(m.p("d/b.bin")).unwrap();
        f.write_all(b"more").unwrap();
    }
    let mut want = big.clone();
    want.extend_from_slice(b"more");
    assert_eq!(std::fs::read(m.p("a.bin")).unwrap(), want);
    m.sync(&w);
    for name in ["a.bin", "d/b.bin"] {
        assert_eq!(
            common::sha256_hex(&w.bytes("links", name)),
            common::sha256_hex(&want),
            "{name} in the bucket"
        );
    }
    m.unmount(&w);
    let again = w.mount("buckets/local/links", "ml", WRITE, &[]);
    let (a, b) = (
        std::fs::metadata(again.p("a.bin")).unwrap(),
        std::fs::metadata(again.p("d/b.bin")).unwrap(),
    );
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2), "after a remount");
    std::fs::write(again.p("a.bin"), b"new").unwrap();
    assert_eq!(std::fs::read(again.p("d/b.bin")).unwrap(), b"new");
    again.sync(&w);
    assert_eq!(w.bytes("links", "d/b.bin"), b"new");
    again.unmount(&w);
}

#[test]
fn bucket_prefix_mounts_and_tokens() {
    let w = World::new();
    w.create_bucket("b2");
    // A prefix that holds nothing yet can be mounted writable; its first file creates it.
    let m = w.mount("hf://buckets/local/b2/ckpt/run1", "pre", WRITE, &[]);
    std::fs::write(m.p("step1.bin"), pseudo(10_000, 3)).unwrap();
    m.sync(&w);
    assert_eq!(
        w.files("b2").keys().cloned().collect::<Vec<_>>(),
        vec!["ckpt/run1/step1.bin".to_string()]
    );
    m.unmount(&w);

    // A read token gives a read-only mount (said on stderr), writes answer EROFS.
    let ro = w.mount("buckets/local/b2", "ro", READ, &[]);
    assert_eq!(std::fs::read(ro.p("ckpt/run1/step1.bin")).unwrap(), pseudo(10_000, 3));
    let e = std::fs::write(ro.p("x"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    let err = std::fs::read_to_string(&ro.stderr).unwrap();
    assert!(err.contains("read-only"), "{err}");
    ro.unmount(&w);

    // --write with a read token, a revision, a missing bucket: one clear line, non-zero exit.
    let dir = w.dir.path().join("fail");
    std::fs::create_dir_all(&dir).unwrap();
    for (token, args, want) in [
        (READ, vec!["buckets/local/b2", "--write"], "may not write"),
        (WRITE, vec!["buckets/local/b2", "--revision", "main"], "no revisions"),
        (WRITE, vec!["buckets/local/b2@v1"], "no revisions"),
        (WRITE, vec!["buckets/local/nope"], "not found"),
    ] {
        let o = w
            .hubfs(token)
            .arg("mount")
            .args(&args[..1])
            .arg(&dir)
            .args(&args[1..])
            .arg("--cache-dir")
            .arg(w.dir.path().join("fail-cache"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "{args:?} mounted");
        assert!(text.contains(want), "{args:?}: {text}");
    }
}

type Conn = common::NfsConn;

fn nfs_name(s: &str) -> filename3<'static> {
    filename3(Opaque::owned(s.as_bytes().to_vec()))
}

async fn nfs_walk(c: &mut Conn, path: &str) -> Result<nfs3::nfs_fh3, nfsstat3> {
    let mut fh = c.root_nfs_fh3();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        match c
            .lookup(&nfs3::LOOKUP3args {
                what: diropargs3 {
                    dir: fh.clone(),
                    name: nfs_name(part),
                },
            })
            .await
            .unwrap()
        {
            Nfs3Result::Ok(ok) => fh = ok.object,
            Nfs3Result::Err((s, _)) => return Err(s),
        }
    }
    Ok(fh)
}

async fn nfs_write_file(c: &mut Conn, dir: &str, name: &str, data: &[u8]) {
    let d = nfs_walk(c, dir).await.unwrap();
    let r = c
        .create(&nfs3::CREATE3args {
            where_: diropargs3 {
                dir: d,
                name: nfs_name(name),
            },
            how: nfs3::createhow3::UNCHECKED(nfs3::sattr3::default()),
        })
        .await
        .unwrap();
    assert!(matches!(r, Nfs3Result::Ok(_)), "create {name}");
    let fh = nfs_walk(c, &format!("{dir}/{name}")).await.unwrap();
    for (i, chunk) in data.chunks(1 << 20).enumerate() {
        let r = c
            .write(&nfs3::WRITE3args {
                file: fh.clone(),
                offset: (i << 20) as u64,
                count: chunk.len() as u32,
                stable: nfs3::stable_how::FILE_SYNC,
                data: Opaque::owned(chunk.to_vec()),
            })
            .await
            .unwrap();
        assert!(matches!(r, Nfs3Result::Ok(_)), "write {name}");
    }
}

#[test]
fn nfs_bucket_server_writes_renames_deletes() {
    let w = World::new();
    w.create_bucket("b3");
    let mut child = w
        .hubfs(WRITE)
        .args([
            "serve-nfs",
            "buckets/local/b3",
            "--nfs-addr",
            "127.0.0.1:0",
            "--cache-dir",
        ])
        .arg(w.dir.path().join("nfs-cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::from(
            std::fs::File::create(w.dir.path().join("nfs.err")).unwrap(),
        ))
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr: std::net::SocketAddr = first.strip_prefix("nfs: ").expect(&first).parse().unwrap();
    let big = pseudo(2_500_000, 11);
    w.rt.block_on(async {
        let mut c = common::nfs_mount(addr.port()).await.unwrap();
        let root = c.root_nfs_fh3();
        let r = c
            .mkdir(&nfs3::MKDIR3args {
                where_: diropargs3 {
                    dir: root.clone(),
                    name: nfs_name("d"),
                },
                attributes: nfs3::sattr3::default(),
            })
            .await
            .unwrap();
        assert!(matches!(r, Nfs3Result::Ok(_)), "mkdir");
        nfs_write_file(&mut c, "d", "big.bin", &big).await;
        nfs_write_file(&mut c, "d", "keep.txt", b"first").await;
        nfs_write_file(&mut c, "d", "keep.txt", b"second!").await;
        nfs_write_file(&mut c, "", "gone.txt", b"bye").await;
        nfs_write_file(&mut c, "", "old-name.txt", b"renamed").await;
        let d = nfs_walk(&mut c, "d").await.unwrap();
        let r = c
            .rename(&nfs3::RENAME3args {
                from: diropargs3 {
                    dir: root.clone(),
                    name: nfs_name("old-name.txt"),
                },
                to: diropargs3 {
                    dir: d,
                    name: nfs_name("new-name.txt"),
                },
            })
            .await
            .unwrap();
        assert!(matches!(r, Nfs3Result::Ok(_)), "rename");
        let r = c
            .remove(&nfs3::REMOVE3args {
                object: diropargs3 {
                    dir: root.clone(),
                    name: nfs_name("gone.txt"),
                },
            })
            .await
            .unwrap();
        assert!(matches!(r, Nfs3Result::Ok(_)), "remove");
        let _ = c.unmount().await;
    });
    // Stopping the server drains what it holds (the NFS file's "close" is its idle timeout).
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "serve-nfs exit: {status:?}");
    let files = w.files("b3");
    let paths: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(paths, vec!["d/big.bin", "d/keep.txt", "d/new-name.txt"]);
    assert_eq!(w.bytes("b3", "d/keep.txt"), b"second!");
    assert_eq!(w.bytes("b3", "d/new-name.txt"), b"renamed");
    assert_eq!(
        common::sha256_hex(&w.bytes("b3", "d/big.bin")),
        common::sha256_hex(&big)
    );
}

/// Small files of a bucket read in inode order (`cp -r`) go in batches as a repo's do (issue 30):
/// every byte as written, and well under 0.1 Hub requests per file.
#[test]
fn bucket_small_files_are_read_in_batches() {
    use hubfs::local_hub::RouteClass;
    const N: usize = 200;
    let w = World::new();
    w.create_bucket("small");
    let m = w.mount("buckets/local/small", "w-small", WRITE, &[]);
    std::fs::create_dir_all(m.p("d")).unwrap();
    for i in 0..N {
        std::fs::write(m.p(&format!("d/{i:04}.bin")), pseudo(4096, 500 + i as u64)).unwrap();
    }
    m.sync(&w);
    m.unmount(&w);

    let r = w.mount("buckets/local/small", "r-small", READ, &["--read-only"]);
    let requests = || -> u64 {
        [RouteClass::Reconstruction, RouteClass::XorbFetch, RouteClass::Resolve]
            .iter()
            .map(|c| w._hub.stats(*c).requests)
            .sum()
    };
    let before = requests();
    let out = w.dir.path().join("out");
    let st = Command::new("cp").arg("-r").arg(r.p("d")).arg(&out).status().unwrap();
    assert!(st.success());
    let used = requests() - before;
    for i in 0..N {
        let got = std::fs::read(out.join(format!("{i:04}.bin"))).unwrap();
        assert!(got == pseudo(4096, 500 + i as u64), "file {i} differs");
    }
    eprintln!("bucket, cp -r of {N} small files: {used} Hub content requests");
    assert!(used as f64 <= 0.1 * N as f64, "{used} Hub requests for {N} files");
    r.unmount(&w);
}
