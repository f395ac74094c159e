//! The plugin's state directory: one directory per source mount, `sources/<key>/`, holding its
//! mountpoint `mnt/`, its record `source.json` (what it shows, which process serves it) and the
//! server's log. Which pods use a source is never written down: the bind mounts in mountinfo are
//! the truth, so nothing can disagree with the kernel after a crash.
//!
//! Tokens live elsewhere, in 0600 files on a tmpfs when there is one ([`StateDir::token_dir`]),
//! so that they never reach a disk.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What a running source mount is, as the plugin recorded it when it started it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SourceRecord {
    pub key: String,
    /// The mount spec (`datasets/ns/name`, …), for logs and `hubfs status`-like listings.
    pub spec: String,
    /// Commit (read-only) or branch (writable).
    pub revision: String,
    pub read_only: bool,
    pub pid: u32,
    /// The server's start time in clock ticks since boot (`/proc/PID/stat` field 22): a reused pid
    /// is not taken for the server.
    pub start_time: u64,
    /// How long the server may take to commit what is pending once its last pod is gone.
    pub drain_secs: u64,
    /// The Hub account of its token (`anonymous` without one): a republish with a rotated token
    /// of the same account only rewrites the token file.
    #[serde(default)]
    pub identity: String,
    /// The mount pod serving it (mount-pod mode); `pid` is then 0.
    #[serde(default)]
    pub pod: Option<String>,
}

#[derive(Debug, Clone)]
pub struct StateDir {
    pub root: PathBuf,
    pub token_dir: PathBuf,
}

const TMPFS_MAGIC: i64 = 0x0102_1994;

fn is_tmpfs(p: &Path) -> bool {
    rustix::fs::statfs(p).is_ok_and(|s| s.f_type == TMPFS_MAGIC)
}

impl StateDir {
    /// Creates the layout. Tokens go to `ROOT/tokens` when ROOT is on tmpfs, else to
    /// `/run/hubfs-csi/<hash of ROOT>/tokens` when /run/hubfs-csi (the DaemonSet's memory
    /// emptyDir) or /run is a tmpfs, else under /dev/shm, else to `ROOT/tokens` (warned).
    pub fn open(root: &Path) -> std::io::Result<StateDir> {
        std::fs::create_dir_all(root.join("sources"))?;
        let root = root.canonicalize()?;
        let h = crate::csi::short_hash(root.as_os_str().as_encoded_bytes());
        let run = Path::new("/run/hubfs-csi");
        let token_dir = if is_tmpfs(&root) {
            root.join("tokens")
        } else if is_tmpfs(run) || is_tmpfs(Path::new("/run")) {
            run.join(h).join("tokens")
        } else if is_tmpfs(Path::new("/dev/shm")) {
            PathBuf::from("/dev/shm/hubfs-csi").join(h).join("tokens")
        } else {
            tracing::warn!("no tmpfs for tokens: they are kept in 0600 files under the state dir");
            root.join("tokens")
        };
        std::fs::create_dir_all(&token_dir)?;
        std::fs::set_permissions(&token_dir, std::fs::Permissions::from_mode(0o700))?;
        Ok(StateDir { root, token_dir })
    }

    pub fn source_dir(&self, key: &str) -> PathBuf {
        self.root.join("sources").join(key)
    }

    pub fn source_mnt(&self, key: &str) -> PathBuf {
        self.source_dir(key).join("mnt")
    }

    pub fn token_file(&self, key: &str) -> PathBuf {
        self.token_dir.join(format!("{key}.token"))
    }

    /// Writes (or rewrites) the token of a source: a new 0600 file renamed over the old one, so a
    /// reader never sees half a token.
    pub fn write_token(&self, key: &str, token: Option<&str>) -> std::io::Result<PathBuf> {
        let path = self.token_file(key);
        let tmp = self.token_dir.join(format!(".{key}.token.tmp"));
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(token.unwrap_or("").as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        Ok(path)
    }

    /// The token a source was last given (`None`: anonymous or no file).
    pub fn read_token(&self, key: &str) -> Option<String> {
        let t = std::fs::read_to_string(self.token_file(key)).ok()?;
        let t = t.trim();
        (!t.is_empty()).then(|| t.to_string())
    }

    pub fn remove_token(&self, key: &str) {
        let _ = std::fs::remove_file(self.token_file(key));
    }

    pub fn write_record(&self, r: &SourceRecord) -> std::io::Result<()> {
        let dir = self.source_dir(&r.key);
        std::fs::create_dir_all(&dir)?;
        let tmp = dir.join("source.json.tmp");
        let body = serde_json::to_vec_pretty(r).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, body)?;
        std::fs::rename(tmp, dir.join("source.json"))
    }

    /// Every record found (unreadable ones are logged and skipped).
    pub fn records(&self) -> Vec<SourceRecord> {
        let Ok(rd) = std::fs::read_dir(self.root.join("sources")) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in rd.flatten() {
            let p = e.path().join("source.json");
            match std::fs::read(&p).map(|b| serde_json::from_slice::<SourceRecord>(&b)) {
                Ok(Ok(r)) => out.push(r),
                Ok(Err(err)) => tracing::warn!(path = %p.display(), error = %err, "unreadable source record"),
                Err(_) => {}
            }
        }
        out
    }

    /// Keys of every source directory, recorded or not (a crash between mkdir and the record
    /// leaves one without).
    pub fn source_keys(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(self.root.join("sources")) else {
            return Vec::new();
        };
        rd.flatten().filter_map(|e| e.file_name().into_string().ok()).collect()
    }

    /// Keys of every token file.
    pub fn token_keys(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(&self.token_dir) else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|n| n.strip_suffix(".token").map(str::to_string))
            .collect()
    }

    /// Removes a source's directory (its mountpoint must be unmounted: only empty dirs go).
    pub fn remove_source(&self, key: &str) {
        let dir = self.source_dir(key);
        let _ = std::fs::remove_file(dir.join("source.json"));
        let _ = std::fs::remove_dir(dir.join("mnt"));
        // The server's logs go with it: what went wrong at its start reached the plugin's log and
        // the RPC's answer.
        let _ = std::fs::remove_file(dir.join("server.log"));
        let _ = std::fs::remove_file(dir.join("server.log.1"));
        let _ = std::fs::remove_dir(&dir);
        self.remove_token(key);
    }
}

/// Start time of `pid` in clock ticks since boot, and whether it is a zombie; `None` if gone.
pub fn proc_start(pid: u32) -> Option<(u64, bool)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields count from after it.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let zombie = f.first() == Some(&"Z") || f.first() == Some(&"X");
    Some((f.get(19)?.parse().ok()?, zombie))
}

/// Whether the record's server still runs (same pid, same start time, not a zombie).
pub fn server_alive(r: &SourceRecord) -> bool {
    matches!(proc_start(r.pid), Some((t, false)) if t == r.start_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_tokens_are_private() {
        let (t, z) = proc_start(std::process::id()).unwrap();
        assert!(!z);
        let r = SourceRecord {
            key: "k".into(),
            spec: "a/b".into(),
            revision: "main".into(),
            read_only: true,
            pid: std::process::id(),
            start_time: t,
            drain_secs: 1,
            identity: "anonymous".into(),
            pod: None,
        };
        assert!(server_alive(&r));
        assert!(!server_alive(&SourceRecord {
            start_time: t + 1,
            ..r.clone()
        }));
        let dir = tempfile::tempdir().unwrap();
        let s = StateDir::open(dir.path()).unwrap();
        let p = s.write_token("k", Some("hf_x")).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        s.write_token("k", Some("hf_y")).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "hf_y");
        s.write_record(&r).unwrap();
        assert_eq!(s.records(), vec![r]);
        s.remove_source("k");
        assert!(s.records().is_empty());
        if !s.token_dir.starts_with(&s.root) {
            let _ = std::fs::remove_dir_all(s.token_dir.parent().unwrap());
        }
    }
}
