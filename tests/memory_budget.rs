//! One memory budget per mount process (issue 29, part 2): the built binary as a person runs it
//! (`mount --daemon --memory-limit`), several readers at once under a budget too small for their
//! prefetch windows. Every byte must still equal the Hub's, no block may be fetched twice, the
//! windows must have been cut (not the memory grown), and `hubfs status` must say where the
//! memory is. (Peak RSS against the limit is checked by `benches/many_readers.rs` on a release
//! build; this debug build's own code and allocations are larger.)

mod common;

use std::process::Output;

use hubfs::local_hub::{DEFAULT_WRITE_TOKEN, LocalHub, RouteClass};
use serde_json::Value;
use sha2::Digest;

/// Files, their size, and the budget they are read under.
const FILES: usize = 4;
const SIZE: usize = 40 << 20;
const LIMIT: &str = "96M";

/// `local/{name}`, a model repo of `FILES` files `shard-N.bin`, uploaded through Xet; their bytes.
async fn upload(ep: &str, name: &str) -> Vec<Vec<u8>> {
    let data: Vec<Vec<u8>> = (0..FILES).map(|i| common::bytes(SIZE, 7 + i as u64)).collect();
    let files: Vec<_> = data
        .iter()
        .enumerate()
        .map(|(i, d)| (format!("shard-{i}.bin"), d.clone()))
        .collect();
    common::upload_xet_files(ep, &common::Repo::model(&format!("local/{name}")), &files).await;
    data
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn readers_under_a_small_budget_get_every_byte_once_and_status_shows_the_memory() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: FUSE mounts need root here");
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let hub = rt.block_on(LocalHub::start_temp(false)).unwrap();
    let ep = hub.endpoint().to_string();
    let data = rt.block_on(upload(&ep, "budget"));
    let cli = common::isolated::Isolated::new(&ep);

    // Too small a limit is refused with what to do.
    let dir = cli.path("mnt");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let o = cli
        .command(Some(DEFAULT_WRITE_TOKEN))
        .args(["mount", "local/budget", d, "--memory-limit", "10M"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("too small: a mount needs at least 96M"),
        "{}",
        text(&o)
    );

    let o = cli
        .command(Some(DEFAULT_WRITE_TOKEN))
        .args(["mount", "local/budget", d, "--daemon", "--memory-limit", LIMIT])
        .output()
        .unwrap();
    let (pid, _log) = common::isolated::daemon_started(&o);
    let _mounted = common::isolated::DaemonMount(dir.clone(), pid);
    for i in 0..FILES {
        std::fs::metadata(dir.join(format!("shard-{i}.bin"))).unwrap();
    }
    hub.reset_stats();

    // Four readers at once, 4 MiB reads, as `dd bs=4M` would.
    let readers: Vec<_> = (0..FILES)
        .map(|i| {
            let path = dir.join(format!("shard-{i}.bin"));
            std::thread::spawn(move || {
                use std::io::Read;
                let mut f = std::fs::File::open(path).unwrap();
                let mut h = sha2::Sha256::new();
                let mut buf = vec![0u8; 4 << 20];
                loop {
                    let n = f.read(&mut buf).unwrap();
                    if n == 0 {
                        return hex::encode(h.finalize());
                    }
                    h.update(&buf[..n]);
                }
            })
        })
        .collect();
    for (i, r) in readers.into_iter().enumerate() {
        assert_eq!(r.join().unwrap(), common::sha256_hex(&data[i]), "shard-{i}.bin");
    }
    let served: u64 = RouteClass::ALL.iter().map(|c| hub.stats(*c).bytes_out).sum();
    let read = (FILES * SIZE) as f64;
    assert!(
        served as f64 <= read * 1.02,
        "the Hub served {served} bytes for {read} read: a block was fetched twice"
    );

    // `status --json` asks the mount where its memory is.
    let o = cli
        .command(Some(DEFAULT_WRITE_TOKEN))
        .args(["status", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let all: Value = serde_json::from_slice(&o.stdout).unwrap();
    let m = &all[0]["memory"];
    assert_eq!(m["source"], "--memory-limit", "{m}");
    let plan = &m["plan"];
    assert_eq!(plan["limit"].as_u64(), Some(96 << 20), "{m}");
    let blocks = plan["blocks"].as_u64().unwrap();
    assert!(
        plan["memory_tier"].as_u64().unwrap() <= blocks / 4,
        "the 64 MiB memory tier is cut to a quarter of the blocks' room: {m}"
    );
    assert!(
        m["prefetches_refused"].as_u64().unwrap() > 0,
        "four readers' windows do not fit in {LIMIT}: some prefetch must have been refused: {m}"
    );
    assert_eq!(m["overruns"].as_u64(), Some(0), "no read went past the budget: {m}");
    assert!(
        m["rss"].as_u64().unwrap() > 0 && m["peak_rss"].as_u64().unwrap() > 0,
        "{m}"
    );
    let o = cli
        .command(Some(DEFAULT_WRITE_TOKEN))
        .args(["status"])
        .output()
        .unwrap();
    let human = text(&o);
    assert!(
        human.contains("of a 96 MiB budget (--memory-limit)") && human.contains("prefetches not started"),
        "{human}"
    );

    let o = cli
        .command(Some(DEFAULT_WRITE_TOKEN))
        .args(["unmount", d])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    common::isolated::wait_gone(pid);
    rt.block_on(hub.stop());
}
