//! The `hubfs` binary run as a user runs it, with a home, cache dir and mount registry of its own
//! under a temporary directory, pointed at one Hub: the tests that drive the binary start here.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub struct Isolated {
    /// The Hub endpoint (`HF_ENDPOINT`); a test may point it at another Hub between runs.
    pub ep: String,
    root: tempfile::TempDir,
}

impl Isolated {
    pub fn new(ep: &str) -> Isolated {
        Isolated {
            ep: ep.to_string(),
            root: tempfile::tempdir().unwrap(),
        }
    }

    /// A path under the private root.
    pub fn path(&self, p: &str) -> PathBuf {
        self.root.path().join(p)
    }

    /// The default cache dir of every run (`XDG_CACHE_HOME/hubfs`).
    pub fn cache_dir(&self) -> PathBuf {
        self.path("xdg-cache/hubfs")
    }

    /// `hubfs` with the private `HF_HOME`, `XDG_CACHE_HOME` and registry, and `token` as
    /// `HF_TOKEN` (`None`: no token, not even one from the test's own environment).
    pub fn command(&self, token: Option<&str>) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hubfs"));
        c.env("HF_ENDPOINT", &self.ep)
            .env("HF_HOME", self.path("hf-home"))
            .env("XDG_CACHE_HOME", self.path("xdg-cache"))
            .env("HUBFS_RUNTIME_DIR", self.path("run"))
            .env_remove("HF_TOKEN")
            .env_remove("HF_TOKEN_PATH")
            .env_remove("RUST_LOG");
        if let Some(t) = token {
            c.env("HF_TOKEN", t);
        }
        c
    }
}

/// (pid, log file) from a successful `mount --daemon`'s output.
pub fn daemon_started(o: &Output) -> (i32, PathBuf) {
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "mount --daemon failed: {out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let pid = out
        .lines()
        .find(|l| l.starts_with("mounted "))
        .and_then(|l| l.rsplit("(pid ").next())
        .and_then(|s| s.trim().trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no pid in {out:?}"));
    let log = out
        .lines()
        .find_map(|l| l.strip_prefix("log: "))
        .unwrap_or_else(|| panic!("no log line in {out:?}"));
    (pid, PathBuf::from(log))
}

/// Whether `pid` runs (a zombie does not).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s.rsplit(')').next().unwrap_or("").split_whitespace().next();
            !matches!(state, Some("Z" | "X"))
        })
        .unwrap_or(false)
}

/// Waits (at most 60 s) until `pid` has exited.
pub fn wait_gone(pid: i32) {
    let t = Instant::now();
    while alive(pid) {
        assert!(t.elapsed() < Duration::from_secs(60), "pid {pid} still running");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A `mount --daemon` a test started: on drop (the test ended, passed or not) the mount is
/// detached and its daemon killed, so a failed assertion leaves nothing mounted behind.
pub struct DaemonMount(pub PathBuf, pub i32);

impl Drop for DaemonMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        // SAFETY: kill(2) on the daemon this test started (gone already: ESRCH, ignored).
        unsafe { libc::kill(self.1, libc::SIGKILL) };
    }
}

/// Whether this machine can replace `/dev` in a private mount namespace (`unshare -m`), the way
/// tests hide `/dev/fuse` from the binary; if not, says why the calling test is skipped.
pub fn can_hide_dev() -> bool {
    let probe = Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs none /dev"])
        .stderr(std::process::Stdio::piped())
        .output();
    match probe {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            eprintln!(
                "skipped: cannot replace /dev in a private mount namespace: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            false
        }
        Err(e) => {
            eprintln!("skipped: unshare cannot run: {e}");
            false
        }
    }
}

/// A local Hub with `files` in dataset `local/NAME` (Xet), mounted with `mount --daemon` and
/// `extra` options: the runtime and Hub (kept alive), the mountpoint and its guard; `None` when
/// not root (FUSE mounts need it here).
pub fn mounted_xet_dataset(
    name: &str,
    files: &[(&str, &[u8])],
    extra: &[&str],
) -> Option<(MountedHub, PathBuf, DaemonMount)> {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: FUSE mounts need root here");
        return None;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let hub = rt.block_on(hubfs::local_hub::LocalHub::start_temp(false)).unwrap();
    let ep = hub.endpoint().to_string();
    let repo = super::Repo::dataset(&format!("local/{name}"));
    let files: Vec<(String, Vec<u8>)> = files.iter().map(|(p, d)| (p.to_string(), d.to_vec())).collect();
    rt.block_on(super::upload_xet_files(&ep, &repo, &files));
    let cli = Isolated::new(&ep);
    let dir = cli.path("mnt");
    std::fs::create_dir_all(&dir).unwrap();
    let o = cli
        .command(Some(hubfs::local_hub::DEFAULT_WRITE_TOKEN))
        .args([
            "mount",
            &format!("datasets/local/{name}"),
            dir.to_str().unwrap(),
            "--daemon",
        ])
        .args(extra)
        .output()
        .unwrap();
    let (pid, _log) = daemon_started(&o);
    let guard = DaemonMount(dir.clone(), pid);
    Some(((rt, hub, cli), dir, guard))
}

/// What `mounted_xet_dataset` keeps alive for a test: the runtime, the Hub, and the binary's private home.
pub type MountedHub = (tokio::runtime::Runtime, hubfs::local_hub::LocalHub, Isolated);
