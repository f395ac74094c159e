//! `hubfs mount` as a person runs it: the binary, its exit codes and the one-line errors.

use std::process::{Command, Output};
use std::time::Duration;

use hubfs::local_hub::LocalHub;

fn hubfs(args: &[&str], endpoint: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hubfs"))
        .args(args)
        .env("HF_ENDPOINT", endpoint)
        .env("HF_TOKEN", "hf_local_write")
        .env("HF_HOME", std::env::temp_dir().join("hubfs-cli-test-home"))
        .env("XDG_CACHE_HOME", std::env::temp_dir().join("hubfs-cli-test-cache"))
        .output()
        .expect("run hubfs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[test]
fn mount_errors_daemon_and_unmount() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
    let ep = hub.endpoint().to_string();
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    let mnt_s = mnt.to_str().unwrap();

    // The mountpoint must exist.
    let o = hubfs(&["mount", "demo/tiny-model", mnt_s], &ep);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    std::fs::create_dir(&mnt).unwrap();

    // Unknown repo, bad revision, bad repo spec, unusable cache dir: one clear line each, non-zero exit.
    let not_a_dir = dir.path().join("plain-file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let not_a_dir = not_a_dir.to_str().unwrap();
    for (args, want) in [
        (
            vec!["mount", "demo/tiny-model", mnt_s, "--cache-dir", not_a_dir],
            "cache dir",
        ),
        (vec!["mount", "demo/nope", mnt_s], "not found"),
        (vec!["mount", "demo/tiny-model", mnt_s, "--revision", "v9"], "revision"),
        (vec!["mount", "not a repo", mnt_s], "repo"),
        (
            vec!["mount", "demo/tiny-model", mnt_s, "--memory-cache-size", "lots"],
            "size",
        ),
    ] {
        let o = hubfs(&args, &ep);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr(&o).to_lowercase().contains(want), "{args:?}: {}", stderr(&o));
    }

    // --daemon returns once the mount is usable and leaves it running.
    let o = hubfs(&["mount", "--daemon", "demo/tiny-model", mnt_s], &ep);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("mounted demo/tiny-model@"));
    let cfg = std::fs::read_to_string(mnt.join("config.json")).unwrap();
    assert!(cfg.contains("tiny-demo"));

    // A second mount on the same directory is refused as busy.
    let o = hubfs(&["mount", "demo/tiny-model", mnt_s], &ep);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("busy"), "{}", stderr(&o));

    let o = hubfs(&["unmount", mnt_s], &ep);
    assert!(o.status.success(), "{}", stderr(&o));
    std::thread::sleep(Duration::from_millis(200));
    assert!(!mnt.join("config.json").exists(), "still mounted after unmount");
    rt.block_on(hub.stop());
}

/// `hubfs serve-nfs` and `hubfs mount --nfs` as a person runs them.
#[test]
fn nfs_serving_from_the_command_line() {
    use std::io::BufRead;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
    let ep = hub.endpoint().to_string();
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mnt_s = mnt.to_str().unwrap();

    // NFS options without --nfs, and an unknown repo: clear errors, non-zero exit.
    let o = hubfs(&["mount", "demo/tiny-model", mnt_s, "--serve-only"], &ep);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--nfs"), "{}", stderr(&o));
    let o = hubfs(&["serve-nfs", "demo/nope"], &ep);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not found"), "{}", stderr(&o));

    // This kernel has no NFS client: `mount --nfs` says so in one line and what to do instead.
    let kernel_nfs = std::fs::read_to_string("/proc/filesystems")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().last() == Some("nfs"));
    if !kernel_nfs {
        let o = hubfs(&["mount", "--nfs", "demo/tiny-model", mnt_s], &ep);
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains("no NFS client") && e.contains("--serve-only"), "{e}");
    }

    // serve-nfs prints its address, serves the repo, and stops cleanly on SIGTERM.
    let mut child = Command::new(env!("CARGO_BIN_EXE_hubfs"))
        .args([
            "serve-nfs",
            "demo/tiny-model",
            "--nfs-addr",
            "127.0.0.1:0",
            "--cache-size",
            "0",
        ])
        .env("HF_ENDPOINT", &ep)
        .env("HF_TOKEN", "hf_local_read")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr: std::net::SocketAddr = first.strip_prefix("nfs: ").expect(&first).parse().unwrap();
    let second = lines.next().unwrap().unwrap();
    assert!(second.starts_with("serving demo/tiny-model@"), "{second}");
    let config = rt.block_on(async {
        use nfs3_client::nfs3_types::nfs3;
        use nfs3_client::nfs3_types::xdr_codec::Opaque;
        let mut c = nfs3_client::Nfs3ConnectionBuilder::new(nfs3_client::tokio::TokioConnector, "127.0.0.1", "/")
            .connect_from_privileged_port(false)
            .mount_port(addr.port())
            .nfs3_port(addr.port())
            .mount()
            .await
            .unwrap();
        let root = c.root_nfs_fh3();
        let fh = c
            .lookup(&nfs3::LOOKUP3args {
                what: nfs3::diropargs3 {
                    dir: root,
                    name: nfs3::filename3(Opaque::owned(b"config.json".to_vec())),
                },
            })
            .await
            .unwrap()
            .unwrap()
            .object;
        let r = c
            .read(&nfs3::READ3args {
                file: fh,
                offset: 0,
                count: 1 << 20,
            })
            .await
            .unwrap()
            .unwrap();
        assert!(r.eof);
        r.data.to_vec()
    });
    assert!(String::from_utf8_lossy(&config).contains("tiny-demo"));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "serve-nfs exit after SIGTERM: {status}");

    // `mount --nfs --serve-only --daemon` returns once serving, and says where.
    let o = hubfs(
        &[
            "mount",
            "--nfs",
            "--serve-only",
            "--daemon",
            "demo/tiny-model",
            mnt_s,
            "--cache-size",
            "0",
        ],
        &ep,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(out.contains("at nfs://127.0.0.1:"), "{out}");
    let pid: i32 = out
        .lines()
        .find(|l| l.starts_with("mounted "))
        .and_then(|l| l.rsplit("(pid ").next())
        .and_then(|s| s.trim().trim_end_matches(')').parse().ok())
        .expect(&out);
    assert!(
        out.lines().any(|l| l.starts_with("log: ")),
        "the daemon names its log: {out}"
    );
    // SAFETY: kill(2) on the detached server this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    rt.block_on(hub.stop());
}

/// A mount still waiting for the Hub (here one that is not there: it would retry for
/// `--max-hub-wait`, 10 minutes) stops at SIGTERM, as a person or a supervisor expects, and
/// leaves nothing mounted.
#[test]
fn a_mount_waiting_for_the_hub_stops_at_sigterm() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: FUSE mounts need root here");
        return;
    }
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hubfs"))
        .args(["mount", "demo/tiny-model", mnt.to_str().unwrap()])
        .env("HF_ENDPOINT", format!("http://127.0.0.1:{port}"))
        .env("HF_TOKEN", "hf_local_write")
        .env("HF_HOME", dir.path().join("home"))
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(child.try_wait().unwrap().is_none(), "still waiting for the Hub");
    // SAFETY: kill(2) on the child this test started and has not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("the mount did not stop within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(err.contains("stopped before"), "{err}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(mnt.to_str().unwrap()), "nothing left mounted");
}
