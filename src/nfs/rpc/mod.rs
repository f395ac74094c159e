//! hubfs's own ONC RPC front for NFSv3: record marking over TCP, the RPC header, and the NFS v3,
//! MOUNT v3 and portmapper programs, all on one port, calling an nfsserve `NFSFileSystem` directly.
//!
//! It replaces `nfsserve::tcp` because of two costs measured there (docs/BENCHMARKS.md): nfsserve
//! 0.11 remembers every (xid, client) for 60 s and sweeps that whole map on every call under one
//! mutex, so sustained small reads fall to a fifth of their first seconds; and it writes each
//! reply's record mark and body in two writes, which let libnfs read half a reply at teardown.
//! Here a reply is built in one buffer with its mark and handed to the socket whole, and nothing is
//! kept per call once it is answered.
//!
//! No duplicate-request cache: over TCP a client resends a call only after its connection broke,
//! so a resent non-idempotent call (a REMOVE, say) may get the answer a second attempt earns
//! (NFS3ERR_NOENT), as with any server that keeps no such cache.

mod conn;
mod mount;
mod msg;
mod nfs3;
mod nfs3_dir;
mod xdr;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use nfsserve::nfs::{fattr3, fileid3, nfsstat3};
use nfsserve::vfs::NFSFileSystem;
use tokio::net::TcpListener;

/// How far a WRITE's data has got (RFC 1813 `stable_how`): UNSTABLE data may be lost by a server
/// crash until a COMMIT; DATA_SYNC and FILE_SYNC data is on stable storage when answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stability {
    Unstable = 0,
    DataSync = 1,
    FileSync = 2,
}

impl Stability {
    pub fn from_wire(v: u32) -> Option<Stability> {
        match v {
            0 => Some(Stability::Unstable),
            1 => Some(Stability::DataSync),
            2 => Some(Stability::FileSync),
            _ => None,
        }
    }
}

/// What the front calls beyond nfsserve's trait, which has no word for WRITE stability or COMMIT,
/// and whose READ returns a `Vec` and no attributes (so a READ cost a copy and a second GETATTR).
#[async_trait]
pub trait Served: NFSFileSystem {
    /// WRITE, made as stable as `asked` (or more); returns the attributes after it and the
    /// stability reached, which the reply tells the client.
    async fn write_durable(
        &self,
        id: fileid3,
        offset: u64,
        data: &[u8],
        asked: Stability,
    ) -> Result<(fattr3, Stability), nfsstat3>;

    /// COMMIT: once this returns Ok, every WRITE to `id` answered so far is on stable storage.
    async fn commit(&self, id: fileid3) -> Result<(), nfsstat3>;

    /// READ: the bytes, whether they end the file, and the file's attributes for the reply (None
    /// when they cannot be had).
    async fn read_attr(&self, id: fileid3, offset: u64, count: u32) -> Result<(Bytes, bool, Option<fattr3>), nfsstat3> {
        let (data, eof) = self.read(id, offset, count).await?;
        Ok((Bytes::from(data), eof, self.getattr(id).await.ok()))
    }
}

/// What the front needs of a filesystem: nfsserve's trait and `Served`, shareable across tasks.
pub trait Fs: Served + Send + Sync + 'static {}
impl<T: Served + Send + Sync + 'static> Fs for T {}

/// The programs' shared state: the filesystem and the facts their replies need.
pub struct Front<T> {
    fs: Arc<T>,
    /// The port every program answers on (portmapper GETPORT gives it out).
    port: u16,
    /// Whether the filesystem takes changes; LINK and MKNOD, which the trait has no call for, are
    /// answered NFS3ERR_ROFS when it does not and NFS3ERR_NOTSUPP when it does.
    writable: bool,
}

impl<T: Fs> Front<T> {
    /// The reply to one record, or None when it gets none (not a call, or unreadable).
    async fn answer(&self, record: &[u8]) -> Option<Vec<u8>> {
        let call = match msg::parse_call(record) {
            Ok(c) => c,
            Err(msg::BadCall::Unreadable(why)) => {
                tracing::debug!(%why, "NFS: unreadable call header, not answered");
                return None;
            }
            Err(bad) => return msg::denied(&bad),
        };
        let xid = call.xid;
        Some(match (call.prog, call.vers) {
            (nfs3::PROGRAM, 3) => nfs3::dispatch(self, call).await,
            (nfs3::PROGRAM, _) => msg::prog_mismatch(xid, 3, 3),
            (mount::MOUNT_PROGRAM, 3) => mount::mount(self, call).await,
            (mount::MOUNT_PROGRAM, _) => msg::prog_mismatch(xid, 3, 3),
            (mount::PORTMAP_PROGRAM, 2) => mount::portmap(self, call),
            (mount::PORTMAP_PROGRAM, _) => msg::prog_mismatch(xid, 2, 2),
            _ => msg::refused(xid, msg::Refusal::ProgUnavail),
        })
    }
}

/// A bound NFS port, not yet serving.
pub struct RpcListener<T> {
    listener: TcpListener,
    front: Arc<Front<T>>,
}

impl<T: Fs> RpcListener<T> {
    /// Binds `addr` (port 0 picks a free one) for `fs`.
    pub async fn bind(addr: SocketAddr, fs: Arc<T>, writable: bool) -> std::io::Result<RpcListener<T>> {
        let listener = TcpListener::bind(addr).await?;
        let port = listener.local_addr()?.port();
        Ok(RpcListener {
            listener,
            front: Arc::new(Front { fs, port, writable }),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts connections until the task running this is aborted; each connection is served on a
    /// task of its own and ends with its client.
    pub async fn serve(self) {
        loop {
            match self.listener.accept().await {
                Ok((socket, peer)) => {
                    tracing::debug!(%peer, "NFS connection");
                    tokio::spawn(conn::serve(self.front.clone(), socket));
                }
                Err(e) => {
                    // Out of descriptors, say: wait instead of spinning, and keep serving.
                    tracing::warn!(error = %e, "NFS accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}
