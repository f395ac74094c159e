//! What the mount asks of the kernel at FUSE init: read and write sizes, background READs,
//! READDIRPLUS, direct I/O and passthrough, each only where the mount's kind allows it.

use fuser::{InitFlags, KernelConfig};

use super::{FuseAdapter, MAX_BACKGROUND, MAX_READ};

impl FuseAdapter {
    /// Sets what this mount asks of the kernel; the kernel keeps what it supports.
    pub(super) fn negotiate(&mut self, config: &mut KernelConfig) {
        // Ask for large reads ahead and parallel directory operations; the kernel keeps what it supports.
        let _ = config.set_max_readahead(MAX_READ);
        // 1 MiB writes: a staging pwrite per MiB instead of per 128 KiB.
        let _ = config.set_max_write(MAX_READ);
        let _ = config.add_capabilities(InitFlags::FUSE_ASYNC_READ | InitFlags::FUSE_PARALLEL_DIROPS);
        // Readahead READs of every open file share one background queue (fuser's default: 16,
        // congested from 12): eight sequential readers with 8 MiB windows in 1 MiB READs would
        // get two each in flight. Room for every reader's window instead.
        // Under a small memory budget (below 256 MiB) fuser's 16 stays: more READs in flight than
        // its blocks can hold take exact ranges, and some of those bytes came twice (CI measured
        // 1.105 × Hub bytes under 128M with 128).
        let small = self
            .vfs
            .chunk_store()
            .budget()
            .plan()
            .is_some_and(|p| p.limit < 256 << 20);
        let most = if small { 16 } else { MAX_BACKGROUND };
        let _ = config.set_max_background(most);
        let _ = config.set_congestion_threshold(most / 4 * 3);
        // READDIRPLUS only where files cannot change under the listing. Its attributes come from
        // the snapshot taken at opendir, and the kernel applies them to inodes it already has: on
        // a writable mount a write that ended after the opendir would have its size rolled back
        // (seen in the stress test). There, `ls -l` costs one LOOKUP per entry instead.
        if !self.vfs.is_writable() {
            let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        }
        if self.vfs.options().direct_io.is_some() && !self.vfs.is_writable() {
            self.direct.negotiate(config);
        }
        // Passthrough for fully cached Hub files of read-only and overlay mounts (kernel 6.9+).
        // Depth 1: the backing files sit on an ordinary filesystem.
        if self.vfs.options().passthrough && (!self.vfs.is_writable() || self.vfs.is_overlay()) {
            match config.add_capabilities(InitFlags::FUSE_PASSTHROUGH) {
                Ok(()) if config.set_max_stack_depth(1).is_ok() => {
                    self.passthrough.enable();
                    self.vfs.passthrough_granted();
                    tracing::debug!("FUSE passthrough granted");
                }
                _ => {
                    self.passthrough.not_offered();
                    tracing::info!("this kernel does not offer FUSE passthrough; reads go through the daemon")
                }
            }
        }
    }
}
