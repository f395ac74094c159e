//! When commit rounds run: the committer task, its debounce of background work and its backoff
//! after a failure.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::Writer;

use tokio::sync::Notify;

use super::round::RoundOutcome;
use crate::vfs::VirtualFs;

impl VirtualFs {
    /// Starts the committer of a writable mount (no-op on a read-only one). It holds the core
    /// weakly: dropping the last frontend's reference stops it.
    pub fn start_committer(self: &Arc<Self>, rt: &tokio::runtime::Handle) {
        let Some(w) = &self.writer else { return };
        if w.layer.is_some() {
            // An overlay publishes only when asked (`publish`): no rounds, no uploads.
            self.write_status();
            return;
        }
        let kick = w.kick.clone();
        let weak = Arc::downgrade(self);
        self.enable_background_uploads(rt);
        rt.spawn(committer_loop(weak, kick));
        self.write_status();
    }
}

/// How often a debounced round checks whether a whole commit's worth of changes is ready.
const FULL_BATCH_CHECK: Duration = Duration::from_millis(200);

/// When the last background change came, for the committer's debounce. While it debounces, a close
/// records the time instead of waking it: a `cp -r` of 10,000 small files woke it twice per file,
/// each time on another core. Callers that wait for a commit still wake it (`kick`).
pub(super) struct Quiet {
    born: tokio::time::Instant,
    /// Nanoseconds from `born` to the last change.
    last: std::sync::atomic::AtomicU64,
    debouncing: std::sync::atomic::AtomicBool,
}

impl Quiet {
    pub(super) fn new() -> Quiet {
        Quiet {
            born: tokio::time::Instant::now(),
            last: std::sync::atomic::AtomicU64::new(0),
            debouncing: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Records a change now; true if the committer is not debouncing and must be woken.
    pub(super) fn note(&self) -> bool {
        let at = self.born.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        self.last.store(at, std::sync::atomic::Ordering::SeqCst);
        !self.debouncing.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn last(&self) -> tokio::time::Instant {
        self.born + Duration::from_nanos(self.last.load(std::sync::atomic::Ordering::SeqCst))
    }

    fn set_debouncing(&self, on: bool) {
        self.debouncing.store(on, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Runs rounds: at once when someone waits, after the quiet period for background work, with
/// backoff (1 s doubling to 60 s) after a failure.
async fn committer_loop(weak: Weak<VirtualFs>, kick: Arc<Notify>) {
    let mut backoff = Duration::from_secs(1);
    let mut failed = false;
    loop {
        let notified = kick.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (urgent, ready, quiet, max_delay) = {
            let Some(vfs) = weak.upgrade() else { return };
            let Some(w) = &vfs.writer else { return };
            // The Hub asked us to wait (429 with Retry-After): no commit before then, however urgent.
            // Callers of close()/fsync() waiting for a commit get the reason at once when the wait
            // is long (the Hub's commit limit); a short one they wait out. Their files stay staged.
            // Nothing is sent meanwhile, so no request is refused again.
            if let Some((until, wall)) = w.rate_limited_until() {
                if until.saturating_duration_since(tokio::time::Instant::now()) > crate::hub_client::MAX_RETRY_WAIT {
                    w.refuse_waiters(wall);
                }
                vfs.write_status();
                drop(vfs);
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => {}
                    _ = &mut notified => {}
                }
                continue;
            }
            (
                !w.waiters.lock().is_empty(),
                w.has_ready_work(),
                w.opts.quiet_period,
                w.opts.max_batch_delay,
            )
        };
        if !urgent {
            if !ready {
                // Nothing to commit; local metadata may have changed (status counts).
                if let Some(vfs) = weak.upgrade() {
                    vfs.refresh_status();
                }
                notified.await;
                continue;
            }
            // Debounce: each new change pushes the round back by the quiet period, up to the
            // maximum delay, so a stream of closes (a `cp -r`) makes few, large commits. After a
            // failure the backoff applies instead. A waiter arriving meanwhile starts it at once.
            // A whole commit's worth ready (`full_batch_ready`, checked a few times a second, not
            // per close) goes at once.
            let start = tokio::time::Instant::now();
            let latest = start + if failed { backoff } else { max_delay.max(quiet) };
            let mut deadline = start + if failed { backoff } else { quiet };
            match weak.upgrade() {
                Some(v) => {
                    if let Some(w) = &v.writer {
                        w.quiet.set_debouncing(true);
                    }
                }
                None => return,
            }
            let mut check = tokio::time::interval_at(start + FULL_BATCH_CHECK, FULL_BATCH_CHECK);
            check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => {
                        // Changes noted meanwhile push the round back as a kick would have.
                        let Some(v) = weak.upgrade() else { return };
                        let Some(w) = &v.writer else { return };
                        let next = (w.quiet.last() + quiet).min(latest);
                        if failed || next <= tokio::time::Instant::now() {
                            break;
                        }
                        deadline = next;
                    }
                    _ = check.tick(), if !failed => {
                        match weak.upgrade() {
                            Some(v) if v.writer.as_ref().is_some_and(|w| w.full_batch_ready()) => break,
                            Some(_) => {}
                            None => return,
                        }
                    }
                    _ = &mut notified => {
                        let urgent = match weak.upgrade() {
                            Some(v) => v.writer.as_ref().is_some_and(|w| !w.waiters.lock().is_empty()),
                            None => return,
                        };
                        if urgent { break; }
                        if !failed {
                            deadline = (tokio::time::Instant::now() + quiet).min(latest);
                        }
                        notified.set(kick.notified());
                        notified.as_mut().enable();
                    }
                }
            }
            // Closes from here on wake the committer again (the round may be waiting for the
            // budget, and the next debounce starts from its own kick).
            match weak.upgrade() {
                Some(v) => {
                    if let Some(w) = &v.writer {
                        w.quiet.set_debouncing(false);
                    }
                }
                None => return,
            }
        }
        // The mount's commit budget: wait for a slot. Closes meanwhile join this round. A kick
        // re-checks (a drain at unmount does not wait for the budget).
        loop {
            let woken = kick.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let slot = match weak.upgrade() {
                Some(v) => {
                    let slot = v.writer.as_ref().and_then(|w| w.budget_slot());
                    match slot {
                        Some(_) => v.write_status(),
                        None => {
                            if let Some(w) = &v.writer {
                                *w.budget_wait.lock() = None;
                            }
                        }
                    }
                    slot
                }
                None => return,
            };
            let Some(at) = slot else { break };
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = &mut woken => {}
            }
        }
        let Some(vfs) = weak.upgrade() else { return };
        match vfs.round().await {
            // Rate limited: the wait the Hub asked for replaces the backoff (top of the loop).
            RoundOutcome::Failed if vfs.writer.as_ref().is_some_and(|w| w.rate_limited_until().is_some()) => {
                failed = false;
            }
            RoundOutcome::Failed => {
                if failed {
                    backoff = (backoff * 2).min(Duration::from_secs(60));
                }
                failed = true;
            }
            RoundOutcome::Committed => {
                failed = false;
                backoff = Duration::from_secs(1);
            }
            RoundOutcome::Idle => {
                failed = false;
                // Nothing could be sent (e.g. only whiteouts of directories): wait for news.
                drop(vfs);
                notified.await;
            }
        }
    }
}

impl Writer {
    /// When the budget lets the next commit go, if that is later than now; noted for `status`.
    fn budget_slot(&self) -> Option<tokio::time::Instant> {
        if self.draining.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        let now = tokio::time::Instant::now();
        let at = self.budget.lock().as_mut()?.next_slot(now);
        if at <= now {
            return None;
        }
        let wall = chrono::Utc::now() + chrono::Duration::from_std(at - now).unwrap_or(chrono::Duration::zero());
        *self.budget_wait.lock() = Some(wall);
        tracing::debug!(
            wait_ms = (at - now).as_millis() as u64,
            "commit waits for the mount's commit budget"
        );
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// While the committer debounces, a change only moves the time the round waits from; it wakes
    /// the committer only when it is not debouncing.
    #[test]
    fn changes_wake_the_committer_only_outside_a_debounce() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let q = Quiet::new();
            assert!(q.note(), "idle: the change wakes the committer");
            let first = q.last();
            q.set_debouncing(true);
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(!q.note(), "debouncing: no wake");
            assert!(q.last() >= first + Duration::from_millis(20), "the last change moved");
            q.set_debouncing(false);
            assert!(q.note());
        });
    }
}
