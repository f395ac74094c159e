//! Sparse reads through the built binary, as a person runs it (`mount --daemon` of a dataset): small
//! reads spread over a file cost the Hub what they read, not the 8 MiB blocks around them, and a
//! later `cat` of the whole file fetches only what those reads did not (the Hub's bytes counted by
//! the local Hub). The figures with DuckDB and pyarrow are in `ci/bench-parquet.sh`.

mod common;

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::Command;

use hubfs::local_hub::{DEFAULT_WRITE_TOKEN, LocalHub, RouteClass};

const SIZE: usize = 24 << 20;
/// Reads of 512 KiB every 2 MiB: within the 4 MiB a reader may skip and still count as reading
/// on, but more skipped than read (a parquet reader's column chunks).
const READ: usize = 512 << 10;
const STRIDE: usize = 2 << 20;

/// Detaches the mount and kills its daemon if the test ends early.
struct Mounted(PathBuf, i32);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        // SAFETY: kill(2) on the daemon this test started (gone already: ESRCH, ignored).
        unsafe { libc::kill(self.1, libc::SIGKILL) };
    }
}

#[test]
fn strided_reads_fetch_their_bytes_and_a_later_cat_only_the_rest() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: FUSE mounts need root here");
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let hub = rt.block_on(LocalHub::start_temp(false)).unwrap();
    let ep = hub.endpoint().to_string();
    let data = common::bytes(SIZE, 44);
    let repo = common::Repo::dataset("local/sparse");
    rt.block_on(common::upload_xet_files(
        &ep,
        &repo,
        &[("table.parquet".to_string(), data.clone())],
    ));
    let cli = common::isolated::Isolated::new(&ep);
    let dir = cli.path("mnt");
    std::fs::create_dir_all(&dir).unwrap();
    let o = cli
        .command(Some(DEFAULT_WRITE_TOKEN))
        .args(["mount", "datasets/local/sparse", dir.to_str().unwrap(), "--daemon"])
        .output()
        .unwrap();
    let (pid, _log) = common::isolated::daemon_started(&o);
    let _mounted = Mounted(dir.clone(), pid);
    let path = dir.join("table.parquet");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), SIZE as u64);
    hub.reset_stats();
    let served = || -> u64 { RouteClass::ALL.iter().map(|c| hub.stats(*c).bytes_out).sum() };

    let f = std::fs::File::open(&path).unwrap();
    let mut buf = vec![0u8; READ];
    let mut reads = 0;
    let mut at = 4096;
    while at + READ < SIZE - (1 << 20) {
        f.read_exact_at(&mut buf, at as u64).unwrap();
        assert!(buf == data[at..at + READ], "bytes at {at}");
        reads += 1;
        at += STRIDE;
    }
    let wanted = (reads * READ) as u64;
    let sparse = served();
    // Whole pages around each read, and nothing else: before, each read within 4 MiB of the last
    // loaded the 8 MiB blocks around it and prefetched the next ones (the whole file).
    assert!(
        sparse <= wanted + reads as u64 * 8192,
        "{reads} reads of {READ} bytes cost the Hub {sparse} bytes"
    );

    // Now the whole file in order: the blocks load only the gaps around the parts already
    // fetched. A gap of a Xet file starts and ends inside Xet chunks (64 KiB on average, at most
    // 128 KiB) that the parts hold some of, and those chunks come again: at most 256 KiB a part.
    let all = std::fs::read(&path).unwrap();
    assert!(all == data, "the whole file equals the Hub's bytes");
    let total = served();
    let most = SIZE as u64 + reads as u64 * (256 << 10);
    assert!(
        total <= most && most < SIZE as u64 + wanted,
        "the Hub served {total} bytes for a {SIZE}-byte file after {sparse} of sparse reads: the \
         bytes those reads fetched were fetched again"
    );
}
