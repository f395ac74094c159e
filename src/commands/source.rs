//! What `mount` and `serve-nfs` share on the command line: where a mount's content comes from and
//! how it is cached (`SourceArgs`), and running detached (`DaemonArgs`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::hub_client::{HubClientConfig, RepoRef};
use crate::util::units::{parse_duration, parse_size};
use crate::vfs::VfsOptions;

/// Where a mount's content comes from and how it is cached: shared by `mount` and `serve-nfs`.
#[derive(Args, Debug)]
pub struct SourceArgs {
    /// ns/name (model), datasets/ns/name, spaces/ns/name, optionally @REVISION, or an hf:// URL
    /// (hf://datasets/ns/name@rev/sub/dir mounts that folder); a bucket as buckets/ns/name or
    /// hf://buckets/ns/name[/prefix].
    pub repo: String,
    /// Branch, tag, full commit id or refs/pr/N (default: main, or the @REVISION of REPO).
    #[arg(long)]
    pub revision: Option<String>,
    /// Hub endpoint (default: $HF_ENDPOINT, else <https://huggingface.co>).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Hub token (default: $HF_TOKEN, else the token file under $HF_HOME).
    #[arg(long, hide_env_values = true)]
    pub token: Option<String>,
    /// Memory for cached file content, e.g. 256M, 2G (within --memory-limit: at most a quarter
    /// of its room for blocks).
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub memory_cache_size: u64,
    /// Memory the whole mount process may use, e.g. 256M, 2G (at least 96M): prefetch shrinks
    /// and readers wait rather than grow past it. Default: half the cgroup's memory.max when one is
    /// set (a container's limit), at most 512M; 512M otherwise.
    #[arg(long, value_parser = parse_memory_limit)]
    pub memory_limit: Option<u64>,
    /// Directory of the on-disk content cache (default: $XDG_CACHE_HOME/hubfs, else ~/.cache/hubfs).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Disk space for cached file content, e.g. 10G; 0 turns the disk cache off.
    #[arg(long, default_value = "10G", value_parser = parse_size)]
    pub cache_size: u64,
    /// How long listings and attributes are trusted before a branch is re-resolved, e.g. 60s, 5m.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub metadata_ttl: Duration,
    /// Owner of every file (default: the caller's uid).
    #[arg(long)]
    pub uid: Option<u32>,
    /// Group of every file (default: the caller's gid).
    #[arg(long)]
    pub gid: Option<u32>,
    /// Writable: files written are uploaded and committed to the branch (needs a write token).
    /// A bucket is writable without it when the token can write to it.
    #[arg(long)]
    pub write: bool,
    /// Read-only even where the mount would be writable by default (a bucket).
    #[arg(long, conflicts_with = "write")]
    pub read_only: bool,
    /// A local writable layer over the revision (which stays read-only on the Hub): every change
    /// is kept on local disk, across unmounts and crashes, until `hubfs overlay commit` publishes
    /// it as one commit or pull request (`hubfs overlay diff` lists it, `hubfs overlay reset`
    /// drops it). A read token is enough. The layer lives under the cache dir, keyed by Hub, repo
    /// and revision, or in UPPER with `--overlay=UPPER`. The mount stays on the revision's commit
    /// until it is remounted.
    #[arg(
        long,
        value_name = "UPPER",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "",
        conflicts_with_all = ["write", "read_only"]
    )]
    pub overlay: Option<String>,
    /// With --write: commit title; {summary} becomes what the commit does, {count} its number of changes.
    #[arg(long, default_value = "hubfs: {summary}", requires = "write")]
    pub commit_message: String,
    /// With --write: how long stopping (SIGINT/SIGTERM, unmount) waits for pending commits before
    /// leaving them staged for the next mount.
    #[arg(long, default_value = "60s", value_parser = parse_duration, requires = "write")]
    pub drain_timeout: Duration,
    /// With --write: commit in the background at most once per DURATION, everything closed, renamed
    /// and deleted meanwhile in one commit (e.g. 10m for a job that writes all the time). Default:
    /// once closes pause for 0.5 s, at most 5 s after the first pending change. `hubfs commit`,
    /// `hubfs sync`, fsync and unmount commit at once whatever this says.
    #[arg(long, value_parser = parse_duration, requires = "write")]
    pub commit_every: Option<Duration>,
    /// With --write: this mount's share of the repo's commit budget, N/SECONDS (the Hub allows a
    /// repo 128 commits an hour on the free plan, shared by all its clients). Commits wait for it;
    /// closes do not. 0: no budget (commit whenever there is work).
    #[arg(long, default_value = "64/3600", value_parser = parse_budget, requires = "write")]
    pub commit_budget: BudgetArg,
    /// Small files fetched ahead of a reader that opens a directory's files one after another in
    /// listing order (`cat *`, `tar c`, data loaders): each then finds its bytes cached instead of
    /// waiting a round trip. Another order fetches nothing ahead. 0 turns it off.
    #[arg(long, default_value_t = 16)]
    pub prefetch_files: usize,
    /// What a Hub file's mtime is. `revision` (default): the time of the commit the mount shows,
    /// the same for every file. `last-commit`: the date of the last commit that changed the file,
    /// as the Hub's file list shows it; listings then cost 20 times as many requests (the Hub
    /// pages them by 50 instead of 1,000), which a directory of thousands of files feels.
    #[arg(long, default_value = "revision", value_parser = ["revision", "last-commit"])]
    pub file_times: String,
    /// With --write: what happens to what the Hub cannot store. `practical` (default): modes,
    /// owners, times, symlinks, FIFOs, sockets and device nodes are kept by the mount (and across
    /// remounts with the same cache dir), never committed; `hubfs status` counts them. `strict`:
    /// chmod, chown, symlink and mknod of a non-regular file answer EPERM, so every change either
    /// reaches the Hub or fails.
    #[arg(long, default_value = "practical", value_parser = ["practical", "strict"], requires = "write")]
    pub posix: String,
    /// FUSE passthrough on read-only mounts. `auto` (default): a file the disk cache holds whole
    /// is read by the kernel straight from the cache file (Linux 6.9+ and root; elsewhere reads go
    /// through hubfs as before). `off`: every read goes through hubfs.
    #[arg(long, default_value = "auto", value_parser = ["auto", "off"])]
    pub passthrough: String,
    /// Files of read-only FUSE mounts read without the kernel's readahead (direct I/O): what a
    /// program reads is about what is fetched. Default '*.parquet': column queries (DuckDB,
    /// Polars, pyarrow reading a few columns) read scattered pieces that the kernel's readahead
    /// turns into up to eleven times the bytes. A file of a folder being scanned whole (one of its
    /// files read through within 30 s) is opened as usual, and a file read through from its start
    /// (`cp`) is fetched ahead as usual (docs/CONFIGURATION.md). Comma-separated globs on the path
    /// in the repo, or `none`. A file the disk cache holds whole still passes through, and mmap
    /// keeps working.
    #[arg(long, value_name = "GLOBS", default_value = "*.parquet", value_parser = parse_globs)]
    pub direct_io: GlobsArg,
    /// Kernel readahead of the mount in KiB (a page fault in an mmap'd file reads around it by as
    /// much). Default: 8192 for model repos (safetensors loads), 1024 for datasets, spaces and
    /// buckets (random reads of a mapping pay it per fault).
    #[arg(long, value_name = "KIB", value_parser = clap::value_parser!(u64).range(128..=65536))]
    pub readahead_kib: Option<u64>,
    /// Shared cache tier on an object store: s3://bucket/prefix (S3 or S3-compatible),
    /// gs://bucket/prefix or az://container/prefix. Blocks missing from memory and disk are looked
    /// up there before the Hub, and blocks fetched from the Hub are written there, so a fleet of
    /// nodes fetches them from the Hub about once. Credentials from the cloud's usual places
    /// (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, ~/.aws; GOOGLE_APPLICATION_CREDENTIALS;
    /// AZURE_STORAGE_ACCOUNT_NAME, …); a store that fails only slows reads down
    /// (docs/CONFIGURATION.md).
    #[arg(long, value_name = "URL", env = "HUBFS_SHARED_CACHE")]
    pub shared_cache: Option<String>,
    /// How long a read waits for the Hub when it refuses a request for one of its request windows
    /// (429: a window lasts 5 minutes), cannot be reached, or answers 5xx, before the read fails
    /// with EIO, e.g. 10m, 1h. Background work (prefetch) never waits. 0: a few quick retries only.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub max_hub_wait: Duration,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics (docs/METRICS.md).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// `--memory-limit`: a size no smaller than the budget's minimum.
pub fn parse_memory_limit(s: &str) -> Result<u64, String> {
    let v = parse_size(s)?;
    let min = crate::chunk_store::budget::MIN_LIMIT;
    if v < min {
        return Err(format!("{s} is too small: a mount needs at least {}M", min >> 20));
    }
    Ok(v)
}

/// `--direct-io`: globs, or none.
#[derive(Debug, Clone)]
pub struct GlobsArg(pub Option<globset::GlobSet>);

fn parse_globs(s: &str) -> Result<GlobsArg, String> {
    if s.trim().is_empty() || s.trim() == "none" {
        return Ok(GlobsArg(None));
    }
    let mut set = globset::GlobSetBuilder::new();
    for g in s.split(',').map(str::trim).filter(|g| !g.is_empty()) {
        set.add(globset::Glob::new(g).map_err(|e| format!("{g}: {e}"))?);
    }
    set.build().map(|g| GlobsArg(Some(g))).map_err(|e| e.to_string())
}

/// `--commit-budget`: a budget, or none (`0`).
#[derive(Debug, Clone, Copy)]
pub struct BudgetArg(pub Option<crate::vfs::BudgetSpec>);

fn parse_budget(s: &str) -> Result<BudgetArg, String> {
    crate::vfs::BudgetSpec::parse(s).map(BudgetArg)
}

impl SourceArgs {
    /// The Hub client and filesystem settings these options describe.
    pub fn to_settings(&self) -> (HubClientConfig, VfsOptions) {
        let mut client = HubClientConfig::from_env();
        if let Some(e) = &self.endpoint {
            client.endpoint = e.trim_end_matches('/').to_string();
        }
        if let Some(t) = &self.token {
            client.token = Some(t.clone());
        }
        client.tree_expand = self.file_times == "last-commit";
        client.patience = self.max_hub_wait;
        let (uid, gid) = (rustix::process::getuid().as_raw(), rustix::process::getgid().as_raw());
        let vfs = VfsOptions {
            metadata_ttl: self.metadata_ttl,
            uid: self.uid.unwrap_or(uid),
            gid: self.gid.unwrap_or(gid),
            memory_cache_bytes: self.memory_cache_size,
            memory_limit: Some(crate::chunk_store::budget::limit_or_default(
                self.memory_limit,
                "--memory-limit",
            )),
            cache_dir: Some(self.cache_dir.clone().unwrap_or_else(crate::vfs::default_cache_dir)),
            disk_cache_bytes: self.cache_size,
            prefetch_files: self.prefetch_files,
            passthrough: self.passthrough == "auto",
            direct_io: self.direct_io.0.clone(),
            readahead: self.readahead_kib.map(|k| k << 10),
            shared_cache: self.shared_cache.clone(),
            ..VfsOptions::default()
        };
        let mut vfs = vfs;
        let bucket = RepoRef::parse(&self.repo).is_ok_and(|(r, _, _)| r.is_bucket());
        if let Some(upper) = &self.overlay {
            let cache = vfs.cache_dir.clone().unwrap_or_else(crate::vfs::default_cache_dir);
            vfs.write = Some(crate::vfs::WriteOptions {
                staging_root: cache.join("overlays"),
                status_dir: Some(cache.join("mounts")),
                close: crate::vfs::CloseMode::Keep,
                posix_strict: false,
                overlay: Some(crate::vfs::OverlayOptions {
                    upper: (!upper.is_empty()).then(|| super::serve::absolute(std::path::Path::new(upper))),
                    ..Default::default()
                }),
                ..Default::default()
            });
        } else if self.write || (bucket && !self.read_only) {
            let cache = vfs.cache_dir.clone().unwrap_or_else(crate::vfs::default_cache_dir);
            let mut w = crate::vfs::WriteOptions {
                staging_root: cache.join("staging"),
                commit_message: self.commit_message.clone(),
                status_dir: Some(cache.join("mounts")),
                ..Default::default()
            };
            if let Some(every) = self.commit_every {
                w.quiet_period = every;
                w.max_batch_delay = every;
                w.early_full_commits = false;
            }
            w.commit_budget = self.commit_budget.0;
            w.posix_strict = self.posix == "strict";
            w.unless_refused = !self.write;
            vfs.write = Some(w);
        }
        if let (Some(w), Some((limit, _))) = (vfs.write.as_mut(), &vfs.memory_limit) {
            w.background_uploads = crate::vfs::uploads_for_budget(*limit);
        }
        (client, vfs)
    }
}

/// Running detached from the terminal (`mount --daemon`).
#[derive(Args, Debug)]
pub struct DaemonArgs {
    /// Return once the mount is usable (exit 0) or has failed (non-zero), leaving it running on its
    /// own: detached from this terminal, logging to a file (see --log-file).
    #[arg(long)]
    pub daemon: bool,
    /// The log file (with --daemon by default CACHE_DIR/logs/MOUNTPOINT.log, printed by `mount`
    /// and shown by `hubfs status`; without --daemon, stderr unless this is given).
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    /// Size at which the log file is rotated (one old file, NAME.log.1, is kept).
    #[arg(long, default_value = "10M", value_parser = parse_size)]
    pub log_max_size: u64,
}
