//! Releasing the VirtualFs handles the NFS adapter holds, on a thread of its own.
//!
//! The adapter keeps its handles in moka caches, and moka frees removed values later, through
//! crossbeam-epoch, on whatever thread next touches *any* moka cache: possibly one that holds a
//! VirtualFs lock at that moment (the inode table's, say). A `Drop` that released inline would then
//! take that lock again on the same thread and deadlock (seen: `serve-nfs --write` hung after a few
//! hundred small files). So a held handle's drop only queues its release here; this thread does the
//! work with no lock of the caller's held.

use std::sync::Arc;
use std::sync::mpsc;

use parking_lot::Mutex;

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

/// A VirtualFs file handle held for NFS, released (through the `Releaser`) once it is closed and
/// no request is using it, or when dropped.
///
/// A write handle is closed by its cache (quiet, pushed out, its file removed) at any moment,
/// also between a WRITE getting it and writing through it; a release then would make that WRITE
/// fail with a stale handle. So requests `enter` the handle, and a close waits for them to leave.
pub struct HeldFile {
    pub fh: u64,
    /// A leaf lock: nothing is locked or released while it is held.
    state: Mutex<Use>,
    releaser: Releaser,
}

#[derive(Default)]
struct Use {
    /// Requests using the handle now.
    users: u32,
    /// Closed: no new request may enter; released when the last one leaves.
    closed: bool,
    released: bool,
}

impl Use {
    /// Whether the handle is to be released now (once).
    fn release_due(&mut self) -> bool {
        let due = self.closed && self.users == 0 && !self.released;
        self.released |= due;
        due
    }
}

impl HeldFile {
    pub fn new(fh: u64, releaser: Releaser) -> HeldFile {
        HeldFile {
            fh,
            state: Mutex::new(Use::default()),
            releaser,
        }
    }

    /// A new handle, entered by the request that opened it.
    pub fn new_in_use(fh: u64, releaser: Releaser) -> (Arc<HeldFile>, InUse) {
        let held = Arc::new(HeldFile {
            fh,
            state: Mutex::new(Use {
                users: 1,
                ..Use::default()
            }),
            releaser,
        });
        (held.clone(), InUse(held))
    }

    /// Marks the handle in use for one request; None once it is closed (open another then).
    pub fn enter(self: &Arc<Self>) -> Option<InUse> {
        let mut s = self.state.lock();
        if s.closed {
            return None;
        }
        s.users += 1;
        Some(InUse(self.clone()))
    }

    /// Closes the handle (for a write handle: closes the file, so its commit follows): released
    /// now, or when the last request using it leaves.
    pub fn close(&self) {
        let due = {
            let mut s = self.state.lock();
            s.closed = true;
            s.release_due()
        };
        if due {
            self.releaser.queue(Job::File(self.fh));
        }
    }

    fn leave(&self) {
        let due = {
            let mut s = self.state.lock();
            s.users = s.users.saturating_sub(1);
            s.release_due()
        };
        if due {
            self.releaser.queue(Job::File(self.fh));
        }
    }
}

impl Drop for HeldFile {
    fn drop(&mut self) {
        // No request can be using it: each holds a reference.
        self.close();
    }
}

/// One request's use of a `HeldFile` (see `enter`).
pub struct InUse(Arc<HeldFile>);

impl std::ops::Deref for InUse {
    type Target = HeldFile;
    fn deref(&self) -> &HeldFile {
        &self.0
    }
}

impl Drop for InUse {
    fn drop(&mut self) {
        self.0.leave();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A releaser whose queue the test reads instead of a thread.
    fn queue() -> (Releaser, mpsc::Receiver<Job>) {
        let (tx, rx) = mpsc::channel();
        (Releaser { tx }, rx)
    }

    fn released(rx: &mpsc::Receiver<Job>) -> Vec<u64> {
        rx.try_iter()
            .filter_map(|j| match j {
                Job::File(fh) => Some(fh),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_close_waits_for_the_requests_using_the_handle() {
        let (releaser, rx) = queue();
        let (held, opener) = HeldFile::new_in_use(7, releaser);
        let other = held.enter().expect("open handle");
        // The cache lets go (pushed out while full) while two requests still write through it.
        held.close();
        assert!(released(&rx).is_empty(), "released under a request");
        assert!(held.enter().is_none(), "a closed handle takes no new request");
        drop(opener);
        assert!(released(&rx).is_empty());
        drop(other);
        assert_eq!(released(&rx), [7], "released once the last request left");
        held.close();
        drop(held);
        assert!(released(&rx).is_empty(), "released once only");
    }

    #[test]
    fn an_unused_handle_is_released_at_close_or_drop() {
        let (releaser, rx) = queue();
        let a = Arc::new(HeldFile::new(1, releaser.clone()));
        a.close();
        assert_eq!(released(&rx), [1]);
        let b = HeldFile::new(2, releaser);
        drop(b);
        assert_eq!(released(&rx), [2]);
    }
}
