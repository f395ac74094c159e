//! The webhook's HTTPS: rustls with the aws-lc-rs provider reqwest already brings, the key pair
//! re-read when its files change (a Kubernetes Secret is updated in place, and the API server
//! must never see an expired certificate), and handshakes off the accept loop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

const TLS_HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);

/// Why a certificate and key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{path}: {err}")]
    Pem {
        path: PathBuf,
        err: rustls::pki_types::pem::Error,
    },
    #[error("{path}: no certificate in it")]
    NoCertificate { path: PathBuf },
    #[error("the key does not fit the certificate, or is unusable: {0}")]
    Key(rustls::Error),
}

/// Loads a PEM chain and key and checks that they belong together.
fn load_pair(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|err| TlsError::Read {
            path: path.to_path_buf(),
            err,
        })
    };
    let pem_err = |path: &Path, err| TlsError::Pem {
        path: path.to_path_buf(),
        err,
    };
    let chain = CertificateDer::pem_slice_iter(&read(cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(cert, e))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert.to_path_buf(),
        });
    }
    let key_der = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| pem_err(key, e))?;
    CertifiedKey::from_der(chain, key_der, provider).map_err(TlsError::Key)
}

/// The pair every handshake gets; swapped by [`KeyPair::watch`] when the files change.
#[derive(Debug)]
struct CurrentPair(parking_lot::RwLock<Arc<CertifiedKey>>);

impl rustls::server::ResolvesServerCert for CurrentPair {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().clone())
    }
}

/// What identifies a file's content cheaply: a Secret update swaps a symlink (new inode), an
/// overwrite changes the mtime or size.
type Stamp = Option<(SystemTime, u64, u64, u64)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.dev(), m.ino()))
}

/// The served key pair, and what reloads it from its files.
pub struct KeyPair {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Arc<CurrentPair>,
    seen: (Stamp, Stamp),
}

impl KeyPair {
    /// Loads the pair (the webhook does not start without a good one).
    pub fn load(cert: &Path, key: &Path) -> Result<KeyPair, TlsError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        // Stamped before reading: a change in between is reloaded at the first check.
        let seen = (stamp(cert), stamp(key));
        let pair = load_pair(cert, key, &provider)?;
        Ok(KeyPair {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            provider,
            current: Arc::new(CurrentPair(parking_lot::RwLock::new(Arc::new(pair)))),
            seen,
        })
    }

    /// A server configuration whose every handshake gets the current pair; HTTP/1.1 only.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(self.current.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// Re-reads the pair whenever either file's stamp changes, checking every `every`. A pair that
    /// does not load (half written, mismatched) is logged and the old one kept; it is tried again
    /// at the next change.
    pub async fn watch(mut self, every: Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let now = (stamp(&self.cert), stamp(&self.key));
            if now == self.seen {
                continue;
            }
            self.seen = now;
            let (c, k, p) = (self.cert.clone(), self.key.clone(), self.provider.clone());
            match tokio::task::spawn_blocking(move || load_pair(&c, &k, &p)).await {
                Ok(Ok(pair)) => {
                    *self.current.0.write() = Arc::new(pair);
                    tracing::info!(cert = %self.cert.display(), "TLS certificate reloaded");
                }
                Ok(Err(e)) => {
                    tracing::warn!("TLS certificate changed but cannot be loaded, serving the previous one: {e}")
                }
                Err(e) => tracing::warn!("TLS certificate reload failed: {e}"),
            }
        }
    }
}

/// Hands axum connections whose TLS handshake is done; handshakes run in tasks of their own, so a
/// slow or silent client delays nobody else.
pub struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(tokio_rustls::server::TlsStream<tokio::net::TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept loop never ends while the process runs.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

async fn accept_loop(
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    ready: tokio::sync::mpsc::Sender<(tokio_rustls::server::TlsStream<tokio::net::TcpStream>, SocketAddr)>,
) {
    loop {
        let (stream, peer) = match tcp.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                // EMFILE and the like: wait instead of spinning.
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, ready) = (acceptor.clone(), ready.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(TLS_HANDSHAKE_DEADLINE, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = ready.send((tls, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

/// Accepts TCP connections on `tcp` and hands them to axum once their handshake is done.
pub fn listen(tcp: tokio::net::TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<TlsListener> {
    let local = tcp.local_addr()?;
    let (tx, ready) = tokio::sync::mpsc::channel(64);
    tokio::spawn(accept_loop(tcp, tokio_rustls::TlsAcceptor::from(config), tx));
    Ok(TlsListener { ready, local })
}
