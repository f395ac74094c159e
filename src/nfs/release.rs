//! Releasing the VirtualFs handles the NFS adapter holds, on a thread of its own.
//!
//! The adapter keeps its handles in moka caches, and moka frees removed values later, through
//! crossbeam-epoch, on whatever thread next touches *any* moka cache: possibly one that holds a
//! VirtualFs lock at that moment (the inode table's, say). A `Drop` that released inline would then
//! take that lock again on the same thread and deadlock (seen: `serve-nfs --write` hung after a few
//! hundred small files). So a held handle's drop only queues its release here; this thread does the
//! work with no lock of the caller's held.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use crate::vfs::VirtualFs;

enum Job {
    File(u64),
    Dir(u64),
    /// Answered once every release queued before it is done.
    Barrier(mpsc::SyncSender<()>),
}

/// The queue to the releasing thread. The thread ends when the last sender is gone.
#[derive(Clone)]
pub struct Releaser {
    tx: mpsc::Sender<Job>,
}

impl Releaser {
    pub fn start(vfs: Arc<VirtualFs>) -> Releaser {
        let (tx, rx) = mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("hubfs-nfs-release".into())
            .spawn(move || {
                for job in rx {
                    match job {
                        Job::File(fh) => vfs.release(fh),
                        Job::Dir(fh) => vfs.releasedir(fh),
                        Job::Barrier(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            // Without the thread, queued releases would never run: handles would stay open (and
            // written files uncommitted) until the mount ends, so say so loudly.
            tracing::error!(error = %e, "cannot start the NFS release thread; handles stay open until exit");
        }
        Releaser { tx }
    }

    /// Waits until every release queued so far has been carried out.
    pub fn flush(&self) {
        let (done_tx, done_rx) = mpsc::sync_channel(1);
        if self.tx.send(Job::Barrier(done_tx)).is_ok() {
            let _ = done_rx.recv();
        }
    }

    fn queue(&self, job: Job) {
        // Fails only when the thread is gone (at exit), when there is nothing left to release to.
        let _ = self.tx.send(job);
    }
}

/// A VirtualFs file handle held for NFS, released (through the `Releaser`) at `close` or drop,
/// whichever comes first.
pub struct HeldFile {
    pub fh: u64,
    released: AtomicBool,
    releaser: Releaser,
}

impl HeldFile {
    pub fn new(fh: u64, releaser: Releaser) -> HeldFile {
        HeldFile {
            fh,
            released: AtomicBool::new(false),
            releaser,
        }
    }

    /// Releases the handle now (for a write handle: closes the file, so its commit follows). Reads
    /// or writes still using it afterwards get a stale-handle answer.
    pub fn close(&self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            self.releaser.queue(Job::File(self.fh));
        }
    }
}

impl Drop for HeldFile {
    fn drop(&mut self) {
        self.close();
    }
}

/// A VirtualFs directory snapshot handle held for a listing in progress.
pub struct HeldDir {
    pub fh: u64,
    releaser: Releaser,
}

impl HeldDir {
    pub fn new(fh: u64, releaser: Releaser) -> HeldDir {
        HeldDir { fh, releaser }
    }
}

impl Drop for HeldDir {
    fn drop(&mut self) {
        self.releaser.queue(Job::Dir(self.fh));
    }
}
