//! Uploads that follow the writer. A file written from its start in order (`cp`, `rsync`, a
//! checkpoint save) is fed to a Xet stream while it is still being written, once it passes
//! `FOLLOW_MIN`: its chunking, hashing and most xorb uploads then overlap the writing, and the
//! close that must wait for the upload (`--close upload`) only waits for the last xorbs. With
//! `--close stage` the background upload starts with the first bytes instead of at close.
//!
//! Only what the writer can no longer change is fed: the file must have been created empty and
//! only appended to (`DirtyFile::stable_prefix`). Any other write or a truncate ends the stream,
//! and the close uploads the file as before; so does a failed stream. What a stream stored before
//! it ended stays in the CAS unused.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use tokio::sync::{Notify, OwnedSemaphorePermit, oneshot};

use super::{CloseMode, Writer};
use crate::vfs::VirtualFs;
use crate::write::compression::Compression;
use crate::write::staging::{DirtyFile, InPlace};
use crate::write::upload::{InPlaceOutcome, LiveEnd, LiveUpload, UploadError};

/// A file is followed once this much of it is written: below, its upload at close is short, and
/// a file that small may still go inline in the commit (the Hub's LFS threshold is 10 MB).
pub(super) const FOLLOW_MIN: u64 = 16 << 20;

/// Bytes fed per read of the staged file (the crates' ingestion block).
const FEED_BLOCK: u64 = 2 << 20;

/// A file's follower, as the mount's table of them holds it.
pub(super) enum Follow {
    /// Feeding the stream.
    Running(Arc<Feed>),
    /// Tried and ended (not appended to in order, no Xet, a failed stream): not started again
    /// for this staged file.
    Off,
}

/// What the writer, the close and the follower's task share.
pub(super) struct Feed {
    /// Bytes fed so far (the write path pokes the task once a block more is written).
    fed: AtomicU64,
    poke: Notify,
    /// Set by the close that wants the outcome: the task feeds the rest and finishes.
    finish: parking_lot::Mutex<Option<oneshot::Sender<Finished>>>,
    /// The writer went away without a close that wanted the upload: end the stream.
    cancel: AtomicBool,
}

/// A follower's outcome: the content it uploaded (generation, size, sample) and what the Hub
/// said, or why the close must upload the file itself.
pub(super) type Finished = Result<(InPlace, InPlaceOutcome), UploadError>;

impl VirtualFs {
    /// After a write through a handle: starts following `file` once it is large enough, or pokes
    /// its follower once a block more is written. Cheap: a size read and a table lookup.
    pub(crate) fn follow_write(&self, file: &Arc<DirtyFile>) {
        let Some(w) = &self.writer else { return };
        if !matches!(w.opts.close, CloseMode::Upload | CloseMode::Stage) {
            return;
        }
        let size = file.size();
        if size < FOLLOW_MIN {
            return;
        }
        let mut table = w.ahead.following.lock();
        match table.get(&file.id()) {
            Some(Follow::Running(feed)) => {
                if size >= feed.fed.load(Ordering::Relaxed) + FEED_BLOCK {
                    feed.poke.notify_one();
                }
            }
            Some(Follow::Off) => {}
            None => {
                if !file.grown_only() {
                    table.insert(file.id(), Follow::Off);
                    return;
                }
                let (Some(me), Some(rt)) = (w.ahead.me.get().cloned(), w.ahead.rt.get()) else {
                    return;
                };
                // One of the background upload slots: followers stay within the memory budget's
                // uploads. None free: the file is uploaded at close, or followed at a later write.
                let Ok(permit) = w.ahead.slots.clone().try_acquire_owned() else {
                    return;
                };
                let feed = Arc::new(Feed {
                    fed: AtomicU64::new(0),
                    poke: Notify::new(),
                    finish: parking_lot::Mutex::new(None),
                    cancel: AtomicBool::new(false),
                });
                table.insert(file.id(), Follow::Running(feed.clone()));
                crate::metrics::followed_upload("started");
                rt.spawn(follow(me, file.clone(), feed, permit));
            }
        }
    }

    /// The close that uploads `file`: takes its follower, if one is running, and asks it to
    /// finish. `None`: no follower; the close uploads the file itself.
    pub(super) fn finish_following(&self, w: &Writer, file: &DirtyFile) -> Option<oneshot::Receiver<Finished>> {
        let feed = match w.ahead.following.lock().remove(&file.id()) {
            Some(Follow::Running(feed)) => feed,
            _ => return None,
        };
        let (tx, rx) = oneshot::channel();
        *feed.finish.lock() = Some(tx);
        feed.poke.notify_one();
        Some(rx)
    }

    /// The last write handle of `file` is gone: a follower no close asked for ends, and the
    /// file's entry goes (a later open starts afresh).
    pub(crate) fn follow_closed(&self, file: &DirtyFile) {
        let Some(w) = &self.writer else { return };
        if file.writers() > 0 {
            return;
        }
        if let Some(Follow::Running(feed)) = w.ahead.following.lock().remove(&file.id()) {
            feed.cancel.store(true, Ordering::SeqCst);
            feed.poke.notify_one();
            crate::metrics::followed_upload("cancelled");
        }
    }

    /// Marks `file`'s follower ended for good (the table keeps `Off` until the writers go).
    fn follow_off(&self, id: u64) {
        if let Some(w) = &self.writer {
            let mut table = w.ahead.following.lock();
            if matches!(table.get(&id), Some(Follow::Running(_))) {
                table.insert(id, Follow::Off);
            }
        }
    }
}

/// The follower's task: feeds whole blocks as they become stable, then the rest once a close
/// asks, and answers that close.
async fn follow(me: Weak<VirtualFs>, file: Arc<DirtyFile>, feed: Arc<Feed>, _slot: OwnedSemaphorePermit) {
    let Some(vfs) = me.upgrade() else { return };
    let Some(w) = vfs.writer.as_ref() else { return };
    let started = start(w, &file).await;
    drop(vfs);
    let mut live = match started {
        Ok(Some(live)) => live,
        Ok(None) => return end(&me, &file, &feed, None),
        Err(e) => return end(&me, &file, &feed, Some(e)),
    };
    loop {
        let Some(vfs) = me.upgrade() else { return };
        let Some(w) = vfs.writer.as_ref() else { return };
        if feed.cancel.load(Ordering::SeqCst) {
            w.uploader.abort_live(&live);
            return;
        }
        // Every whole block the writer can no longer change.
        while let Some(end_at) = file.stable_prefix()
            && end_at >= live.fed() + FEED_BLOCK
            && !feed.cancel.load(Ordering::SeqCst)
        {
            if let Err(e) = feed_range(w, &file, &mut live, FEED_BLOCK).await {
                drop(vfs);
                return end(&me, &file, &feed, Some(e));
            }
            feed.fed.store(live.fed(), Ordering::Relaxed);
        }
        let asked = feed.finish.lock().take();
        if let Some(reply) = asked {
            let outcome = finish(w, &file, live).await;
            let _ = reply.send(outcome);
            return;
        }
        if !file.grown_only() {
            w.uploader.abort_live(&live);
            drop(vfs);
            return end(&me, &file, &feed, None);
        }
        drop(vfs);
        feed.poke.notified().await;
    }
}

/// Opens the stream, compressed or not as the bytes written so far say.
async fn start(w: &Writer, file: &Arc<DirtyFile>) -> Result<Option<LiveUpload>, UploadError> {
    // A sample only: bytes a writer is changing meanwhile cannot make the upload wrong.
    let path = file.data_file()?.to_path_buf();
    let len = file.size();
    let compression = tokio::task::spawn_blocking(move || -> std::io::Result<Compression> {
        Compression::of_file(&std::fs::File::open(path)?, len)
    })
    .await
    .map_err(std::io::Error::other)?
    .unwrap_or(Compression::Auto);
    w.uploader.start_live(compression).await
}

/// Reads the next `len` bytes from the staged file and feeds them, if the file is still only
/// appended to once they are read (a write below the size clears that before its bytes move).
async fn feed_range(w: &Writer, file: &Arc<DirtyFile>, live: &mut LiveUpload, len: u64) -> Result<(), UploadError> {
    let (f, at) = (file.clone(), live.fed());
    let block = tokio::task::spawn_blocking(move || f.read_exact_at(at, len as usize))
        .await
        .map_err(std::io::Error::other)??;
    if !file.grown_only() {
        w.uploader.abort_live(live);
        return Err(UploadError::Xet("the file was written out of order".into()));
    }
    w.uploader.feed_live(live, block).await
}

/// Feeds what is left once the close asked, and finishes the stream. The content must still be
/// the one fed when the stream ends (`unchanged_since`); the close checks that again before it
/// records the upload.
async fn finish(w: &Writer, file: &Arc<DirtyFile>, mut live: LiveUpload) -> Finished {
    let now = match file.in_place()? {
        Some(now) if file.grown_only() => now,
        _ => {
            w.uploader.abort_live(&live);
            return Err(UploadError::Xet("the file changed under the upload".into()));
        }
    };
    while live.fed() < now.size {
        let len = (now.size - live.fed()).min(FEED_BLOCK);
        feed_range(w, file, &mut live, len).await?;
    }
    if !file.unchanged_since(now.generation) {
        w.uploader.abort_live(&live);
        return Err(UploadError::Xet("the file changed under the upload".into()));
    }
    let end = LiveEnd {
        path: &now.path,
        size: now.size,
        sample: now.sample.clone(),
    };
    let outcome = w.uploader.finish_live(live, end).await?;
    Ok((now, outcome))
}

/// A follower that stopped before any close asked: not started again for this file (the close
/// uploads it). A close that asked meanwhile is told to do so.
fn end(me: &Weak<VirtualFs>, file: &DirtyFile, feed: &Feed, error: Option<UploadError>) {
    if let Some(e) = &error {
        tracing::debug!(path = %file.repo_path(), error = %e, "upload that followed the writer ended; the close uploads the file");
    }
    if let Some(vfs) = me.upgrade() {
        vfs.follow_off(file.id());
    }
    let waiting = feed.finish.lock().take();
    match waiting {
        // Counted by the close it answers.
        Some(reply) => {
            let _ = reply.send(Err(error.unwrap_or_else(|| {
                UploadError::Xet("the upload that followed the writer ended".into())
            })));
        }
        None => crate::metrics::followed_upload("ended"),
    }
}
