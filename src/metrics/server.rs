//! The `/metrics` endpoint (`--metrics-addr HOST:PORT`): a small HTTP server on a thread and
//! runtime of its own, so a scrape never waits behind a busy mount and a stuck mount still answers.

use std::net::SocketAddr;

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("--metrics-addr {addr}: {err}")]
    Bind { addr: SocketAddr, err: std::io::Error },
    #[error("starting the metrics thread: {0}")]
    Thread(std::io::Error),
}

/// Turns the process's own text into what a scrape answers (the CSI plugin merges its servers'
/// metrics in). Runs on a blocking thread: it may wait on other processes.
pub type Render = Box<dyn Fn(String) -> String + Send + Sync>;

/// A running endpoint; the address it listens on (port 0 picks one).
pub struct MetricsServer {
    pub addr: SocketAddr,
}

/// Listens on `addr` (bound before returning, so a busy port fails the command) and serves
/// `GET /metrics` until the process exits.
pub fn serve(addr: SocketAddr, render: Option<Render>) -> Result<MetricsServer, MetricsError> {
    let listener = std::net::TcpListener::bind(addr).map_err(|err| MetricsError::Bind { addr, err })?;
    let local = listener.local_addr().map_err(|err| MetricsError::Bind { addr, err })?;
    listener
        .set_nonblocking(true)
        .map_err(|err| MetricsError::Bind { addr, err })?;
    let render = std::sync::Arc::new(render);
    std::thread::Builder::new()
        .name("hubfs-metrics".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics endpoint not started");
                    return;
                }
            };
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics endpoint not started");
                        return;
                    }
                };
                let app = axum::Router::new().route(
                    "/metrics",
                    axum::routing::get(move || {
                        let render = render.clone();
                        async move {
                            let own = super::get().encode();
                            let body = match render.as_ref() {
                                Some(_) => tokio::task::spawn_blocking(move || match render.as_ref() {
                                    Some(f) => f(own),
                                    None => own,
                                })
                                .await
                                .unwrap_or_default(),
                                None => own,
                            };
                            (
                                [(
                                    http::header::CONTENT_TYPE,
                                    prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                                )],
                                body,
                            )
                        }
                    }),
                );
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::warn!(error = %e, "metrics endpoint stopped");
                }
            });
        })
        .map_err(MetricsError::Thread)?;
    tracing::info!(addr = %local, "metrics at http://{local}/metrics");
    Ok(MetricsServer { addr: local })
}
