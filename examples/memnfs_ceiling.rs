//! The NFS ceiling (see `hubfs::nfs::ceiling`) as a program, for fio runs by hand.
//!
//! `cargo run --release --example memnfs_ceiling -- [SIZE_MIB]` serves data.bin on a free loopback
//! port (printed as `nfs: IP:PORT`) until Ctrl-C.

fn main() -> anyhow::Result<()> {
    let mib: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(1024);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let (addr, task) = hubfs::nfs::ceiling::serve(mib, "127.0.0.1:0".parse()?).await?;
        println!("nfs: {addr} (data.bin, {mib} MiB)");
        hubfs::cli::wait_for_signal().await?;
        task.abort();
        Ok(())
    })
}
