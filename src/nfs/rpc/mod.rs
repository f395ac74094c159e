//! hubfs's own ONC RPC front for NFSv3: record marking over TCP, the RPC header, and the NFS v3,
//! MOUNT v3 and portmapper programs, all on one port, calling an nfsserve `NFSFileSystem` directly.
//!
//! It replaces `nfsserve::tcp` because of two costs measured there (docs/BENCHMARKS.md's history in git): nfsserve
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
use nfsserve::nfs::{fattr3, fileid3, filename3, nfspath3, nfsstat3, sattr3, specdata3};
use nfsserve::vfs::{NFSFileSystem, VFSCapabilities};
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

/// Most supplementary groups AUTH_UNIX credentials carry.
pub const MAX_GROUPS: usize = 16;

/// The caller of one call, as its AUTH_UNIX credentials name it: user, group and supplementary
/// groups. AUTH_UNIX is not authentication (a client says what it likes); it is what every NFSv3
/// server without Kerberos goes by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    groups: [u32; MAX_GROUPS],
    ngroups: u8,
}

impl Cred {
    /// The first `MAX_GROUPS` of `groups` are kept.
    pub fn new(uid: u32, gid: u32, groups: &[u32]) -> Cred {
        let n = groups.len().min(MAX_GROUPS);
        let mut g = [0u32; MAX_GROUPS];
        g[..n].copy_from_slice(&groups[..n]);
        Cred {
            uid,
            gid,
            groups: g,
            ngroups: n as u8,
        }
    }

    pub fn groups(&self) -> &[u32] {
        &self.groups[..usize::from(self.ngroups)]
    }
}

/// Who makes a call: AUTH_UNIX's ids, or None for AUTH_NONE (the filesystem decides whom that
/// stands for; hubfs: the mount's owner).
pub type Who<'a> = Option<&'a Cred>;

/// ACCESS bits (RFC 1813 §3.3.4).
pub const ACCESS3_READ: u32 = 0x01;
pub const ACCESS3_LOOKUP: u32 = 0x02;
pub const ACCESS3_MODIFY: u32 = 0x04;
pub const ACCESS3_EXTEND: u32 = 0x08;
pub const ACCESS3_DELETE: u32 = 0x10;
pub const ACCESS3_EXECUTE: u32 = 0x20;

/// How CREATE makes its file (RFC 1813 `createhow3`; an EXCLUSIVE create's verifier is not kept).
#[derive(Debug, Clone)]
pub enum CreateHow {
    Unchecked(sattr3),
    Guarded(sattr3),
    Exclusive,
}

/// What MKNOD makes: the types RFC 1813 `mknoddata3` allows (the others are NFS3ERR_BADTYPE).
#[derive(Debug, Clone, Copy)]
pub enum NodeType {
    Char(specdata3),
    Block(specdata3),
    Socket,
    Fifo,
}

/// What the front calls beyond nfsserve's trait, which has no word for WRITE stability, COMMIT,
/// MKNOD, LINK or the caller's credentials, and whose READ returns a `Vec` and no attributes (so a
/// READ cost a copy and a second GETATTR).
///
/// The `*_by` calls carry the caller (`Who`): a filesystem that checks permissions and gives new
/// entries their creator's ids does it there. Their defaults call nfsserve's trait and ignore the
/// caller; MKNOD and LINK default to NFS3ERR_NOTSUPP.
#[async_trait]
pub trait Served: NFSFileSystem {
    /// WRITE, made as stable as `asked` (or more); returns the attributes after it and the
    /// stability reached, which the reply tells the client.
    async fn write_durable(
        &self,
        who: Who<'_>,
        id: fileid3,
        offset: u64,
        data: &[u8],
        asked: Stability,
    ) -> Result<(fattr3, Stability), nfsstat3>;

    /// COMMIT: once this returns Ok, every WRITE to `id` answered so far is on stable storage.
    async fn commit(&self, id: fileid3) -> Result<(), nfsstat3>;

    /// READ: the bytes, whether they end the file, and the file's attributes for the reply (None
    /// when they cannot be had).
    async fn read_attr(
        &self,
        _who: Who<'_>,
        id: fileid3,
        offset: u64,
        count: u32,
    ) -> Result<(Bytes, bool, Option<fattr3>), nfsstat3> {
        let (data, eof) = self.read(id, offset, count).await?;
        Ok((Bytes::from(data), eof, self.getattr(id).await.ok()))
    }

    /// ACCESS: the object's attributes and which of the `asked` bits the caller has.
    async fn access_by(&self, _who: Who<'_>, id: fileid3, asked: u32) -> Result<(fattr3, u32), nfsstat3> {
        let attr = self.getattr(id).await?;
        let granted = match self.capabilities() {
            VFSCapabilities::ReadWrite => asked,
            VFSCapabilities::ReadOnly => asked & (ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_EXECUTE),
        };
        Ok((attr, granted))
    }

    async fn setattr_by(&self, _who: Who<'_>, id: fileid3, attr: sattr3) -> Result<fattr3, nfsstat3> {
        self.setattr(id, attr).await
    }

    /// CREATE: the new file's id, and its attributes when they are at hand.
    async fn create_by(
        &self,
        _who: Who<'_>,
        dirid: fileid3,
        name: &filename3,
        how: CreateHow,
    ) -> Result<(fileid3, Option<fattr3>), nfsstat3> {
        match how {
            CreateHow::Guarded(_) if self.lookup(dirid, name).await.is_ok() => Err(nfsstat3::NFS3ERR_EXIST),
            CreateHow::Unchecked(a) | CreateHow::Guarded(a) => {
                self.create(dirid, name, a).await.map(|(id, a)| (id, Some(a)))
            }
            CreateHow::Exclusive => Ok((self.create_exclusive(dirid, name).await?, None)),
        }
    }

    async fn mkdir_by(
        &self,
        _who: Who<'_>,
        dirid: fileid3,
        name: &filename3,
        _attr: sattr3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        self.mkdir(dirid, name).await
    }

    async fn symlink_by(
        &self,
        _who: Who<'_>,
        dirid: fileid3,
        name: &filename3,
        target: &nfspath3,
        attr: sattr3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        self.symlink(dirid, name, target, &attr).await
    }

    async fn mknod_by(
        &self,
        _who: Who<'_>,
        _dirid: fileid3,
        _name: &filename3,
        _what: NodeType,
        _attr: sattr3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        Err(nfsstat3::NFS3ERR_NOTSUPP)
    }

    /// LINK: `id` under a second name, `name` in `dirid`.
    async fn link_by(&self, _who: Who<'_>, _id: fileid3, _dirid: fileid3, _name: &filename3) -> Result<(), nfsstat3> {
        Err(nfsstat3::NFS3ERR_NOTSUPP)
    }

    /// REMOVE and RMDIR.
    async fn remove_by(&self, _who: Who<'_>, dirid: fileid3, name: &filename3) -> Result<(), nfsstat3> {
        self.remove(dirid, name).await
    }

    async fn rename_by(
        &self,
        _who: Who<'_>,
        from_dirid: fileid3,
        from: &filename3,
        to_dirid: fileid3,
        to: &filename3,
    ) -> Result<(), nfsstat3> {
        self.rename(from_dirid, from, to_dirid, to).await
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
    /// Whether the filesystem takes changes: when it does not, MKNOD and LINK are answered
    /// NFS3ERR_ROFS here (a filesystem without `mknod_by`/`link_by` would say NFS3ERR_NOTSUPP).
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
