//! The two Linux system calls hubfs makes that no safe crate wraps (rustix has neither): the
//! page-cache census `cachestat(2)` and the write-out request `sync_file_range(2)`. Each is one
//! raw call behind a safe function that takes a borrowed descriptor, so the descriptor is open for
//! the call by construction.

use std::os::fd::{AsFd, AsRawFd};

/// `cachestat(2)` (Linux 6.5+, the same number on every architecture).
const SYS_CACHESTAT: libc::c_long = 451;

/// `struct cachestat_range` of the kernel's uapi.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat` of the kernel's uapi.
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Pages of `file` in the page cache (the whole file), or `None` where the kernel cannot say
/// (older than 6.5, or a filesystem that does not count).
pub fn cached_pages(file: impl AsFd) -> Option<u64> {
    let range = CachestatRange { off: 0, len: 0 };
    let mut stat = Cachestat::default();
    // SAFETY: the descriptor is borrowed, so open for the call; the kernel reads `range` and writes
    // `stat`, both live for the call and laid out as the uapi structs (`repr(C)`, five and two u64);
    // flags must be 0. Nothing else is touched.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_fd().as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    (rc == 0).then_some(stat.nr_cache)
}

/// Asks the kernel to write `file`'s dirty pages out and waits for that (`SYNC_FILE_RANGE_WRITE |
/// SYNC_FILE_RANGE_WAIT_AFTER` over the whole file): no flush of the device's cache and no
/// metadata, unlike `fdatasync`. Best effort; the error is returned for the caller to ignore.
pub fn write_out(file: impl AsFd) -> std::io::Result<()> {
    // SAFETY: the descriptor is borrowed, so open for the call; the call takes integers only and
    // touches no memory of ours.
    let rc = unsafe {
        libc::sync_file_range(
            file.as_fd().as_raw_fd(),
            0,
            0,
            libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_just_written_is_counted_and_written_out() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[5u8; 64 << 10]).unwrap();
        write_out(&f).unwrap();
        // A kernel without cachestat answers None; one with it counts the pages just written.
        if let Some(pages) = cached_pages(&f) {
            assert!(pages > 0, "64 KiB just written are in the page cache");
        }
    }
}
