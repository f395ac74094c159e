//! The NFS ceiling (see `hubfs::nfs::ceiling`) as a program, for fio runs by hand.
//!
//! `cargo run --release --example memnfs_ceiling -- [SIZE_MIB] [--nfsserve]` serves data.bin on a
//! free loopback port (printed as `nfs: IP:PORT`) until Ctrl-C, through hubfs's RPC front or, with
//! `--nfsserve`, through nfsserve's own TCP listener.

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let stock = args.iter().any(|a| a == "--nfsserve");
    let mib: usize = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(1024);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let addr = "127.0.0.1:0".parse()?;
        let (addr, task) = if stock {
            hubfs::nfs::ceiling::serve_nfsserve(mib, addr).await?
        } else {
            hubfs::nfs::ceiling::serve(mib, addr).await?
        };
        let via = if stock { "nfsserve" } else { "hubfs rpc" };
        println!("nfs: {addr} (data.bin, {mib} MiB, {via})");
        hubfs::process::signals::wait_for_signal().await?;
        task.abort();
        Ok(())
    })
}
