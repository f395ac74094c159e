//! The kernel readahead of a FUSE mount (its BDI's `read_ahead_kb`): raised after mounting, read
//! back for `hubfs status`.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Sets the kernel readahead of a new mount to `bytes`. The kernel takes it only through sysfs,
/// which needs root; `hubfs status` shows what the mount got (`readahead_of`).
pub fn raise_readahead(mountpoint: &Path, bytes: u64) {
    let Some(path) = readahead_path(mountpoint) else {
        return;
    };
    if let Err(e) = std::fs::write(&path, format!("{}", bytes / 1024)) {
        tracing::info!(
            path,
            error = %e,
            "could not set the kernel readahead to {} KiB (it takes root); page faults in mapped files read around by the kernel's default",
            bytes / 1024
        );
    }
}

/// The kernel readahead a mount has, in bytes.
pub fn readahead_of(mountpoint: &Path) -> Option<u64> {
    let kib: u64 = std::fs::read_to_string(readahead_path(mountpoint)?)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The sysfs file of a mount's readahead: its BDI is named after the mount's st_dev.
fn readahead_path(mountpoint: &Path) -> Option<String> {
    let dev = std::fs::metadata(mountpoint).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    Some(format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb"))
}
