//! A fleet through the shared tier costs the Hub about one node's requests plus one per node, not
//! N times one node's: the listings, point lookups and blocks a commit fixes come from the tier
//! (SeaweedFS's `weed mini`, as in tests/shared_cache.rs, whose helpers this shares).
//!
//! - `a_fleet_costs_the_hub_about_one_nodes_requests`: one node alone over an empty tier, then N
//!   nodes at once over another empty tier (`HUBFS_FLEET_NODES`, default 32), every one an
//!   anonymous `hubfs mount --daemon` of `demo/tiny-model` with a cache dir of its own, on a local
//!   Hub seeded with the demo repos that enforces the Hub's request windows as they are by
//!   default (anonymous callers share one IP here). Every node looks each file up by name, walks
//!   the tree and reads every file; no read fails, every sha256 is the Hub's, and the fleet's
//!   Hub requests (api, resolve, cas, commit) are at most twice one node's plus one per node.
//! - `a_node_finding_everything_in_the_tier_asks_the_hub_only_for_its_revision`: a node whose
//!   listings and blocks, small Xet files batched included, are all in the tier makes one Hub
//!   request (its mount's `repo_info`): no Xet token, no reconstruction, no download.
//!
//! - `a_fleet_resolves_its_branch_about_once_per_ttl_and_follows_it_when_it_moves`: 8 nodes with
//!   a 2 s metadata TTL open their roots for 12 s (each open asks for the current commit): the
//!   fleet asks the Hub for the branch about once per TTL, not once per node per TTL (the same
//!   without the tier is measured beside it); a commit to the branch is then listed by every node
//!   within 3 TTL + 2 s.
//!
//! Without the `weed` binary a test is skipped, except under CI (`CI` or `HUBFS_REQUIRE_STORES`).

mod common;
#[path = "common/shared_tier.rs"]
mod shared_tier;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use hubfs::local_hub::{DEFAULT_WRITE_TOKEN, LocalHub, RouteClass};
use sha2::Digest;
use shared_tier::*;

const REPO: &str = "demo/tiny-model";

/// Both tests start `weed mini` on its fixed ports: one at a time.
static WEED_PORTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Nodes of the fleet: `HUBFS_FLEET_NODES`, else 32 (about 16 s on 2 cores, debug build).
fn fleet_size() -> usize {
    std::env::var("HUBFS_FLEET_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}

/// The Hub's requests per class since the last reset: api, resolve, cas, commit.
#[derive(Debug, Clone, Copy, Default)]
struct Requests([u64; 4]);

impl Requests {
    fn now(hub: &LocalHub) -> Requests {
        Requests(RouteClass::ALL.map(|c| hub.stats(c).requests))
    }

    fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

impl std::fmt::Display for Requests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [api, resolve, cas, commit] = self.0;
        write!(
            f,
            "{} (api {api}, resolve {resolve}, cas {cas}, commit {commit})",
            self.total()
        )
    }
}

/// Every file of `repo` at `main` and the sha256 of the bytes the Hub serves for it (downloaded
/// here, redirects followed), by repo path.
fn hub_sums(rt: &tokio::runtime::Runtime, ep: &str, repo: &common::Repo) -> BTreeMap<String, String> {
    let c = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    rt.block_on(async {
        let tree: serde_json::Value = c
            .get(format!("{}/tree/main?recursive=true", repo.api(ep)))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mut out = BTreeMap::new();
        for e in tree.as_array().unwrap().iter().filter(|e| e["type"] == "file") {
            let path = e["path"].as_str().unwrap().to_string();
            let r = c.get(repo.resolve(ep, "main", &path)).send().await.unwrap();
            assert!(r.status().is_success(), "{path}: {}", r.status());
            out.insert(path, common::sha256_hex(&r.bytes().await.unwrap()));
        }
        out
    })
}

/// Files missing, extra or with other bytes in `got` than in `want` (the first 10).
fn differences(got: &BTreeMap<String, String>, want: &BTreeMap<String, String>) -> Vec<String> {
    let missing = want
        .keys()
        .filter(|k| !got.contains_key(*k))
        .map(|k| format!("{k} missing"));
    let other = got.iter().filter_map(|(k, v)| match want.get(k) {
        None => Some(format!("{k} not on the Hub")),
        Some(w) if w != v => Some(format!("{k}: sha256 {v}, the Hub's {w}")),
        Some(_) => None,
    });
    missing.chain(other).take(10).collect()
}

/// What one node does: looks each of `names` up (point lookups: nothing is listed yet), walks the
/// tree (listings), then reads every file it found whole. The sha256 of each file by repo path,
/// and every failure.
fn read_all(dir: &Path, names: &[String]) -> (BTreeMap<String, String>, Vec<String>) {
    let mut failed = Vec::new();
    for n in names {
        if let Err(e) = std::fs::metadata(dir.join(n)) {
            failed.push(format!("stat {n}: {e}"));
        }
    }
    let mut files = Vec::new();
    walk(dir, "", &mut files, &mut failed);
    let mut sums = BTreeMap::new();
    for f in files {
        match sha256_of(&dir.join(&f)) {
            Ok(s) => {
                sums.insert(f, s);
            }
            Err(e) => failed.push(format!("read {f}: {e}")),
        }
    }
    (sums, failed)
}

fn walk(root: &Path, rel: &str, files: &mut Vec<String>, failed: &mut Vec<String>) {
    let entries = match std::fs::read_dir(root.join(rel)) {
        Ok(e) => e,
        Err(e) => return failed.push(format!("readdir {rel:?}: {e}")),
    };
    for e in entries {
        let e = match e {
            Ok(e) => e,
            Err(e) => return failed.push(format!("readdir {rel:?}: {e}")),
        };
        let name = e.file_name().to_string_lossy().into_owned();
        let path = if rel.is_empty() { name } else { format!("{rel}/{name}") };
        match e.file_type() {
            Ok(t) if t.is_dir() => walk(root, &path, files, failed),
            Ok(_) => files.push(path),
            Err(e) => failed.push(format!("stat {path}: {e}")),
        }
    }
}

fn sha256_of(p: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(p)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match f.read(&mut buf)? {
            0 => return Ok(hex::encode(h.finalize())),
            n => h.update(&buf[..n]),
        }
    }
}

/// The tiers' counts of every running mount, summed (`hubfs status --json`): blocks and metadata
/// served by the tier and fetched from the Hub.
fn tier_counts(cli: &common::isolated::Isolated) -> BTreeMap<&'static str, u64> {
    let o = cli.command(None).args(["status", "--json"]).output().unwrap();
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    let mut out = BTreeMap::new();
    for m in all.as_array().into_iter().flatten() {
        for k in [
            "hits",
            "misses",
            "meta_hits",
            "meta_misses",
            "invalid",
            "dropped",
            "refs_found",
            "refs_written",
        ] {
            *out.entry(k).or_insert(0) += m["memory"]["shared"][k].as_u64().unwrap_or(0);
        }
    }
    out
}

/// The nodes' shared-tier and revision log messages, counted (hashes and times left out), for a
/// failure.
fn log_summary(nodes: &[Node]) -> String {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for n in nodes {
        let log = std::fs::read_to_string(&n.log).unwrap_or_default();
        for l in log.lines() {
            let Some(msg) = ["hubfs::chunk_store::shared", "hubfs::vfs::revision"]
                .iter()
                .find_map(|t| l.split_once(t).map(|(_, m)| m))
            else {
                continue;
            };
            let msg: String = msg
                .split_whitespace()
                .filter(|w| !["key=", "_ms=", "url=", "old=", "new="].iter().any(|k| w.contains(k)))
                .collect::<Vec<_>>()
                .join(" ");
            *seen.entry(msg).or_default() += 1;
        }
    }
    seen.iter().map(|(m, c)| format!("{c:5} {m}\n")).collect()
}

#[test]
fn a_fleet_costs_the_hub_about_one_nodes_requests() {
    let bin = weed_bin();
    if !can_run(bin.is_some(), "ci/weed.sh build, or set HUBFS_WEED") {
        return;
    }
    let _ports = WEED_PORTS.lock().unwrap_or_else(|e| e.into_inner());
    let n = fleet_size();
    let Fleet { rt, hub, cli, .. } = Fleet::demo();
    assert!(
        hub.request_windows().enabled,
        "the Hub's default request windows are on"
    );
    let _weed = Weed::start(&bin.unwrap(), &cli.path("weed"));
    let run = std::process::id();
    let want = hub_sums(&rt, hub.endpoint(), &common::Repo::model(REPO));
    let names: Vec<String> = want.keys().cloned().collect();
    let node = |name: &str, url: &str| Node::start_as(&cli, name, REPO, None, url, &["--shared-cache", url]);

    // One node alone over an empty tier: what one node costs, its mount included.
    let url = format!("s3://{BUCKET}/one-{run}");
    hub.reset_stats();
    let t = Instant::now();
    let first = node("one", &url);
    let (sums, failed) = read_all(&first.dir, &names);
    let one_took = t.elapsed();
    let one = Requests::now(&hub);
    assert!(failed.is_empty(), "the first node: {failed:?}");
    assert_eq!(differences(&sums, &want), Vec::<String>::new(), "the first node");
    let one_tier = wait_uploaded(&cli, &first);
    drop(first);
    // What a commit fixes is in the tier now: a point lookup per file and the root's listing.
    let stored = tier_size(&cli, &url);
    assert_eq!(
        stored["meta_objects"].as_u64(),
        Some(names.len() as u64 + 1),
        "{stored}"
    );

    // N nodes over another empty tier, mounted one after another and reading all at once.
    // SeaweedFS on these 2 cores has left 32 nodes' lookups unanswered for 5 s, which pauses
    // their tiers (their reads then go to the Hub, as they should): a fleet over the bound whose
    // nodes' tiers paused measured the store's stall, and runs once more over a fresh prefix.
    let bound = 2 * one.total() + n as u64;
    let mut attempt = 0;
    let (nodes, mounted, mounts, results, read_took, fleet, counts, refused) = loop {
        let url = format!("s3://{BUCKET}/fleet-{run}-{attempt}");
        hub.reset_stats();
        let t = Instant::now();
        let nodes: Vec<Node> = (0..n).map(|i| node(&format!("node{i}"), &url)).collect();
        let mounted = t.elapsed();
        let mounts = Requests::now(&hub);
        let start = std::sync::Barrier::new(n);
        let t = Instant::now();
        let results: Vec<(BTreeMap<String, String>, Vec<String>)> = std::thread::scope(|s| {
            let readers: Vec<_> = nodes
                .iter()
                .map(|node| {
                    let (start, names) = (&start, &names);
                    s.spawn(move || {
                        start.wait();
                        read_all(&node.dir, names)
                    })
                })
                .collect();
            readers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let read_took = t.elapsed();
        let fleet = Requests::now(&hub);
        let counts = tier_counts(&cli);
        let refused = hub.request_window_stats().refused;
        let paused: usize = nodes.iter().map(tier_paused).sum();
        if fleet.total() > bound && paused > 0 && attempt == 0 {
            eprintln!(
                "the fleet cost the Hub {fleet} while {paused} tiers paused (the store stalled): once more\n{}",
                log_summary(&nodes)
            );
            attempt += 1;
            continue;
        }
        break (nodes, mounted, mounts, results, read_took, fleet, counts, refused);
    };

    let failed: Vec<String> = results
        .iter()
        .enumerate()
        .flat_map(|(i, (_, f))| f.iter().map(move |f| format!("node {i}: {f}")))
        .collect();
    let wrong: Vec<String> = results
        .iter()
        .enumerate()
        .flat_map(|(i, (sums, _))| {
            differences(sums, &want)
                .into_iter()
                .map(move |d| format!("node {i}: {d}"))
        })
        .collect();
    eprintln!(
        "fleet of {n} nodes, {REPO} ({} files): one node alone {one} in {:.1} s (tier after it: {one_tier})",
        want.len(),
        one_took.as_secs_f64()
    );
    eprintln!(
        "  the fleet: {fleet}, of which the {n} mounts {mounts}; {:.2}× one node, {:.2} per node; bound 2 × {} + {n} = {bound}",
        fleet.total() as f64 / one.total() as f64,
        fleet.total() as f64 / n as f64,
        one.total()
    );
    // Past each node's own revision check, what the fleet cost against what one node did.
    eprintln!(
        "  beyond the mounts' repo_info: the fleet {}, one node {} ({:.2}×)",
        fleet.total() - mounts.total(),
        one.total() - 1,
        (fleet.total() - mounts.total()) as f64 / (one.total() - 1) as f64
    );
    eprintln!(
        "  wall time: mounts {:.1} s one after another, reads {:.1} s all at once; tier counts over the fleet {counts:?}; refused by the Hub's windows {refused:?}",
        mounted.as_secs_f64(),
        read_took.as_secs_f64()
    );
    assert!(failed.is_empty(), "{} failed reads: {failed:?}", failed.len());
    assert!(wrong.is_empty(), "not the Hub's bytes: {wrong:?}");
    assert!(
        refused.values().all(|r| *r == 0),
        "the Hub's windows refused requests: {refused:?}"
    );
    assert!(
        fleet.total() <= bound,
        "the fleet cost the Hub {fleet}, more than 2 × one node's {one} + {n}; the nodes' tier logs:\n{}",
        log_summary(&nodes)
    );
}

#[test]
fn a_node_finding_everything_in_the_tier_asks_the_hub_only_for_its_revision() {
    let bin = weed_bin();
    if !can_run(bin.is_some(), "ci/weed.sh build, or set HUBFS_WEED") {
        return;
    }
    let _ports = WEED_PORTS.lock().unwrap_or_else(|e| e.into_inner());
    // 300 small Xet files (read in batches) and a 12 MiB one (2 blocks) in one commit.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let hub = rt.block_on(LocalHub::start_temp(false)).unwrap();
    let repo = common::Repo::model("local/small");
    let mut files: Vec<(String, Vec<u8>)> = (0..300)
        .map(|i| (format!("d/{i:05}.bin"), common::bytes(4096, 9_000 + i)))
        .collect();
    files.push(("big.bin".to_string(), common::bytes(12 << 20, 8_999)));
    rt.block_on(common::upload_xet_files(hub.endpoint(), &repo, &files));
    let want = hub_sums(&rt, hub.endpoint(), &repo);
    assert_eq!(want.len(), files.len() + 1, "the files and .gitattributes");
    let cli = common::isolated::Isolated::new(hub.endpoint());
    let _weed = Weed::start(&bin.unwrap(), &cli.path("weed"));
    let url = format!("s3://{BUCKET}/small-{}", std::process::id());
    let node = |name: &str| {
        Node::start_as(
            &cli,
            name,
            "local/small",
            Some(DEFAULT_WRITE_TOKEN),
            &url,
            &["--shared-cache", &url],
        )
    };

    // The first node fills the tier.
    let a = node("a");
    hub.reset_stats();
    let (sums, failed) = read_all(&a.dir, &[]);
    let first = Requests::now(&hub);
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(differences(&sums, &want), Vec::<String>::new(), "the first node");
    let tier = wait_uploaded(&cli, &a);
    drop(a);

    // The second finds everything there: its mount's revision is all it asks the Hub.
    hub.reset_stats();
    let b = node("b");
    let (sums, failed) = read_all(&b.dir, &[]);
    let second = Requests::now(&hub);
    let fine = |c: RouteClass| hub.stats(c).requests;
    eprintln!(
        "302 files: the first node cost the Hub {first} (its tier: {tier}); the second {second}, \
         {} reconstructions, {} xorb fetches",
        fine(RouteClass::Reconstruction),
        fine(RouteClass::XorbFetch)
    );
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(differences(&sums, &want), Vec::<String>::new(), "the second node");
    assert_eq!(
        second.0,
        [1, 0, 0, 0],
        "one api request (the mount's repo_info): no Xet token, no CAS request, no download: {second}"
    );
}

/// Times `node`'s tier paused after a failed store request (its log says so at `warn`).
fn tier_paused(node: &Node) -> usize {
    let log = std::fs::read_to_string(&node.log).unwrap_or_default();
    log.matches("shared cache unavailable").count()
}

/// Opens the mount's root every 100 ms (each open asks the mount for its current commit) until
/// `until`, or until the listing holds `wanted` if given; when it was found, if it was.
fn watch_root(dir: &Path, until: Instant, wanted: Option<&str>) -> Option<Instant> {
    while Instant::now() < until {
        let names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        if wanted.is_some_and(|w| names.iter().any(|n| n == w)) {
            return Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// Every node watches its root at once until `until` (or until it lists `wanted`): when each
/// found it.
fn fleet_watches(nodes: &[Node], until: Instant, wanted: Option<&str>) -> Vec<Option<Instant>> {
    std::thread::scope(|s| {
        let watchers: Vec<_> = nodes
            .iter()
            .map(|n| s.spawn(move || watch_root(&n.dir, until, wanted)))
            .collect();
        watchers.into_iter().map(|w| w.join().unwrap()).collect()
    })
}

#[test]
fn a_fleet_resolves_its_branch_about_once_per_ttl_and_follows_it_when_it_moves() {
    let bin = weed_bin();
    if !can_run(bin.is_some(), "ci/weed.sh build, or set HUBFS_WEED") {
        return;
    }
    let _ports = WEED_PORTS.lock().unwrap_or_else(|e| e.into_inner());
    let n = fleet_size().min(8);
    let (ttl, period) = (Duration::from_secs(2), Duration::from_secs(12));
    let Fleet { rt, hub, cli, .. } = Fleet::new(1 << 20, 4_242);
    let _weed = Weed::start(&bin.unwrap(), &cli.path("weed"));
    let url = format!("s3://{BUCKET}/refs-{}", std::process::id());
    let ttl_arg = format!("{}ms", ttl.as_millis());
    let node = |name: &str, tier: bool| {
        let mut args = vec!["--metadata-ttl", ttl_arg.as_str()];
        if tier {
            args.extend(["--shared-cache", url.as_str()]);
        }
        Node::start_as(&cli, name, "local/shared", Some(DEFAULT_WRITE_TOKEN), &url, &args)
    };
    let api = || hub.stats(RouteClass::Api).requests;
    let refreshes = period.as_secs_f64() / ttl.as_secs_f64();

    // N nodes on one tier, each opening its root 10 times a second for the period.
    let shared: Vec<Node> = (0..n).map(|i| node(&format!("s{i}"), true)).collect();
    let paused = || shared.iter().map(tier_paused).sum::<usize>();
    let mut shared_api = 0;
    // SeaweedFS on these 2 cores has answered a write after 7 s, which pauses a node's tier for
    // 10 s (its reads and revisions then go to the Hub, as they should): that period measures
    // the Hub, not the tier, and is measured once more.
    for attempt in 0..2 {
        let (before, paused_before) = (api(), paused());
        fleet_watches(&shared, Instant::now() + period, None);
        shared_api = api() - before;
        if paused() == paused_before {
            break;
        }
        eprintln!("attempt {attempt}: a node's tier paused (the store failed a request): measuring again");
    }

    // The branch moves: every node lists the new file within about 1.5 TTL.
    let repo = common::Repo::model("local/shared");
    let c = common::client();
    let moved = Instant::now();
    rt.block_on(common::commit_ok(
        &c,
        hub.endpoint(),
        DEFAULT_WRITE_TOKEN,
        &repo,
        &[
            common::header_line("move the branch", None),
            common::utf8_line("moved.txt", "moved\n"),
        ],
    ));
    let seen = fleet_watches(&shared, moved + 4 * ttl + Duration::from_secs(4), Some("moved.txt"));
    let followed: Vec<Option<f64>> = seen
        .iter()
        .map(|s| s.map(|t| t.duration_since(moved).as_secs_f64()))
        .collect();
    let counts = tier_counts(&cli);
    let logs = log_summary(&shared);
    drop(shared);

    // The same without the tier: each node re-resolves once per TTL.
    let alone: Vec<Node> = (0..n).map(|i| node(&format!("a{i}"), false)).collect();
    let before = api();
    fleet_watches(&alone, Instant::now() + period, None);
    let alone_api = api() - before;
    drop(alone);

    // About one Hub request per TTL for the fleet; SeaweedFS answers claims racing on one name a
    // second apart, which lets a few more through at this short TTL.
    let bound = (3.0 * refreshes).ceil() as u64 + 2;
    eprintln!(
        "{n} nodes, --metadata-ttl {ttl:?}, {period:?} of lookups: the Hub's api requests {shared_api} with the \
         tier (bound {bound}; one per TTL is {refreshes:.0}), {alone_api} without it; after the branch moved, \
         each node listed the new file after {followed:.1?} s; tier counts {counts:?}; the nodes' logs:\n{logs}"
    );
    assert!(
        alone_api as f64 >= n as f64 * refreshes * 0.5,
        "without the tier each node re-resolves about once per TTL ({alone_api} api requests): the lookups \
         did not drive refreshes, so this test proves nothing"
    );
    assert!(
        shared_api <= bound && shared_api * 2 <= alone_api,
        "with the tier the fleet asked the Hub {shared_api} times in {period:?}: more than {bound}, or more \
         than half of the {alone_api} without it; the nodes' tier logs:\n{logs}"
    );
    let limit = 3.0 * ttl.as_secs_f64() + 2.0;
    assert!(
        followed.iter().all(|f| f.is_some_and(|s| s <= limit)),
        "every node lists the moved branch's file within {limit} s: {followed:?}"
    );
}
