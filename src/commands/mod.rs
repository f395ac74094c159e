//! Command-line interface. Each subcommand parses its options, then calls into the library.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use std::time::Duration;

use crate::hub_client::{HubClientConfig, RepoRef};
use crate::local_hub::{FaultSettings, LocalHub, LocalHubConfig, RouteClass, TokenSpec};
use crate::vfs::VfsOptions;

#[derive(Parser, Debug)]
#[command(
    name = "hubfs",
    version,
    about = "Mount Hugging Face Hub repositories as local directories"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Mount a Hub repo at a directory (read-only unless --write), over FUSE (or NFS with --nfs).
    Mount(MountArgs),
    /// Serve a Hub repo over NFSv3 without mounting it (read-only unless --write), for any NFS client.
    ServeNfs(ServeNfsArgs),
    /// Unmount a hubfs mount (FUSE or NFS) and wait until its process has committed what it could
    /// and exited.
    Unmount {
        /// The mountpoint (for `mount --nfs --serve-only`, the directory named when it started).
        dir: PathBuf,
    },
    /// Commit everything a writable mount has pending now (waiting for the Hub's commit rate limit
    /// if it must, and saying so); prints the commit id.
    Commit {
        /// The writable mount.
        dir: PathBuf,
        /// Title of this commit (default: the mount's --commit-message).
        #[arg(short, long)]
        message: Option<String>,
    },
    /// Wait until a writable mount has nothing pending: every closed file, rename and deletion is
    /// committed. Exits non-zero with the reason if something cannot be committed.
    Sync {
        /// The writable mount.
        dir: PathBuf,
    },
    /// Show every running hubfs mount of this user (FUSE and NFS, read-only and writable, any cache
    /// dir): repo, commit, mountpoint, log file; for writable mounts also files waiting to be
    /// committed, the last commit and upload errors.
    Status {
        /// Only mounts using this cache dir; staged files left there by stopped mounts are listed too
        /// (default: every mount, and the default cache dir for left-over staged files).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Also list what writable mounts keep only locally: symlinks and special files, and the
        /// files whose mode or owner the Hub never sees.
        #[arg(long, short)]
        verbose: bool,
    },
    /// Start a local Hub with demo repos, mount demo/tiny-model under DIR and show around.
    Demo {
        /// Where to mount (created if missing).
        #[arg(default_value = "hubfs-demo")]
        dir: PathBuf,
        /// Run the tour, then unmount and exit instead of waiting for Ctrl-C.
        #[arg(long)]
        exit: bool,
    },
    /// Run an offline Hub (HTTP API, LFS and Xet) that stock clients and hubfs can use.
    LocalHub(LocalHubArgs),
    /// Kubernetes CSI node plugin: mounts repos as pod volumes (see docs/KUBERNETES.md).
    CsiNode(crate::csi::CsiNodeArgs),
    /// Serves one source mount of `csi-node` (started by the plugin with a FUSE descriptor).
    #[command(hide = true)]
    CsiServe,
}

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
    /// Hub endpoint (default: $HF_ENDPOINT, else https://huggingface.co).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Hub token (default: $HF_TOKEN, else the token file under $HF_HOME).
    #[arg(long, hide_env_values = true)]
    pub token: Option<String>,
    /// Memory for cached file content, e.g. 256M, 2G.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub memory_cache_size: u64,
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
    /// Kernel readahead of the mount in KiB (a page fault in an mmap'd file reads around it by as
    /// much). Default: 8192 for model repos (safetensors loads), 1024 for datasets, spaces and
    /// buckets (random reads of a mapping pay it per fault).
    #[arg(long, value_name = "KIB", value_parser = clap::value_parser!(u64).range(128..=65536))]
    pub readahead_kib: Option<u64>,
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
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let vfs = VfsOptions {
            metadata_ttl: self.metadata_ttl,
            uid: self.uid.unwrap_or(uid),
            gid: self.gid.unwrap_or(gid),
            memory_cache_bytes: self.memory_cache_size,
            cache_dir: Some(self.cache_dir.clone().unwrap_or_else(crate::vfs::default_cache_dir)),
            disk_cache_bytes: self.cache_size,
            prefetch_files: self.prefetch_files,
            passthrough: self.passthrough == "auto",
            readahead: self.readahead_kib.map(|k| k << 10),
            ..VfsOptions::default()
        };
        let mut vfs = vfs;
        let bucket = RepoRef::parse(&self.repo).is_ok_and(|(r, _, _)| r.is_bucket());
        if self.write || (bucket && !self.read_only) {
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
            }
            w.commit_budget = self.commit_budget.0;
            w.posix_strict = self.posix == "strict";
            w.unless_refused = !self.write;
            vfs.write = Some(w);
        }
        (client, vfs)
    }
}

#[derive(Args, Debug)]
pub struct MountArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Existing, empty directory to mount on.
    pub mountpoint: PathBuf,
    /// Let other users access the mount.
    #[arg(long)]
    pub allow_other: bool,
    #[command(flatten)]
    pub daemon: DaemonArgs,
    /// Serve over NFSv3 and mount with the kernel's NFS client instead of FUSE.
    #[arg(long)]
    pub nfs: bool,
    /// With --nfs: the address the NFS server listens on (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0", requires = "nfs")]
    pub nfs_addr: SocketAddr,
    /// With --nfs: serve only, do not mount (for a kernel without an NFS client, or another host).
    #[arg(long, requires = "nfs")]
    pub serve_only: bool,
    /// With --write: what close() waits for. `upload` (default): the file is durable in the local
    /// journal and, if the Hub stores it through LFS/Xet (files of 1 MiB and more), its content is
    /// uploaded, so close() reports upload errors; the commit follows, grouped with others. `commit`:
    /// the Hub commit holding the file (one commit per close when closes come one by one: mind the
    /// Hub's 128 commits an hour). `stage`: durable in the local journal only; upload and commit
    /// follow, grouped. fsync does what `upload` does (`commit` with --close commit).
    #[arg(long, default_value = "upload", value_parser = ["upload", "commit", "stage"], requires = "write")]
    pub close: String,
}

/// Running detached from the terminal (`mount --daemon`).
#[derive(Args, Debug)]
pub struct DaemonArgs {
    /// Return once the mount is usable (exit 0) or has failed (non-zero), leaving it running on its
    /// own: detached from this terminal, logging to a file (see --log-file).
    #[arg(long)]
    pub daemon: bool,
    /// The log file (with --daemon by default CACHE_DIR/logs/<mountpoint>.log, printed by `mount`
    /// and shown by `hubfs status`; without --daemon, stderr unless this is given).
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    /// Size at which the log file is rotated (one old file, NAME.log.1, is kept).
    #[arg(long, default_value = "10M", value_parser = parse_size)]
    pub log_max_size: u64,
}

#[derive(Args, Debug)]
pub struct ServeNfsArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Address to listen on, e.g. 127.0.0.1:2049 (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub nfs_addr: SocketAddr,
}

/// `512K`, `256M`, `2G` or plain bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("{s:?}: use a number with K, M, G or T")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 512M, 2G)"))?;
    if n.is_nan() || n < 0.0 {
        return Err(format!("{s:?} must not be negative"));
    }
    Ok((n * mult as f64) as u64)
}

/// `500ms`, `30s`, `5m`, `1h` or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bad = || format!("{s:?} is not a duration (e.g. 30s, 5m, 500ms)");
    let (num, unit) = s
        .find(|c: char| c.is_ascii_alphabetic())
        .map(|i| (&s[..i], &s[i..]))
        .unwrap_or((s, "s"));
    let n: f64 = num.parse().map_err(|_| bad())?;
    if n.is_nan() || n < 0.0 {
        return Err(bad());
    }
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(bad()),
    };
    Ok(Duration::from_secs_f64(secs))
}

#[derive(Args, Debug)]
pub struct LocalHubArgs {
    /// Directory holding every repo, commit and blob; a restart with the same dir serves the same data.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Address of the API origin (the blob and CAS origins take free ports on the same IP).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: SocketAddr,
    /// A token as NAME:TOKEN:read|write, or NAME:TOKEN:fineGrained:SCOPES with SCOPES such as
    /// dataset/NAME/DS=repo.content.read+repo.write,user/NAME=repo.content.read (repeatable; see
    /// docs/LOCAL_HUB.md). Without any, hf_local_write and hf_local_read exist.
    #[arg(long = "token", value_name = "NAME:TOKEN:ROLE")]
    pub tokens: Vec<TokenSpec>,
    /// Create the demo repos demo/tiny-model and datasets/demo/tiny-dataset if missing.
    #[arg(long)]
    pub seed_demo: bool,
    /// Commits accepted per repository (all clients together) in any sliding window of SECONDS,
    /// like the Hub's "128 per hour"; past it commits get the Hub's 429. 0 for no limit.
    #[arg(
        long,
        value_name = "N/SECONDS",
        default_value = "128/3600",
        allow_hyphen_values = true
    )]
    pub commit_limit: crate::local_hub::CommitLimit,
    /// Most entries (files and folders) a commit may leave in one folder, like the Hub's 10,000;
    /// more is refused with the Hub's 400. 0 for no limit.
    #[arg(long, value_name = "N", default_value_t = crate::local_hub::limits::MAX_DIR_ENTRIES)]
    pub dir_entry_limit: usize,
    /// Most operations one bucket batch (and paths one bucket paths-info request) may carry, where
    /// the Hub's clients split their requests; more is refused with a 400. 0 for no limit.
    #[arg(long, value_name = "N", default_value_t = crate::local_hub::limits::MAX_BUCKET_BATCH_OPS)]
    pub bucket_batch_limit: usize,
    #[command(flatten)]
    pub faults: FaultArgs,
}

/// Sets one knob of a class's fault settings.
type Apply = fn(&mut FaultSettings, f64);

/// Fault knobs applied at start; each takes an optional class prefix, e.g. `cas=0.5` (default: all).
#[derive(Args, Debug, Default)]
pub struct FaultArgs {
    /// Added latency per request in ms: `30` or `resolve=30` (repeatable).
    #[arg(long = "latency-ms", value_name = "[CLASS=]MS")]
    pub latency_ms: Vec<String>,
    /// Per-connection bandwidth cap in Mbit/s.
    #[arg(long = "bandwidth-mbps", value_name = "[CLASS=]MBPS")]
    pub bandwidth_mbps: Vec<String>,
    /// Probability of answering 500.
    #[arg(long = "error-rate", value_name = "[CLASS=]P")]
    pub error_rate: Vec<String>,
    /// Probability of accepting a request and never answering.
    #[arg(long = "stall-rate", value_name = "[CLASS=]P")]
    pub stall_rate: Vec<String>,
    /// Probability of dropping the connection half-way through the body.
    #[arg(long = "reset-rate", value_name = "[CLASS=]P")]
    pub reset_rate: Vec<String>,
    /// Requests per second allowed before answering 429 with a RateLimit header.
    #[arg(long = "rate-limit", value_name = "[CLASS=]RPS")]
    pub rate_limit: Vec<String>,
    /// Probability of answering 429 with a RateLimit header (wait 1 s).
    #[arg(long = "throttle-rate", value_name = "[CLASS=]P")]
    pub throttle_rate: Vec<String>,
}

impl FaultArgs {
    /// Folds the flags into settings per class.
    pub fn to_settings(&self) -> anyhow::Result<Vec<(RouteClass, FaultSettings)>> {
        let mut per: [FaultSettings; RouteClass::EVERY.len()] = Default::default();
        let knobs: [(&str, &Vec<String>, Apply); 7] = [
            ("--latency-ms", &self.latency_ms, |s, v| s.latency_ms = v as u64),
            ("--bandwidth-mbps", &self.bandwidth_mbps, |s, v| s.bandwidth_mbps = v),
            ("--error-rate", &self.error_rate, |s, v| s.error_rate = v),
            ("--stall-rate", &self.stall_rate, |s, v| s.stall_rate = v),
            ("--reset-rate", &self.reset_rate, |s, v| s.reset_rate = v),
            ("--rate-limit", &self.rate_limit, |s, v| s.rate_limit = v),
            ("--throttle-rate", &self.throttle_rate, |s, v| s.throttle_rate = v),
        ];
        for (flag, values, apply) in knobs {
            for raw in values {
                let (classes, v) = match raw.split_once('=') {
                    Some((c, v)) => {
                        let class = RouteClass::parse(c).ok_or_else(|| {
                            anyhow::anyhow!(
                                "{flag} {raw}: unknown class {c:?}; use api, resolve, cas, commit, reconstruction, \
                                 xorb-fetch, xorb-upload or shard-upload"
                            )
                        })?;
                        (vec![class], v)
                    }
                    None => (RouteClass::ALL.to_vec(), raw.as_str()),
                };
                let v: f64 = v
                    .parse()
                    .map_err(|_| anyhow::anyhow!("{flag} {raw}: {v:?} is not a number"))?;
                if !v.is_finite() || v < 0.0 {
                    anyhow::bail!("{flag} {raw}: the value must be a non-negative number");
                }
                for c in classes {
                    apply(&mut per[c as usize], v);
                    // Check each flag on its own so the message names the flag that is wrong.
                    per[c as usize]
                        .validate()
                        .map_err(|e| anyhow::anyhow!("{flag} {raw}: {e}"))?;
                }
            }
        }
        let out: Vec<_> = RouteClass::EVERY
            .iter()
            .map(|c| (*c, per[*c as usize].clone()))
            .collect();
        for (c, s) in &out {
            s.validate()
                .map_err(|e| anyhow::anyhow!("fault settings for {c:?}: {e}"))?;
        }
        Ok(out)
    }
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::LocalHub(args) => run_local_hub(args),
        Command::Mount(args) => crate::mount_process::run_mount(args),
        Command::ServeNfs(args) => crate::mount_process::run_serve_nfs(args),
        Command::Unmount { dir } => crate::unmount::run(&dir),
        Command::Commit { dir, message } => crate::control::run_commit(&dir, message),
        Command::Sync { dir } => crate::control::run_sync(&dir),
        Command::Status {
            cache_dir,
            json,
            verbose,
        } => crate::status::run(cache_dir.as_deref(), json, verbose),
        Command::Demo { dir, exit } => crate::demo::run(&dir, exit),
        Command::CsiNode(args) => crate::csi::run(args),
        Command::CsiServe => crate::csi::run_serve(),
    }
}

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

fn run_local_hub(args: LocalHubArgs) -> anyhow::Result<()> {
    let faults = args.faults.to_settings()?;
    let default_tokens = args.tokens.is_empty();
    let cfg = LocalHubConfig {
        data_dir: args.data_dir,
        addr: args.addr,
        tokens: args.tokens,
        seed_demo: args.seed_demo,
        faults,
        commit_limit: args.commit_limit,
        dir_entry_limit: args.dir_entry_limit,
        bucket_batch_limit: args.bucket_batch_limit,
    };
    let rt = runtime()?;
    rt.block_on(async move {
        // Caught before the endpoint is printed: a stop sent right after it shuts down cleanly.
        let mut signals = StopSignals::new()?;
        let hub = LocalHub::start(cfg).await?;
        if default_tokens {
            eprintln!(
                "tokens: write {} , read {} (user local)",
                crate::local_hub::DEFAULT_WRITE_TOKEN,
                crate::local_hub::DEFAULT_READ_TOKEN
            );
        }
        println!("endpoint: {}", hub.endpoint());
        use std::io::Write;
        std::io::stdout().flush()?;
        signals.recv().await;
        tracing::info!("shutting down");
        hub.stop().await;
        Ok(())
    })
}

/// SIGINT and SIGTERM, caught from the moment this is created: a mount creates it before it says
/// it is ready, so a stop sent right after that unmounts and drains instead of killing the process.
pub struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Must run inside the tokio runtime.
    pub fn new() -> anyhow::Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves at the next SIGINT or SIGTERM (or one that arrived since `new`).
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// Resolves on SIGINT or SIGTERM (caught from this call on).
pub async fn wait_for_signal() -> anyhow::Result<()> {
    StopSignals::new()?.recv().await;
    Ok(())
}
