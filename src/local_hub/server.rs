//! Starting and stopping a local Hub: three public origins (API, blob, CAS) plus the embedded CAS on
//! an internal port, one shared state, and the request dispatcher of the API origin.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use xet_client::cas_client::{LocalServer, LocalServerConfig};

use super::auth::{Auth, Caller, TokenSpec};
use super::bucket_store::BucketStore;
use super::error::{HubError, HubResult};
use super::faults::{FaultSettings, Faults, RouteClass};
use super::http_util::{json_response, parse_query, read_body};
use super::limits::{CommitLimit, RepoCommitStats};
use super::routes::Route;
use super::state::{HubState, HubStateParts, random_hex};
use super::store::{RefKind, Store};
use super::windows::{Origin, RequestWindows, WindowStats};
use super::{api_read, api_write, bucket_api, discussions, lfs, resolve, xet};

/// One request as the route handlers see it.
pub struct Req {
    pub method: Method,
    pub headers: HeaderMap,
    pub query: std::collections::HashMap<String, Vec<String>>,
    pub body: Body,
    /// `http://host:port` the client used, for absolute URLs in answers (`Link`, `commitUrl`).
    pub base: String,
    pub caller: Option<Caller>,
}

#[derive(Debug, Clone)]
pub struct LocalHubConfig {
    pub data_dir: PathBuf,
    pub addr: SocketAddr,
    pub tokens: Vec<TokenSpec>,
    pub seed_demo: bool,
    pub faults: Vec<(RouteClass, FaultSettings)>,
    /// Accepted commits allowed per repository in a sliding window, all clients together; past it
    /// the commit endpoint answers 429 as the Hub does. Default: the Hub's free plan, 128 per hour
    /// ([`CommitLimit::HUB_FREE`]); [`CommitLimit::UNLIMITED`] turns it off.
    pub commit_limit: CommitLimit,
    /// Most entries (files and folders) a commit may leave in a directory it adds to; more is
    /// refused with the Hub's 400. Default: the Hub's 10,000; 0 for no limit.
    pub dir_entry_limit: usize,
    /// Most operations one bucket batch (and paths one bucket paths-info) may carry; more is
    /// refused with a 400. Default: 1,000, where the Hub's clients split; 0 for no limit.
    pub bucket_batch_limit: usize,
    /// The Hub's request windows (`api`, `resolvers`, `pages` quotas per 5 minutes, per user or
    /// IP), past which requests get the Hub's 429. Default: as strict as the Hub, every user on the
    /// free tier; [`RequestWindows::off`] for tests that need more.
    pub request_windows: RequestWindows,
}

impl LocalHubConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        LocalHubConfig {
            data_dir: data_dir.into(),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            tokens: Vec::new(),
            seed_demo: false,
            faults: Vec::new(),
            commit_limit: CommitLimit::default(),
            dir_entry_limit: super::limits::MAX_DIR_ENTRIES,
            bucket_batch_limit: super::limits::MAX_BUCKET_BATCH_OPS,
            request_windows: RequestWindows::default(),
        }
    }
}

/// A running local Hub. Dropping it without `stop` leaves its tasks running until the runtime ends.
pub struct LocalHub {
    state: Arc<HubState>,
    tasks: Vec<JoinHandle<()>>,
    cas_stop: Option<tokio::sync::oneshot::Sender<()>>,
    _temp: Option<tempfile::TempDir>,
}

async fn bind(addr: SocketAddr) -> anyhow::Result<(TcpListener, String)> {
    let l = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let a = l.local_addr()?;
    Ok((l, format!("http://{a}")))
}

fn serve(listener: TcpListener, router: Router) -> JoinHandle<()> {
    let router = router.layer(axum::middleware::from_fn(super::http_util::close_when_body_unread));
    tokio::spawn(async move {
        // The peer address is what anonymous requests are counted by (request windows).
        let service = router.into_make_service_with_connect_info::<SocketAddr>();
        if let Err(e) = axum::serve(listener, service).await {
            tracing::error!(error = %e, "local hub listener failed");
        }
    })
}

/// The CAS origin's path prefix, random per data dir and kept across restarts. Xet clients key their
/// local dedup caches by CAS URL: without it, a fresh data dir served on a port an earlier local Hub
/// used would let clients dedupe against xorbs this CAS never received, making uploads unreadable.
fn load_cas_prefix(dir: &std::path::Path) -> anyhow::Result<String> {
    let p = dir.join("cas-instance");
    if let Ok(s) = std::fs::read_to_string(&p)
        && s.len() == 16
        && s.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Ok(format!("/cas/{s}"));
    }
    let s = random_hex(8);
    super::store::write_atomic(&p, s.as_bytes())?;
    Ok(format!("/cas/{s}"))
}

fn load_secret(dir: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let p = dir.join("secret");
    if let Ok(s) = std::fs::read(&p)
        && s.len() >= 32
    {
        return Ok(s);
    }
    let s = random_hex(32).into_bytes();
    super::store::write_atomic(&p, &s)?;
    Ok(s)
}

impl LocalHub {
    pub async fn start(cfg: LocalHubConfig) -> anyhow::Result<LocalHub> {
        cfg.request_windows
            .validate()
            .map_err(|e| anyhow::anyhow!("request windows: {e}"))?;
        std::fs::create_dir_all(&cfg.data_dir)
            .map_err(|e| anyhow::anyhow!("cannot create data dir {}: {e}", cfg.data_dir.display()))?;
        let store = Store::open(&cfg.data_dir).map_err(|e| anyhow::anyhow!("{e}"))?;
        store.set_dir_entry_limit(cfg.dir_entry_limit);
        let buckets = BucketStore::open(&cfg.data_dir, cfg.bucket_batch_limit).map_err(|e| anyhow::anyhow!("{e}"))?;
        let faults = Faults::new();
        for (class, s) in &cfg.faults {
            faults.set(*class, s.clone()).map_err(|e| anyhow::anyhow!(e))?;
        }

        // The embedded CAS, on an internal loopback port.
        let ctx = xet_runtime::core::XetContext::default()?;
        let (cas_listener, cas_internal) = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let cas_port = cas_listener.local_addr()?.port();
        let cas = Arc::new(
            LocalServer::new(
                ctx,
                LocalServerConfig {
                    data_directory: store.cas_dir(),
                    host: "127.0.0.1".to_string(),
                    port: cas_port,
                    in_memory: false,
                },
            )
            .await?,
        );
        let cas_client = cas.client();
        let (cas_stop, cas_rx) = tokio::sync::oneshot::channel();
        let cas_task = tokio::spawn(async move {
            if let Err(e) = cas.serve_until_stopped(cas_listener, cas_rx).await {
                tracing::error!(error = %e, "embedded CAS failed");
            }
        });

        let ip = cfg.addr.ip();
        let (api_l, endpoint) = bind(cfg.addr).await?;
        let (blob_l, blob_url) = bind(SocketAddr::new(ip, 0)).await?;
        let (cas_l, cas_origin) = bind(SocketAddr::new(ip, 0)).await?;
        let cas_prefix = load_cas_prefix(&cfg.data_dir)?;
        let cas_url = format!("{cas_origin}{cas_prefix}");
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        let state = Arc::new(HubState::new(HubStateParts {
            store,
            buckets,
            auth: Auth::new(&cfg.tokens),
            faults: faults.clone(),
            endpoint,
            blob_url,
            cas_url,
            cas_prefix,
            cas_internal,
            cas_client,
            http,
            secret: load_secret(&cfg.data_dir)?,
            commit_limit: cfg.commit_limit,
            request_windows: cfg.request_windows.clone(),
        }));

        let with_faults = |r: Router, class: Option<RouteClass>| {
            r.layer(axum::middleware::from_fn_with_state(
                (faults.clone(), class),
                super::faults::layer,
            ))
        };
        // Inside the faults layer: a refused request is still a request of its class, and an
        // injected fault is answered before the window counts it.
        let with_windows = |r: Router, origin: Origin| {
            r.layer(axum::middleware::from_fn_with_state(
                (state.clone(), origin),
                super::windows::layer,
            ))
        };
        let api = with_faults(
            with_windows(Router::new().fallback(api_entry).with_state(state.clone()), Origin::Api),
            None,
        );
        // The blob origin is the Hub's CDN: no request windows there.
        let blob = with_faults(
            Router::new().fallback(blob_entry).with_state(state.clone()),
            Some(RouteClass::Resolve),
        );
        let casr = with_faults(
            with_windows(
                Router::new().fallback(xet::cas_front).with_state(state.clone()),
                Origin::Cas,
            ),
            Some(RouteClass::Cas),
        );
        let tasks = vec![cas_task, serve(api_l, api), serve(blob_l, blob), serve(cas_l, casr)];
        let hub = LocalHub {
            state,
            tasks,
            cas_stop: Some(cas_stop),
            _temp: None,
        };
        if cfg.seed_demo {
            super::seed::seed_demo(&hub.state).await?;
        }
        tracing::info!(endpoint = %hub.endpoint(), commit_limit = %hub.commit_limit(), "local hub ready");
        Ok(hub)
    }

    /// A local Hub on a free loopback port with a temporary data dir (removed on drop), default
    /// tokens, no faults. For tests and `hubfs demo`.
    pub async fn start_temp(seed_demo: bool) -> anyhow::Result<LocalHub> {
        LocalHub::start_temp_with(seed_demo, |_| {}).await
    }

    /// `start_temp` with the config adjusted first (e.g. `|c| c.commit_limit = CommitLimit::UNLIMITED`
    /// for a test that commits more than the Hub's 128 per hour to one repo).
    pub async fn start_temp_with(
        seed_demo: bool,
        adjust: impl FnOnce(&mut LocalHubConfig),
    ) -> anyhow::Result<LocalHub> {
        let dir = tempfile::tempdir()?;
        let mut cfg = LocalHubConfig::new(dir.path());
        cfg.seed_demo = seed_demo;
        adjust(&mut cfg);
        let mut hub = LocalHub::start(cfg).await?;
        hub._temp = Some(dir);
        Ok(hub)
    }

    pub fn endpoint(&self) -> &str {
        &self.state.endpoint
    }

    pub fn cas_url(&self) -> &str {
        &self.state.cas_url
    }

    pub fn blob_url(&self) -> &str {
        &self.state.blob_url
    }

    pub fn data_dir(&self) -> &std::path::Path {
        self.state.store.root()
    }

    /// A write token valid on this Hub (the default one when no tokens were configured).
    pub fn write_token(&self) -> Option<String> {
        self.state.auth.some_write_token()
    }

    /// Turns Xet uploads off (or on again): a Hub without Xet storage, for clients' plain-LFS path.
    pub fn set_xet_uploads(&self, on: bool) {
        self.state.xet_uploads.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn set_faults(&self, class: RouteClass, s: FaultSettings) -> Result<(), String> {
        self.state.faults.set(class, s)
    }

    pub fn clear_faults(&self) {
        for c in RouteClass::EVERY {
            let _ = self.state.faults.set(c, FaultSettings::default());
        }
    }

    /// The commit budget per repository now in force.
    pub fn commit_limit(&self) -> CommitLimit {
        self.state.commits.limit()
    }

    /// Changes the commit budget per repository; commits already made keep counting in the window.
    pub fn set_commit_limit(&self, limit: CommitLimit) {
        self.state.commits.set_limit(limit);
    }

    /// Accepted and refused commits per repo (`datasets/ns/name`; models without a prefix).
    pub fn commit_stats(&self) -> std::collections::BTreeMap<String, RepoCommitStats> {
        self.state.commits.stats()
    }

    /// Forgets every repo's commits: a full budget everywhere.
    pub fn reset_commit_counts(&self) {
        self.state.commits.reset();
    }

    /// Most entries a commit may leave in a directory it adds to (0 = no limit).
    pub fn dir_entry_limit(&self) -> usize {
        self.state.store.dir_entry_limit()
    }

    pub fn set_dir_entry_limit(&self, n: usize) {
        self.state.store.set_dir_entry_limit(n);
    }

    /// Most operations a bucket batch (and paths a bucket paths-info) may carry (0 = no limit).
    pub fn bucket_batch_limit(&self) -> usize {
        self.state.buckets.batch_limit()
    }

    pub fn set_bucket_batch_limit(&self, n: usize) {
        self.state.buckets.set_batch_limit(n);
    }

    /// The request windows now in force.
    pub fn request_windows(&self) -> RequestWindows {
        self.state.windows.settings()
    }

    /// Changes the request windows; counts of the current window carry on.
    pub fn set_request_windows(&self, settings: RequestWindows) -> Result<(), String> {
        self.state.windows.set_settings(settings)
    }

    /// Requests per user or IP and bucket in the current window, and refusals.
    pub fn request_window_stats(&self) -> WindowStats {
        self.state.windows.stats()
    }

    /// Forgets every count: a fresh window for every user and IP.
    pub fn reset_request_windows(&self) {
        self.state.windows.reset();
    }

    pub fn stats(&self, class: RouteClass) -> super::faults::ClassStatsSnapshot {
        self.state.faults.stats(class)
    }

    pub fn reset_stats(&self) {
        self.state.faults.reset_stats()
    }

    /// Stops every listener; stalled requests are released first so nothing hangs.
    pub async fn stop(mut self) {
        self.state.faults.shutdown.notify_waiters();
        if let Some(tx) = self.cas_stop.take() {
            let _ = tx.send(());
        }
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
        }
    }
}

fn base_url(state: &HubState, headers: &HeaderMap) -> String {
    headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_alphanumeric() || ".:-[]".contains(c)))
        .map(|h| format!("http://{h}"))
        .unwrap_or_else(|| state.endpoint.clone())
}

async fn api_entry(State(state): State<Arc<HubState>>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    match dispatch(&state, req).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(%method, %path, error = %e, "request failed");
            e.into_response()
        }
    }
}

async fn dispatch(state: &HubState, req: Request) -> HubResult<Response> {
    let (parts, body) = req.into_parts();
    let route = super::routes::parse(&parts.method, parts.uri.path())?;
    let req = Req {
        base: base_url(state, &parts.headers),
        caller: state.auth.caller(&parts.headers)?,
        query: parse_query(parts.uri.query()),
        method: parts.method,
        headers: parts.headers,
        body,
    };
    let m = req.method.clone();
    let is = |want: &Method| m == *want;
    match route {
        Route::Whoami => api_read::whoami(state, req).await,
        Route::CreateRepo if is(&Method::POST) => api_write::create_repo(state, req).await,
        Route::DeleteRepo if is(&Method::DELETE) => api_write::delete_repo(state, req).await,
        Route::ValidateYaml if is(&Method::POST) => api_write::validate_yaml(state, req).await,
        Route::ListRepos(ty) => api_read::list_repos(state, req, ty).await,
        Route::Info { repo, rev } if is(&Method::GET) => api_read::info(state, req, repo, rev).await,
        Route::Tree { repo, rev, path } if is(&Method::GET) => api_read::tree(state, req, repo, rev, path).await,
        Route::PathsInfo { repo, rev } if is(&Method::POST) => api_read::paths_info(state, req, repo, rev).await,
        Route::Preupload { repo, rev } if is(&Method::POST) => api_write::preupload(state, req, repo, rev).await,
        Route::Commit { repo, rev } if is(&Method::POST) => api_write::commit(state, req, repo, rev).await,
        Route::Refs { repo } if is(&Method::GET) => api_read::refs(state, req, repo).await,
        Route::Commits { repo, rev } if is(&Method::GET) => api_read::commits(state, req, repo, rev).await,
        Route::XetToken { repo, rev, write } if is(&Method::GET) => xet::token(state, req, repo, rev, write).await,
        Route::Branch { repo, name } => api_write::set_ref(state, req, repo, RefKind::Branch, name).await,
        Route::Tag { repo, name } => api_write::set_ref(state, req, repo, RefKind::Tag, name).await,
        Route::Settings { repo } if is(&Method::PUT) => api_write::settings(state, req, repo).await,
        Route::Discussions { repo } if is(&Method::POST) => discussions::create(state, req, repo).await,
        Route::Discussions { repo } if is(&Method::GET) => discussions::list(state, req, repo).await,
        Route::Discussion { repo, num } if is(&Method::GET) => discussions::get(state, req, repo, num).await,
        Route::Resolve { repo, rev, path } => resolve::resolve(state, req, repo, rev, path).await,
        Route::LfsBatch { repo } if is(&Method::POST) => lfs::batch(state, req, repo).await,
        Route::LfsVerify { repo } if is(&Method::POST) => lfs::verify(state, req, repo).await,
        Route::AdminFaults => admin_faults(state, req).await,
        Route::AdminStats => admin_stats(state, req).await,
        Route::AdminLimits => admin_limits(state, req).await,
        Route::MoveRepo if is(&Method::POST) => bucket_api::move_bucket(state, req).await,
        Route::Bucket(r) => bucket_api::dispatch(state, req, r).await,
        _ => Err(HubError::MethodNotAllowed),
    }
}

/// The settings object of a `POST` to an admin endpoint (`None` for a `GET`, 405 for any other
/// method); every admin endpoint needs a write token.
async fn admin_post(req: Req) -> HubResult<Option<serde_json::Map<String, Value>>> {
    if !req.caller.as_ref().is_some_and(|c| c.write) {
        return Err(HubError::Forbidden(
            "The admin endpoint needs a write token".to_string(),
        ));
    }
    match req.method {
        Method::POST => {}
        Method::GET => return Ok(None),
        _ => return Err(HubError::MethodNotAllowed),
    }
    let body = read_body(req.body, 1 << 20).await?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| HubError::bad_request(format!("Invalid body: {e}")))
}

/// `GET /admin/faults` shows every class (coarse and CAS steps); `POST` takes `{"api": {...},
/// "xorb-upload": {...}}` (classes left out keep their settings). Needs a write token: faults affect everyone using this Hub.
async fn admin_faults(state: &HubState, req: Req) -> HubResult<Response> {
    if let Some(v) = admin_post(req).await? {
        for (k, s) in v {
            let class =
                RouteClass::parse(&k).ok_or_else(|| HubError::bad_request(format!("Unknown route class {k:?}")))?;
            let s: FaultSettings =
                serde_json::from_value(s).map_err(|e| HubError::bad_request(format!("Invalid settings: {e}")))?;
            state.faults.set(class, s).map_err(HubError::BadRequest)?;
            tracing::info!(?class, "fault settings changed");
        }
    }
    let v: serde_json::Map<String, Value> = RouteClass::EVERY
        .iter()
        .map(|c| Ok((c.name().to_string(), serde_json::to_value(state.faults.get(*c))?)))
        .collect::<Result<_, serde_json::Error>>()
        .map_err(|e| HubError::Internal(e.to_string()))?;
    Ok(json_response(StatusCode::OK, &v))
}

/// `GET /admin/limits`: the commit budget (`"commit_limit": "128/3600"`, `"0"` = none), the
/// entries allowed per directory (`"dir_entry_limit": 10000`, 0 = none), the operations allowed per
/// bucket batch (`"bucket_batch_limit": 1000`, 0 = none) and each repo's commits
/// (`in_window`, `total`, `refused`, `retry_after`). `POST` with `{"commit_limit": "6/60"}`,
/// `{"dir_entry_limit": N}`, `{"bucket_batch_limit": N}` and/or `{"reset_commits": true}` (forgets every repo's commits) changes
/// those; settings left out keep their value. `"request_windows"` shows and takes the request
/// windows' settings (see `RequestWindows::apply_json`). Needs a write token, as `/admin/faults`.
async fn admin_limits(state: &HubState, req: Req) -> HubResult<Response> {
    if let Some(v) = admin_post(req).await? {
        let mut limit = None;
        let mut entries = None;
        let mut bucket_ops = None;
        let mut reset = false;
        let mut windows = None;
        for (k, v) in &v {
            match (k.as_str(), v) {
                ("commit_limit", Value::String(s)) => {
                    limit = Some(
                        s.parse::<CommitLimit>()
                            .map_err(|e| HubError::bad_request(format!("Invalid commit_limit: {e}")))?,
                    );
                }
                ("commit_limit", Value::Number(n)) if n.as_u64() == Some(0) => limit = Some(CommitLimit::UNLIMITED),
                ("dir_entry_limit", Value::Number(n)) => {
                    let n = n.as_u64().and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
                        HubError::bad_request(format!("Invalid dir_entry_limit {n}: a whole number ≥ 0"))
                    })?;
                    entries = Some(n);
                }
                ("bucket_batch_limit", Value::Number(n)) => {
                    let n = n.as_u64().and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
                        HubError::bad_request(format!("Invalid bucket_batch_limit {n}: a whole number ≥ 0"))
                    })?;
                    bucket_ops = Some(n);
                }
                ("reset_commits", Value::Bool(b)) => reset = *b,
                ("request_windows", v) => {
                    let mut w = state.windows.settings();
                    let reset = w
                        .apply_json(v)
                        .map_err(|e| HubError::bad_request(format!("Invalid request_windows: {e}")))?;
                    windows = Some((w, reset));
                }
                _ => {
                    return Err(HubError::bad_request(format!(
                        "Unknown or invalid setting {k:?}: use \"commit_limit\": \"N/SECONDS\" (or \"0\"), \"dir_entry_limit\": N, \"bucket_batch_limit\": N, \"reset_commits\": true and \"request_windows\": {{...}}"
                    )));
                }
            }
        }
        if let Some(l) = limit {
            state.commits.set_limit(l);
            tracing::info!(commit_limit = %l, "commit limit changed");
        }
        if let Some(n) = entries {
            state.store.set_dir_entry_limit(n);
            tracing::info!(dir_entry_limit = n, "directory entry limit changed");
        }
        if let Some(n) = bucket_ops {
            state.buckets.set_batch_limit(n);
            tracing::info!(bucket_batch_limit = n, "bucket batch limit changed");
        }
        if reset {
            state.commits.reset();
            tracing::info!("commit counts reset");
        }
        if let Some((w, reset)) = windows {
            state.windows.set_settings(w).map_err(HubError::BadRequest)?;
            if reset {
                state.windows.reset();
            }
            tracing::info!(reset, "request windows changed");
        }
    }
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({
            "commit_limit": state.commits.limit(),
            "dir_entry_limit": state.store.dir_entry_limit(),
            "bucket_batch_limit": state.buckets.batch_limit(),
            "repos": state.commits.stats(),
            "request_windows": state.windows.settings().to_json(),
        }),
    ))
}

/// `GET /admin/stats[?reset=1]`: requests, body bytes and injected faults per class, and
/// `"request_windows"`: each user's and IP's requests in the current window (`reset` leaves those).
async fn admin_stats(state: &HubState, req: Req) -> HubResult<Response> {
    let mut v: serde_json::Map<String, Value> = RouteClass::EVERY
        .iter()
        .map(|c| Ok((c.name().to_string(), serde_json::to_value(state.faults.stats(*c))?)))
        .collect::<Result<_, serde_json::Error>>()
        .map_err(|e| HubError::Internal(e.to_string()))?;
    let windows = serde_json::to_value(state.windows.stats()).map_err(|e| HubError::Internal(e.to_string()))?;
    v.insert("request_windows".to_string(), windows);
    if super::http_util::query_flag(&req.query, "reset") {
        state.faults.reset_stats();
    }
    Ok(json_response(StatusCode::OK, &v))
}

async fn blob_entry(State(state): State<Arc<HubState>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let req = Req {
        base: base_url(&state, &parts.headers),
        caller: None,
        query: parse_query(parts.uri.query()),
        method: parts.method,
        headers: parts.headers,
        body,
    };
    let r = match segs.as_slice() {
        [kind @ ("lfs" | "xet"), key] => resolve::blob_download(&state, req, kind, key).await,
        ["upload", ..] if matches!(req.method, Method::PUT | Method::POST) => {
            lfs::blob_upload(&state, req, &segs).await
        }
        _ => Err(HubError::RouteNotFound),
    };
    r.unwrap_or_else(|e| e.into_response())
}
