//! hubfs itself, as users run it: `hubfs mount` (FUSE) and `hubfs serve-nfs` as child processes,
//! so that each one's peak RSS is its own and every option goes through the real command line.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};

use crate::fio::Target;

/// How long a stopping hubfs may take: its 60 s drain and some.
const STOP_LIMIT: Duration = Duration::from_secs(90);

/// Which frontend a process serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frontend {
    Fuse,
    Nfs,
}

impl Frontend {
    pub fn name(self) -> &'static str {
        match self {
            Frontend::Fuse => "FUSE",
            Frontend::Nfs => "NFS",
        }
    }
}

/// How a hubfs process is started.
pub struct Spec<'a> {
    pub hubfs: &'a Path,
    pub endpoint: &'a str,
    pub token: &'a str,
    pub repo: String,
    /// Fresh per process, so a new process starts cold (content cache, staging, status file).
    pub cache_dir: PathBuf,
    pub write: bool,
    /// `--close stage` (FUSE only): closes return once the file is journaled.
    pub close_stage: bool,
}

/// A running `hubfs mount` or `hubfs serve-nfs`; stopped with SIGTERM on drop.
pub struct Hubfs {
    child: Child,
    pub target: Target,
    pub cache_dir: PathBuf,
    mountpoint: Option<PathBuf>,
}

impl Hubfs {
    pub fn start(front: Frontend, spec: &Spec, work: &Path) -> anyhow::Result<Hubfs> {
        std::fs::create_dir_all(&spec.cache_dir)?;
        let mut cmd = Command::new(spec.hubfs);
        let mountpoint = match front {
            Frontend::Fuse => {
                let dir = tempfile::tempdir_in(work)?.keep();
                cmd.arg("mount").arg(&spec.repo).arg(&dir);
                if spec.close_stage {
                    cmd.args(["--close", "stage"]);
                }
                Some(dir)
            }
            Frontend::Nfs => {
                cmd.arg("serve-nfs").arg(&spec.repo);
                None
            }
        };
        cmd.args(["--endpoint", spec.endpoint, "--token", spec.token])
            .arg("--cache-dir")
            .arg(&spec.cache_dir);
        if spec.write {
            // No commit budget: the suite measures the mount and the Hub. Under the default budget
            // (64 an hour, 8 at once) the 10,000-file job's 20 commits of 500 would spread over
            // 12 minutes; ci/commit-plan.sh measures commits under the budget.
            cmd.args(["--write", "--commit-budget", "0"]);
        }
        // Its log goes beside its cache dir, out of the suite's output.
        let log_path = spec.cache_dir.with_extension("log");
        let log = std::fs::File::create(&log_path)?;
        let mut child = cmd
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", spec.hubfs.display()))?;
        let stdout = child.stdout.take().context("child stdout")?;
        // The ready line: "mounted ..." (FUSE) or "nfs: ADDR" then "serving ..." (NFS).
        let mut addr: Option<SocketAddr> = None;
        let mut ready = false;
        let mut lines = BufReader::new(stdout).lines();
        for line in lines.by_ref() {
            let line = line?;
            if let Some(a) = line.strip_prefix("nfs: ") {
                addr = Some(a.trim().parse().context("nfs address")?);
            }
            if line.starts_with("mounted ") || line.starts_with("serving ") {
                ready = true;
                break;
            }
        }
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        if !ready {
            let status = child.wait()?;
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            bail!(
                "hubfs {front:?} exited before it was ready ({status}): {}",
                tail.join(" | ")
            );
        }
        let target = match (front, &mountpoint, addr) {
            (Frontend::Fuse, Some(dir), _) => Target::Fuse(dir.clone()),
            (Frontend::Nfs, _, Some(a)) => Target::Nfs(a),
            _ => bail!("hubfs {front:?} printed no address"),
        };
        Ok(Hubfs {
            child,
            target,
            cache_dir: spec.cache_dir.clone(),
            mountpoint,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resets the process's peak RSS (VmHWM) to its current RSS, before a job.
    pub fn reset_peak(&self) {
        let _ = std::fs::write(format!("/proc/{}/clear_refs", self.pid()), "5");
    }

    /// CPU seconds (user + system) the serving process has used so far.
    pub fn cpu_secs(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        // Fields 14 and 15 (utime, stime), counted after the parenthesised command name.
        let f: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        (ticks(11) + ticks(12)) / hz
    }

    /// Peak RSS since the last reset, in MiB.
    pub fn peak_mib(&self) -> f64 {
        proc_kib(self.pid(), "VmHWM:") as f64 / 1024.0
    }

    /// The writable mount's status file (`cache/mounts/PID.json`), rewritten after every commit round.
    pub fn status(&self) -> Option<serde_json::Value> {
        let p = self.cache_dir.join("mounts").join(format!("{}.json", self.pid()));
        let text = std::fs::read_to_string(p).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Bytes this writable mount has uploaded so far (the Xet session's count).
    pub fn bytes_uploaded(&self) -> u64 {
        self.status().and_then(|s| s["bytes_uploaded"].as_u64()).unwrap_or(0)
    }

    /// Waits for a status file written after `since` (any, without it) that shows nothing waiting
    /// for a commit (no dirty or open file, no pending rename or delete): the committer rewrites it
    /// after every round, so that is a round that saw everything written before `since` settled.
    pub fn wait_settled(&self, since: Option<SystemTime>, limit: Duration) -> anyhow::Result<Duration> {
        let t = Instant::now();
        let path = self.cache_dir.join("mounts").join(format!("{}.json", self.pid()));
        loop {
            let fresh = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .is_ok_and(|m| since.is_none_or(|s| m > s));
            let status = self.status();
            if fresh && let Some(s) = &status {
                let dirty = s["dirty"].as_array().map_or(0, |a| a.len());
                let pending = s["pending_namespace_changes"].as_u64().unwrap_or(0);
                if dirty == 0 && pending == 0 {
                    return Ok(t.elapsed());
                }
            }
            if t.elapsed() > limit {
                let err = status.map(|s| s["last_error"].to_string()).unwrap_or_default();
                bail!("writes not committed after {limit:?} (last error {err})");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM (FUSE: unmount; writable: drain pending commits) and wait for the exit.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.terminate()
    }

    fn terminate(&mut self) -> anyhow::Result<()> {
        // SAFETY: kill(2) of a child this process started and has not reaped yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        // hubfs drains pending commits for up to 60 s (--drain-timeout) before it exits.
        let t = Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait()? {
                break Some(st);
            }
            if t.elapsed() > STOP_LIMIT {
                // SAFETY: as above; the child has not been reaped.
                unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) };
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(dir) = self.mountpoint.take() {
            let _ = std::fs::remove_dir(&dir);
        }
        // Content cache and staging of a finished process: gigabytes in a full run.
        let _ = std::fs::remove_dir_all(&self.cache_dir);
        match status {
            None => bail!("hubfs did not exit within {STOP_LIMIT:?} of SIGTERM (killed)"),
            Some(st) if !st.success() => bail!("hubfs exited with {st}"),
            Some(_) => Ok(()),
        }
    }
}

impl Drop for Hubfs {
    fn drop(&mut self) {
        if self.mountpoint.is_some() || self.child.try_wait().ok().flatten().is_none() {
            let _ = self.terminate();
        }
    }
}

fn proc_kib(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
