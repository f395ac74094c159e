//! The commit a mount shows, and how a branch or tag is re-resolved: once per metadata TTL from the
//! Hub, or, on a read-only mount with a shared tier, through the tier's record of the revision
//! (`chunk_store::shared::refs`), so a fleet asks the Hub about once per TTL instead of once per
//! node.
//!
//! Sharing, without clocks. Every half TTL the mount looks at the record. A record written since
//! the mount's previous look is at least as new as that look, so the mount takes its commit and
//! knows the revision as of that look. When what the mount knows is a TTL old, it claims the
//! refresh: one node asks the Hub and writes the record, the others look again a second later
//! and take it. What a mount shows is never older than about 1.5 TTL, as without the tier it is
//! never older than one TTL (plus the wait for a Hub window). A record older than the mount's own
//! knowledge is never taken, so a mount does not go back to an older commit, except when two nodes
//! resolve the branch from the Hub within the same second as it moves: the later writer may then
//! hold the older commit, for one more TTL.
//!
//! The record is trusted as the tier's other objects are (see CONFIGURATION's "What is
//! trusted"): a node only uses records of the repo it opened with its own token at mount, and a
//! record must carry a verified header naming its key and a commit id.

use std::time::{Duration, Instant};

use crate::chunk_store::shared::{RefClaim, RefLook, RefRecord};
use crate::chunk_store::{MetaKey, SharedTier};

use super::VirtualFs;

/// Below this TTL the revision is not shared: a look every half TTL would cost the store more
/// than the Hub requests it saves.
const MIN_SHARED_TTL: Duration = Duration::from_secs(2);

/// How soon a mount looks again when another node is asking the Hub.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// The mount's revision. Behind `VirtualFs::revision` (an async mutex: a refresh holds it, so
/// lookups wait for the one refresh rather than each sending one).
pub(super) struct Revision {
    pub(super) commit: String,
    /// The last check: a Hub request, or a look at the tier's record.
    pub(super) checked: Instant,
    /// `commit` was the revision's commit at this time or later.
    known_at: Instant,
    /// The tier's record at the last look.
    seen: Option<Seen>,
    /// Another node is asking the Hub: look again then, not a half TTL later.
    look_again: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    /// The record's write (`None`: there was none).
    write: Option<u64>,
    at: Instant,
}

impl Revision {
    /// `commit`, resolved at `at`.
    pub(super) fn new(commit: String, at: Instant) -> Revision {
        Revision {
            commit,
            checked: at,
            known_at: at,
            seen: None,
            look_again: None,
        }
    }

    /// The Hub said `commit` to a request sent at `asked` (or the mount committed it itself).
    pub(super) fn resolved(&mut self, commit: String, asked: Instant) {
        if commit != self.commit {
            tracing::info!(old = %self.commit, new = %commit, "revision moved");
        }
        self.commit = commit;
        self.known_at = asked;
        self.checked = Instant::now();
    }

    /// Whether it is time to look at the tier's record.
    fn look_due(&self, ttl: Duration, now: Instant) -> bool {
        match self.look_again {
            Some(t) => now >= t,
            None => now.duration_since(self.checked) >= ttl / 2,
        }
    }

    /// Whether what the mount knows is a TTL old: the Hub is asked.
    fn stale(&self, ttl: Duration, now: Instant) -> bool {
        now.duration_since(self.known_at) >= ttl
    }

    /// Notes a look at `now` that found `record` (`None`: no record). A record written since the
    /// previous look, when that look came after what the mount knew, is taken.
    fn looked(&mut self, record: Option<&RefRecord>, now: Instant) {
        let write = record.map(|r| r.write);
        if let (Some(prev), Some(r)) = (self.seen, record)
            && prev.write != write
            && prev.at >= self.known_at
        {
            if r.commit != self.commit {
                tracing::info!(old = %self.commit, new = %r.commit, "revision moved (from the shared tier)");
                self.commit = r.commit.clone();
            }
            self.known_at = prev.at;
        }
        self.seen = Some(Seen { write, at: now });
    }
}

impl VirtualFs {
    /// Re-resolves a branch or tag when it is due (see the module's doc).
    pub(super) async fn refresh_revision(&self, rev: &mut Revision) {
        let ttl = self.opts.metadata_ttl;
        let Some((tier, key)) = self.revision_record() else {
            if rev.checked.elapsed() >= ttl {
                self.resolve_from_hub(rev, None).await;
            }
            return;
        };
        let now = Instant::now();
        if !rev.look_due(ttl, now) {
            return;
        }
        rev.checked = now;
        rev.look_again = None;
        match tier.get_ref(&key).await {
            RefLook::Found(r) => rev.looked(Some(&r), now),
            RefLook::Absent => rev.looked(None, now),
            RefLook::Failed => {
                tracing::debug!("revision: the tier's record could not be read; the Hub is asked when due");
                if rev.stale(ttl, now) {
                    self.resolve_from_hub(rev, None).await;
                }
                return;
            }
        }
        if !rev.stale(ttl, now) {
            return;
        }
        let claim = match tier.claim_ref(&key).await {
            // Waiting on another node is bounded: past two TTLs the mount asks the Hub itself.
            RefClaim::Theirs if now.duration_since(rev.known_at) < 2 * ttl => {
                tracing::debug!("revision: another node is asking the Hub; looking again shortly");
                rev.look_again = Some(now + LOOK_AGAIN);
                return;
            }
            RefClaim::Theirs | RefClaim::None => None,
            RefClaim::Ours(c) => {
                // A record written between the look and the claim (by a node whose claim went
                // just before ours was made) makes the Hub request needless.
                let now = Instant::now();
                if let RefLook::Found(r) = tier.get_ref(&key).await {
                    rev.looked(Some(&r), now);
                    if !rev.stale(ttl, now) {
                        return;
                    }
                }
                Some(c)
            }
        };
        tracing::debug!(
            claimed = claim.is_some(),
            "revision: asking the Hub, then writing the tier's record"
        );
        self.resolve_from_hub(rev, Some((tier, &key, claim))).await;
    }

    /// The tier and the key of this mount's revision record, when the revision is shared: a
    /// read-only mount of a repo's branch or tag, with a shared tier and a TTL of at least
    /// [`MIN_SHARED_TTL`]. (A writable mount's own commits move its branch; a bucket has no
    /// revision to share.)
    fn revision_record(&self) -> Option<(&SharedTier, MetaKey)> {
        if self.writer.is_some() || self.repo.is_bucket() || self.opts.metadata_ttl < MIN_SHARED_TTL {
            return None;
        }
        let tier = self.reader.store.shared()?;
        let scope = ["v1", self.repo.kind.plural(), &self.repo.namespace, &self.repo.name];
        Some((tier, MetaKey::new(&scope, "ref", &self.revision_name)))
    }

    /// Asks the Hub (as background work: with the api window nearly spent or closed it is not
    /// sent, and the known commit is served until the window allows). With `publish`, the answer
    /// is written as the tier's record, under the refresh's claim if this node holds it.
    async fn resolve_from_hub(
        &self,
        rev: &mut Revision,
        publish: Option<(&SharedTier, &MetaKey, Option<crate::chunk_store::shared::Claim>)>,
    ) {
        let asked = Instant::now();
        let info = crate::hub_client::windows::background(self.client.repo_info(&self.repo, &self.revision_name));
        match info.await {
            Ok(info) => {
                rev.resolved(info.sha, asked);
                if let Some((tier, key, claim)) = publish
                    && let Some(write) = tier.put_ref(key, &rev.commit, claim).await
                {
                    rev.seen = Some(Seen {
                        write: Some(write),
                        at: Instant::now(),
                    });
                }
            }
            Err(e) if e.rate_limited_for().is_some() => {
                tracing::debug!(error = %e, "revision not refreshed: the Hub's window is kept for reads")
            }
            // Keep serving the known commit when the Hub is unreachable; retry next time.
            Err(e) => tracing::warn!(error = %e, "could not refresh the revision"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    fn record(commit: char, write: u64) -> RefRecord {
        RefRecord {
            commit: commit.to_string().repeat(40),
            write,
            node: "n".into(),
        }
    }

    fn at(t0: Instant, secs: u64) -> Instant {
        t0 + Duration::from_secs(secs)
    }

    #[test]
    fn a_record_is_taken_only_when_written_since_the_last_look() {
        let t0 = Instant::now();
        let mut rev = Revision::new("a".repeat(40), t0);
        assert!(!rev.look_due(TTL, at(t0, 29)));
        assert!(rev.look_due(TTL, at(t0, 30)));
        // The first look cannot tell when the record was written: noted, not taken.
        rev.looked(Some(&record('b', 1)), at(t0, 30));
        assert_eq!(rev.commit, "a".repeat(40));
        assert!(!rev.stale(TTL, at(t0, 30)));
        // The same write again: nothing new.
        rev.looked(Some(&record('b', 1)), at(t0, 60));
        assert_eq!(rev.commit, "a".repeat(40));
        assert!(
            rev.stale(TTL, at(t0, 60)),
            "a TTL since the mount resolved it: ask the Hub"
        );
        // Another node wrote since: taken, known as of the previous look.
        rev.looked(Some(&record('c', 2)), at(t0, 61));
        assert_eq!(rev.commit, "c".repeat(40));
        assert!(!rev.stale(TTL, at(t0, 61)));
        assert!(rev.stale(TTL, at(t0, 120)), "known as of the look at 60 s");
    }

    #[test]
    fn a_record_older_than_what_the_mount_knows_is_not_taken() {
        let t0 = Instant::now();
        let mut rev = Revision::new("a".repeat(40), t0);
        rev.looked(Some(&record('b', 1)), at(t0, 30));
        // The mount asks the Hub itself after that look (the tier failed meanwhile).
        rev.resolved("d".repeat(40), at(t0, 70));
        // A record written between the look at 30 s and the Hub's answer at 70 s may be older.
        rev.looked(Some(&record('c', 2)), at(t0, 90));
        assert_eq!(rev.commit, "d".repeat(40));
        // Once a look follows the mount's own knowledge, later writes are taken.
        rev.looked(Some(&record('e', 3)), at(t0, 120));
        assert_eq!(rev.commit, "e".repeat(40));
    }

    #[test]
    fn no_record_is_noted_and_a_first_record_after_it_is_taken() {
        let t0 = Instant::now();
        let mut rev = Revision::new("a".repeat(40), t0);
        rev.looked(None, at(t0, 30));
        rev.looked(Some(&record('b', 7)), at(t0, 60));
        assert_eq!(rev.commit, "b".repeat(40), "written after the look that found none");
    }

    #[test]
    fn looking_again_soon_replaces_the_half_ttl() {
        let t0 = Instant::now();
        let mut rev = Revision::new("a".repeat(40), t0);
        rev.checked = at(t0, 60);
        rev.look_again = Some(at(t0, 61));
        assert!(!rev.look_due(TTL, at(t0, 60)));
        assert!(rev.look_due(TTL, at(t0, 61)));
    }
}
