//! `hubfs doctor [REPO] [--write] [--json]`: what a newcomer runs when a mount does not work, or
//! before the first one. One line per check, `ok`, `warn` or `FAIL`, and under every line that is
//! not ok the command or setting that fixes it. The exit status is non-zero when a check FAILs
//! (something blocks a mount), zero when there are only warnings (a mount works, slower or with
//! less).
//!
//! Doctor changes nothing that matters: it opens `/dev/fuse` and closes it, reads files under
//! `/proc`, `/sys`, `/boot` and `/etc`, lists running mounts as `hubfs status` does (which drops
//! the records of mounts whose process is gone), and asks the Hub at most four questions (whoami, the repo's revision, one listing,
//! and for a bucket with `--write` a Xet write token), each with a deadline and without the
//! patience a mount has for the Hub's request windows: a doctor that waits ten minutes helps
//! nobody.

mod hub;
mod system;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use crate::util::units::{parse_duration, parse_size};

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// A repo to check, named as for `hubfs mount`: ns/name (model), datasets/ns/name,
    /// buckets/ns/name, optionally @REVISION, or an hf:// URL.
    pub repo: Option<String>,
    /// Also check that the token may write to REPO (as `hubfs mount --write` needs).
    #[arg(long, requires = "repo")]
    pub write: bool,
    /// Print the checks as a JSON array of {name, status, detail, fix}.
    #[arg(long)]
    pub json: bool,
    /// Hub endpoint (default: $HF_ENDPOINT, else https://huggingface.co), as for `hubfs mount`.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Hub token (default: $HF_TOKEN, else the token file under $HF_HOME), as for `hubfs mount`.
    /// Never printed.
    #[arg(long, hide_env_values = true)]
    pub token: Option<String>,
    /// The cache dir the mount would use (default: $XDG_CACHE_HOME/hubfs, else ~/.cache/hubfs).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// The disk cache size the mount would use, e.g. 10G (mount's default).
    #[arg(long, default_value = "10G", value_parser = parse_size)]
    pub cache_size: u64,
    /// The memory limit the mount would use, e.g. 512M (default: as `hubfs mount` picks it).
    #[arg(long, value_parser = super::source::parse_memory_limit)]
    pub memory_limit: Option<u64>,
    /// Deadline of each request to the Hub, e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// A mount works, but slower, with less, or not in every mode.
    Warn,
    /// A mount would fail (or the asked-for mode would).
    Fail,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Upper case so that a failure stands out in a column of `ok`s.
        f.pad(match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        })
    }
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Stable, short, for scripts: `fuse-device`, `token`, `repo`, …
    pub name: &'static str,
    pub status: Status,
    /// What was found, and how it was found out where that is not obvious.
    pub detail: String,
    /// What to do about it (a command or a setting); `None` when ok.
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    pub fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Every check, in the order a mount meets them: the kernel side, the Hub, then local resources.
pub fn checks(args: &DoctorArgs) -> anyhow::Result<Vec<Check>> {
    let root = rustix::process::geteuid().is_root();
    let mut out = vec![
        system::fuse_device(root),
        system::fusermount(root),
        system::allow_other(root),
        system::passthrough(root),
        system::nfs_client(),
    ];
    out.extend(hub::checks(args)?);
    out.push(system::cache_disk(args.cache_dir.clone(), args.cache_size, args.write));
    out.push(system::memory(args.memory_limit));
    Ok(out)
}

/// `hubfs doctor`.
pub fn run(args: DoctorArgs) -> anyhow::Result<()> {
    use std::io::Write as _;
    let checks = checks(&args)?;
    let text = if args.json {
        serde_json::to_string_pretty(&checks)? + "\n"
    } else {
        render(&checks)
    };
    let mut stdout = std::io::stdout().lock();
    // A reader that stops early (`| head`) is not an error of the checks.
    let _ = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
    if checks.iter().any(|c| c.status == Status::Fail) {
        // The report already says what failed; an error line under it would only repeat it.
        std::process::exit(1);
    }
    Ok(())
}

/// The text report: `STATUS  NAME  detail`, a `fix:` line under each line that is not ok, and a
/// summary.
fn render(checks: &[Check]) -> String {
    use std::fmt::Write as _;
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut s = String::new();
    for c in checks {
        let _ = writeln!(s, "{:<4}  {:<width$}  {}", c.status, c.name, c.detail);
        if let Some(fix) = &c.fix {
            let _ = writeln!(s, "{:<4}  {:<width$}  fix: {fix}", "", "");
        }
    }
    let count = |st| checks.iter().filter(|c| c.status == st).count();
    let (warn, fail) = (count(Status::Warn), count(Status::Fail));
    let verdict = if fail > 0 {
        "a mount would fail until the FAIL lines are fixed"
    } else if warn > 0 {
        "hubfs can mount; the warnings cost speed or features"
    } else {
        "hubfs can mount"
    };
    let _ = writeln!(s, "{fail} FAIL, {warn} warn: {verdict}");
    s
}

/// `1.5 GiB`, `640 MiB`: sizes as people read them.
pub fn human(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixes_follow_their_line_and_the_summary_counts() {
        let text = render(&[
            Check::ok("fuse-device", "fine"),
            Check::warn("token", "anonymous", "set HF_TOKEN"),
            Check::fail("repo", "a/b: not found", "check the name"),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("ok    fuse-device  fine"), "{text}");
        assert!(lines[1].starts_with("warn  token"), "{text}");
        assert!(lines[2].trim_start().starts_with("fix: set HF_TOKEN"), "{text}");
        assert!(lines[3].starts_with("FAIL  repo"), "{text}");
        assert_eq!(
            lines[5],
            "1 FAIL, 1 warn: a mount would fail until the FAIL lines are fixed"
        );
    }

    #[test]
    fn json_statuses_are_lower_case() {
        let v = serde_json::to_value(Check::fail("x", "d", "f")).unwrap();
        assert_eq!(v["status"], "fail");
        assert_eq!(
            serde_json::to_value(Check::ok("x", "d")).unwrap()["fix"],
            serde_json::Value::Null
        );
    }

    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(human(10 << 30), "10.0 GiB");
        assert_eq!(human(640 << 20), "640 MiB");
    }
}
