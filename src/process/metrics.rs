//! What a mount adds to the process's metrics ([`crate::metrics`]): its info series and, read at
//! every scrape, its cache sizes, passthrough opens and write state. A mount holds no reference
//! here: once its VirtualFs is gone its refresher sets nothing.

use std::sync::{Arc, Weak};
use std::time::SystemTime;

use crate::metrics::{Metrics, MountLabels, PartLabel, TierLabel, counter_to};
use crate::vfs::VirtualFs;

/// Adds `vfs` (mounted from `repo` at `revision`, served by `frontend`: `fuse`, `nfs`) to the metrics.
pub fn watch(
    vfs: &Arc<VirtualFs>,
    repo: &str,
    revision: &str,
    frontend: &'static str,
    passthrough: Option<crate::fuse::PassthroughStats>,
) {
    let m = crate::metrics::get();
    m.mounts
        .get_or_create(&MountLabels {
            repo: repo.to_string(),
            revision: revision.to_string(),
            mode: if vfs.is_writable() { "rw" } else { "ro" },
            frontend,
        })
        .set(1);
    let weak: Weak<VirtualFs> = Arc::downgrade(vfs);
    crate::metrics::on_scrape(move |m| {
        if let Some(vfs) = weak.upgrade() {
            refresh(m, &vfs, passthrough.as_ref());
        }
    });
}

/// The revision a mount asked for (`--revision`, else the spec's `@REV`, else `main`): the
/// mount info's label (a name, unlike the commit, that stays put while a writable mount commits).
pub fn asked_revision(spec: &str, revision: Option<&str>) -> String {
    let in_spec = crate::hub_client::RepoRef::parse(spec).ok().and_then(|(_, r, _)| r);
    revision
        .map(str::to_string)
        .or(in_spec)
        .unwrap_or_else(|| "main".to_string())
}

fn tier(m: &Metrics, name: &'static str, (bytes, entries, cap): (u64, u64, u64)) {
    let l = TierLabel { tier: name };
    m.cache_bytes.get_or_create(&l).set(bytes as i64);
    m.cache_entries.get_or_create(&l).set(entries as i64);
    m.cache_capacity.get_or_create(&l).set(cap as i64);
}

fn memory(m: &Metrics, r: &crate::chunk_store::MemoryReport) {
    let set = |f: &prometheus_client::metrics::family::Family<PartLabel, prometheus_client::metrics::gauge::Gauge>,
               part: &'static str,
               v: u64| {
        f.get_or_create(&PartLabel { part }).set(v.min(i64::MAX as u64) as i64);
    };
    if let Some(p) = &r.plan {
        set(&m.memory_budget, "limit", p.limit);
        set(&m.memory_budget, "fixed", p.fixed);
        set(&m.memory_budget, "downloads", p.downloads);
        set(&m.memory_budget, "blocks", p.blocks);
        set(&m.memory_budget, "memory_tier", p.memory_tier);
    }
    set(&m.memory_in_use, "resident", r.rss);
    set(&m.memory_in_use, "blocks", r.blocks_on_loan);
    set(&m.memory_in_use, "held", r.held);
    set(&m.memory_in_use, "idle_buffers", r.idle_buffers);
    set(&m.memory_in_use, "loading", r.reserved);
    counter_to(&m.memory_prefetches_refused, r.prefetches_refused);
    counter_to(&m.memory_waits, r.waits);
    counter_to(&m.memory_overruns, r.overruns);
}

/// The Hub's request windows as the mount's client met them.
fn windows(m: &Metrics, vfs: &VirtualFs) {
    for b in vfs.hub_client().windows().report() {
        let l = crate::metrics::BucketLabel {
            bucket: crate::hub_client::windows::Bucket::ALL
                .iter()
                .map(|b| b.name())
                .find(|n| *n == b.bucket)
                .unwrap_or("other"),
        };
        counter_to(&m.hub_window_requests.get_or_create(&l), b.requests);
        counter_to(&m.hub_window_refused.get_or_create(&l), b.refused);
        counter_to(&m.hub_window_deferred.get_or_create(&l), b.deferred);
        m.hub_window_remaining
            .get_or_create(&l)
            .set(b.remaining.map_or(-1, |r| r.min(i64::MAX as u64) as i64));
        m.hub_window_wait.get_or_create(&l).set(b.wait_secs);
        m.hub_window_waiting
            .get_or_create(&l)
            .set(b.waiting.min(i64::MAX as u64) as i64);
    }
}

fn refresh(m: &Metrics, vfs: &VirtualFs, passthrough: Option<&crate::fuse::PassthroughStats>) {
    windows(m, vfs);
    let store = vfs.chunk_store();
    tier(m, "memory", store.memory_usage());
    if let Some(disk) = store.disk() {
        tier(m, "disk", disk.usage());
    }
    m.held_bytes.set(store.held_bytes() as i64);
    memory(m, &store.memory_report());
    if let Some(p) = passthrough {
        counter_to(&m.passthrough_opens, p.opened());
        counter_to(&m.passthrough_kept, p.kept_cached());
        counter_to(&m.passthrough_warmed, p.warmed());
    }
    let Some(report) = vfs.status_report() else {
        return;
    };
    m.staged_files.set(report.dirty.len() as i64);
    m.pending_bytes
        .set(report.dirty.iter().map(|d| d.size).sum::<u64>() as i64);
    m.pending_namespace_changes.set(report.pending_namespace_changes as i64);
    counter_to(&m.uploaded_bytes, report.bytes_uploaded);
    counter_to(&m.commits, report.counters.commits);
    counter_to(&m.files_committed, report.counters.files_committed);
    counter_to(&m.commit_failures, report.counters.failed_rounds);
    let left = report
        .commit_budget
        .as_deref()
        .and_then(|b| b.split('/').next()?.parse::<i64>().ok())
        .map_or(-1, |n| (n - report.commits_in_window.unwrap_or(0) as i64).max(0));
    m.commit_budget_left.set(left);
    let age = vfs
        .oldest_dirty_mtime()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .map_or(0.0, |d| d.as_secs_f64());
    m.oldest_pending.set(age);
}
