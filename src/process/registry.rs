//! The running-mounts registry: every hubfs mount (FUSE or NFS, read-only or writable, any cache
//! dir) writes one small JSON record per process into a per-user runtime directory, so that
//! `hubfs status` and `hubfs unmount` find it whichever shell or cache dir started it.
//!
//! The directory is chosen from the uid alone (not from environment variables, which differ
//! between `sudo` and a login shell): `/run/hubfs` for root, `/run/user/UID/hubfs` where that
//! exists, else `/tmp/hubfs-UID` (created 0700 and checked to be ours). `HUBFS_RUNTIME_DIR`
//! overrides it (tests).
//!
//! A record names its process by pid *and* start time, so a pid reused after a crash is not taken
//! for the mount; records of dead processes are removed by whoever reads them.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// How a mount is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Frontend {
    Fuse,
    Nfs,
}

/// One running mount, as `hubfs status --json` prints it (plus `writable`, added there).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MountRecord {
    pub pid: u32,
    /// Clock ticks since boot at which the process started (`/proc/PID/stat` field 22).
    pub start_time: u64,
    /// `ns/name`, `datasets/ns/name` or `spaces/ns/name`, as given to `mount`.
    pub repo: String,
    /// The revision asked for (branch, tag, commit) and the commit it resolved to at mount time.
    pub revision: String,
    pub commit: String,
    /// Absolute mountpoint; for `--nfs --serve-only`, the directory named on the command line.
    pub mountpoint: String,
    pub frontend: Frontend,
    /// `read-only` or `writable`.
    pub mode: String,
    /// The NFS server's address (NFS mounts only).
    pub nfs_addr: Option<String>,
    /// The log file (daemon mounts); `None` when the mount logs to its terminal.
    pub log_file: Option<String>,
    pub cache_dir: String,
    /// The writable mount's status file (`<cache>/mounts/PID.json`).
    pub status_file: Option<String>,
    /// How long this mount waits for pending commits when stopped (unmount waits as long).
    pub drain_secs: u64,
    /// The socket `hubfs commit` and `hubfs sync` talk to (writable mounts).
    #[serde(default)]
    pub control_socket: Option<String>,
    /// FUSE passthrough as the session negotiated it at mount (read-only FUSE mounts).
    #[serde(default)]
    pub passthrough: Option<String>,
    /// The kernel readahead hubfs asked for and the one the mount got, in KiB (FUSE mounts).
    #[serde(default)]
    pub readahead_kib: Option<(u64, u64)>,
}

/// The registry directory (created if missing).
pub fn dir() -> anyhow::Result<PathBuf> {
    if let Some(d) = std::env::var_os("HUBFS_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        let d = PathBuf::from(d);
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        return Ok(d);
    }
    let uid = rustix::process::getuid().as_raw();
    let candidates = if uid == 0 {
        vec![PathBuf::from("/run/hubfs"), PathBuf::from("/tmp/hubfs-0")]
    } else {
        let run = PathBuf::from(format!("/run/user/{uid}"));
        let mut v = Vec::new();
        if run.is_dir() {
            v.push(run.join("hubfs"));
        }
        v.push(PathBuf::from(format!("/tmp/hubfs-{uid}")));
        v
    };
    let mut last = None;
    for d in candidates {
        match private_dir(&d, uid) {
            Ok(()) => return Ok(d),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no runtime directory for hubfs")))
}

/// Creates `d` with mode 0700 if missing and checks it belongs to `uid` (a shared /tmp must not
/// let another user plant records).
fn private_dir(d: &Path, uid: u32) -> anyhow::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(d) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating {}", d.display())),
    }
    let meta = std::fs::symlink_metadata(d).with_context(|| format!("reading {}", d.display()))?;
    if !meta.is_dir() || meta.uid() != uid {
        anyhow::bail!("{} is not a directory owned by uid {uid}", d.display());
    }
    Ok(())
}

/// Start time of a process in clock ticks since boot, `None` if it does not exist or has exited
/// (a daemon's zombie lingers until init reaps it, which can take seconds).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count fields after the last ')'.
    let mut rest = stat.get(stat.rfind(')')? + 2..)?.split(' ');
    if matches!(rest.next(), Some("Z" | "X")) {
        return None;
    }
    rest.nth(18)?.parse().ok()
}

/// Whether the process a record names is still the one that wrote it.
pub fn alive(r: &MountRecord) -> bool {
    start_time(r.pid) == Some(r.start_time)
}

/// This process's record, removed when dropped (normal exit, unmount, error after mounting).
pub struct Registration {
    path: PathBuf,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes the record of this process; failure only loses the `status` listing, so it is logged.
pub fn register(mut record: MountRecord) -> Option<Registration> {
    record.pid = std::process::id();
    record.start_time = start_time(record.pid).unwrap_or(0);
    let write = || -> anyhow::Result<PathBuf> {
        let dir = dir()?;
        let path = dir.join(format!("{}.json", record.pid));
        let tmp = dir.join(format!(".{}.json.tmp", record.pid));
        std::fs::write(&tmp, serde_json::to_vec_pretty(&record)?)?;
        std::fs::rename(&tmp, &path)?;
        Ok(path)
    };
    match write() {
        Ok(path) => Some(Registration { path }),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "hubfs status will not list this mount");
            None
        }
    }
}

/// Records of running mounts, oldest first; records of dead processes are removed.
pub fn live() -> Vec<MountRecord> {
    let Ok(dir) = dir() else { return Vec::new() };
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        let Some(r) = std::fs::read(&p)
            .ok()
            .and_then(|b| serde_json::from_slice::<MountRecord>(&b).ok())
        else {
            continue;
        };
        if !alive(&r) {
            let _ = std::fs::remove_file(&p);
            continue;
        }
        out.push(r);
    }
    out.sort_by_key(|r| (r.start_time, r.pid));
    out
}

/// DIR made absolute without touching DIR itself (its parent is resolved, which is safe).
pub fn absolute_no_stat(dir: &Path) -> PathBuf {
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => parent.canonicalize().map(|p| p.join(name)).unwrap_or(abs.clone()),
        _ => abs,
    }
}

/// The registry record of the mount at `dir` (as given when it started, or made absolute).
pub fn find_record(dir: &Path) -> Option<MountRecord> {
    let abs = absolute_no_stat(dir).display().to_string();
    let given = dir.display().to_string();
    live()
        .into_iter()
        .find(|r| r.mountpoint == abs || r.mountpoint == given)
}

/// The running hubfs mount at `dir`, or an error that says there is none.
pub fn record_for(dir: &Path) -> anyhow::Result<MountRecord> {
    find_record(dir).ok_or_else(|| {
        anyhow::anyhow!(
            "{} is not a running hubfs mount (`hubfs status` lists them)",
            dir.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_start_time_is_read_and_stable() {
        let me = std::process::id();
        let a = start_time(me).unwrap();
        assert!(a > 0);
        assert_eq!(start_time(me), Some(a));
        assert_eq!(start_time(u32::MAX), None);
    }

    #[test]
    fn a_record_with_a_wrong_start_time_is_dead() {
        let me = std::process::id();
        let mut r = MountRecord {
            pid: me,
            start_time: start_time(me).unwrap(),
            repo: "a/b".into(),
            revision: "main".into(),
            commit: "0".repeat(40),
            mountpoint: "/m".into(),
            frontend: Frontend::Fuse,
            mode: "read-only".into(),
            nfs_addr: None,
            log_file: None,
            cache_dir: "/c".into(),
            status_file: None,
            drain_secs: 0,
            control_socket: None,
            passthrough: None,
            readahead_kib: None,
        };
        assert!(alive(&r));
        r.start_time += 1;
        assert!(!alive(&r), "a reused pid is not the mount");
    }
}
