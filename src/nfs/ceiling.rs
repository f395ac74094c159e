//! The NFS ceiling for benchmarks: a trivial nfsserve filesystem serving one file (`data.bin`) from
//! memory. Served through hubfs's RPC front (`serve`), whatever it reaches is what the transport and
//! the client allow on this machine, and hubfs's NFS frontend is measured against it in the same
//! run. `serve_nfsserve` serves it through nfsserve's own TCP listener instead, to compare the two
//! transports.

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use nfsserve::nfs::{fattr3, fileid3, filename3, ftype3, nfspath3, nfsstat3, nfstime3, sattr3, specdata3};
use nfsserve::tcp::{NFSTcp, NFSTcpListener};
use nfsserve::vfs::{DirEntry, NFSFileSystem, ReadDirResult, VFSCapabilities};

const ROOT: fileid3 = 1;
const FILE: fileid3 = 2;
const NAME: &[u8] = b"data.bin";

pub struct MemNfs {
    data: Vec<u8>,
}

impl MemNfs {
    /// `mib` MiB of pseudo-random bytes.
    pub fn new(mib: usize) -> MemNfs {
        MemNfs {
            data: crate::util::pattern::demo_bytes(mib << 20, 1),
        }
    }

    fn attr(&self, id: fileid3) -> fattr3 {
        let (ftype, mode, nlink, size) = match id {
            ROOT => (ftype3::NF3DIR, 0o555, 2, 0),
            _ => (ftype3::NF3REG, 0o444, 1, self.data.len() as u64),
        };
        fattr3 {
            ftype,
            mode,
            nlink,
            uid: 0,
            gid: 0,
            size,
            used: size,
            rdev: specdata3::default(),
            fsid: 1,
            fileid: id,
            atime: nfstime3::default(),
            mtime: nfstime3::default(),
            ctime: nfstime3::default(),
        }
    }
}

/// Serves a MemNfs of `mib` MiB through hubfs's RPC front on `addr` (port 0: a free one) until the
/// task is aborted.
pub async fn serve(mib: usize, addr: SocketAddr) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = super::rpc::RpcListener::bind(addr, Arc::new(MemNfs::new(mib)), false).await?;
    let addr = listener.local_addr()?;
    Ok((addr, tokio::spawn(listener.serve())))
}

/// The same server through nfsserve 0.11's own TCP listener.
pub async fn serve_nfsserve(
    mib: usize,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = NFSTcpListener::bind(&addr.to_string(), MemNfs::new(mib)).await?;
    let addr = SocketAddr::new(listener.get_listen_ip(), listener.get_listen_port());
    let task = tokio::spawn(async move {
        let _ = listener.handle_forever().await;
    });
    Ok((addr, task))
}

#[async_trait]
impl NFSFileSystem for MemNfs {
    fn capabilities(&self) -> VFSCapabilities {
        VFSCapabilities::ReadWrite
    }

    fn root_dir(&self) -> fileid3 {
        ROOT
    }

    async fn lookup(&self, dirid: fileid3, filename: &filename3) -> Result<fileid3, nfsstat3> {
        match (dirid, filename.0.as_slice()) {
            (ROOT, NAME) => Ok(FILE),
            (ROOT, b"." | b"..") => Ok(ROOT),
            (ROOT, _) => Err(nfsstat3::NFS3ERR_NOENT),
            _ => Err(nfsstat3::NFS3ERR_NOTDIR),
        }
    }

    async fn getattr(&self, id: fileid3) -> Result<fattr3, nfsstat3> {
        match id {
            ROOT | FILE => Ok(self.attr(id)),
            _ => Err(nfsstat3::NFS3ERR_STALE),
        }
    }

    async fn setattr(&self, _id: fileid3, _setattr: sattr3) -> Result<fattr3, nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }

    async fn read(&self, id: fileid3, offset: u64, count: u32) -> Result<(Vec<u8>, bool), nfsstat3> {
        if id != FILE {
            return Err(nfsstat3::NFS3ERR_ISDIR);
        }
        let len = self.data.len();
        let start = (offset as usize).min(len);
        let end = start.saturating_add(count as usize).min(len);
        Ok((self.data[start..end].to_vec(), end == len))
    }

    async fn write(&self, _id: fileid3, _offset: u64, _data: &[u8]) -> Result<fattr3, nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }

    async fn create(&self, _d: fileid3, _f: &filename3, _a: sattr3) -> Result<(fileid3, fattr3), nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }

    async fn create_exclusive(&self, _d: fileid3, _f: &filename3) -> Result<fileid3, nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }

    async fn mkdir(&self, _d: fileid3, _f: &filename3) -> Result<(fileid3, fattr3), nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }

    async fn remove(&self, _d: fileid3, _f: &filename3) -> Result<(), nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }

    async fn rename(&self, _a: fileid3, _b: &filename3, _c: fileid3, _d: &filename3) -> Result<(), nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }

    async fn readdir(&self, dirid: fileid3, start_after: fileid3, _max: usize) -> Result<ReadDirResult, nfsstat3> {
        if dirid != ROOT {
            return Err(nfsstat3::NFS3ERR_NOTDIR);
        }
        let mut entries = Vec::new();
        if start_after < FILE {
            entries.push(DirEntry {
                fileid: FILE,
                name: NAME.into(),
                attr: self.attr(FILE),
            });
        }
        Ok(ReadDirResult { entries, end: true })
    }

    async fn symlink(
        &self,
        _d: fileid3,
        _l: &filename3,
        _s: &nfspath3,
        _a: &sattr3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }

    async fn readlink(&self, _id: fileid3) -> Result<nfspath3, nfsstat3> {
        Err(nfsstat3::NFS3ERR_INVAL)
    }
}

#[async_trait]
impl super::rpc::Served for MemNfs {
    async fn write_durable(
        &self,
        _who: super::rpc::Who<'_>,
        _id: fileid3,
        _offset: u64,
        _data: &[u8],
        _asked: super::rpc::Stability,
    ) -> Result<(fattr3, super::rpc::Stability), nfsstat3> {
        Err(nfsstat3::NFS3ERR_ROFS)
    }

    async fn commit(&self, _id: fileid3) -> Result<(), nfsstat3> {
        Ok(())
    }
}
