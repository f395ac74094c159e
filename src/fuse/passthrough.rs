//! FUSE passthrough (Linux 6.9+): an open answered with a backing file is served by the kernel
//! from that file (reads, mmap, readahead) without a request to the daemon. Used on read-only
//! mounts for files the disk tier holds whole (`vfs::passthrough`).
//!
//! The kernel's rules shape this: every passthrough open of an inode must name the same backing
//! file, an inode open through passthrough takes no other kind of open (EIO, even direct I/O),
//! and one open through the page cache refuses passthrough (ETXTBSY). So opens are counted per
//! inode: while an inode has cached opens, new ones stay cached; while it has passthrough opens,
//! new ones reuse its backing file, even when the inode shows other content by then.
//! The backing id is closed when the inode's last passthrough handle is released (closing it
//! earlier makes the kernel answer EIO). Counts only drop at RELEASE, which the kernel sends after
//! it dropped its own, so they never undercount what the kernel holds.
//!
//! An open that could pass through stays plain (keeping the inode's pages) while the kernel's page
//! cache of the inode holds most of the file (`served`): this mount just read it through FUSE, and
//! the cache file is most likely on disk only, so passthrough would turn a re-read from memory into
//! one from the disk. Once those pages are gone (the inode was evicted, or reads show they were
//! dropped), opens pass through again.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use fuser::{BackingId, FileHandle, FopenFlags, ReplyOpen};
use parking_lot::Mutex;

use super::served::Served;
use super::warm::{WarmStop, Warmer};
use crate::vfs::VirtualFs;

#[derive(Default)]
struct Opens {
    /// The inode's backing id and the file it names.
    backing: Option<(Arc<BackingId>, PathBuf)>,
    /// Reads the backing file ahead while it is cold; dropped with the backing id.
    warm: Option<WarmStop>,
    through: u32,
    cached: u32,
}

#[derive(Default)]
struct State {
    inodes: HashMap<u64, Opens>,
    /// Open handle → (inode, opened through passthrough).
    handles: HashMap<u64, (u64, bool)>,
}

/// What a session's passthrough came to (`hubfs status` shows it); 0: not asked for.
const ON: u8 = 1;
const NOT_OFFERED: u8 = 2;
const REFUSED: u8 = 3;

/// Per-session passthrough bookkeeping. One mutex, a leaf (no other lock is taken under it).
#[derive(Default)]
pub(super) struct Passthrough {
    /// The kernel granted FUSE_PASSTHROUGH and the backing ioctl has not been refused.
    enabled: AtomicBool,
    /// 0 (not asked for), `ON`, `NOT_OFFERED` or `REFUSED`.
    outcome: AtomicU8,
    state: Mutex<State>,
    /// Opens answered with passthrough, for `status` and tests.
    opened: AtomicU64,
    /// READ requests the session received (tests check passthrough reads send none).
    reads: AtomicU64,
    /// Opens of a whole file answered plain because the kernel's cache of the inode held it.
    kept: AtomicU64,
    /// What the kernel's page cache of each inode holds.
    served: Served,
    /// Reads cold backing files ahead of their readers.
    warmer: Warmer,
}

impl Passthrough {
    pub(super) fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
        self.outcome.store(ON, Ordering::Relaxed);
    }

    /// The kernel did not offer passthrough at INIT.
    pub(super) fn not_offered(&self) {
        self.outcome.store(NOT_OFFERED, Ordering::Relaxed);
    }

    /// What `hubfs status` says about it.
    pub(super) fn describe(&self) -> &'static str {
        match self.outcome.load(Ordering::Relaxed) {
            ON => "on: files the disk cache holds whole are read by the kernel from the cache file",
            NOT_OFFERED => {
                "unavailable: this kernel does not offer FUSE passthrough (Linux 6.9+); reads go through hubfs"
            }
            REFUSED => "unavailable: the kernel refused a backing file (needs root); reads go through hubfs",
            _ => "off",
        }
    }

    pub(super) fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    pub(super) fn kept(&self) -> u64 {
        self.kept.load(Ordering::Relaxed)
    }

    /// Backing files read ahead because they were cold at their first passthrough open.
    pub(super) fn warmed(&self) -> u64 {
        self.warmer.started()
    }

    /// A READ of `size` bytes at `offset` of `ino`, from a file opened with `open_flags`.
    pub(super) fn count_read(&self, ino: u64, offset: u64, size: u32, open_flags: i32) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        // Direct I/O bypasses the page cache: it neither fills it nor shows it was dropped.
        if self.enabled.load(Ordering::Relaxed) && open_flags & libc::O_DIRECT == 0 {
            self.served.read(ino, offset, u64::from(size));
        }
    }

    /// The kernel evicted `ino` (FORGET), and its pages with it.
    pub(super) fn forgotten(&self, ino: u64) {
        if self.enabled.load(Ordering::Relaxed) {
            self.served.dropped(ino);
        }
    }

    pub(super) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Answers a read-only open of `ino` (VFS handle `fh`): through the inode's backing file when
    /// the rules above allow, else as a plain open with `flags`.
    pub(super) fn reply(&self, vfs: &VirtualFs, ino: u64, fh: u64, flags: FopenFlags, reply: ReplyOpen) {
        if !self.enabled.load(Ordering::Relaxed) {
            return reply.opened(FileHandle(fh), flags);
        }
        if !flags.contains(FopenFlags::FOPEN_KEEP_CACHE) {
            // This open drops the inode's pages (any answer but one that keeps them).
            self.served.dropped(ino);
        }
        let (path, warm) = match vfs.passthrough_file(fh) {
            Some((path, size)) => {
                let warm = self.served.holds_most(ino, size);
                tracing::debug!(
                    ino,
                    size,
                    held = self.served.held(ino, size),
                    keep = flags.contains(FopenFlags::FOPEN_KEEP_CACHE),
                    "open of a whole cached file"
                );
                (Some(path), warm)
            }
            None => (None, false),
        };
        let mut guard = self.state.lock();
        let State { inodes, handles } = &mut *guard;
        let node = inodes.entry(ino).or_default();
        if node.cached == 0
            && node.backing.is_none()
            && !warm
            && let Some(path) = &path
        {
            match std::fs::File::open(path).and_then(|f| reply.open_backing(&f)) {
                Ok(id) => {
                    node.backing = Some((Arc::new(id), path.clone()));
                    node.warm = self.warmer.start(path);
                }
                Err(e) => {
                    // EPERM without CAP_SYS_ADMIN, or a backing filesystem the kernel refuses:
                    // plain opens from now on.
                    tracing::info!(error = %e, path = %path.display(), "FUSE passthrough refused; reads go through the daemon");
                    self.enabled.store(false, Ordering::Relaxed);
                    self.outcome.store(REFUSED, Ordering::Relaxed);
                }
            }
        }
        match node.backing.clone() {
            Some((id, backing)) => {
                if path.as_ref() != Some(&backing) {
                    // The inode shows other content now (the branch moved, or the whole file was
                    // evicted) while opens pass through to the old one. The kernel refuses any
                    // open of such an inode that does not pass through to the same file (EIO),
                    // so this one reads what they read until the last of them is closed.
                    tracing::debug!(ino, "open shares the inode's passthrough file until its opens close");
                }
                node.through += 1;
                handles.insert(fh, (ino, true));
                drop(guard);
                // Answered without FOPEN_KEEP_CACHE: the kernel drops the inode's pages.
                self.served.dropped(ino);
                self.opened.fetch_add(1, Ordering::Relaxed);
                reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), &id);
            }
            None => {
                node.cached += 1;
                handles.insert(fh, (ino, false));
                drop(guard);
                if warm && path.is_some() {
                    tracing::debug!(ino, "open kept on the page cache that holds the file");
                    self.kept.fetch_add(1, Ordering::Relaxed);
                }
                reply.opened(FileHandle(fh), flags);
            }
        }
    }

    /// Whether `ino` has opens that pass through.
    pub(super) fn passes_through(&self, ino: u64) -> bool {
        self.enabled.load(Ordering::Relaxed) && self.state.lock().inodes.get(&ino).is_some_and(|n| n.through > 0)
    }

    /// A write open of `ino` is about to be made (overlay mounts). Refused (false: ETXTBSY) while
    /// the inode has passthrough opens: the kernel would answer EIO to a plain open beside them,
    /// and their readers would go on reading the Hub's bytes from the cache file. Otherwise counted
    /// as a plain open from now on, so no passthrough open joins it; `plain_opened` or
    /// `plain_failed` follows.
    pub(super) fn begin_plain(&self, ino: u64) -> bool {
        if !self.enabled.load(Ordering::Relaxed) {
            return true;
        }
        let mut st = self.state.lock();
        let node = st.inodes.entry(ino).or_default();
        if node.through > 0 {
            return false;
        }
        node.cached += 1;
        true
    }

    /// The open `begin_plain` counted got handle `fh`.
    pub(super) fn plain_opened(&self, ino: u64, fh: u64) {
        if self.enabled.load(Ordering::Relaxed) {
            self.state.lock().handles.insert(fh, (ino, false));
        }
    }

    /// The open `begin_plain` counted failed.
    pub(super) fn plain_failed(&self, ino: u64) {
        let mut st = self.state.lock();
        if let Some(node) = st.inodes.get_mut(&ino) {
            node.cached = node.cached.saturating_sub(1);
            if node.through == 0 && node.cached == 0 {
                st.inodes.remove(&ino);
            }
        }
    }

    /// A handle answered by `reply` or counted by `begin_plain` was released.
    pub(super) fn released(&self, fh: u64) {
        let mut st = self.state.lock();
        let Some((ino, through)) = st.handles.remove(&fh) else {
            return;
        };
        if let Some(node) = st.inodes.get_mut(&ino) {
            if through {
                node.through = node.through.saturating_sub(1);
                if node.through == 0 {
                    node.backing = None;
                    node.warm = None;
                }
            } else {
                node.cached = node.cached.saturating_sub(1);
            }
            if node.through == 0 && node.cached == 0 {
                st.inodes.remove(&ino);
            }
        }
    }
}

/// Opens answered with FUSE passthrough by one session.
#[derive(Clone)]
pub struct PassthroughStats(pub(super) Arc<Passthrough>);

impl PassthroughStats {
    /// Opens the kernel served from a backing file so far.
    pub fn opened(&self) -> u64 {
        self.0.opened()
    }

    /// What became of passthrough in this session, in words (`hubfs status`).
    pub fn describe(&self) -> &'static str {
        self.0.describe()
    }

    /// READ requests the session received so far (passthrough reads send none).
    pub fn reads(&self) -> u64 {
        self.0.reads()
    }

    /// Opens of a file the disk cache holds whole that stayed plain, because the kernel's page
    /// cache of it held the file (this mount had just read it).
    pub fn kept_cached(&self) -> u64 {
        self.0.kept()
    }

    /// Backing files read ahead by the mount because they were out of the page cache at their
    /// first passthrough open.
    pub fn warmed(&self) -> u64 {
        self.0.warmed()
    }

    /// Whether the session believes the kernel's page cache holds pages of `ino` (read through
    /// FUSE, not yet evicted or shown dropped): what keeps its opens off passthrough. The kernel's
    /// FORGET and the next OPEN may be handled on different threads, so a test that evicts an
    /// inode waits for this to turn false before it opens the file again.
    pub fn page_cache_held(&self, ino: u64) -> bool {
        self.0.served.tracks(ino)
    }
}
