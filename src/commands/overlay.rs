//! `hubfs overlay diff|commit|reset DIR`: what an overlay mount's layer changes, publishing it as a
//! commit or a pull request, and dropping changes. A running mount is asked over its control
//! socket; a layer whose mount is gone is opened here, in this process, as the mount would open it
//! (its lock keeps a mount from starting meanwhile).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};

use crate::hub_client::{HubClient, HubClientConfig, RepoRef};
use crate::process::control::{Request, Secret, request_record};
use crate::process::registry::{MountRecord, find_record};
use crate::vfs::{Change, ChangeKind, VfsOptions, VirtualFs};
use crate::write::layer;

#[derive(Subcommand, Debug)]
pub enum OverlayCommand {
    /// List what the layer changes: added, modified, deleted and renamed files (with sizes), and
    /// what it keeps locally only.
    Diff {
        #[command(flatten)]
        at: LayerArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Publish the layer as one commit (or, with --pr, one pull request) made on the layer's commit;
    /// the layer is then empty and the mount shows the new commit. Needs a write token.
    Commit {
        #[command(flatten)]
        at: LayerArgs,
        /// The commit's title.
        #[arg(short, long)]
        message: String,
        /// The commit's description (default: the list of changes).
        #[arg(long)]
        description: Option<String>,
        /// Open a pull request (refs/pr/N and a discussion) instead of committing to the branch;
        /// prints its URL.
        #[arg(long)]
        pr: bool,
        /// The branch to commit to, or the pull request's target; created at the layer's commit
        /// when missing (default: the revision the overlay was mounted at).
        #[arg(long)]
        branch: Option<String>,
        /// Publish paths that changed on the Hub too since the layer changed them (the layer's
        /// version wins).
        #[arg(long)]
        force: bool,
    },
    /// Drop the layer's changes at and below PATHs (every change without one): the Hub's version
    /// shows again.
    Reset {
        #[command(flatten)]
        at: LayerArgs,
        /// Paths in the repo, or paths inside the mount.
        paths: Vec<PathBuf>,
    },
}

/// Which layer: a mount's directory (running or not), or a layer directory.
#[derive(Args, Debug)]
pub struct LayerArgs {
    /// The overlay's mountpoint, or its layer directory (`--overlay=UPPER`).
    pub dir: PathBuf,
    /// Where layers without UPPER live (the mount's --cache-dir; default: $XDG_CACHE_HOME/hubfs).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Hub token (default: $HF_TOKEN, else the token file under $HF_HOME); `overlay commit` needs
    /// one that may write.
    #[arg(long, hide_env_values = true)]
    pub token: Option<String>,
}

/// Where the layer is.
enum Target {
    Mounted(Box<MountRecord>),
    Layer(PathBuf),
}

fn locate(at: &LayerArgs) -> anyhow::Result<Target> {
    if let Some(rec) = find_record(&at.dir) {
        if rec.mode != "overlay" {
            bail!(
                "{} is a {} mount, not an overlay (mount one with `hubfs mount REPO DIR --overlay`)",
                at.dir.display(),
                rec.mode
            );
        }
        return Ok(Target::Mounted(Box::new(rec)));
    }
    if at.dir.join(layer::LAYER_FILE).is_file() {
        return Ok(Target::Layer(at.dir.clone()));
    }
    let cache = at.cache_dir.clone().unwrap_or_else(crate::vfs::default_cache_dir);
    let abs = super::serve::absolute(&at.dir);
    match layer::find_for_mountpoint(&cache.join("overlays"), &abs) {
        Some(d) => Ok(Target::Layer(d)),
        None => bail!(
            "no overlay layer for {}: it is not a running overlay mount, not a layer directory, and no layer under {} \
             was last mounted there (pass the mount's --cache-dir, or the layer directory itself)",
            at.dir.display(),
            cache.join("overlays").display()
        ),
    }
}

fn token(at: &LayerArgs) -> Option<String> {
    at.token.clone().or_else(|| HubClientConfig::from_env().token)
}

/// Opens a layer whose mount is gone, on the commit it lies over.
fn open_layer(dir: &Path, token: Option<String>, rt: &tokio::runtime::Runtime) -> anyhow::Result<Arc<VirtualFs>> {
    let rec = layer::read(dir)?.with_context(|| format!("{} holds no layer record", dir.display()))?;
    let mut cfg = HubClientConfig::from_env();
    cfg.endpoint = rec.endpoint.clone();
    cfg.token = token;
    let client = HubClient::new(cfg)?;
    let (repo, _, _) = RepoRef::parse(&rec.repo).map_err(|e| anyhow::anyhow!("{e}"))?;
    let opts = VfsOptions {
        disk_cache_bytes: 0,
        write: Some(crate::vfs::WriteOptions {
            staging_root: dir.to_path_buf(),
            status_dir: None,
            close: crate::vfs::CloseMode::Keep,
            overlay: Some(crate::vfs::OverlayOptions {
                upper: Some(dir.to_path_buf()),
                keep_base: true,
                mountpoint: None,
            }),
            ..Default::default()
        }),
        ..VfsOptions::default()
    };
    let vfs = rt
        .block_on(VirtualFs::new(client, repo, &rec.revision, None, opts))
        .with_context(|| format!("opening the layer in {} ({}@{})", dir.display(), rec.repo, rec.revision))?;
    Ok(Arc::new(vfs))
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// A path given on the command line as a repo path: one inside the mount (absolute, or relative to
/// the working directory), relative to the mount's root; any other as it is.
fn repo_path(dir: &Path, p: &Path) -> String {
    let (abs_dir, abs_p) = (super::serve::absolute(dir), super::serve::absolute(p));
    match abs_p.strip_prefix(&abs_dir) {
        Ok(rel) => rel.to_string_lossy().into_owned(),
        _ => p.to_string_lossy().trim_matches('/').to_string(),
    }
}

pub fn run(cmd: OverlayCommand) -> anyhow::Result<()> {
    match cmd {
        OverlayCommand::Diff { at, json } => diff(&at, json),
        OverlayCommand::Commit {
            at,
            message,
            description,
            pr,
            branch,
            force,
        } => {
            let req = Request::OverlayCommit {
                message,
                description,
                pr,
                branch,
                force,
                token: token(&at).map(Secret),
            };
            commit(&at, req)
        }
        OverlayCommand::Reset { at, paths } => {
            let paths: Vec<String> = paths.iter().map(|p| repo_path(&at.dir, p)).collect();
            let n = match locate(&at)? {
                Target::Mounted(rec) => {
                    let a = request_record(&at.dir, &rec, &Request::OverlayReset { paths })?;
                    answer_ok(&a)?;
                    a.dropped.unwrap_or(0)
                }
                Target::Layer(d) => {
                    let rt = runtime()?;
                    let vfs = open_layer(&d, token(&at), &rt)?;
                    rt.block_on(vfs.layer_reset(&paths))?
                }
            };
            println!("dropped {n} change(s)");
            Ok(())
        }
    }
}

fn answer_ok(a: &crate::process::control::Answer) -> anyhow::Result<()> {
    if a.ok != Some(true) {
        bail!(
            "{}",
            a.error.clone().unwrap_or_else(|| "the mount gave no reason".into())
        );
    }
    Ok(())
}

fn diff(at: &LayerArgs, json: bool) -> anyhow::Result<()> {
    let (changes, base, layer_dir, repo) = match locate(at)? {
        Target::Mounted(rec) => {
            let a = request_record(&at.dir, &rec, &Request::OverlayDiff)?;
            answer_ok(&a)?;
            // (The mount's spec may name a revision: the commit is printed instead.)
            let repo = rec.repo.split('@').next().unwrap_or_default().to_string();
            (a.changes.unwrap_or_default(), a.commit.unwrap_or_default(), None, repo)
        }
        Target::Layer(d) => {
            let rt = runtime()?;
            let vfs = open_layer(&d, token(at), &rt)?;
            let c = rt.block_on(vfs.layer_changes())?;
            let rec = vfs.layer_record().map(|(_, r)| r);
            let base = rec.as_ref().map(|r| r.base.clone()).unwrap_or_default();
            let repo = rec.map(|r| r.repo).unwrap_or_default();
            (c, base, Some(d), repo)
        }
    };
    if json {
        let v = serde_json::json!({
            "repo": repo,
            "base": base,
            "layer": layer_dir.map(|d| d.display().to_string()),
            "changes": changes,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print!("{}", render(&changes));
    if changes.is_empty() {
        println!("no changes over {repo}@{}", short(&base));
    } else {
        println!("{} change(s) over {repo}@{}", changes.len(), short(&base));
    }
    Ok(())
}

fn short(c: &str) -> &str {
    &c[..c.len().min(12)]
}

/// One line per change: a letter, the path, the sizes.
fn render(changes: &[Change]) -> String {
    let mut out = String::new();
    for c in changes {
        let letter = match c.kind {
            ChangeKind::Added => 'A',
            ChangeKind::Modified => 'M',
            ChangeKind::Deleted => 'D',
            ChangeKind::Renamed => 'R',
            ChangeKind::Local => 'L',
        };
        let name = match (&c.kind, &c.from) {
            (ChangeKind::Renamed, Some(f)) => format!("{f} -> {}", c.path),
            _ => c.path.clone(),
        };
        let sizes = match (c.hub_size, c.size) {
            (Some(h), Some(s)) if c.kind == ChangeKind::Modified => format!("{h} -> {s} bytes"),
            (_, Some(s)) => format!("{s} bytes"),
            (Some(h), None) => format!("{h} bytes"),
            (None, None) => String::new(),
        };
        let mut extra = Vec::new();
        if !sizes.is_empty() {
            extra.push(sizes);
        }
        if let Some(n) = &c.note {
            extra.push(n.clone());
        }
        if c.conflict {
            extra.push("CONFLICT: changed on the Hub too".into());
        }
        let tail = if extra.is_empty() {
            String::new()
        } else {
            format!("  ({})", extra.join("; "))
        };
        out.push_str(&format!("{letter}  {name}{tail}\n"));
    }
    out
}

fn commit(at: &LayerArgs, req: Request) -> anyhow::Result<()> {
    let published = match locate(at)? {
        Target::Mounted(rec) => {
            let a = request_record(&at.dir, &rec, &req)?;
            answer_ok(&a)?;
            a.published.unwrap_or_default()
        }
        Target::Layer(d) => {
            let Some(opts) = req.into_publish() else {
                bail!("not a commit request");
            };
            let rt = runtime()?;
            let vfs = open_layer(&d, opts.token.clone(), &rt)?;
            rt.block_on(vfs.publish(&opts))?
        }
    };
    match (&published.commit, &published.pr_url) {
        (None, _) => println!("nothing to publish: the layer holds no change the Hub can store"),
        (Some(c), Some(url)) => {
            println!(
                "opened pull request #{} on {}: {url}",
                published.pr_num.unwrap_or(0),
                published.branch.as_deref().unwrap_or("main")
            );
            println!(
                "commit {c} ({} operation(s), {} bytes uploaded)",
                published.operations, published.bytes_uploaded
            );
        }
        (Some(c), None) => {
            println!(
                "committed {c} to {} ({} operation(s), {} bytes uploaded)",
                published.branch.as_deref().unwrap_or("?"),
                published.operations,
                published.bytes_uploaded
            );
            if let Some(h) = &published.rebased_on {
                println!("(the branch had moved to {h} without touching these paths: the commit is on top of it)");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_render_one_line_each() {
        let c = |kind, path: &str| Change {
            kind,
            path: path.into(),
            from: None,
            size: None,
            hub_size: None,
            conflict: false,
            note: None,
        };
        let out = render(&[
            Change {
                size: Some(20),
                hub_size: Some(10),
                conflict: true,
                ..c(ChangeKind::Modified, "config.json")
            },
            Change {
                from: Some("a.bin".into()),
                size: Some(5),
                ..c(ChangeKind::Renamed, "b.bin")
            },
            Change {
                hub_size: Some(7),
                ..c(ChangeKind::Deleted, "README.md")
            },
        ]);
        assert_eq!(
            out,
            "M  config.json  (10 -> 20 bytes; CONFLICT: changed on the Hub too)\n\
             R  a.bin -> b.bin  (5 bytes)\n\
             D  README.md  (7 bytes)\n"
        );
    }

    #[test]
    fn paths_inside_the_mount_become_repo_paths() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("x.txt"), b"").unwrap();
        assert_eq!(repo_path(d.path(), &d.path().join("x.txt")), "x.txt");
        // Deleted in the layer: still a path inside the mount.
        assert_eq!(repo_path(d.path(), &d.path().join("gone/y.txt")), "gone/y.txt");
        assert_eq!(repo_path(d.path(), Path::new("notes/eval.json")), "notes/eval.json");
        assert_eq!(repo_path(d.path(), Path::new("/notes/")), "notes");
    }
}
