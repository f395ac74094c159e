//! fio jobs: one job per run, its JSON report parsed into the figures the suite reports.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Where a job's files are: a FUSE mountpoint (psync, or io_uring for queue depths above 1) or an
/// NFS server reached by fio's libnfs engine.
#[derive(Clone, Debug)]
pub enum Target {
    Fuse(PathBuf),
    Nfs(SocketAddr),
}

/// What one fio job did: bytes per second, operations per second, fio's own runtime
/// and the wall time of the fio process (which includes opening and closing the files), and what
/// the table should say about how it was obtained (a rerun), if anything.
#[derive(Clone, Debug, Default)]
pub struct FioResult {
    pub bw: f64,
    pub iops: f64,
    pub runtime: Duration,
    pub wall: Duration,
    pub note: Option<String>,
}

/// A fio process that did not exit in time.
#[derive(Debug)]
struct Stuck(String);

impl std::fmt::Display for Stuck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Stuck {}

/// One fio job, built up with the methods below and run by [`Fio::run`].
#[derive(Clone, Debug)]
pub struct Job {
    pub rw: &'static str,
    pub bs: u64,
    /// Paths relative to the target's root; several make one job over several files.
    pub files: Vec<String>,
    /// fio's `filename_format` (`$filenum` counts from 0) naming `files` instead of a list: fio
    /// takes at most 4096 characters of file names in one option.
    pub format: Option<String>,
    /// Size of each file (fio's nfs engine cannot stat; for writes it is what gets written).
    pub file_size: u64,
    pub iodepth: u32,
    /// fio's random seed: it decides the bytes a write job writes. Jobs that must not share
    /// content (and so dedup against each other's uploads) get different seeds.
    pub seed: u64,
    /// Time-based jobs run this long (random reads); others run once over the files.
    pub runtime: Option<Duration>,
}

impl Job {
    pub fn new(rw: &'static str, bs: u64, files: Vec<String>, file_size: u64) -> Job {
        Job {
            rw,
            bs,
            files,
            format: None,
            file_size,
            iodepth: 1,
            seed: 4242,
            runtime: None,
        }
    }

    /// A job over `count` files named by `format`, where `$filenum` stands for 0, 1, 2…
    pub fn many(rw: &'static str, bs: u64, format: &str, count: usize, file_size: u64) -> Job {
        let files = (0..count).map(|i| format.replace("$filenum", &i.to_string())).collect();
        Job {
            format: Some(format.to_string()),
            ..Job::new(rw, bs, files, file_size)
        }
    }

    pub fn seeded(mut self, seed: u64) -> Job {
        self.seed = seed;
        self
    }

    pub fn depth(mut self, d: u32) -> Job {
        self.iodepth = d;
        self
    }

    pub fn timed(mut self, d: Duration) -> Job {
        self.runtime = Some(d);
        self
    }

    fn is_write(&self) -> bool {
        self.rw.contains("write")
    }

    fn args(&self, target: &Target) -> Vec<String> {
        let mut a = vec![
            "--name=job".to_string(),
            "--output-format=json".to_string(),
            "--thread".to_string(),
            format!("--rw={}", self.rw),
            format!("--bs={}", self.bs),
            format!("--iodepth={}", self.iodepth),
            format!("--filesize={}", self.file_size),
            format!("--nrfiles={}", self.files.len()),
            "--file_service_type=sequential".to_string(),
            "--randrepeat=1".to_string(),
            format!("--randseed={}", self.seed),
        ];
        let names = match target {
            Target::Fuse(dir) => {
                let engine = if self.iodepth > 1 { "io_uring" } else { "psync" };
                a.push(format!("--ioengine={engine}"));
                // Names relative to the mountpoint keep a long file list under the kernel's
                // 128 KiB limit for one argument.
                a.push(format!("--directory={}", dir.display()));
                join_names(&self.files)
            }
            Target::Nfs(addr) => {
                let port = addr.port();
                a.push("--ioengine=nfs".to_string());
                a.push(format!(
                    "--nfs_url=nfs://{}/?nfsport={port}&mountport={port}",
                    addr.ip()
                ));
                join_names(&self.files)
            }
        };
        match &self.format {
            Some(f) => a.push(format!("--filename_format={f}")),
            None => a.push(format!("--filename={names}")),
        }
        if let Some(t) = self.runtime {
            a.push(format!("--runtime={}ms", t.as_millis()));
            a.push("--time_based".to_string());
        }
        if self.is_write() {
            // Fresh pseudo-random bytes for every block, the same sequence for the same seed: an
            // identical rewrite writes identical bytes, and nothing dedups inside one file.
            a.push("--refill_buffers=1".to_string());
            a.push("--create_on_open=1".to_string());
            a.push("--openfiles=1".to_string());
        }
        a
    }
}

/// fio separates file names with ':'; a name holding one escapes it.
fn join_names(names: &[String]) -> String {
    names
        .iter()
        .map(|p| p.replace(':', "\\:"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The fio binary (it must have the nfs engine for NFS targets), how long one job may take, and how
/// long a timed job may go on past its runtime (starting, mounting, tearing down) before it counts
/// as stuck.
pub struct Fio {
    pub bin: PathBuf,
    pub timeout: Duration,
    pub stuck_after_runtime: Duration,
    /// Bytes read by the read jobs run so far (a job's CPU per GiB divides by it).
    pub read_bytes: std::cell::Cell<u64>,
}

struct Output {
    status: std::process::ExitStatus,
    stderr: String,
}

/// SIGKILL to `pid` and every process whose parent it is (fio forks helpers that outlive it).
fn kill_tree(pid: u32) {
    let mut pids = vec![pid];
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // Field 4 of /proc/PID/stat, after the parenthesised command name.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1));
            if ppid == Some(pid.to_string().as_str())
                && let Some(child) = e.file_name().to_str().and_then(|n| n.parse().ok())
            {
                pids.push(child);
            }
        }
    }
    for p in pids {
        // SAFETY: kill(2) of fio, a child this process started, and of fio's own children.
        unsafe { libc::kill(p as i32, libc::SIGKILL) };
    }
}

impl Fio {
    /// Runs `job` against `target`; an error when fio fails, reports a job error or moves no bytes.
    ///
    /// An NFS job with more than one request in flight that gets stuck is run once more. fio's nfs
    /// engine tears down with requests still in flight, and libnfs (4.0 on Debian 12) does not reset
    /// its receive state when it disconnects: its unmount, on a new connection, then takes the
    /// server's answer as the rest of a reply it had half read and waits forever (seen as a fio stack in
    /// `nfs_umount`, with the server having answered every call on that connection). Two runs in
    /// about 280 hung here; the figures of a clean rerun are the job's, and its cell says so.
    pub fn run(&self, target: &Target, job: &Job) -> anyhow::Result<FioResult> {
        match self.run_once(target, job) {
            Err(e) if e.is::<Stuck>() && matches!(target, Target::Nfs(_)) && job.iodepth > 1 => {
                eprintln!("  fio stuck ({e}); running it once more");
                let mut r = self.run_once(target, job)?;
                r.note = Some("rerun: libnfs hung in its unmount".into());
                Ok(r)
            }
            other => other,
        }
    }

    fn run_once(&self, target: &Target, job: &Job) -> anyhow::Result<FioResult> {
        let args = job.args(target);
        // A timed job that has not ended well past its runtime is stuck, whatever the budget.
        let limit = job
            .runtime
            .map_or(self.timeout, |t| self.timeout.min(t + self.stuck_after_runtime));
        // Report and errors go to files: a stuck helper process of fio then holds no pipe open,
        // and libnfs's chatter cannot fill one.
        let report = tempfile::NamedTempFile::new()?;
        let errors = tempfile::NamedTempFile::new()?;
        let t = Instant::now();
        let mut child = Command::new(&self.bin)
            .args(&args)
            .arg(format!("--output={}", report.path().display()))
            .stdout(Stdio::null())
            .stderr(errors.reopen()?)
            .spawn()
            .with_context(|| format!("running {}", self.bin.display()))?;
        let status = loop {
            if let Some(st) = child.try_wait()? {
                break st;
            }
            if t.elapsed() > limit {
                kill_tree(child.id());
                let _ = child.wait();
                return Err(Stuck(format!(
                    "fio did not finish in {limit:?} (a request left unanswered?); args {args:?}"
                ))
                .into());
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let wall = t.elapsed();
        let stderr = std::fs::read_to_string(errors.path()).unwrap_or_default();
        let text = std::fs::read_to_string(report.path()).unwrap_or_default();
        let out = Output { status, stderr };
        let tail = || out.stderr.lines().rev().take(6).collect::<Vec<_>>().join(" | ");
        // libnfs prints teardown chatter before the JSON on some runs.
        let json = text.find("{\n").map_or("", |i| &text[i..]);
        let v: serde_json::Value = serde_json::from_str(json)
            .with_context(|| format!("fio printed no JSON report (exit {}): {}", out.status, tail()))?;
        let j = &v["jobs"][0];
        let part = if job.is_write() { &j["write"] } else { &j["read"] };
        let err = j["error"].as_i64().unwrap_or(0);
        let bytes = part["io_bytes"].as_u64().unwrap_or(0);
        if !out.status.success() || err != 0 || bytes == 0 {
            bail!(
                "fio job failed (exit {}, job error {err}, {bytes} bytes): {}; args {args:?}",
                out.status,
                tail()
            );
        }
        if !job.is_write() {
            self.read_bytes.set(self.read_bytes.get() + bytes);
        }
        Ok(FioResult {
            bw: part["bw_bytes"].as_f64().unwrap_or(0.0),
            iops: part["iops"].as_f64().unwrap_or(0.0),
            runtime: Duration::from_millis(part["runtime"].as_u64().unwrap_or(0)),
            wall,
            note: None,
        })
    }
}

/// The page cache, dropped before cold and re-read passes so that the kernel does not answer.
pub fn drop_caches() {
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for fio: stuck (asleep) on its first run, then a clean JSON report.
    ///
    /// Written under another name and copied into place by `cp`: a descriptor this process held
    /// open for writing the script could be inherited by a child another test forks at that
    /// moment, and executing the script would then fail with ETXTBSY until that child execs.
    fn fake_fio(dir: &std::path::Path) -> PathBuf {
        let script = dir.join("fio");
        let source = dir.join("fio.src");
        let marker = dir.join("ran-once");
        std::fs::write(
            &source,
            format!(
                r#"#!/bin/sh
if [ ! -e {m} ]; then touch {m}; exec sleep 60; fi
for a in "$@"; do case "$a" in --output=*) out="${{a#--output=}}" ;; esac; done
printf '{{\n"jobs": [{{"error": 0, "read": {{"io_bytes": 4096, "bw_bytes": 4096, "iops": 1.0, "runtime": 1000}}}}]}}\n' > "$out"
"#,
                m = marker.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o755)).unwrap();
        let copied = Command::new("cp").arg("-p").arg(&source).arg(&script).status().unwrap();
        assert!(copied.success(), "cp {} {}", source.display(), script.display());
        script
    }

    fn fio(dir: &std::path::Path) -> Fio {
        Fio {
            bin: fake_fio(dir),
            timeout: Duration::from_secs(30),
            stuck_after_runtime: Duration::from_millis(500),
            read_bytes: Default::default(),
        }
    }

    fn rand_job(depth: u32) -> Job {
        Job::new("randread", 4096, vec!["f".into()], 1 << 20)
            .depth(depth)
            .timed(Duration::from_millis(100))
    }

    #[test]
    fn a_stuck_nfs_job_in_flight_is_rerun_once_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let nfs = Target::Nfs("127.0.0.1:9".parse().unwrap());
        let t = Instant::now();
        let r = fio(dir.path()).run(&nfs, &rand_job(16)).unwrap();
        assert_eq!(r.iops, 1.0);
        assert_eq!(r.note.as_deref(), Some("rerun: libnfs hung in its unmount"));
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "stuck means runtime + grace, not the budget"
        );
    }

    #[test]
    fn other_stuck_jobs_fail() {
        let dir = tempfile::tempdir().unwrap();
        let nfs = Target::Nfs("127.0.0.1:9".parse().unwrap());
        let e = fio(dir.path()).run(&nfs, &rand_job(1)).unwrap_err();
        assert!(e.to_string().contains("did not finish"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let fuse = Target::Fuse(dir.path().to_path_buf());
        let e = fio(dir.path()).run(&fuse, &rand_job(16)).unwrap_err();
        assert!(e.to_string().contains("did not finish"), "{e}");
    }
}
