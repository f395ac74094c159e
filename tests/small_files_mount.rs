//! Small Xet files through the built binary (`hubfs mount --daemon`, a process of its own), read by
//! the programs people copy datasets with: `cp -r` (inode order), `tar -cf - DIR` (readdir order) and
//! a Python reader in shuffled order. Each reader gets a fresh mount and cache; every file it read is
//! checked against the sha256 the Hub lists, and the Hub's content requests are counted: at most
//! 0.1 per file for 4 KiB files uploaded in one commit.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::isolated::{Isolated, daemon_started, wait_gone};
use hubfs::local_hub::{LocalHub, RouteClass};
use serde_json::Value;

const N: usize = 400;

fn hub_with_files() -> (tokio::runtime::Runtime, LocalHub, BTreeMap<String, String>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let hub = rt.block_on(LocalHub::start_temp(false)).unwrap();
    let repo = common::Repo::dataset("local/small");
    let files: Vec<(String, Vec<u8>)> = (0..N)
        .map(|i| (format!("d/{i:05}.bin"), common::bytes(4096, 7_000 + i as u64)))
        .collect();
    rt.block_on(common::upload_xet_files(hub.endpoint(), &repo, &files));
    // The sha256 of every file, as the Hub lists it.
    let tree: Value = rt.block_on(async {
        common::client()
            .get(format!("{}/tree/main/d", repo.api(hub.endpoint())))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    let want: BTreeMap<String, String> = tree
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert!(e["xetHash"].is_string(), "{e}");
            let name = e["path"].as_str().unwrap().trim_start_matches("d/").to_string();
            (name, e["lfs"]["oid"].as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(want.len(), N);
    (rt, hub, want)
}

fn content_requests(hub: &LocalHub) -> u64 {
    [RouteClass::Reconstruction, RouteClass::XorbFetch, RouteClass::Resolve]
        .iter()
        .map(|c| hub.stats(*c).requests)
        .sum()
}

/// sha256 of every file under `dir`, by name.
fn sums_of(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let b = std::fs::read(e.path()).unwrap();
            (e.file_name().to_string_lossy().into_owned(), common::sha256_hex(&b))
        })
        .collect()
}

fn sh(script: &str, mnt: &Path, out: &Path) -> String {
    let o = Command::new("bash")
        .arg("-c")
        .arg(script)
        .env("MNT", mnt)
        .env("OUT", out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{script}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn cp_tar_and_a_shuffled_reader_cost_under_a_tenth_of_a_request_per_file() {
    let (rt, hub, want) = hub_with_files();
    let cli = Isolated::new(hub.endpoint());
    let readers: [(&str, &str); 3] = [
        ("cp -r", "cp -r \"$MNT/d\" \"$OUT/d\""),
        ("tar", "tar -C \"$MNT\" -cf - d | tar -C \"$OUT\" -xf -"),
        (
            "python shuffled",
            "python3 -c 'import os, random, sys, hashlib\n\
             d = os.path.join(os.environ[\"MNT\"], \"d\"); names = os.listdir(d); random.Random(7).shuffle(names)\n\
             for n in names: print(n, hashlib.sha256(open(os.path.join(d, n), \"rb\").read()).hexdigest())'",
        ),
    ];
    for (k, (what, script)) in readers.iter().enumerate() {
        let mnt = cli.path(&format!("m{k}"));
        let out = cli.path(&format!("out{k}"));
        std::fs::create_dir_all(&mnt).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        let cache = cli.path(&format!("cache{k}"));
        let o = cli
            .command(Some(common::WRITE))
            .args(["mount", "datasets/local/small", mnt.to_str().unwrap(), "--daemon"])
            .arg("--cache-dir")
            .arg(&cache)
            .output()
            .unwrap();
        let (pid, _) = daemon_started(&o);
        let before = content_requests(&hub);
        let t = std::time::Instant::now();
        let printed = sh(script, &mnt, &out);
        let secs = t.elapsed().as_secs_f64();
        let requests = content_requests(&hub) - before;
        let got = if printed.is_empty() {
            sums_of(&out.join("d"))
        } else {
            printed
                .lines()
                .filter_map(|l| l.split_once(' '))
                .map(|(n, h)| (n.to_string(), h.to_string()))
                .collect()
        };
        assert!(got == want, "{what}: some file differs from the Hub's sha256");
        eprintln!(
            "{what}: {N} files in {secs:.2} s ({:.0} files/s), {requests} Hub content requests ({:.3}/file)",
            N as f64 / secs,
            requests as f64 / N as f64
        );
        assert!(
            requests as f64 <= 0.1 * N as f64,
            "{what}: {requests} Hub requests for {N} files"
        );
        let o = cli
            .command(None)
            .args(["unmount", mnt.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "unmount: {}", String::from_utf8_lossy(&o.stderr));
        wait_gone(pid);
    }
    rt.block_on(hub.stop());
}
