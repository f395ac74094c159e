//! The FUSE ceiling (see `hubfs::fuse::ceiling`) as a program, for fio runs by hand.
//!
//! `cargo run --release --example memfs_ceiling -- DIR [SIZE_MIB]` mounts DIR/data.bin until Ctrl-C.

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: memfs_ceiling DIR [SIZE_MIB]"))?;
    let mib: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(1024);
    let session = hubfs::fuse::ceiling::mount(std::path::Path::new(&dir), mib)?;
    println!("mounted memfs ({mib} MiB) at {dir}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(hubfs::process::signals::wait_for_signal())?;
    session.umount_and_join()?;
    Ok(())
}
