//! The command layer: one module per subcommand, each with its clap types beside its handler.
//! `Cli` and `run` dispatch; everything a command needs comes from the layers below (process
//! plumbing, the frontends, the core, the Hub client, util), never the other way round.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

mod cache;
mod commit;
pub mod demo;
mod doctor;
pub mod local_hub;
pub mod mount;
mod overlay;
mod serve;
pub mod serve_nfs;
pub mod source;
pub mod status;
pub mod unmount;

pub use local_hub::LocalHubArgs;
pub use mount::MountArgs;
pub use serve_nfs::ServeNfsArgs;
pub use source::{DaemonArgs, SourceArgs};

/// What `hubfs --help` ends with: the exit statuses (`crate::process::exit`). The numbers are
/// stable; scripts and the Python package test them.
const EXIT_STATUS_HELP: &str = "\
Exit status:
  0    success
  1    any other failure (and `hubfs doctor` when a check FAILs)
  2    the command line was refused (unknown option, missing argument)
  3    the repo or bucket does not exist, or it is private and the token cannot see it
  4    the repo has no such revision (branch, tag or commit)
  5    the Hub refused the token, or the token may not do this (401, 403, --write)
  6    /dev/fuse cannot be opened (no FUSE in this kernel or container, or not root)
  7    the mountpoint does not exist, is not a directory, is busy, or the kernel refused it
  8    the Hub could not be reached, or kept failing past every retry (network, timeout, 5xx, 429)
  143  a mount stopped by SIGINT or SIGTERM before it was ready
`mount --daemon` exits with its mount process's status when it is 3 to 8, else with 1.";

#[derive(Parser, Debug)]
#[command(
    name = "hubfs",
    version,
    about = "Mount Hugging Face Hub repositories as local directories",
    after_long_help = EXIT_STATUS_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log lines as `text` or `json` (one object per line, for log collectors). The level comes
    /// from RUST_LOG; SIGUSR1 raises a running process's to debug, SIGUSR2 restores it.
    #[arg(long, global = true, value_enum, default_value = "text", env = "HUBFS_LOG_FORMAT")]
    pub log_format: crate::process::logging::LogFormat,
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
    /// An overlay mount's layer (`hubfs mount REPO DIR --overlay`): `diff` lists its changes,
    /// `commit` publishes them as one commit or pull request, `reset` drops them.
    #[command(subcommand)]
    Overlay(overlay::OverlayCommand),
    /// The caches: `hubfs cache shared URL` shows (and trims) the shared cache tier.
    #[command(subcommand)]
    Cache(cache::CacheCommand),
    /// Check this machine, the Hub, the token and optionally a repo for what a mount needs: one line
    /// per check (ok, warn, FAIL) with the fix for each that is not ok; exits non-zero on a FAIL.
    Doctor(doctor::DoctorArgs),
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
    /// Kubernetes mutating admission webhook: adds the hubfs sidecar to pods that use hubfs volumes.
    CsiWebhook(crate::csi::webhook::CsiWebhookArgs),
    /// The sidecar the webhook adds to a pod: serves the pod's hubfs volumes from inside the pod.
    CsiSidecar(crate::csi::sidecar_serve::CsiSidecarArgs),
    /// Serves one source mount of `csi-node` (started by the plugin with a FUSE descriptor).
    #[command(hide = true)]
    CsiServe,
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::LocalHub(args) => local_hub::run(args),
        Command::Mount(args) => mount::run(args),
        Command::ServeNfs(args) => serve_nfs::run(args),
        Command::Unmount { dir } => unmount::run(&dir),
        Command::Commit { dir, message } => commit::run_commit(&dir, message),
        Command::Sync { dir } => commit::run_sync(&dir),
        Command::Status {
            cache_dir,
            json,
            verbose,
        } => status::run(cache_dir.as_deref(), json, verbose),
        Command::Overlay(cmd) => overlay::run(cmd),
        Command::Cache(cmd) => cache::run(cmd),
        Command::Demo { dir, exit } => demo::run(&dir, exit),
        Command::Doctor(args) => doctor::run(args),
        Command::CsiNode(args) => crate::csi::run(args),
        Command::CsiWebhook(args) => crate::csi::webhook::run(args),
        Command::CsiSidecar(args) => crate::csi::run_sidecar(args),
        Command::CsiServe => crate::csi::run_serve(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_help_lists_every_exit_status() {
        use crate::process::exit::Failure;
        for f in Failure::ALL {
            let line = format!("\n  {:<4} ", f.code());
            assert!(
                EXIT_STATUS_HELP.contains(&line),
                "{f:?} ({}) is not in --help",
                f.code()
            );
        }
    }
}
