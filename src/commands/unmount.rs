//! `hubfs unmount DIR`: unmounts any hubfs mount (FUSE, kernel NFS, or an NFS server started with
//! `mount --nfs --serve-only DIR`) and waits until its process has drained and exited, so a script
//! that unmounts knows the mount's pending commits were made (or are staged for the next mount).
//!
//! What is mounted at DIR is read from `/proc/self/mountinfo`, never by stat-ing DIR: a FUSE mount
//! whose server died answers every stat with ENOTCONN.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::process::mountinfo::{Entry, mounted_at};
use crate::process::registry::{Frontend, MountRecord, absolute_no_stat, find_record};

fn is_hubfs_fstype(m: &Entry) -> bool {
    m.fstype == "fuse.hubfs" || m.source.starts_with("hubfs:")
}

/// `hubfs unmount DIR`.
pub fn run(dir: &Path) -> anyhow::Result<()> {
    let abs = absolute_no_stat(dir);
    let record = find_record(dir);
    match (mounted_at(&abs), record) {
        // An NFS mount's server unmounts the kernel mount itself when asked to stop.
        (_, Some(r)) if r.frontend == Frontend::Nfs => stop(&r, dir),
        (Some(_), Some(r)) => {
            crate::process::session::unmount(&abs)?;
            wait_for_exit(&r)
        }
        // A hubfs mount without a record: started in-process (tests, `hubfs demo`).
        (Some(m), None) if is_hubfs_fstype(&m) => crate::process::session::unmount(&abs),
        (Some(m), None) => bail!(
            "{} is not a hubfs mount (it is a {} mount of {}); use umount for it",
            dir.display(),
            m.fstype,
            m.source
        ),
        // A FUSE mount already detached (`umount -l`) and still draining.
        (None, Some(r)) => stop(&r, dir),
        (None, None) => bail!(
            "{} is not a hubfs mount: nothing is mounted there (`hubfs status` lists running mounts)",
            dir.display()
        ),
    }
}

/// Asks the mount's process to stop (SIGTERM: it unmounts, drains and exits) and waits for it.
fn stop(r: &MountRecord, dir: &Path) -> anyhow::Result<()> {
    // The record was checked to name a live process.
    if let Err(e) = crate::process::signals::send(r.pid, rustix::process::Signal::TERM) {
        bail!("cannot stop hubfs (pid {}) serving {}: {e}", r.pid, dir.display());
    }
    wait_for_exit(r)
}

/// Waits for the mount's process to exit: its drain timeout plus a margin, then gives up saying so.
fn wait_for_exit(r: &MountRecord) -> anyhow::Result<()> {
    let limit = Duration::from_secs(r.drain_secs + 30);
    let start = Instant::now();
    let mut said = false;
    while crate::process::registry::alive(r) {
        if start.elapsed() > limit {
            bail!(
                "unmounted, but hubfs (pid {}) is still running after {} s{}",
                r.pid,
                limit.as_secs(),
                r.log_file
                    .as_deref()
                    .map(|l| format!(": see its log {l}"))
                    .unwrap_or_default()
            );
        }
        if !said && start.elapsed() > Duration::from_secs(1) && r.mode == "writable" {
            eprintln!(
                "waiting for hubfs (pid {}) to commit pending files (at most {} s)…",
                r.pid, r.drain_secs
            );
            said = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hubfs_mounts_are_told_apart() {
        let text = "36 35 98:0 / /mnt/a rw - ext3 /dev/root rw\n\
                    40 1 0:52 / /tmp/m rw,nosuid shared:7 - fuse.hubfs hubfs:demo/tiny-model ro\n";
        let m = crate::process::mountinfo::parse(text);
        assert!(is_hubfs_fstype(&m[1]));
        assert!(!is_hubfs_fstype(&m[0]));
    }
}
