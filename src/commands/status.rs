//! `hubfs status`: every running hubfs mount of this user, from the registry (see
//! [`crate::process::registry`]); for writable mounts also what their status file says (files waiting, last
//! commit, errors: `<cache>/mounts/<pid>.json`, rewritten by the mount as it works); then staged
//! files that no running mount owns (the next `hubfs mount --write` of their repo commits them).

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use crate::process::registry::{Frontend, MountRecord};
use crate::vfs::StatusReport;
use crate::write::metadata::{Special, differs};

/// How long `status` waits for a writable mount's live report before reading its status file.
const LIVE_STATUS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// One line of `status --json`: the registry record and, for a writable mount, its report.
#[derive(Debug, Serialize)]
pub struct MountStatus {
    #[serde(flatten)]
    pub mount: MountRecord,
    pub writable: Option<StatusReport>,
    /// Where the mount's memory is (asked live; `None` if it did not answer).
    pub memory: Option<crate::chunk_store::MemoryReport>,
    /// The Hub's request windows as the mount met them (asked live): requests and refusals per
    /// bucket, what is left, and until when requests wait.
    pub hub: Option<Vec<crate::hub_client::windows::BucketReport>>,
}

/// Running mounts, optionally only those using `cache_dir`.
pub fn running(cache_dir: Option<&Path>) -> Vec<MountStatus> {
    let want = cache_dir.map(|c| std::path::absolute(c).unwrap_or_else(|_| c.to_path_buf()));
    crate::process::registry::live()
        .into_iter()
        .filter(|r| want.as_ref().is_none_or(|c| Path::new(&r.cache_dir) == c))
        .map(|r| {
            // Asked live when the mount answers (its status file lags while it works), else read.
            let live = r
                .control_socket
                .as_deref()
                .and_then(|s| crate::process::control::live_status(Path::new(s), LIVE_STATUS_TIMEOUT));
            let (live, memory, hub) = match live {
                Some(a) => (a.status, a.memory, a.hub),
                None => (None, None, None),
            };
            let writable = live.or_else(|| {
                r.status_file.as_ref().and_then(|f| {
                    std::fs::read(f)
                        .ok()
                        .and_then(|b| serde_json::from_slice::<StatusReport>(&b).ok())
                })
            });
            MountStatus {
                mount: r,
                writable,
                memory,
                hub,
            }
        })
        .collect()
}

/// Staging directories holding journaled files, with their count (whether or not mounted).
pub fn staged_dirs(cache_dir: &Path) -> Vec<(PathBuf, usize)> {
    let mut out = Vec::new();
    let mut stack = vec![cache_dir.join("staging")];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        // One `.data` per staged file (a new file's journal entries may be lines of the opens
        // log, with no `.meta`); the copies being uploaded and the saved open files are not.
        let mut files = 0;
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                if !matches!(p.file_name().and_then(|n| n.to_str()), Some("recovered" | "uploads")) {
                    stack.push(p);
                }
            } else if p.extension().and_then(|x| x.to_str()) == Some("data") {
                files += 1;
            }
        }
        if files > 0 {
            out.push((d, files));
        }
    }
    out.sort();
    out
}

/// Removes the status files of writable mounts that died without cleaning up (kill -9): their pid
/// names no live process. Their staged files stay and are listed as left over.
fn prune_status_files(cache_dir: &Path) {
    let Ok(rd) = std::fs::read_dir(cache_dir.join("mounts")) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let pid = p
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(pid) = pid
            && crate::process::registry::start_time(pid).is_none()
        {
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// One line per request bucket the mount used: `hub api: 412 requests, 588 of 1000 left`, and
/// `waiting until … (the window is spent)` while one is closed.
fn print_hub(buckets: &[crate::hub_client::windows::BucketReport]) {
    for b in buckets {
        let mut line = format!("  hub {}: {} requests", b.bucket, b.requests);
        if b.refused > 0 {
            line.push_str(&format!(", {} refused (429)", b.refused));
        }
        match (b.remaining, b.quota) {
            (Some(r), Some(q)) => line.push_str(&format!(", {r} of {q} left in the window")),
            (Some(r), None) => line.push_str(&format!(", {r} left in the window")),
            _ => {}
        }
        if b.deferred > 0 {
            line.push_str(&format!(", {} background requests deferred", b.deferred));
        }
        println!("{line}");
        if let Some(until) = &b.waiting_until {
            println!(
                "    waiting until {until}: the Hub's {} window is spent; {} read(s) wait for it to reset \
                 (--max-hub-wait bounds the wait)",
                b.bucket, b.waiting
            );
        }
    }
}

/// MiB, rounded.
fn mib(b: u64) -> u64 {
    (b + (1 << 19)) >> 20
}

fn print_memory(m: &crate::chunk_store::MemoryReport) {
    let rss = format!("resident {} MiB (peak {} MiB)", mib(m.rss), mib(m.peak_rss));
    let Some(p) = &m.plan else {
        println!("  memory: {rss}, no budget");
        return;
    };
    println!("  memory: {rss} of a {} MiB budget ({})", mib(p.limit), m.source);
    println!(
        "    blocks: {} of {} MiB on loan ({} MiB held for readers, {} MiB memory cache of {} MiB), {} MiB idle buffers",
        mib(m.blocks_on_loan),
        mib(p.blocks),
        mib(m.held),
        mib(m.memory_tier),
        mib(p.memory_tier),
        mib(m.idle_buffers),
    );
    println!(
        "    fixed: {} MiB process, up to {} MiB downloads in flight",
        mib(p.fixed),
        mib(p.downloads)
    );
    if let Some(s) = &m.shared {
        println!(
            "    shared tier {}{}: {} blocks served, {} fetched from the Hub after a miss, {} failed verification, {} written, {} dropped, {} uploads queued",
            s.url,
            if s.paused { " (paused)" } else { "" },
            s.hits,
            s.misses,
            s.invalid,
            s.written,
            s.dropped,
            s.pending_uploads
        );
        println!(
            "      metadata: {} served, {} missed, {} written; revisions: {} records found, {} written",
            s.meta_hits, s.meta_misses, s.meta_written, s.refs_found, s.refs_written
        );
    }
    if m.prefetches_refused + m.waits + m.overruns > 0 {
        println!(
            "    under pressure: {} prefetches not started, {} reads waited for room, {} went past the budget",
            m.prefetches_refused, m.waits, m.overruns
        );
    }
}

/// An overlay commits nothing by itself: what its layer holds, and how to see and publish it.
fn print_overlay(m: &StatusReport, mountpoint: &str) {
    println!("  layer: {}", m.staging_dir);
    let files = m.dirty.len();
    let others = m.pending_namespace_changes + m.local_only_entries;
    if files + others == 0 {
        println!("  no local changes");
    } else {
        println!(
            "  local changes: {files} file(s) written, {others} other change(s) (`hubfs overlay diff {mountpoint}` \
             lists them, `hubfs overlay commit {mountpoint} -m TITLE [--pr]` publishes them)"
        );
    }
    if let Some(c) = &m.last_commit {
        println!("  last published: {c}");
    }
    if let Some(e) = &m.last_error {
        println!("  last error: {e}");
    }
}

fn print_writable(m: &StatusReport, verbose: bool) {
    println!(
        "  last commit: {}   commits: {}   files committed: {}   uploaded: {} bytes",
        m.last_commit.as_deref().unwrap_or("none yet"),
        m.counters.commits,
        m.counters.files_committed,
        m.bytes_uploaded
    );
    if let Some(e) = &m.last_error {
        println!("  last error: {e}");
    }
    if let Some(t) = &m.rate_limited_until {
        println!("  rate-limited by the Hub until {t}: commits wait, files stay staged");
    }
    if let Some(b) = &m.commit_budget {
        let used = m.commits_in_window.unwrap_or(0);
        match &m.budget_wait_until {
            Some(t) => println!("  commit budget {b}: {used} used; the next commit waits until {t}"),
            None => println!("  commit budget {b}: {used} used"),
        }
    }
    if m.dirty.is_empty() && m.pending_namespace_changes == 0 {
        println!("  everything is committed");
    }
    for d in &m.dirty {
        let state = if d.open { "open" } else { "pending" };
        match &d.error {
            Some(e) => println!("  {state:8} {} ({} bytes): {e}", d.path, d.size),
            None => println!("  {state:8} {} ({} bytes)", d.path, d.size),
        }
    }
    if m.pending_namespace_changes > 0 {
        println!(
            "  {} rename/delete change(s) waiting for a commit",
            m.pending_namespace_changes
        );
    }
    if m.local_only_entries > 0 || m.metadata_changes > 0 {
        println!(
            "  kept in this mount only, never on the Hub: {} symlink(s) or special file(s), {} mode/owner change(s){}",
            m.local_only_entries,
            m.metadata_changes,
            if verbose { "" } else { " (--verbose lists them)" }
        );
    }
    if m.hard_links > 0 {
        println!(
            "  {} name(s) are hard links, one file in this mount (each name is its own file on the Hub){}",
            m.hard_links,
            if verbose { "" } else { " (--verbose lists them)" }
        );
    }
    if verbose {
        print_local_only(m);
    }
}

/// Lists what a writable mount keeps only locally, from its metadata log.
fn print_local_only(m: &StatusReport) {
    let records = match crate::write::metadata::read_log(Path::new(&m.staging_dir)) {
        Ok(r) => r,
        Err(e) => {
            println!("  (cannot read the metadata log in {}: {e})", m.staging_dir);
            return;
        }
    };
    let mut groups: std::collections::BTreeMap<u64, Vec<&str>> = std::collections::BTreeMap::new();
    for (path, r) in &records {
        if let Some(id) = r.link {
            groups.entry(id).or_default().push(path);
        }
    }
    for (path, r) in &records {
        if let Some(names) = r.link.and_then(|id| groups.get(&id)).filter(|n| n.len() > 1) {
            let others: Vec<&str> = names.iter().copied().filter(|n| n != path).collect();
            println!(
                "  local    {path}: hard link ({} names; also {})",
                names.len(),
                others.join(", ")
            );
        }
        let what = match &r.special {
            Some(Special::Symlink { target }) => format!("symlink -> {target}"),
            Some(Special::Fifo) => "fifo".into(),
            Some(Special::Socket) => "socket".into(),
            Some(Special::Char { rdev }) => format!(
                "char device {}:{}",
                libc::major(*rdev as libc::dev_t),
                libc::minor(*rdev as libc::dev_t)
            ),
            Some(Special::Block { rdev }) => format!(
                "block device {}:{}",
                libc::major(*rdev as libc::dev_t),
                libc::minor(*rdev as libc::dev_t)
            ),
            None if differs(r, m.uid, m.gid) => {
                let kind = if r.dir { "directory" } else { "file" };
                format!("{kind} mode {:04o} owner {}:{}", r.mode, r.uid, r.gid)
            }
            None => continue,
        };
        println!("  local    {path}: {what}");
    }
}

pub fn run(cache_dir: Option<&Path>, json: bool, verbose: bool) -> anyhow::Result<()> {
    let mounts = running(cache_dir);
    if json {
        println!("{}", serde_json::to_string_pretty(&mounts).context("encoding status")?);
        return Ok(());
    }
    if mounts.is_empty() {
        match cache_dir {
            Some(c) => println!("no hubfs mounts running with cache dir {}", c.display()),
            None => println!("no hubfs mounts running"),
        }
    }
    for s in &mounts {
        let m = &s.mount;
        // A bucket has no revisions: its line names the bucket alone, its "commit" is its state.
        if crate::hub_client::RepoRef::parse(&m.repo).is_ok_and(|(r, _, _)| r.is_bucket()) {
            println!("{} at {} (pid {})", m.repo, m.mountpoint, m.pid);
        } else {
            println!("{}@{} at {} (pid {})", m.repo, m.revision, m.mountpoint, m.pid);
        }
        let front = match (m.frontend, &m.nfs_addr) {
            (Frontend::Nfs, Some(a)) => format!("nfs {a}"),
            (Frontend::Nfs, None) => "nfs".to_string(),
            (Frontend::Fuse, _) => "fuse".to_string(),
        };
        println!("  {front}, {}, commit {}, cache {}", m.mode, m.commit, m.cache_dir);
        match &m.log_file {
            Some(l) => println!("  log: {l}"),
            None => println!("  log: the terminal that started it"),
        }
        if let Some(p) = &m.passthrough {
            println!("  passthrough: {p}");
        }
        match m.readahead_kib {
            Some((asked, got)) if got == asked => println!("  readahead: {got} KiB"),
            Some((asked, got)) => {
                println!("  readahead: {got} KiB (hubfs asked for {asked} KiB: setting it takes root)")
            }
            None => {}
        }
        if let Some(mem) = &s.memory {
            print_memory(mem);
        }
        if let Some(hub) = &s.hub {
            print_hub(hub);
        }
        match &s.writable {
            Some(w) if m.mode == "overlay" => print_overlay(w, &m.mountpoint),
            Some(w) => print_writable(w, verbose),
            None => {}
        }
    }
    // Staged files of stopped mounts: in the cache dir asked about, else the default one and every
    // cache dir a running mount uses.
    let mut dirs: Vec<PathBuf> = match cache_dir {
        Some(c) => vec![c.to_path_buf()],
        None => std::iter::once(crate::vfs::default_cache_dir())
            .chain(mounts.iter().map(|s| PathBuf::from(&s.mount.cache_dir)))
            .collect(),
    };
    dirs.sort();
    dirs.dedup();
    let owned: Vec<&str> = mounts
        .iter()
        .filter_map(|s| s.writable.as_ref().map(|w| w.staging_dir.as_str()))
        .collect();
    for c in dirs {
        prune_status_files(&c);
        let quarantine = c.join("staging").join(crate::write::instance::QUARANTINE_DIR);
        for (dir, n) in staged_dirs(&c) {
            if dir.starts_with(&quarantine) {
                println!(
                    "{n} staged file(s) in {} were set aside: they belong to another instance of their repo \
                     (deleted and created again, or on another Hub) and are never committed; copy out what \
                     you need, then delete the folder",
                    dir.display()
                );
            } else if !owned.contains(&dir.to_string_lossy().as_ref()) {
                println!(
                    "{n} staged file(s) in {} wait for the next `hubfs mount --write` of their repo",
                    dir.display()
                );
            }
        }
    }
    Ok(())
}
