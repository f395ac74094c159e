//! The Hub's side: the endpoint answers, the token is accepted and whose it is, the repo resolves
//! and lists, and with `--write` the token may write it. The endpoint and token are resolved as a
//! mount resolves them (`HubClientConfig::from_env`, then `--endpoint` / `--token`), and the
//! requests go through the same `HubClient`, but with one retry and no patience: doctor reports a
//! refusal or an outage instead of waiting it out.
//!
//! Hub calls, at most four: whoami (reachability, identity and role at once: the Hub answers it
//! 401 without a token, which proves it is there), the revision, one listing, and for a bucket
//! with `--write` a Xet write token (what the mount asks too; granting one writes nothing).

use std::future::Future;
use std::time::{Duration, Instant};

use super::{Check, DoctorArgs, Status};
use crate::hub_client::{
    ErrorContext, HubClient, HubClientConfig, HubClientError, RepoKind, RepoRef, TokenRole, Whoami, WriteAccess,
};

/// How the whoami question went: it also tells whether the endpoint answered at all.
enum Who {
    /// The token's account and role.
    Known(Whoami),
    /// No token; the Hub answered (401), so it is reachable.
    Anonymous,
    Failed(HubClientError),
}

/// Where a setting came from, for the user (the resolution itself is `HubClientConfig`'s).
fn origin(flag: bool, var: &str, otherwise: &'static str) -> String {
    let set = std::env::var(var).is_ok_and(|v| !v.trim().is_empty());
    match (flag, set) {
        (true, _) => "--".to_string() + if var == "HF_ENDPOINT" { "endpoint" } else { "token" },
        (false, true) => var.to_string(),
        (false, false) => otherwise.to_string(),
    }
}

/// One call within `deadline`, whatever the client's own deadlines do.
async fn bounded<T>(
    deadline: Duration,
    what: &str,
    f: impl Future<Output = Result<T, HubClientError>>,
) -> Result<T, HubClientError> {
    match tokio::time::timeout(deadline, f).await {
        Ok(r) => r,
        Err(_) => Err(HubClientError::Timeout {
            ctx: Box::new(ErrorContext {
                method: "GET".to_string(),
                path: Some(what.to_string()),
                message: Some(format!("no answer within {deadline:?}")),
                ..Default::default()
            }),
        }),
    }
}

/// The endpoint, token, repo and write checks (the last two only when asked).
pub fn checks(args: &DoctorArgs) -> anyhow::Result<Vec<Check>> {
    let mut cfg = HubClientConfig::from_env();
    if let Some(e) = &args.endpoint {
        cfg.endpoint = e.trim_end_matches('/').to_string();
    }
    if let Some(t) = &args.token {
        cfg.token = Some(t.clone());
    }
    cfg.timeout = args.timeout;
    cfg.connect_timeout = args.timeout.min(Duration::from_secs(5));
    cfg.max_retries = 1;
    cfg.patience = Duration::ZERO;
    let endpoint = cfg.endpoint.clone();
    let from = origin(args.endpoint.is_some(), "HF_ENDPOINT", "the default");
    let has_token = cfg.token.is_some();
    let token_from = origin(
        args.token.is_some(),
        "HF_TOKEN",
        "the token file (HF_TOKEN_PATH or $HF_HOME/token)",
    );
    let client = match HubClient::new(cfg) {
        Ok(c) => c,
        Err(e) => {
            let mut out = vec![Check::fail(
                "endpoint",
                format!("{endpoint} (from {from}) cannot be used: {e}"),
                "set HF_ENDPOINT (or --endpoint) to an http(s) URL such as https://huggingface.co",
            )];
            out.extend(skipped(args, "the endpoint is not usable"));
            return Ok(out);
        }
    };
    // Two attempts and a backoff at most: a call never outlasts this.
    let deadline = args.timeout * 2 + Duration::from_secs(2);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let started = Instant::now();
        let who = match bounded(deadline, "api/whoami-v2", client.whoami()).await {
            Ok(w) => Who::Known(w),
            Err(HubClientError::Unauthorized { .. }) if !has_token => Who::Anonymous,
            Err(e) => Who::Failed(e),
        };
        let took = started.elapsed();
        let endpoint_line = endpoint_check(&endpoint, &from, &who, took);
        let reachable = endpoint_line.status != Status::Fail;
        let mut out = vec![endpoint_line];
        if !reachable {
            out.extend(skipped(args, "the endpoint did not answer"));
            return Ok(out);
        }
        out.push(token_check(&endpoint, &token_from, has_token, &who));
        if let Some(spec) = &args.repo {
            let (line, repo) = repo_check(&client, spec, has_token, deadline).await;
            let opened = line.status != Status::Fail;
            out.push(line);
            if args.write {
                out.push(match repo.filter(|_| opened) {
                    Some(repo) => write_check(&client, &endpoint, spec, &repo, &who, deadline).await,
                    None => Check::warn(
                        "write-access",
                        format!("not checked: {spec} did not open"),
                        "fix the repo line first",
                    ),
                });
            }
        }
        Ok(out)
    })
}

/// The lines after the endpoint, when it cannot be asked anything.
fn skipped(args: &DoctorArgs, why: &str) -> Vec<Check> {
    let mut out = vec![Check::warn(
        "token",
        format!("not checked: {why}"),
        "fix the endpoint line first",
    )];
    if let Some(spec) = &args.repo {
        out.push(Check::warn(
            "repo",
            format!("{spec}: not checked: {why}"),
            "fix the endpoint line first",
        ));
        if args.write {
            out.push(Check::warn(
                "write-access",
                format!("{spec}: not checked: {why}"),
                "fix the endpoint line first",
            ));
        }
    }
    out
}

fn endpoint_check(endpoint: &str, from: &str, who: &Who, took: Duration) -> Check {
    const NAME: &str = "endpoint";
    let reachable = || {
        Check::ok(
            NAME,
            format!("{endpoint} (from {from}) answers ({} ms)", took.as_millis()),
        )
    };
    let net_fix = format!(
        "check the network and any proxy (HTTPS_PROXY), or the endpoint: HF_ENDPOINT / --endpoint \
         (now {endpoint}; offline, `hubfs local-hub` serves one)"
    );
    let e = match who {
        Who::Known(_) | Who::Anonymous => return reachable(),
        Who::Failed(e) => e,
    };
    match e {
        // The Hub answered, just not with an identity: the token line says why.
        HubClientError::Unauthorized { .. }
        | HubClientError::Forbidden { .. }
        | HubClientError::RateLimited { .. }
        | HubClientError::NotFound { .. }
        | HubClientError::RepoNotFound { .. } => reachable(),
        HubClientError::Timeout { .. } => {
            Check::fail(NAME, format!("{endpoint} (from {from}) does not answer: {e}"), net_fix)
        }
        HubClientError::Network { .. } => Check::fail(
            NAME,
            format!("{endpoint} (from {from}) cannot be reached: {e}"),
            net_fix,
        ),
        HubClientError::Server { .. } => Check::fail(
            NAME,
            format!("{endpoint} (from {from}) answers with a server error: {e}"),
            "retry later (the public Hub's status: https://status.huggingface.co)",
        ),
        _ => Check::fail(
            NAME,
            format!("{endpoint} (from {from}) does not answer as a Hub: {e}"),
            format!("check HF_ENDPOINT / --endpoint (now {endpoint}): it must be the Hub's base URL"),
        ),
    }
}

/// The token's role in words.
fn role(w: &Whoami) -> String {
    match &w.token {
        TokenRole::Read => "a read token (mounts; no --write)".to_string(),
        TokenRole::Write => "a write token".to_string(),
        TokenRole::FineGrained(fg) => format!(
            "a fine-grained token ({} global, {} scoped permission set(s))",
            fg.global.len(),
            fg.scoped.len()
        ),
        TokenRole::Other(r) if r.is_empty() => "not an access token (OAuth or app token)".to_string(),
        TokenRole::Other(r) => format!("a token of role {r:?}"),
    }
}

fn token_check(endpoint: &str, token_from: &str, has_token: bool, who: &Who) -> Check {
    const NAME: &str = "token";
    let new_token =
        format!("create a token at {endpoint}/settings/tokens and `export HF_TOKEN=hf_…` (or `hf auth login`)");
    match who {
        Who::Known(w) => Check::ok(
            NAME,
            format!("user {} with {} (from {token_from}; whoami-v2)", w.name, role(w)),
        ),
        Who::Anonymous => Check::warn(
            NAME,
            "no token (none in --token, HF_TOKEN, HF_TOKEN_PATH or $HF_HOME/token): requests are \
             anonymous, with lower request limits, and private or gated repos cannot be read",
            format!("for public repos nothing is needed; otherwise {new_token}"),
        ),
        Who::Failed(HubClientError::Unauthorized { .. }) => Check::fail(
            NAME,
            format!("the Hub refused the token from {token_from} (401): it is mistyped, revoked or for another Hub"),
            new_token,
        ),
        Who::Failed(e @ HubClientError::NotFound { .. }) => Check::warn(
            NAME,
            format!("the endpoint has no whoami-v2 (a mirror or proxy?), so the token's owner is unknown: {e}"),
            "nothing for reading; with --write the Hub decides at the first commit",
        ),
        Who::Failed(e @ HubClientError::RateLimited { .. }) => Check::warn(
            NAME,
            format!("the Hub refuses requests for now, so the token was not checked: {e}"),
            "wait for the Hub's request window to reset (at most 5 minutes) and run doctor again",
        ),
        Who::Failed(e) => Check::warn(
            NAME,
            format!(
                "{} not checked: {e}",
                if has_token { "token" } else { "anonymous access" }
            ),
            "see the endpoint line",
        ),
    }
}

fn kind_name(k: RepoKind) -> &'static str {
    match k {
        RepoKind::Model => "model",
        RepoKind::Dataset => "dataset",
        RepoKind::Space => "space",
        RepoKind::Bucket => "bucket",
    }
}

/// REPO parses as the mount parses it, its revision resolves and its root (or subfolder) lists.
async fn repo_check(client: &HubClient, spec: &str, has_token: bool, deadline: Duration) -> (Check, Option<RepoRef>) {
    const NAME: &str = "repo";
    let naming = "name it as for `hubfs mount`: ns/name (a model), datasets/ns/name, spaces/ns/name or \
                  buckets/ns/name, optionally @REVISION";
    let (repo, rev, sub) = match RepoRef::parse(spec) {
        Ok(p) => p,
        Err(e) => {
            return (
                Check::fail(NAME, format!("{spec:?} is not a repo name: {e}"), naming),
                None,
            );
        }
    };
    let revision = rev.unwrap_or_else(|| "main".to_string());
    let sub = sub.unwrap_or_default();
    let info = match bounded(deadline, spec, client.repo_info(&repo, &revision)).await {
        Ok(i) => i,
        Err(e) => return (repo_failure(client, spec, &repo, &revision, has_token, &e), Some(repo)),
    };
    let at = if repo.is_bucket() {
        String::new()
    } else {
        format!("@{revision} → commit {}", info.sha.get(..12).unwrap_or(&info.sha))
    };
    let visibility = if info.private { "private" } else { "public" };
    let head = format!("{} {}{at} ({visibility})", kind_name(repo.kind), repo.id());
    let line = match bounded(deadline, spec, client.list_dir(&repo, &info.sha, &sub)).await {
        Ok(entries) => Check::ok(
            NAME,
            format!(
                "{head}: {} entries in {}",
                entries.len(),
                if sub.is_empty() {
                    "its root".to_string()
                } else {
                    sub.clone()
                }
            ),
        ),
        Err(e) if e.is_not_found() && !sub.is_empty() => Check::fail(
            NAME,
            format!("{head}, but the folder {sub} does not exist in it"),
            "name an existing folder after the repo (hf://…/FOLDER), or mount the whole repo",
        ),
        Err(e) => Check::fail(
            NAME,
            format!("{head}, but listing it failed: {e}"),
            "see the endpoint and token lines",
        ),
    };
    (line, Some(repo))
}

fn repo_failure(
    client: &HubClient,
    spec: &str,
    repo: &RepoRef,
    revision: &str,
    has_token: bool,
    e: &HubClientError,
) -> Check {
    const NAME: &str = "repo";
    let kind_hint = if repo.kind == RepoKind::Model {
        " (a dataset is datasets/ns/name, a bucket buckets/ns/name)"
    } else {
        ""
    };
    match e {
        HubClientError::RevisionNotFound { .. } => Check::fail(
            NAME,
            format!("{spec}: revision {revision:?} does not exist"),
            "name a branch, tag, full commit id or refs/pr/N (ns/name@REV or --revision)",
        ),
        HubClientError::RepoNotFound { .. } | HubClientError::NotFound { .. } => Check::fail(
            NAME,
            format!(
                "{spec}: no such {} {}, or it is private and {} cannot see it",
                kind_name(repo.kind),
                repo.id(),
                if has_token {
                    "this token"
                } else {
                    "an anonymous request"
                }
            ),
            if has_token {
                format!("check the name{kind_hint}; if it is private, use a token of an account that can read it")
            } else {
                format!("check the name{kind_hint}; if it is private, set HF_TOKEN to a token that can read it")
            },
        ),
        HubClientError::Unauthorized { .. } => Check::fail(
            NAME,
            format!("{spec}: the Hub refused the token (401)"),
            "fix the token (see the token line)",
        ),
        HubClientError::Forbidden { .. } => Check::fail(
            NAME,
            format!("{spec}: access refused (403): gated, or the token may not read it: {e}"),
            format!(
                "accept the repo's conditions at {}/{} with the token's account, or use a token with access",
                client.endpoint(),
                repo.web_path()
            ),
        ),
        HubClientError::RateLimited { .. } => Check::warn(
            NAME,
            format!("{spec}: not checked, the Hub refuses requests for now: {e}"),
            "wait for the Hub's request window to reset (at most 5 minutes); a token gets larger windows",
        ),
        _ => Check::fail(NAME, format!("{spec}: {e}"), "see the endpoint line"),
    }
}

/// Whether the token may write REPO: from whoami (no further call for a repo); a bucket, whose
/// write permissions whoami does not fully name, also asks for a Xet write token as the mount does.
async fn write_check(
    client: &HubClient,
    endpoint: &str,
    spec: &str,
    repo: &RepoRef,
    who: &Who,
    deadline: Duration,
) -> Check {
    const NAME: &str = "write-access";
    let get_one = format!(
        "use a write token, or a fine-grained one with repo.write on {} or {} ({endpoint}/settings/tokens)",
        repo.id(),
        repo.namespace
    );
    let w = match who {
        Who::Known(w) => w,
        Who::Anonymous => {
            return Check::fail(NAME, format!("{spec}: no token, and writing needs one"), get_one);
        }
        Who::Failed(HubClientError::Unauthorized { .. }) => {
            return Check::fail(NAME, format!("{spec}: the Hub refused the token"), get_one);
        }
        Who::Failed(e) => {
            return Check::warn(
                NAME,
                format!("{spec}: cannot tell, whoami failed ({e}); the Hub decides at the first commit"),
                "run doctor again when the token line is ok",
            );
        }
    };
    let access = w.write_access(repo);
    if let WriteAccess::No(why) = &access {
        return Check::fail(NAME, format!("{} may not write {spec}: {why}", w.name), get_one);
    }
    if repo.is_bucket() {
        return match bounded(deadline, spec, client.xet_write_token(repo, "main")).await {
            Ok(_) => Check::ok(
                NAME,
                format!("{} may write {spec} (the Hub granted a Xet write token)", w.name),
            ),
            Err(e @ (HubClientError::Unauthorized { .. } | HubClientError::Forbidden { .. })) => Check::fail(
                NAME,
                format!(
                    "{} may not write {spec}: the Hub refused a Xet write token ({e})",
                    w.name
                ),
                get_one,
            ),
            Err(e) => Check::warn(
                NAME,
                format!("{spec}: cannot tell, asking for a Xet write token failed: {e}"),
                "run doctor again; the mount asks the same question",
            ),
        };
    }
    match access {
        WriteAccess::Yes => Check::ok(
            NAME,
            format!(
                "{} may write {spec} by the token's role (whoami-v2; the Hub still refuses a commit if the \
                 account itself may not write there)",
                w.name
            ),
        ),
        _ => Check::warn(
            NAME,
            format!("{spec}: whoami-v2 does not say whether the token may write; the Hub decides at the first commit"),
            get_one,
        ),
    }
}
