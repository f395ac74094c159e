//! Prometheus metrics of one hubfs process (a mount, an NFS server, a CSI server or the plugin).
//!
//! Every layer records into one process-wide set ([`get`](crate::metrics::get)): counters and histograms are atomics,
//! cheap enough to update on every read whether or not anything scrapes them. Values that are a
//! state rather than an event (cache sizes, files waiting to upload) are read at scrape time by the
//! refreshers upper layers register ([`on_scrape`](crate::metrics::on_scrape)), so no layer below keeps a copy in step.
//! [`server`](crate::metrics::server) serves the text format at `/metrics`. docs/METRICS.md lists every metric.
//!
//! Labels are bounded: endpoint classes, status codes, tiers, operation names, and once per mount
//! its repo, revision and mode. Never a path, a file name, a URL or a token.

mod labels;
pub mod server;
pub mod xet_upload;

use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

pub use labels::*;

type Hist = Family<ClassLabel, Histogram, fn() -> Histogram>;
type OpHist = Family<OpLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 100 µs to about 100 s.
    Histogram::new(exponential_buckets(0.0001, 4.0, 11))
}

/// Every metric of the process.
pub struct Metrics {
    registry: Registry,
    started: Instant,
    pub hub_requests: Family<RequestLabels, Counter>,
    pub hub_received: Family<ClassLabel, Counter>,
    pub hub_sent: Family<ClassLabel, Counter>,
    pub hub_duration: Hist,
    pub hub_retries: Family<ClassLabel, Counter>,
    pub hub_rate_limited: Family<ClassLabel, Counter>,
    pub hub_rate_limit_wait: Counter<f64, AtomicU64>,
    pub hub_deadline_expired: Family<ClassLabel, Counter>,
    pub hub_window_requests: Family<BucketLabel, Counter>,
    pub hub_window_refused: Family<BucketLabel, Counter>,
    pub hub_window_deferred: Family<BucketLabel, Counter>,
    pub hub_window_remaining: Family<BucketLabel, Gauge>,
    pub hub_window_wait: Family<BucketLabel, Gauge<f64, AtomicU64>>,
    pub hub_window_waiting: Family<BucketLabel, Gauge>,
    pub block_bytes: Family<SourceLabel, Counter>,
    pub block_lookups: Family<SourceLabel, Counter>,
    pub passthrough_opens: Counter,
    pub passthrough_kept: Counter,
    pub passthrough_warmed: Counter,
    pub read_bytes: Family<OpLabels, Counter>,
    pub op_duration: OpHist,
    pub cache_bytes: Family<TierLabel, Gauge>,
    pub cache_entries: Family<TierLabel, Gauge>,
    pub cache_capacity: Family<TierLabel, Gauge>,
    pub cache_evictions: Family<TierLabel, Counter>,
    pub held_bytes: Gauge,
    pub memory_budget: Family<PartLabel, Gauge>,
    pub memory_in_use: Family<PartLabel, Gauge>,
    pub memory_prefetches_refused: Counter,
    pub prefetch_bytes: Family<OutcomeLabel, Counter>,
    pub shared_tier: Family<OutcomeLabel, Counter>,
    pub followed_uploads: Family<OutcomeLabel, Counter>,
    pub memory_waits: Counter,
    pub memory_overruns: Counter,
    pub staged_files: Gauge,
    pub pending_bytes: Gauge,
    pub oldest_pending: Gauge<f64, AtomicU64>,
    pub pending_namespace_changes: Gauge,
    pub uploaded_bytes: Counter,
    pub upload_duration: Histogram,
    pub commits: Counter,
    pub files_committed: Counter,
    pub commit_failures: Counter,
    pub commit_budget_left: Gauge,
    pub uptime: Gauge<f64, AtomicU64>,
    pub mounts: Family<MountLabels, Gauge>,
    pub csi_volumes: Family<VolumeLabels, Gauge>,
    pub csi_calls: Family<CsiCallLabels, Counter>,
}

impl Metrics {
    fn new() -> Metrics {
        let mut m = Metrics {
            registry: Registry::with_prefix("hubfs"),
            started: Instant::now(),
            hub_requests: Family::default(),
            hub_received: Family::default(),
            hub_sent: Family::default(),
            hub_duration: Family::new_with_constructor(latency_histogram),
            hub_retries: Family::default(),
            hub_rate_limited: Family::default(),
            hub_rate_limit_wait: Counter::default(),
            hub_deadline_expired: Family::default(),
            hub_window_requests: Family::default(),
            hub_window_refused: Family::default(),
            hub_window_deferred: Family::default(),
            hub_window_remaining: Family::default(),
            hub_window_wait: Family::default(),
            hub_window_waiting: Family::default(),
            block_bytes: Family::default(),
            block_lookups: Family::default(),
            passthrough_opens: Counter::default(),
            passthrough_kept: Counter::default(),
            passthrough_warmed: Counter::default(),
            read_bytes: Family::default(),
            op_duration: Family::new_with_constructor(latency_histogram),
            cache_bytes: Family::default(),
            cache_entries: Family::default(),
            cache_capacity: Family::default(),
            cache_evictions: Family::default(),
            held_bytes: Gauge::default(),
            memory_budget: Family::default(),
            memory_in_use: Family::default(),
            memory_prefetches_refused: Counter::default(),
            prefetch_bytes: Family::default(),
            followed_uploads: Family::default(),
            shared_tier: Family::default(),
            memory_waits: Counter::default(),
            memory_overruns: Counter::default(),
            staged_files: Gauge::default(),
            pending_bytes: Gauge::default(),
            oldest_pending: Gauge::default(),
            pending_namespace_changes: Gauge::default(),
            uploaded_bytes: Counter::default(),
            upload_duration: latency_histogram(),
            commits: Counter::default(),
            files_committed: Counter::default(),
            commit_failures: Counter::default(),
            commit_budget_left: Gauge::default(),
            uptime: Gauge::default(),
            mounts: Family::default(),
            csi_volumes: Family::default(),
            csi_calls: Family::default(),
        };
        m.register();
        m.register_windows();
        m.register_csi();
        m
    }

    fn register(&mut self) {
        let r = &mut self.registry;
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        r.register("build_info", "The hubfs version (value 1)", build);
        r.register_with_unit(
            "uptime",
            "Time since the process started",
            Unit::Seconds,
            self.uptime.clone(),
        );
        r.register(
            "mount_info",
            "One series per mounted repo: repo, revision, mode (ro/rw), frontend (value 1)",
            self.mounts.clone(),
        );
        r.register(
            "hub_requests",
            "HTTP requests to the Hub (every attempt), by endpoint class and status (or timeout/error)",
            self.hub_requests.clone(),
        );
        r.register_with_unit(
            "hub_received",
            "Response body bytes received from the Hub",
            Unit::Bytes,
            self.hub_received.clone(),
        );
        r.register_with_unit(
            "hub_sent",
            "Request body bytes sent to the Hub",
            Unit::Bytes,
            self.hub_sent.clone(),
        );
        r.register_with_unit(
            "hub_request_duration",
            "Duration of one Hub request attempt, body included",
            Unit::Seconds,
            self.hub_duration.clone(),
        );
        r.register("hub_retries", "Hub requests retried", self.hub_retries.clone());
        r.register(
            "hub_rate_limited",
            "Hub answers with status 429 (rate limited)",
            self.hub_rate_limited.clone(),
        );
        r.register_with_unit(
            "hub_rate_limit_wait",
            "Time spent waiting before retries the Hub asked for (RateLimit/Retry-After)",
            Unit::Seconds,
            self.hub_rate_limit_wait.clone(),
        );
        r.register(
            "hub_deadline_expired",
            "Hub request attempts that hit their deadline",
            self.hub_deadline_expired.clone(),
        );
        r.register_with_unit(
            "block_loaded",
            "Bytes of blocks (or of ranges read straight from disk) loaded from the disk tier or the Hub",
            Unit::Bytes,
            self.block_bytes.clone(),
        );
        r.register(
            "block_lookups",
            "Block lookups by where the block was found (memory, held, disk, hub)",
            self.block_lookups.clone(),
        );
        r.register(
            "passthrough_opens",
            "Opens answered with FUSE passthrough (the kernel reads the disk tier's file itself)",
            self.passthrough_opens.clone(),
        );
        r.register(
            "passthrough_kept",
            "Opens that could pass through but stayed on the page cache, which held the file this mount had just served",
            self.passthrough_kept.clone(),
        );
        r.register(
            "passthrough_warmed",
            "Cache files read ahead by the mount because they were cold at their first passthrough open",
            self.passthrough_warmed.clone(),
        );
        r.register_with_unit(
            "read",
            "Bytes returned to read requests, by frontend",
            Unit::Bytes,
            self.read_bytes.clone(),
        );
        r.register_with_unit(
            "operation_duration",
            "Duration of filesystem operations, by frontend and operation",
            Unit::Seconds,
            self.op_duration.clone(),
        );
        r.register_with_unit(
            "cache_size",
            "Bytes held by a cache tier",
            Unit::Bytes,
            self.cache_bytes.clone(),
        );
        r.register(
            "cache_entries",
            "Blocks held by a cache tier",
            self.cache_entries.clone(),
        );
        r.register_with_unit(
            "cache_capacity",
            "The configured size of a cache tier",
            Unit::Bytes,
            self.cache_capacity.clone(),
        );
        r.register(
            "cache_evictions",
            "Blocks a cache tier dropped to stay within its size",
            self.cache_evictions.clone(),
        );
        r.register_with_unit(
            "held",
            "Bytes of blocks readers' prefetch windows hold (outside the memory tier's budget)",
            Unit::Bytes,
            self.held_bytes.clone(),
        );
        r.register_with_unit(
            "memory_budget",
            "The memory budget (--memory-limit) and how it is split: limit, fixed, downloads, blocks, memory_tier",
            Unit::Bytes,
            self.memory_budget.clone(),
        );
        r.register_with_unit(
            "memory_in_use",
            "Memory in use: resident (the process's RSS), blocks (pooled block buffers on loan, against the blocks part), held, idle_buffers, loading (room loads took for blocks not in yet)",
            Unit::Bytes,
            self.memory_in_use.clone(),
        );
        r.register(
            "memory_prefetches_refused",
            "Prefetches not started because the memory budget had no room beyond the readers' reserve",
            self.memory_prefetches_refused.clone(),
        );
        r.register_with_unit(
            "prefetch",
            "Bytes of blocks fetched ahead of readers (from the Hub or the disk tier), by outcome: fetched, used (a read was served from them), evicted_unused (let go before any read used them)",
            Unit::Bytes,
            self.prefetch_bytes.clone(),
        );
        r.register(
            "write_followed_uploads",
            "Uploads that followed a writer, by outcome: started, stored (the close used it), ended (the file was not written in order, or the stream failed: the close uploaded the file), cancelled (the writer went away)",
            self.followed_uploads.clone(),
        );
        r.register(
            "shared_tier_events",
            "Shared cache tier events by outcome: hit, miss, invalid (failed verification, refetched and replaced), claimed, waited_hit, wait_expired, stale_claim, written, dropped (upload queue full), upload_failed, paused",
            self.shared_tier.clone(),
        );
        r.register(
            "memory_waits",
            "Loads that waited for room in the memory budget",
            self.memory_waits.clone(),
        );
        r.register(
            "memory_overruns",
            "Loads that went past a full memory budget after waiting 5 s",
            self.memory_overruns.clone(),
        );
        r.register(
            "write_staged_files",
            "Files written and not yet committed",
            self.staged_files.clone(),
        );
        r.register_with_unit(
            "write_pending",
            "Bytes of files written and not yet committed",
            Unit::Bytes,
            self.pending_bytes.clone(),
        );
        r.register_with_unit(
            "write_oldest_pending_age",
            "Age of the oldest change waiting for a commit (0 when none waits)",
            Unit::Seconds,
            self.oldest_pending.clone(),
        );
        r.register(
            "write_pending_namespace_changes",
            "Deletions and moves waiting for a commit",
            self.pending_namespace_changes.clone(),
        );
        r.register_with_unit(
            "write_uploaded",
            "File content bytes uploaded to the Hub",
            Unit::Bytes,
            self.uploaded_bytes.clone(),
        );
        r.register_with_unit(
            "write_upload_duration",
            "Duration of one upload (a file, or files uploaded together), failures included",
            Unit::Seconds,
            self.upload_duration.clone(),
        );
        r.register("write_commits", "Commits made", self.commits.clone());
        r.register(
            "write_files_committed",
            "Files committed (a commit holds several)",
            self.files_committed.clone(),
        );
        r.register(
            "write_commit_failures",
            "Commit rounds that failed (retried later)",
            self.commit_failures.clone(),
        );
        r.register(
            "write_commit_budget_remaining",
            "Commits left in the mount's commit budget window (-1: the mount has no budget)",
            self.commit_budget_left.clone(),
        );
    }

    /// The Hub's request windows (`api`, `resolvers`, `pages`; `cas` for the Xet CAS), as the
    /// answers' `RateLimit` headers describe them.
    fn register_windows(&mut self) {
        let r = &mut self.registry;
        r.register(
            "hub_window_requests",
            "Hub answers per request window (bucket), any status",
            self.hub_window_requests.clone(),
        );
        r.register(
            "hub_window_refused",
            "Hub answers 429 per request window: the window was spent",
            self.hub_window_refused.clone(),
        );
        r.register(
            "hub_window_deferred",
            "Background requests (prefetch, revision refresh) not sent to keep the window's last tenth for reads",
            self.hub_window_deferred.clone(),
        );
        r.register(
            "hub_window_remaining",
            "Requests the last answer said were left in the current window (-1: not said)",
            self.hub_window_remaining.clone(),
        );
        r.register_with_unit(
            "hub_window_wait",
            "Time until a spent window resets and the reads waiting for it go (0: open)",
            Unit::Seconds,
            self.hub_window_wait.clone(),
        );
        r.register(
            "hub_window_waiting",
            "Reads waiting now for a spent window to reset",
            self.hub_window_waiting.clone(),
        );
    }

    fn register_csi(&mut self) {
        let r = &mut self.registry;
        r.register(
            "csi_volume_info",
            "CSI plugin: one series per published volume, naming the source mount that serves it (value 1)",
            self.csi_volumes.clone(),
        );
        r.register(
            "csi_calls",
            "CSI plugin: NodePublishVolume and NodeUnpublishVolume calls by result",
            self.csi_calls.clone(),
        );
    }

    /// The registry in the Prometheus text format, after running the refreshers.
    pub fn encode(&self) -> String {
        self.uptime
            .set(process_uptime().unwrap_or_else(|| self.started.elapsed().as_secs_f64()));
        let refreshers = std::mem::take(&mut *REFRESH.lock());
        refreshers.iter().for_each(|f| f(self));
        REFRESH.lock().splice(0..0, refreshers);
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "encoding metrics");
        }
        out
    }
}

/// Seconds since this process started, from /proc (`None` where it cannot be read).
fn process_uptime() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at field 3; starttime is field 22.
    let after = stat.rsplit_once(')')?.1;
    let start_ticks: f64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let boot: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let hz = rustix::param::clock_ticks_per_second();
    (hz > 0).then(|| (boot - start_ticks / hz as f64).max(0.0))
}

type Refresher = Box<dyn Fn(&Metrics) + Send + Sync>;

static METRICS: OnceLock<Metrics> = OnceLock::new();
static REFRESH: Mutex<Vec<Refresher>> = Mutex::new(Vec::new());

/// The process's metrics.
pub fn get() -> &'static Metrics {
    METRICS.get_or_init(Metrics::new)
}

/// Runs `f` before every scrape (it sets gauges from some live state).
pub fn on_scrape(f: impl Fn(&Metrics) + Send + Sync + 'static) {
    REFRESH.lock().push(Box::new(f));
}

/// One attempt of a Hub request.
pub fn hub_attempt(class: HubClass, attempt: Attempt, sent: u64, elapsed: Duration) {
    let m = get();
    let c = ClassLabel { class: class.as_str() };
    let status = match attempt {
        Attempt::Status { status, received } => {
            m.hub_received.get_or_create(&c).inc_by(received);
            if status == 429 {
                m.hub_rate_limited.get_or_create(&c).inc();
            }
            status.to_string()
        }
        Attempt::Timeout => {
            m.hub_deadline_expired.get_or_create(&c).inc();
            "timeout".to_string()
        }
        Attempt::Error => "error".to_string(),
    };
    m.hub_requests
        .get_or_create(&RequestLabels {
            class: class.as_str(),
            status,
        })
        .inc();
    m.hub_sent.get_or_create(&c).inc_by(sent);
    m.hub_duration.get_or_create(&c).observe(elapsed.as_secs_f64());
}

/// Request body bytes sent to the Hub that no single attempt accounts for (an upload session's).
pub fn hub_sent(class: HubClass, bytes: u64) {
    get()
        .hub_sent
        .get_or_create(&ClassLabel { class: class.as_str() })
        .inc_by(bytes);
}

/// A retry after `delay`; `asked`: the Hub named the wait (429/503 with RateLimit or Retry-After).
pub fn hub_retry(class: HubClass, delay: Duration, asked: bool) {
    let m = get();
    m.hub_retries.get_or_create(&ClassLabel { class: class.as_str() }).inc();
    if asked {
        m.hub_rate_limit_wait.inc_by(delay.as_secs_f64());
    }
}

fn xet_class(reconstruction: bool) -> HubClass {
    if reconstruction {
        HubClass::XetReconstruction
    } else {
        HubClass::XetXorb
    }
}

/// What the Xet fetcher's attempt gives: (status, wait hint, body pieces), a transport error, or
/// the deadline.
pub type XetOutcome<W, E> = Result<Result<(u16, W, Vec<bytes::Bytes>), E>, tokio::time::error::Elapsed>;

/// One attempt of a Xet CAS GET (the reconstruction carries the CAS token; xorb ranges are
/// presigned URLs): the status and body pieces, a transport error, or the deadline.
pub fn xet_attempt<W, E>(reconstruction: bool, r: &XetOutcome<W, E>, elapsed: Duration) {
    let a = match r {
        Ok(Ok((status, _, body))) => Attempt::Status {
            status: *status,
            received: body.iter().map(|b| b.len() as u64).sum(),
        },
        Ok(Err(_)) => Attempt::Error,
        Err(_) => Attempt::Timeout,
    };
    hub_attempt(xet_class(reconstruction), a, 0, elapsed);
}

/// A retried Xet CAS GET (see [`hub_retry`]).
pub fn xet_retry(reconstruction: bool, delay: Duration, asked: bool) {
    hub_retry(xet_class(reconstruction), delay, asked);
}

/// A block (or part of one, `bytes` long) found in `source`. Bytes count only for loads (disk,
/// Hub): a memory hit hands over a whole block of which a read uses a slice, so its bytes would
/// say nothing; `read_bytes` has what readers got.
pub fn block(source: BlockSource, bytes: usize) {
    let m = get();
    let l = SourceLabel {
        source: source.as_str(),
    };
    m.block_lookups.get_or_create(&l).inc();
    if matches!(source, BlockSource::Disk | BlockSource::Shared | BlockSource::Hub) {
        m.block_bytes.get_or_create(&l).inc_by(bytes as u64);
    }
}

/// One filesystem operation of `frontend` (`fuse`, `nfs`) that took `elapsed`.
pub fn op(frontend: &'static str, op: &'static str, elapsed: Duration) {
    get()
        .op_duration
        .get_or_create(&OpLabels { frontend, op })
        .observe(elapsed.as_secs_f64());
}

/// Records an operation's duration when dropped (it lives as long as the operation's future).
pub struct OpTimer {
    frontend: &'static str,
    op: &'static str,
    start: Instant,
}

impl Drop for OpTimer {
    fn drop(&mut self) {
        op(self.frontend, self.op, self.start.elapsed());
    }
}

/// Starts timing operation `op` of `frontend`.
pub fn timer(frontend: &'static str, op: &'static str) -> OpTimer {
    OpTimer {
        frontend,
        op,
        start: Instant::now(),
    }
}

/// Records one upload's duration (a file, or files uploaded together) when dropped, failed
/// uploads included.
pub struct UploadTimer(Instant);

impl UploadTimer {
    pub fn start() -> UploadTimer {
        UploadTimer(Instant::now())
    }
}

impl Drop for UploadTimer {
    fn drop(&mut self) {
        get().upload_duration.observe(self.0.elapsed().as_secs_f64());
    }
}

/// The name of NFSv3 procedure `p` (RFC 1813), the `op` label of NFS operations.
pub fn nfs_proc_name(p: u32) -> &'static str {
    const NAMES: [&str; 22] = [
        "null",
        "getattr",
        "setattr",
        "lookup",
        "access",
        "readlink",
        "read",
        "write",
        "create",
        "mkdir",
        "symlink",
        "mknod",
        "remove",
        "rmdir",
        "rename",
        "link",
        "readdir",
        "readdirplus",
        "fsstat",
        "fsinfo",
        "pathconf",
        "commit",
    ];
    NAMES.get(p as usize).copied().unwrap_or("unknown")
}

/// `bytes` returned to a read of `frontend`.
pub fn read(frontend: &'static str, bytes: usize) {
    get()
        .read_bytes
        .get_or_create(&OpLabels { frontend, op: "read" })
        .inc_by(bytes as u64);
}

/// An entry left cache tier `tier`; `evicted`: for room (not replaced or removed on purpose).
pub fn evicted(tier: &'static str, evicted: bool) {
    if evicted {
        get().cache_evictions.get_or_create(&TierLabel { tier }).inc();
    }
}

/// `bytes` of prefetched blocks that were `fetched`, `used` or `evicted_unused`.
pub fn prefetch(outcome: &'static str, bytes: usize) {
    get()
        .prefetch_bytes
        .get_or_create(&OutcomeLabel { outcome })
        .inc_by(bytes as u64);
}

/// One event of an upload that follows a writer (`vfs::commit::follow`).
pub fn followed_upload(outcome: &'static str) {
    get().followed_uploads.get_or_create(&OutcomeLabel { outcome }).inc();
}

/// One shared-tier event (`chunk_store::shared`).
pub fn shared(outcome: &'static str) {
    get().shared_tier.get_or_create(&OutcomeLabel { outcome }).inc();
}

/// Raises `counter` to `total` (a monotonic total kept elsewhere, read at scrape time).
pub fn counter_to(counter: &Counter, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_come_from_the_path() {
        assert_eq!(HubClass::of_path("/api/models/a/b/tree/main"), HubClass::Api);
        assert_eq!(HubClass::of_path("/api/datasets/a/b/commit/main"), HubClass::Commit);
        assert_eq!(HubClass::of_path("/a/b/resolve/main/x.bin"), HubClass::Resolve);
        assert_eq!(HubClass::of_path("/lfs/blob"), HubClass::Other);
    }

    #[test]
    fn recorded_values_appear_in_the_text_format() {
        hub_attempt(
            HubClass::Api,
            Attempt::Status {
                status: 200,
                received: 1234,
            },
            0,
            Duration::from_millis(3),
        );
        block(BlockSource::Disk, 4096);
        let text = get().encode();
        assert!(
            text.contains("hubfs_hub_requests_total{class=\"api\",status=\"200\"}"),
            "{text}"
        );
        assert!(text.contains("hubfs_hub_received_bytes_total{class=\"api\"}"), "{text}");
        assert!(
            text.contains("hubfs_block_loaded_bytes_total{source=\"disk\"}"),
            "{text}"
        );
        assert!(text.contains("hubfs_build_info{version="), "{text}");
        assert!(
            text.contains("# TYPE hubfs_hub_request_duration_seconds histogram"),
            "{text}"
        );
    }
}
