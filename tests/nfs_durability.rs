//! What NFS WRITE stability promises, against a real crash: `hubfs serve-nfs --write` is killed
//! with SIGKILL right after its WRITEs, before any Hub commit, and started again on the same cache
//! dir. A file whose WRITEs were COMMITted, and one written FILE_SYNC, are committed by the new
//! instance with the written bytes; a file with only UNSTABLE WRITEs is kept (in `recovered/`) but
//! not uploaded; the new instance has a new write verifier, which tells clients to resend.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hubfs::local_hub::LocalHub;
use nfs3_client::nfs3_types::nfs3::{self, diropargs3, filename3, nfs_fh3, nfsstat3};
use nfs3_client::nfs3_types::xdr_codec::Opaque;

mod common;

type Conn = common::NfsConn;

const REPO: &str = "local/durable";

/// `hubfs serve-nfs --write` of the test dataset on a free port, and that port.
fn serve(endpoint: &str, token: &str, cache: &Path) -> (Child, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hubfs"))
        .args(["serve-nfs", "--write", &format!("datasets/{REPO}")])
        .args(["--nfs-addr", "127.0.0.1:0", "--cache-dir"])
        .arg(cache)
        .env("HF_ENDPOINT", endpoint)
        .env("HF_TOKEN", token)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn hubfs serve-nfs");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("serve-nfs printed nothing").unwrap();
    let addr: std::net::SocketAddr = first.strip_prefix("nfs: ").expect(&first).parse().unwrap();
    // Keep reading stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, addr.port())
}

async fn connect(port: u16) -> Conn {
    common::nfs_mount(port).await.unwrap()
}

/// CREATE `name` in the root and WRITE `data` at `how`; returns the handle and the verifier.
async fn create_and_write(c: &mut Conn, name: &str, data: &[u8], how: nfs3::stable_how) -> (nfs_fh3, [u8; 8]) {
    let root = c.root_nfs_fh3();
    let r = c
        .create(&nfs3::CREATE3args {
            where_: diropargs3 {
                dir: root,
                name: filename3(Opaque::owned(name.as_bytes().to_vec())),
            },
            how: nfs3::createhow3::UNCHECKED(nfs3::sattr3::default()),
        })
        .await
        .unwrap()
        .unwrap();
    let fh = match r.obj {
        nfs3::post_op_fh3::Some(fh) => fh,
        nfs3::post_op_fh3::None => panic!("CREATE {name} returned no handle"),
    };
    let mut verf = [0u8; 8];
    for (i, chunk) in data.chunks(256 << 10).enumerate() {
        let w = c
            .write(&nfs3::WRITE3args {
                file: fh.clone(),
                offset: (i * (256 << 10)) as u64,
                count: chunk.len() as u32,
                stable: how,
                data: Opaque::owned(chunk.to_vec()),
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(w.count as usize, chunk.len());
        verf = w.verf.0;
    }
    (fh, verf)
}

/// The file's bytes on the Hub's main branch, or None while it is not there.
async fn hub_file(endpoint: &str, path: &str) -> Option<Vec<u8>> {
    // reqwest::get follows the redirect to the blob origin (common::client does not).
    let r = reqwest::get(common::Repo::dataset(REPO).resolve(endpoint, "main", path))
        .await
        .unwrap();
    if r.status() == reqwest::StatusCode::NOT_FOUND {
        return None;
    }
    assert!(r.status().is_success(), "{path}: {}", r.status());
    Some(r.bytes().await.unwrap().to_vec())
}

fn kill9(mut child: Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()? {
        let p = e.ok()?.path();
        if p.is_dir() {
            if let Some(found) = find_file(&p, name) {
                return Some(found);
            }
        } else if p.ends_with(name) {
            return Some(p);
        }
    }
    None
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect()
}

#[test]
fn committed_and_file_sync_writes_survive_a_crash_of_the_server() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
    let ep = hub.endpoint().to_string();
    let token = hub.write_token().unwrap();
    rt.block_on(common::create_repo_ok(
        &common::client(),
        &ep,
        &token,
        &common::Repo::dataset(REPO),
        false,
    ));
    let cache = tempfile::tempdir().unwrap();
    let committed = pattern(700_000, 1);
    let file_sync = pattern(300_000, 2);
    let unstable = pattern(200_000, 3);

    let (server, port) = serve(&ep, &token, cache.path());
    let verf = rt.block_on(async {
        let mut c = connect(port).await;
        let (fh, verf) = create_and_write(&mut c, "committed.bin", &committed, nfs3::stable_how::UNSTABLE).await;
        let r = c
            .commit(&nfs3::COMMIT3args {
                file: fh,
                offset: 0,
                count: 0,
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.verf.0, verf, "COMMIT's verifier is the WRITEs'");
        create_and_write(&mut c, "file-sync.bin", &file_sync, nfs3::stable_how::FILE_SYNC).await;
        create_and_write(&mut c, "unstable.bin", &unstable, nfs3::stable_how::UNSTABLE).await;
        verf
    });
    // The crash, well inside the 2 s without WRITEs after which a file would be committed.
    kill9(server);
    rt.block_on(async {
        for f in ["committed.bin", "file-sync.bin", "unstable.bin"] {
            assert!(hub_file(&ep, f).await.is_none(), "{f} was committed before the crash");
        }
    });

    let (server, port) = serve(&ep, &token, cache.path());
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(60);
        for (f, want) in [("committed.bin", &committed), ("file-sync.bin", &file_sync)] {
            let got = loop {
                if let Some(b) = hub_file(&ep, f).await {
                    break b;
                }
                assert!(Instant::now() < deadline, "{f} was not committed after the restart");
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            assert!(
                got == *want,
                "{f}: the Hub has {} bytes, not the {} written",
                got.len(),
                want.len()
            );
        }
        assert!(
            hub_file(&ep, "unstable.bin").await.is_none(),
            "uncommitted UNSTABLE data was uploaded"
        );
        // The new instance's verifier differs, so a client resends what it never saw committed.
        let mut c = connect(port).await;
        let (_, new_verf) = create_and_write(&mut c, "probe.bin", b"x", nfs3::stable_how::UNSTABLE).await;
        assert_ne!(new_verf, verf, "a restarted server kept its write verifier");
        let root = c.root_nfs_fh3();
        let r = c
            .lookup(&nfs3::LOOKUP3args {
                what: diropargs3 {
                    dir: root,
                    name: filename3(Opaque::owned(b"unstable.bin".to_vec())),
                },
            })
            .await
            .unwrap();
        assert!(
            matches!(r, nfs3::Nfs3Result::Err((nfsstat3::NFS3ERR_NOENT, _))),
            "unstable.bin is not in the mount after the restart"
        );
    });
    // Its bytes are kept for a person to look at, not thrown away.
    let kept = find_file(cache.path(), "recovered/unstable.bin").expect("unstable.bin kept under recovered/");
    assert_eq!(std::fs::read(kept).unwrap(), unstable);
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    let mut server = server;
    let status = server.wait().unwrap();
    assert!(status.success(), "serve-nfs exit after SIGTERM: {status}");
    rt.block_on(hub.stop());
}
