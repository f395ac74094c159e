//! The C allocator's tuning for long-running processes (mounts, NFS servers, CSI volume servers).

/// Keeps the mount's resident memory close to what its caches hold, so the memory budget holds
/// (measured for docs/BENCHMARKS.md; the runs are in its git history). glibc gives threads their
/// own malloc arenas (up to 8 per core) and keeps freed space inside them; and once a large
/// `mmap`ed buffer is freed it raises its mmap threshold past it, so later 8 MiB block buffers come
/// from the arenas and stay resident after they are freed (a mount under `--memory-limit 128M`
/// peaked at 135–161 MiB that way, 109–116 with a fixed threshold). So: a fixed 1 MiB threshold
/// (block buffers are mapped and unmapped; the buffer pool keeps the few worth keeping, so cold
/// reads did not slow), two arenas, and a thread that hands free arena pages back once a second.
/// Must run before the runtime starts its threads.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only adjusts allocator tuning under the allocator's own lock; called
        // before the runtime's threads start (the logger's thread may exist already).
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        }
        let trim = std::thread::Builder::new()
            .name("hubfs-malloc-trim".to_string())
            .spawn(|| {
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                    // SAFETY: malloc_trim is thread-safe and has no preconditions.
                    unsafe {
                        libc::malloc_trim(0);
                    }
                }
            });
        if let Err(e) = trim {
            tracing::debug!(error = %e, "no malloc trim thread");
        }
    }
}
