//! Opens answered with FUSE direct I/O (`FOPEN_DIRECT_IO`): the kernel sends each read as the
//! program asked for it, with no readahead and no page cache, so a parquet query's scattered
//! reads fetch what they read. Only where the kernel lets such files be mmap'd too
//! (`FUSE_DIRECT_IO_ALLOW_MMAP`, Linux 6.6+): without it an mmap of them fails (ENODEV), and a
//! reader that maps parquet files (Polars) would break.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use fuser::{InitFlags, KernelConfig};
use parking_lot::Mutex;

#[derive(Default)]
pub(super) struct DirectReads {
    /// The kernel took `FUSE_DIRECT_IO_ALLOW_MMAP` at INIT.
    granted: AtomicBool,
    /// Handles opened with direct I/O. A leaf lock.
    handles: Mutex<HashSet<u64>>,
}

impl DirectReads {
    /// Asks the kernel at INIT for what direct I/O opens need: mmap of such files, and the pieces
    /// of one large direct read sent at once (ASYNC_DIO), not one after another.
    pub(super) fn negotiate(&self, config: &mut KernelConfig) {
        let _ = config.add_capabilities(InitFlags::FUSE_ASYNC_DIO);
        match config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP) {
            Ok(()) => self.granted.store(true, Ordering::Relaxed),
            Err(_) => tracing::info!(
                "this kernel cannot mmap direct I/O files (Linux 6.6+); --direct-io is off, reads keep the kernel's readahead"
            ),
        }
    }

    pub(super) fn granted(&self) -> bool {
        self.granted.load(Ordering::Relaxed)
    }

    /// Handle `fh` was opened with direct I/O.
    pub(super) fn opened(&self, fh: u64) {
        self.handles.lock().insert(fh);
    }

    /// Whether handle `fh` was opened with direct I/O: its READs do not fill the page cache.
    pub(super) fn is_direct(&self, fh: u64) -> bool {
        self.granted() && self.handles.lock().contains(&fh)
    }

    pub(super) fn released(&self, fh: u64) {
        if self.granted() {
            self.handles.lock().remove(&fh);
        }
    }
}
