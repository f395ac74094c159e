//! `hubfs status`: what every writable mount under a cache dir is doing, read from the status
//! files the mounts keep in `<cache>/mounts/<pid>.json`, plus staged files that no running mount
//! owns (they are committed by the next `hubfs mount --write` of their repo).

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::vfs::StatusReport;

fn alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    pid > 0 && unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
}

/// Status reports of live mounts; files of dead processes are removed.
pub fn live_mounts(cache_dir: &Path) -> Vec<StatusReport> {
    let dir = cache_dir.join("mounts");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        let Some(r) = std::fs::read(&p)
            .ok()
            .and_then(|b| serde_json::from_slice::<StatusReport>(&b).ok())
        else {
            continue;
        };
        if !alive(r.pid) {
            let _ = std::fs::remove_file(&p);
            continue;
        }
        out.push(r);
    }
    out.sort_by_key(|r| r.pid);
    out
}

/// Staging directories holding journaled files, with their count (whether or not mounted).
pub fn staged_dirs(cache_dir: &Path) -> Vec<(PathBuf, usize)> {
    let mut out = Vec::new();
    let mut stack = vec![cache_dir.join("staging")];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        let mut metas = 0;
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().and_then(|n| n.to_str()) != Some("recovered") {
                    stack.push(p);
                }
            } else if p.extension().and_then(|x| x.to_str()) == Some("meta") {
                metas += 1;
            }
        }
        if metas > 0 {
            out.push((d, metas));
        }
    }
    out.sort();
    out
}

pub fn run(cache_dir: &Path, json: bool) -> anyhow::Result<()> {
    let mounts = live_mounts(cache_dir);
    if json {
        println!("{}", serde_json::to_string_pretty(&mounts).context("encoding status")?);
        return Ok(());
    }
    if mounts.is_empty() {
        println!("no writable hubfs mounts running (cache dir {})", cache_dir.display());
    }
    for m in &mounts {
        println!(
            "{}@{} at {} (pid {})",
            m.repo,
            m.branch,
            m.mountpoint.as_deref().unwrap_or("?"),
            m.pid
        );
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
    }
    let owned: Vec<&str> = mounts.iter().map(|m| m.staging_dir.as_str()).collect();
    for (dir, n) in staged_dirs(cache_dir) {
        if !owned.contains(&dir.to_string_lossy().as_ref()) {
            println!(
                "{n} staged file(s) in {} wait for the next `hubfs mount --write` of their repo",
                dir.display()
            );
        }
    }
    Ok(())
}
