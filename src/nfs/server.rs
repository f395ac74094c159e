//! Serving a VirtualFs over NFSv3 on one TCP port (NFS, MOUNT and portmapper GETPORT all answer
//! there), and mounting it with the kernel's NFS client where the kernel has one.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

use super::rpc::RpcListener;
use super::{MAX_TRANSFER, NfsAdapter, WriteLimits};
use crate::vfs::VirtualFs;

/// A running NFS server; dropping it stops accepting connections.
pub struct NfsServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
    /// The adapter's write handles, closed at stop so their files get committed.
    writers: Arc<super::Writers>,
}

impl NfsServer {
    /// Binds `addr` (port 0 picks a free port) and serves `vfs` until stopped.
    pub async fn start(vfs: Arc<VirtualFs>, addr: SocketAddr) -> anyhow::Result<NfsServer> {
        NfsServer::start_with(vfs, addr, WriteLimits::default()).await
    }

    /// `start` with other write-handle limits than the defaults.
    pub async fn start_with(vfs: Arc<VirtualFs>, addr: SocketAddr, limits: WriteLimits) -> anyhow::Result<NfsServer> {
        let writable = vfs.is_writable();
        let adapter = Arc::new(NfsAdapter::with_limits(vfs, limits));
        let writers = adapter.writers.clone();
        let listener = RpcListener::bind(addr, adapter, writable)
            .await
            .with_context(|| format!("cannot listen on {addr} for NFS (pick a free --nfs-addr)"))?;
        let addr = listener.local_addr().context("reading the NFS listener's address")?;
        let task = tokio::spawn(listener.serve());
        Ok(NfsServer { addr, task, writers })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting connections (connections already open end with their client) and closes
    /// every file open for writing, so a drain that follows commits them.
    pub fn stop(&self) {
        self.task.abort();
        self.writers.close_all();
    }
}

impl Drop for NfsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether the running kernel has an NFS client (built in, or loaded as a module).
pub fn kernel_has_nfs_client() -> bool {
    let has = || {
        std::fs::read_to_string("/proc/filesystems")
            .map(|s| s.lines().any(|l| l.split_whitespace().last() == Some("nfs")))
            .unwrap_or(false)
    };
    if has() {
        return true;
    }
    // A modular client loads on demand; try once, quietly.
    let _ = std::process::Command::new("modprobe")
        .arg("-q")
        .arg("nfs")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    has()
}

/// The options the kernel mount uses: NFSv3 over TCP on the server's single port, no lock manager,
/// 1 MiB transfers, attribute caching as long as the metadata TTL.
pub fn kernel_mount_options(addr: SocketAddr, metadata_ttl: Duration, writable: bool) -> String {
    let port = addr.port();
    format!(
        "vers=3,tcp,port={port},mountport={port},nolock,rsize={MAX_TRANSFER},wsize={MAX_TRANSFER},actimeo={},{}",
        metadata_ttl.as_secs().max(1),
        if writable { "rw" } else { "ro" }
    )
}

/// Mounts the server at `mountpoint` with the kernel client (`mount -t nfs`).
pub fn kernel_mount(addr: SocketAddr, mountpoint: &Path, metadata_ttl: Duration, writable: bool) -> anyhow::Result<()> {
    if !kernel_has_nfs_client() {
        bail!(
            "this kernel has no NFS client (no \"nfs\" in /proc/filesystems): mount over FUSE instead \
             (drop --nfs), or pass --serve-only and point a userspace NFS client at the server"
        );
    }
    let out = std::process::Command::new("mount")
        .arg("-t")
        .arg("nfs")
        .arg("-o")
        .arg(kernel_mount_options(addr, metadata_ttl, writable))
        .arg(format!("{}:/", addr.ip()))
        .arg(mountpoint)
        .output()
        .context("running mount(8) for the NFS mount")?;
    if !out.status.success() {
        bail!(
            "mount -t nfs at {} failed: {}",
            mountpoint.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_options_name_the_single_port_and_ttl() {
        let o = kernel_mount_options("127.0.0.1:2049".parse().unwrap(), Duration::from_secs(60), false);
        assert!(o.contains("vers=3,tcp,port=2049,mountport=2049,nolock"), "{o}");
        assert!(o.contains("rsize=1048576,wsize=1048576"), "{o}");
        assert!(o.contains("actimeo=60"), "{o}");
        assert!(o.ends_with(",ro"), "a read-only mount: {o}");
        let w = kernel_mount_options("127.0.0.1:2049".parse().unwrap(), Duration::from_secs(60), true);
        assert!(w.ends_with(",rw"), "a --write mount must not be mounted ro: {w}");
    }
}
