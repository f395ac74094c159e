//! The exit status of each kind of failure, as scripts and the Python package see it: the built
//! binary run against a local Hub (`--help` lists the numbers, `src/process/exit.rs` picks them).
//!
//! 3 a missing repo, 4 a missing revision, 5 a refused token (and `--write` without one that may
//! write), 7 a mountpoint that is missing, not a directory or busy, 8 a Hub that cannot be reached,
//! the same through `mount --daemon` (its mount process's status); 6 with `/dev` replaced by an
//! empty tmpfs in a private mount namespace; 2 for a refused command line, and `hubfs doctor`
//! keeps 1 when a check FAILs.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use hubfs::local_hub::LocalHub;

/// `hubfs ARGS…` against `endpoint` with `token` (none: anonymous), caches under `home`.
fn hubfs(args: &[&str], endpoint: &str, token: Option<&str>, home: &Path) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hubfs"));
    c.args(args)
        .env("HF_ENDPOINT", endpoint)
        .env("HF_HOME", home.join("hf-home"))
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env_remove("HF_TOKEN")
        .env_remove("HF_TOKEN_PATH")
        .stdin(Stdio::null());
    if let Some(t) = token {
        c.env("HF_TOKEN", t);
    }
    c.output().expect("run hubfs")
}

fn code_and_line(o: &Output) -> (Option<i32>, String) {
    let err = String::from_utf8_lossy(&o.stderr);
    let line = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    (o.status.code(), line.to_string())
}

/// One command and the exit status it must end with.
struct Case<'a> {
    what: &'a str,
    args: Vec<&'a str>,
    endpoint: &'a str,
    token: Option<&'a str>,
    want: i32,
}

fn case<'a>(what: &'a str, args: &[&'a str], endpoint: &'a str, token: Option<&'a str>, want: i32) -> Case<'a> {
    Case {
        what,
        args: args.to_vec(),
        endpoint,
        token,
        want,
    }
}

/// Whether this process may open /dev/fuse (a `mount` checks it before the Hub).
fn fuse_here() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_ok()
}

#[test]
fn each_kind_of_failure_has_its_exit_status() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
    let ep_owned = hub.endpoint().to_string();
    let ep = ep_owned.as_str();
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path();
    let mnt = home.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let file = home.join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let (mnt_s, file_s) = (mnt.to_str().unwrap(), file.to_str().unwrap());
    let missing = home.join("missing");
    let missing_s = missing.to_str().unwrap();
    let (write, read, bad) = (Some(common::WRITE), Some(common::READ), Some("hf_not_a_token"));
    // Connection refused, and no patience for it: the mount gives up after its quick retries.
    let nowhere = "http://127.0.0.1:1";
    let quick = ["--max-hub-wait", "0"];

    let mut cases = vec![
        case("serve-nfs of a missing repo", &["serve-nfs", "demo/nope"], ep, write, 3),
        case(
            "serve-nfs of a missing revision",
            &["serve-nfs", "demo/tiny-model", "--revision", "v9"],
            ep,
            write,
            4,
        ),
        case(
            "serve-nfs with a refused token",
            &["serve-nfs", "demo/tiny-model"],
            ep,
            bad,
            5,
        ),
        case(
            "serve-nfs of an unreachable Hub",
            &["serve-nfs", "demo/tiny-model", quick[0], quick[1]],
            nowhere,
            write,
            8,
        ),
        case("an unknown option", &["mount", "--no-such-option"], ep, write, 2),
    ];
    if fuse_here() {
        cases.extend([
            case("mount of a missing repo", &["mount", "demo/nope", mnt_s], ep, write, 3),
            case(
                "mount --daemon of a missing repo",
                &["mount", "--daemon", "demo/nope", mnt_s],
                ep,
                write,
                3,
            ),
            case(
                "mount of a missing revision",
                &["mount", "demo/tiny-model@v9", mnt_s],
                ep,
                write,
                4,
            ),
            case(
                "mount with a refused token",
                &["mount", "demo/tiny-model", mnt_s],
                ep,
                bad,
                5,
            ),
            case(
                "mount --daemon with a refused token",
                &["mount", "--daemon", "demo/tiny-model", mnt_s],
                ep,
                bad,
                5,
            ),
            case(
                "mount --write with a read token",
                &["mount", "--write", "datasets/demo/tiny-dataset", mnt_s],
                ep,
                read,
                5,
            ),
            case(
                "mount on a missing directory",
                &["mount", "demo/tiny-model", missing_s],
                ep,
                write,
                7,
            ),
            case(
                "mount --daemon on a missing directory",
                &["mount", "--daemon", "demo/tiny-model", missing_s],
                ep,
                write,
                7,
            ),
            case("mount on a file", &["mount", "demo/tiny-model", file_s], ep, write, 7),
            case(
                "mount of an unreachable Hub",
                &["mount", "demo/tiny-model", mnt_s, quick[0], quick[1]],
                nowhere,
                write,
                8,
            ),
        ]);
    } else {
        eprintln!("the mount cases skipped: /dev/fuse cannot be opened here");
    }
    let mut wrong = Vec::new();
    for c in &cases {
        let o = hubfs(&c.args, c.endpoint, c.token, home);
        let (code, line) = code_and_line(&o);
        eprintln!("{}: exit {code:?}: {line}", c.what);
        if code != Some(c.want) {
            wrong.push(format!("{}: exit {code:?}, want {}: {line}", c.what, c.want));
        }
        // The repo the message names is the repo alone, not the spec's `@v9` again.
        if c.want == 4 && !line.contains("\"v9\" not found in demo/tiny-model (") {
            wrong.push(format!("{}: the message names the repo oddly: {line}", c.what));
        }
        if code == Some(0) {
            // A case that mounted after all: leave nothing behind for the next one.
            let _ = hubfs(&["unmount", mnt_s], c.endpoint, None, home);
        }
    }

    // `hubfs doctor` keeps its own rule: 1 when a check FAILs, whatever failed.
    let o = hubfs(
        &[
            "doctor",
            "demo/nope",
            "--cache-dir",
            home.join("cache").to_str().unwrap(),
        ],
        ep,
        write,
        home,
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("FAIL"), "{stdout}");
    if o.status.code() != Some(1) {
        wrong.push(format!("doctor with a FAIL: exit {:?}, want 1", o.status.code()));
    }

    // A busy mountpoint: something is mounted there already.
    if fuse_here() {
        let o = hubfs(&["mount", "--daemon", "demo/tiny-model", mnt_s], ep, write, home);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        for args in [
            vec!["mount", "demo/tiny-model", mnt_s],
            vec!["mount", "--daemon", "demo/tiny-model", mnt_s],
        ] {
            let (code, line) = code_and_line(&hubfs(&args, ep, write, home));
            eprintln!("{args:?} on a busy mountpoint: exit {code:?}: {line}");
            if code != Some(7) || !line.contains("busy") {
                wrong.push(format!("{args:?} on a busy mountpoint: exit {code:?}, want 7: {line}"));
            }
        }
        let o = hubfs(&["unmount", mnt_s], ep, None, home);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::thread::sleep(Duration::from_millis(200));
    }
    rt.block_on(hub.stop());
    assert!(wrong.is_empty(), "wrong exit statuses:\n{}", wrong.join("\n"));
}

#[test]
fn a_missing_dev_fuse_exits_6() {
    if !common::isolated::can_hide_dev() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    // /dev/fuse is looked at before the Hub: no Hub is needed, the endpoint is never asked.
    for daemon in [false, true] {
        let mut c = Command::new("unshare");
        // `$0` is the binary the test built, `$1` the mountpoint, `$2` --daemon or nothing.
        c.args([
            "-m",
            "sh",
            "-c",
            "mount -t tmpfs none /dev && mknod -m 666 /dev/null c 1 3 && exec \"$0\" mount $2 demo/tiny-model \"$1\"",
        ])
        .arg(env!("CARGO_BIN_EXE_hubfs"))
        .arg(&mnt)
        .arg(if daemon { "--daemon" } else { "" })
        .env("HF_ENDPOINT", "http://127.0.0.1:1")
        .env("HF_HOME", tmp.path().join("hf-home"))
        .env("XDG_CACHE_HOME", tmp.path().join("cache"))
        .env_remove("HF_TOKEN")
        .stdin(Stdio::null());
        let (code, line) = code_and_line(&c.output().expect("run unshare"));
        eprintln!("without /dev/fuse (daemon: {daemon}): exit {code:?}: {line}");
        assert_eq!(code, Some(6), "daemon: {daemon}: {line}");
        assert!(line.contains("cannot open /dev/fuse"), "{line}");
    }
}
