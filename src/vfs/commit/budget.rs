//! The commit budget of a writable mount: how many commits it may make per time window.
//!
//! The Hub allows a repository a fixed number of commits per hour (128 on the free plan), shared by
//! every client of the repo. A mount takes a share of that (`--commit-budget`, default 64 an hour:
//! half, leaving the rest to other clients) and spends it in two ways at once:
//! - a token bucket refilled at `limit / window`, holding at most `burst` tokens: an idle mount
//!   commits a lone close at once, a steady writer commits at most once per `window / limit`;
//! - a sliding log of its own commit times: never more than `limit` commits in any `window`,
//!   whatever the bucket says (the Hub counts the same way).
//!
//! Commits wait for the budget; closes do not (with `--close upload` or `stage`), so what is closed
//! meanwhile joins the next commit.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// Changes a commit carries while commits are plentiful (and always without a budget). The Hub
/// recommends about 100 files per commit for plain files; a mount also has the commit rate to
/// respect, and `upload_folder` itself sends any number in one.
pub const BASE_CHANGES: usize = 500;
/// The most changes one commit carries (a folder's entry limit on the Hub).
pub const MAX_CHANGES: usize = 10_000;

/// Commits of the burst that early commits leave for the end of a stream of changes.
pub const TAIL_COMMITS: u32 = 2;

/// `N/WINDOW`: at most N commits per WINDOW (`None`: no budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetSpec {
    pub limit: u32,
    pub window: Duration,
}

impl BudgetSpec {
    /// `64/3600`, `64/1h`, `3/60s`; `0` means no budget (`None`).
    pub fn parse(s: &str) -> Result<Option<BudgetSpec>, String> {
        let s = s.trim();
        if s == "0" {
            return Ok(None);
        }
        let bad = || format!("{s:?} is not a commit budget: write N/SECONDS (e.g. 64/3600, 64/1h) or 0 for none");
        let (n, w) = s.split_once('/').ok_or_else(bad)?;
        let limit: u32 = n.trim().parse().map_err(|_| bad())?;
        let w = w.trim();
        let window = if w.chars().all(|c| c.is_ascii_digit()) {
            Duration::from_secs(w.parse().map_err(|_| bad())?)
        } else {
            crate::util::units::parse_duration(w).map_err(|_| bad())?
        };
        if limit == 0 {
            return Ok(None);
        }
        if window.is_zero() {
            return Err(bad());
        }
        Ok(Some(BudgetSpec { limit, window }))
    }

    /// Tokens an idle mount may spend at once: an eighth of the budget, between 1 and 8.
    pub fn burst(&self) -> u32 {
        self.limit.div_ceil(8).clamp(1, 8)
    }
}

impl std::fmt::Display for BudgetSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}s", self.limit, self.window.as_secs())
    }
}

/// The budget's state. Times are tokio instants, so tests can run them on a paused clock.
#[derive(Debug)]
pub struct CommitBudget {
    spec: BudgetSpec,
    tokens: f64,
    refilled: Instant,
    /// When this mount's commits within the last window were made, oldest first.
    log: VecDeque<Instant>,
}

impl CommitBudget {
    pub fn new(spec: BudgetSpec, now: Instant) -> CommitBudget {
        CommitBudget {
            spec,
            tokens: spec.burst() as f64,
            refilled: now,
            log: VecDeque::new(),
        }
    }

    pub fn spec(&self) -> BudgetSpec {
        self.spec
    }

    fn refill(&mut self, now: Instant) {
        let rate = self.spec.limit as f64 / self.spec.window.as_secs_f64();
        let dt = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + dt * rate).min(self.spec.burst() as f64);
        self.refilled = now;
        while self
            .log
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= self.spec.window)
        {
            self.log.pop_front();
        }
    }

    /// When the next commit may be made: `now` if it may be made now.
    pub fn next_slot(&mut self, now: Instant) -> Instant {
        self.refill(now);
        let by_tokens = if self.tokens >= 1.0 {
            now
        } else {
            let rate = self.spec.limit as f64 / self.spec.window.as_secs_f64();
            now + Duration::from_secs_f64((1.0 - self.tokens) / rate)
        };
        let by_log = if (self.log.len() as u32) < self.spec.limit {
            now
        } else {
            self.log.front().map_or(now, |t| *t + self.spec.window)
        };
        by_tokens.max(by_log)
    }

    /// How many commits may be made now, one after another, without waiting.
    pub fn commits_now(&mut self, now: Instant) -> u32 {
        self.refill(now);
        let by_log = self.spec.limit.saturating_sub(self.log.len() as u32);
        (self.tokens.floor() as u32).min(by_log)
    }

    /// Changes the next commit may carry when `pending` wait: everything pending, up to
    /// [`MAX_CHANGES`]. Splitting what is ready would only spend more of the budget, and make the
    /// last files wait for one more commit. While a stream of changes lasts, how *soon* a commit
    /// goes is [`Self::early_cap`]'s (a whole commit's worth); what it carries is then whatever
    /// closed meanwhile: a copy faster than the Hub's commits leaves less for after its end.
    pub fn changes_per_commit(pending: usize) -> usize {
        pending.clamp(BASE_CHANGES, MAX_CHANGES)
    }

    /// A whole commit's worth while a stream of changes lasts: [`BASE_CHANGES`] while the burst is
    /// full, more as it drains (`BASE_CHANGES × burst / commits left`), so that a `cp -r` of
    /// 10,000 small files fits in the burst instead of waiting a refill per 500 files.
    fn stream_batch(&mut self, now: Instant) -> usize {
        let left = self.commits_now(now).max(1) as usize;
        (BASE_CHANGES * self.spec.burst() as usize / left).clamp(BASE_CHANGES, MAX_CHANGES)
    }

    /// The changes a commit may carry when it goes before the stream of changes ends (see
    /// `Writer::full_batch_ready`), or None when the budget has no commit to spare for that: the
    /// last [`TAIL_COMMITS`] are kept for the end of the stream, so that its tail does not wait a
    /// refill.
    pub fn early_cap(&mut self, now: Instant) -> Option<usize> {
        (self.commits_now(now) > TAIL_COMMITS).then(|| self.stream_batch(now))
    }

    /// A commit was made at `now`.
    pub fn spend(&mut self, now: Instant) {
        self.refill(now);
        self.tokens = (self.tokens - 1.0).max(0.0);
        self.log.push_back(now);
    }

    /// Commits made within the last window.
    pub fn used(&mut self, now: Instant) -> usize {
        self.refill(now);
        self.log.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> BudgetSpec {
        BudgetSpec::parse(s).unwrap().unwrap()
    }

    #[test]
    fn parses_budgets_and_refuses_nonsense() {
        assert_eq!(spec("64/3600").window, Duration::from_secs(3600));
        assert_eq!(spec("64/1h"), spec("64/3600"));
        assert_eq!(spec("3/60s").limit, 3);
        assert_eq!(BudgetSpec::parse("0").unwrap(), None);
        assert_eq!(BudgetSpec::parse("0/60").unwrap(), None);
        for bad in ["abc", "5", "5/0", "-1/60", "5/x"] {
            assert!(BudgetSpec::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(spec("64/3600").burst(), 8);
        assert_eq!(spec("3/60").burst(), 1);
        assert_eq!(spec("1000/3600").burst(), 8);
    }

    #[test]
    fn an_idle_mount_commits_at_once_then_spaces_commits() {
        let t0 = Instant::now();
        let mut b = CommitBudget::new(spec("64/3600"), t0);
        // The burst: eight commits at once.
        for _ in 0..8 {
            assert_eq!(b.next_slot(t0), t0);
            b.spend(t0);
        }
        // Then one per window/limit (56.25 s).
        let next = b.next_slot(t0);
        assert!((next - t0).as_secs_f64() > 56.0 && (next - t0).as_secs_f64() < 56.5);
        b.spend(next);
        let after = b.next_slot(next);
        assert!((after - next).as_secs_f64() > 56.0);
    }

    #[test]
    fn commits_grow_as_the_burst_drains() {
        let t0 = Instant::now();
        let mut b = CommitBudget::new(spec("64/3600"), t0);
        let mut sizes = Vec::new();
        while b.commits_now(t0) > 0 {
            sizes.push(b.stream_batch(t0));
            b.spend(t0);
        }
        assert_eq!(sizes, [500, 571, 666, 800, 1000, 1333, 2000, 4000]);
        // A commit takes everything ready, up to MAX_CHANGES, burst full or empty.
        assert_eq!(CommitBudget::changes_per_commit(20), BASE_CHANGES);
        assert_eq!(CommitBudget::changes_per_commit(3_000), 3_000);
        assert_eq!(CommitBudget::changes_per_commit(50_000), MAX_CHANGES);
    }

    #[test]
    fn early_commits_leave_the_tail_its_commits() {
        let t0 = Instant::now();
        let mut b = CommitBudget::new(spec("64/3600"), t0);
        let mut early = Vec::new();
        while let Some(cap) = b.early_cap(t0) {
            early.push(cap);
            b.spend(t0);
        }
        // Six commits go while the stream lasts, each once this many changes are ready (taking
        // whatever more closed meanwhile); two stay for its end.
        assert_eq!(early, [500, 571, 666, 800, 1000, 1333]);
        assert_eq!(b.commits_now(t0), TAIL_COMMITS);
        // The first of the tail's commits goes; refills give early commits back only past the
        // tail's two.
        b.spend(t0);
        assert_eq!(b.early_cap(t0 + Duration::from_secs(57)), None);
        assert_eq!(b.early_cap(t0 + Duration::from_secs(114)), Some(1333));
    }

    #[test]
    fn never_more_than_the_limit_in_any_window() {
        let t0 = Instant::now();
        let mut b = CommitBudget::new(spec("6/60"), t0);
        let mut now = t0;
        let mut made = Vec::new();
        // A writer that wants a commit every 100 ms for five minutes.
        while now < t0 + Duration::from_secs(300) {
            let slot = b.next_slot(now);
            if slot <= now {
                b.spend(now);
                made.push(now);
            }
            now += Duration::from_millis(100);
        }
        for (i, t) in made.iter().enumerate() {
            let in_window = made[i..]
                .iter()
                .take_while(|u| **u < *t + Duration::from_secs(60))
                .count();
            assert!(in_window <= 6, "{in_window} commits in the minute from commit {i}");
        }
        assert!(
            made.len() <= 30 && made.len() >= 25,
            "{} commits in 5 minutes",
            made.len()
        );
    }
}
