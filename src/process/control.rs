//! The control socket behind `hubfs commit DIR` and `hubfs sync DIR`: a writable mount listens on a unix socket in the
//! registry directory (mode 0700, so only its user can connect) and answers two requests, one JSON
//! line each: `{"op":"commit","message":…}` commits everything pending now, `{"op":"sync"}` waits
//! until nothing is pending. The answer is JSON lines: `{"waiting_until":…}` while the Hub's commit
//! rate limit holds commits back, then `{"ok":true,"commit":…}` or `{"ok":false,"error":…}`.
//! `{"op":"status"}` answers at once with the mount's status report as it is now (`hubfs status`:
//! the status file is only rewritten as the mount works, so it may lag a few seconds).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::vfs::VirtualFs;

/// One request on the socket.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    Commit {
        message: Option<String>,
    },
    Sync,
    Status,
    /// An overlay's changes (`hubfs overlay diff`).
    #[serde(rename = "overlay-diff")]
    OverlayDiff,
    /// Publishes an overlay's layer (`hubfs overlay commit`).
    #[serde(rename = "overlay-commit")]
    OverlayCommit {
        message: String,
        #[serde(default)]
        description: Option<String>,
        #[serde(default)]
        pr: bool,
        #[serde(default)]
        branch: Option<String>,
        #[serde(default)]
        force: bool,
        #[serde(default)]
        token: Option<Secret>,
    },
    /// Drops an overlay's changes at and below `paths` (all when empty).
    #[serde(rename = "overlay-reset")]
    OverlayReset {
        paths: Vec<String>,
    },
}

/// A token on the socket: sent as it is (the socket is its user's only), never printed.
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<token>")
    }
}

impl Request {
    /// The publish an `overlay-commit` request asks for (`None`: another request).
    pub fn into_publish(self) -> Option<crate::vfs::PublishOptions> {
        match self {
            Request::OverlayCommit {
                message,
                description,
                pr,
                branch,
                force,
                token,
            } => Some(crate::vfs::PublishOptions {
                message,
                description,
                pr,
                branch,
                force,
                token: token.map(|t| t.0),
            }),
            _ => None,
        }
    }

    fn is_overlay_op(&self) -> bool {
        matches!(
            self,
            Request::OverlayDiff | Request::OverlayCommit { .. } | Request::OverlayReset { .. }
        )
    }
}

/// One answer line.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Answer {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Commits are held back until then (RFC 3339): by the Hub's rate limit, or by this mount's
    /// commit budget (`reason`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Nothing was pending (`commit` made no commit).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nothing_pending: bool,
    /// The answer to `status`: the writable side's report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<crate::vfs::StatusReport>,
    /// The answer to `status`: where the mount's memory is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<crate::chunk_store::MemoryReport>,
    /// The answer to `status`: the Hub's request windows as the mount's answers described them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<Vec<crate::hub_client::windows::BucketReport>>,
    /// The answer to `overlay-diff`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Vec<crate::vfs::Change>>,
    /// The answer to `overlay-commit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published: Option<crate::vfs::Published>,
    /// The answer to `overlay-reset`: entries dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<usize>,
}

impl Answer {
    fn failed(e: impl std::fmt::Display) -> Answer {
        Answer {
            ok: Some(false),
            error: Some(e.to_string()),
            ..Answer::default()
        }
    }
}

/// The listening socket; removed when dropped.
pub struct ControlSocket {
    path: PathBuf,
}

impl ControlSocket {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Starts answering on `<registry dir>/<pid>.sock` (every mount answers `status`; `commit` and
/// `sync` need a writable one).
pub fn listen(vfs: Arc<VirtualFs>, rt: &tokio::runtime::Handle) -> anyhow::Result<ControlSocket> {
    let path = crate::process::registry::dir()?.join(format!("{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = {
        let _g = rt.enter();
        tokio::net::UnixListener::bind(&path).with_context(|| format!("listening on {}", path.display()))?
    };
    rt.spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let vfs = vfs.clone();
                    tokio::spawn(async move {
                        if let Err(e) = serve(vfs, stream).await {
                            tracing::debug!(error = %e, "control connection");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "control socket stopped accepting");
                    return;
                }
            }
        }
    });
    Ok(ControlSocket { path })
}

async fn send(w: &mut tokio::net::unix::OwnedWriteHalf, a: &Answer) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(a).map_err(std::io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line).await
}

async fn serve(vfs: Arc<VirtualFs>, stream: tokio::net::UnixStream) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut line = String::new();
    BufReader::new(r).read_line(&mut line).await?;
    let req: Request = match serde_json::from_str(&line) {
        Ok(r) => r,
        Err(e) => {
            let a = Answer {
                ok: Some(false),
                error: Some(format!("bad request: {e}")),
                ..Answer::default()
            };
            return send(&mut w, &a).await;
        }
    };
    if let Request::Status = req {
        let a = Answer {
            ok: Some(true),
            status: vfs.status_report(),
            memory: Some(vfs.memory_report()),
            hub: Some(vfs.hub_client().windows().report()),
            ..Answer::default()
        };
        return send(&mut w, &a).await;
    }
    if req.is_overlay_op() || vfs.is_overlay() {
        return serve_overlay(&vfs, req, &mut w).await;
    }
    if !vfs.is_writable() {
        let a = Answer {
            ok: Some(false),
            error: Some("a read-only mount: there is nothing to commit".into()),
            ..Answer::default()
        };
        return send(&mut w, &a).await;
    }
    let sync = matches!(req, Request::Sync);
    if let Request::Commit { message } = req {
        if vfs.pending_changes() == 0 {
            let a = Answer {
                ok: Some(true),
                commit: vfs.last_commit(),
                nothing_pending: true,
                ..Answer::default()
            };
            return send(&mut w, &a).await;
        }
        vfs.set_next_commit_title(message);
    }
    loop {
        if let Some(until) = vfs.rate_limited_until() {
            let a = Answer {
                waiting_until: Some(until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                reason: Some("hub".into()),
                ..Answer::default()
            };
            send(&mut w, &a).await?;
            let wait = (until - chrono::Utc::now()).to_std().unwrap_or_default();
            tokio::time::sleep(wait + std::time::Duration::from_millis(100)).await;
            continue;
        }
        // While the round waits for the mount's commit budget, say until when (once per wait).
        let round = vfs.sync_all();
        tokio::pin!(round);
        let mut told = None;
        let r = loop {
            tokio::select! {
                r = &mut round => break r,
                _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {
                    if let Some(t) = vfs.budget_wait_until()
                        && told != Some(t)
                    {
                        told = Some(t);
                        let a = Answer {
                            waiting_until: Some(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                            reason: Some("budget".into()),
                            ..Answer::default()
                        };
                        send(&mut w, &a).await?;
                    }
                }
            }
        };
        if vfs.rate_limited_until().is_some() {
            continue;
        }
        let a = match r {
            Err(e) => Answer {
                ok: Some(false),
                error: Some(e.to_string()),
                ..Answer::default()
            },
            // `commit` sends what was pending when asked; `sync` goes on until nothing is left
            // (files written meanwhile, or a round that took only part of the changes), unless a
            // file cannot be committed (a conflict with the Hub's version): that is its answer.
            Ok(()) if sync && vfs.pending_changes() > 0 => {
                let stuck = vfs.status_report().and_then(|r| {
                    r.dirty
                        .into_iter()
                        .find_map(|d| d.error.map(|e| format!("{}: {e}", d.path)))
                });
                match stuck {
                    Some(e) => Answer {
                        ok: Some(false),
                        error: Some(e),
                        ..Answer::default()
                    },
                    None => {
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
            Ok(()) => Answer {
                ok: Some(true),
                commit: vfs.last_commit(),
                ..Answer::default()
            },
        };
        return send(&mut w, &a).await;
    }
}

/// The overlay requests (and what an overlay answers to `commit` and `sync`).
async fn serve_overlay(vfs: &VirtualFs, req: Request, w: &mut tokio::net::unix::OwnedWriteHalf) -> std::io::Result<()> {
    if !vfs.is_overlay() {
        return send(w, &Answer::failed("not an overlay mount")).await;
    }
    let a = match req {
        Request::OverlayDiff => match vfs.layer_changes().await {
            Ok(c) => Answer {
                ok: Some(true),
                changes: Some(c),
                commit: vfs.layer_record().map(|(_, r)| r.base),
                ..Answer::default()
            },
            Err(e) => Answer::failed(e),
        },
        Request::OverlayReset { paths } => match vfs.layer_reset(&paths).await {
            Ok(n) => Answer {
                ok: Some(true),
                dropped: Some(n),
                ..Answer::default()
            },
            Err(e) => Answer::failed(e),
        },
        req @ Request::OverlayCommit { .. } => {
            let opts = req.into_publish().unwrap_or_default();
            let publish = vfs.publish(&opts);
            tokio::pin!(publish);
            let mut told = None;
            let r = loop {
                tokio::select! {
                    r = &mut publish => break r,
                    _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {
                        if let Some(t) = vfs.rate_limited_until()
                            && told != Some(t)
                        {
                            told = Some(t);
                            let a = Answer {
                                waiting_until: Some(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                                reason: Some("hub".into()),
                                ..Answer::default()
                            };
                            send(w, &a).await?;
                        }
                    }
                }
            };
            match r {
                Ok(p) => Answer {
                    ok: Some(true),
                    commit: p.commit.clone(),
                    published: Some(p),
                    ..Answer::default()
                },
                Err(e) => Answer::failed(e),
            }
        }
        Request::Commit { .. } | Request::Sync => Answer::failed(
            "an overlay commits nothing by itself: publish its changes with `hubfs overlay commit DIR -m MESSAGE`",
        ),
        Request::Status => Answer::failed("unexpected request"),
    };
    send(w, &a).await
}

/// Client side: sends `req` to the writable (or overlay) mount at `dir` and reports its answer.
pub fn request(dir: &Path, req: &Request) -> anyhow::Result<Answer> {
    let rec = crate::process::registry::record_for(dir)?;
    match rec.mode.as_str() {
        "overlay" if !req.is_overlay_op() => bail!(
            "{} is an overlay mount: it commits nothing by itself; publish its changes with \
             `hubfs overlay commit {} -m MESSAGE`",
            dir.display(),
            dir.display()
        ),
        "overlay" => {}
        _ if req.is_overlay_op() => bail!(
            "{} is a {} mount, not an overlay (`hubfs mount --overlay`)",
            dir.display(),
            rec.mode
        ),
        "writable" => {}
        _ => bail!("{} is a read-only mount: there is nothing to commit", dir.display()),
    }
    request_record(dir, &rec, req)
}

/// Sends `req` to the mount `rec` describes.
pub fn request_record(
    dir: &Path,
    rec: &crate::process::registry::MountRecord,
    req: &Request,
) -> anyhow::Result<Answer> {
    use std::io::{BufRead, Write};
    let sock = rec.control_socket.as_deref().with_context(|| {
        format!(
            "the mount at {} (pid {}) takes no commands (started by an older hubfs?)",
            dir.display(),
            rec.pid
        )
    })?;
    let mut s = std::os::unix::net::UnixStream::connect(sock)
        .with_context(|| format!("connecting to the mount at {} (pid {})", dir.display(), rec.pid))?;
    let mut line = serde_json::to_vec(req)?;
    line.push(b'\n');
    s.write_all(&line)?;
    for l in std::io::BufReader::new(s).lines() {
        let a: Answer = serde_json::from_str(&l?).context("the mount's answer")?;
        if let Some(t) = &a.waiting_until {
            match a.reason.as_deref() {
                Some("budget") => eprintln!("waiting for the next slot of the mount's commit budget, at {t} …"),
                _ => eprintln!("the Hub's commit rate limit was reached: waiting until {t} …"),
            }
            continue;
        }
        return Ok(a);
    }
    bail!(
        "the mount at {} closed the connection without an answer (see its log)",
        dir.display()
    )
}

/// The mount's answer to `status` on `socket`, if it answers within `timeout` (for a writable mount
/// that does not, or an older one, `hubfs status` reads its status file instead).
pub fn live_status(socket: &Path, timeout: std::time::Duration) -> Option<Answer> {
    use std::io::{BufRead, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    let mut line = serde_json::to_vec(&Request::Status).ok()?;
    line.push(b'\n');
    s.write_all(&line).ok()?;
    let mut answer = String::new();
    std::io::BufReader::new(s).read_line(&mut answer).ok()?;
    serde_json::from_str::<Answer>(&answer).ok()
}
