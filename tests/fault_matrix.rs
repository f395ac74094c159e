//! The fault matrix: each remote step hubfs takes (tree listing, resolve/range, Xet reconstruction,
//! xorb fetch, xorb upload, shard upload, commit, a bucket's batch) broken by each fault (500, 429 with the Hub's
//! `RateLimit` header, stall, connection reset) at rate 1.0, through real FUSE mounts of an
//! in-process local Hub. Every cell checks that the operation using the step returns within its
//! documented bound with the documented errno, that the step was really reached (the local Hub's
//! per-class counters saw requests and injected faults there), that nothing written is lost (the
//! file lands on the Hub with the right sha256 once the fault clears, checked from the Hub's side)
//! and that the same operation works again afterwards.
//!
//! One local Hub per fault kind, run in parallel (a fault is Hub-wide, so cells sharing a Hub run
//! one after another). `cargo test --test fault_matrix -- --nocapture` prints the table.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hubfs::hub_client::{HubClient, HubClientConfig, RepoRef, TreeEntry};
use hubfs::local_hub::{DEFAULT_WRITE_TOKEN, FaultSettings, LocalHub, RouteClass};
use hubfs::process::session::{MountRequest, Mounted, mount};
use hubfs::vfs::{VfsOptions, WriteOptions};
use serde_json::json;
use sha2::{Digest, Sha256};

/// Short timeouts so the whole matrix runs in a couple of minutes; the bounds below follow from them.
const TIMEOUT: Duration = Duration::from_secs(2);
const RETRIES: u32 = 2;
const READ_TIMEOUT: Duration = Duration::from_secs(4);
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(3);
/// Scheduling slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_secs(3);
const FILE_LEN: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Listing,
    Resolve,
    Reconstruction,
    XorbFetch,
    XorbUpload,
    ShardUpload,
    Commit,
    /// A bucket mount's batch request (the local Hub counts it in the commit class).
    BucketBatch,
}

impl Step {
    const ALL: [Step; 8] = [
        Step::Listing,
        Step::Resolve,
        Step::Reconstruction,
        Step::XorbFetch,
        Step::XorbUpload,
        Step::ShardUpload,
        Step::Commit,
        Step::BucketBatch,
    ];

    fn class(self) -> RouteClass {
        match self {
            Step::Listing => RouteClass::Api,
            Step::Resolve => RouteClass::Resolve,
            Step::Reconstruction => RouteClass::Reconstruction,
            Step::XorbFetch => RouteClass::XorbFetch,
            Step::XorbUpload => RouteClass::XorbUpload,
            Step::ShardUpload => RouteClass::ShardUpload,
            Step::Commit | Step::BucketBatch => RouteClass::Commit,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Step::Listing => "tree listing (api)",
            Step::Resolve => "resolve/range",
            Step::Reconstruction => "xet reconstruction",
            Step::XorbFetch => "xorb fetch",
            Step::XorbUpload => "xorb upload",
            Step::ShardUpload => "shard upload",
            Step::Commit => "commit",
            Step::BucketBatch => "bucket batch",
        }
    }

    /// The file a read step reads (a cold read: no mount has read it before the fault is set).
    fn target(self) -> &'static str {
        match self {
            Step::Listing => "listing",
            Step::Resolve => "plain.txt",
            Step::Reconstruction => "recon.bin",
            Step::XorbFetch => "fetch.bin",
            _ => "data.bin",
        }
    }

    fn writes(self) -> bool {
        matches!(
            self,
            Step::XorbUpload | Step::ShardUpload | Step::Commit | Step::BucketBatch
        )
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    Error500,
    Throttle429,
    Stall,
    Reset,
}

impl Fault {
    const ALL: [Fault; 4] = [Fault::Error500, Fault::Throttle429, Fault::Stall, Fault::Reset];

    fn settings(self) -> FaultSettings {
        let mut s = FaultSettings::default();
        match self {
            Fault::Error500 => s.error_rate = 1.0,
            Fault::Throttle429 => s.throttle_rate = 1.0,
            Fault::Stall => s.stall_rate = 1.0,
            Fault::Reset => s.reset_rate = 1.0,
        }
        s
    }

    fn name(self) -> &'static str {
        match self {
            Fault::Error500 => "500",
            Fault::Throttle429 => "429",
            Fault::Stall => "stall",
            Fault::Reset => "reset",
        }
    }
}

/// One cell's outcome.
struct Cell {
    step: Step,
    fault: Fault,
    /// 0 when the operation succeeded.
    errno: i32,
    elapsed: Duration,
    bound: Duration,
    requests: u64,
    injected: u64,
    recovered: bool,
    problems: Vec<String>,
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn pseudo(len: usize, seed: u64) -> Vec<u8> {
    hubfs::local_hub::seed::demo_bytes(len, seed)
}

fn errno_name(e: i32) -> String {
    match e {
        0 => "ok".into(),
        libc::EIO => "EIO".into(),
        libc::ENOENT => "ENOENT".into(),
        libc::EACCES => "EACCES".into(),
        libc::ETIMEDOUT => "ETIMEDOUT".into(),
        e => format!("errno {e}"),
    }
}

fn client_cfg(hub: &LocalHub) -> HubClientConfig {
    HubClientConfig {
        endpoint: hub.endpoint().to_string(),
        token: hub.write_token(),
        timeout: TIMEOUT,
        max_retries: RETRIES,
        patience: std::time::Duration::ZERO,
        ..HubClientConfig::default()
    }
}

/// One local Hub and the cells of one fault kind.
struct Bench {
    rt: Arc<tokio::runtime::Runtime>,
    hub: LocalHub,
    fault: Fault,
    seed: u64,
    dirs: tempfile::TempDir,
}

impl Bench {
    fn mount(&self, repo: &str, write: bool, tag: &str) -> Mounted {
        let dir = self.dirs.path().join(format!("mnt-{tag}"));
        std::fs::create_dir_all(&dir).unwrap();
        let vfs = VfsOptions {
            read_timeout: READ_TIMEOUT,
            memory_cache_bytes: 64 << 20,
            write: write.then(|| WriteOptions {
                staging_root: self.dirs.path().join(format!("staging-{tag}")),
                upload_timeout: UPLOAD_TIMEOUT,
                quiet_period: Duration::from_millis(200),
                close: hubfs::vfs::CloseMode::Commit,
                ..WriteOptions::default()
            }),
            ..VfsOptions::default()
        };
        let req = MountRequest {
            repo: repo.to_string(),
            mountpoint: dir,
            revision: None,
            client: client_cfg(&self.hub),
            vfs,
            allow_other: false,
        };
        mount(req, &self.rt).expect("mount")
    }

    /// The read-only model repo: a folder to list, a regular file, and two Xet files uploaded in
    /// separate commits (separate xorbs, so reading one never warms the other).
    fn seed_model(&self) {
        let ep = self.hub.endpoint().to_string();
        let seed = self.seed;
        self.rt.block_on(async move {
            let cache = tempfile::tempdir().unwrap();
            let c = hf_hub::HFClient::builder()
                .endpoint(&ep)
                .token(DEFAULT_WRITE_TOKEN)
                .cache_dir(cache.path())
                .build()
                .unwrap();
            c.create_repository()
                .repo_id("local/m")
                .repo_type(hf_hub::RepoTypeModel)
                .send()
                .await
                .unwrap();
            let add = |path: &str, bytes: Vec<u8>| hf_hub::repository::CommitOperation::Add {
                path_in_repo: path.into(),
                source: hf_hub::repository::AddSource::Bytes(bytes.into()),
            };
            let commits = [
                vec![
                    add("listing/a.txt", b"a\n".to_vec()),
                    add("listing/b.txt", b"b\n".to_vec()),
                    add("plain.txt", b"a regular file\n".to_vec()),
                ],
                vec![add("recon.bin", pseudo(FILE_LEN, seed + 1))],
                vec![add("fetch.bin", pseudo(FILE_LEN, seed + 2))],
            ];
            for ops in commits {
                c.model("local", "m")
                    .create_commit()
                    .operations(ops)
                    .commit_message("seed")
                    .send()
                    .await
                    .unwrap();
            }
        });
    }

    fn expected_read(&self, step: Step) -> Vec<u8> {
        match step {
            Step::Resolve => b"a regular file\n".to_vec(),
            Step::Reconstruction => pseudo(FILE_LEN, self.seed + 1),
            Step::XorbFetch => pseudo(FILE_LEN, self.seed + 2),
            _ => Vec::new(),
        }
    }

    /// Path → (listed sha256 or git oid, sha256 of the bytes the Hub serves) at the branch head.
    fn hub_files(&self, repo: &RepoRef) -> BTreeMap<String, (Option<String>, String)> {
        let client = HubClient::new(HubClientConfig {
            timeout: Duration::from_secs(20),
            ..client_cfg(&self.hub)
        })
        .unwrap();
        let ep = self.hub.endpoint().to_string();
        self.rt.block_on(async move {
            let head = client.repo_info(repo, "main").await.unwrap().sha;
            let http = reqwest::Client::new();
            let mut out = BTreeMap::new();
            for e in client.list_tree_recursive(repo, &head, "").await.unwrap() {
                if let TreeEntry::File { path, lfs_sha256, .. } = e {
                    let url = if repo.is_bucket() {
                        format!("{ep}/{}/resolve/{path}", repo.web_path())
                    } else {
                        format!("{ep}/{}/resolve/{head}/{path}", repo.web_path())
                    };
                    let r = http.get(url).bearer_auth(DEFAULT_WRITE_TOKEN).send().await.unwrap();
                    assert!(r.status().is_success(), "{path}: {}", r.status());
                    let body = r.bytes().await.unwrap();
                    out.insert(path, (lfs_sha256, sha(&body)));
                }
            }
            out
        })
    }

    /// A new dataset repo `local/NAME` (a bucket when `bucket`).
    fn create_dataset(&self, name: &str, bucket: bool) {
        let ep = self.hub.endpoint().to_string();
        self.rt.block_on(async {
            let req = if bucket {
                reqwest::Client::new()
                    .post(format!("{ep}/api/buckets/local/{name}"))
                    .json(&json!({}))
            } else {
                reqwest::Client::new()
                    .post(format!("{ep}/api/repos/create"))
                    .json(&json!({"name": name, "organization": "local", "type": "dataset"}))
            };
            let r = req.bearer_auth(DEFAULT_WRITE_TOKEN).send().await.unwrap();
            assert!(r.status().is_success(), "create {name}: {}", r.status());
        });
    }

    fn set_fault(&self, step: Step) {
        self.hub.reset_stats();
        self.hub.set_faults(step.class(), self.fault.settings()).unwrap();
    }

    /// Takes the faulted class's counters for the cell, then clears the fault.
    fn take_stats(&self, cell: &mut Cell) {
        let stats = self.hub.stats(cell.step.class());
        cell.requests = stats.requests;
        cell.injected = stats.faults_injected;
        self.hub.clear_faults();
    }

    fn cell(&self, step: Step) -> Cell {
        let mut cell = Cell {
            step,
            fault: self.fault,
            errno: 0,
            elapsed: Duration::ZERO,
            bound: Duration::ZERO,
            requests: 0,
            injected: 0,
            recovered: false,
            problems: Vec::new(),
        };
        if step.writes() {
            self.write_cell(&mut cell);
        } else {
            self.read_cell(&mut cell);
        }
        self.hub.clear_faults();
        if cell.requests == 0 || cell.injected == 0 {
            cell.problems.push(format!(
                "the faulted step was not reached: {} requests, {} faults injected in class {}",
                cell.requests,
                cell.injected,
                step.class().name()
            ));
        }
        if cell.elapsed > cell.bound {
            cell.problems
                .push(format!("took {:?}, over the bound {:?}", cell.elapsed, cell.bound));
        }
        cell
    }

    /// A cold listing or a cold read on a fresh read-only mount: EIO within the documented bound,
    /// then the same operation succeeds with the Hub's bytes once the fault is cleared.
    fn read_cell(&self, cell: &mut Cell) {
        let step = cell.step;
        let m = self.mount("local/m", false, &format!("r-{step:?}"));
        let root = m.mountpoint.clone();
        // The root listing and the target's attributes come before the fault (cached), so only
        // the step under test is left to do.
        let names: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(names.iter().any(|n| n == step.target()), "{names:?}");
        let target = root.join(step.target());
        let _ = std::fs::metadata(&target).unwrap();
        // Listings are bounded by the client's exchange bound (timeout × attempts plus waits).
        // Reads by the read deadline, twice: when the kernel's readahead of a page fails it reads
        // that page once more (synchronously) before read(2) returns EIO, and each FUSE read gets
        // its own deadline (see SEMANTICS.md).
        cell.bound = match step {
            Step::Listing => client_cfg(&self.hub).exchange_time_bound(),
            _ => READ_TIMEOUT * 2,
        } + SLACK;
        self.set_fault(step);
        let op = |target: &Path| -> std::io::Result<Vec<u8>> {
            if step == Step::Listing {
                let mut names: Vec<String> = std::fs::read_dir(target)?
                    .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                    .collect::<std::io::Result<_>>()?;
                names.sort();
                Ok(names.join(",").into_bytes())
            } else {
                let mut f = std::fs::File::open(target)?;
                let mut buf = Vec::new();
                f.read_to_end(&mut buf)?;
                Ok(buf)
            }
        };
        let t = Instant::now();
        let r = op(&target);
        cell.elapsed = t.elapsed();
        match r {
            Ok(_) => cell.problems.push("the operation succeeded under the fault".into()),
            Err(e) => cell.errno = e.raw_os_error().unwrap_or(-1),
        }
        if cell.errno != libc::EIO {
            cell.problems
                .push(format!("errno {} (want EIO)", errno_name(cell.errno)));
        }
        self.take_stats(cell);
        let want = match step {
            Step::Listing => b"a.txt,b.txt".to_vec(),
            _ => self.expected_read(step),
        };
        match op(&target) {
            Ok(got) if got == want => cell.recovered = true,
            Ok(got) => cell.problems.push(format!(
                "after the fault: {} bytes with sha256 {}, want {}",
                got.len(),
                sha(&got),
                sha(&want)
            )),
            Err(e) => cell.problems.push(format!("after the fault: {e}")),
        }
        if step != Step::Listing {
            // The Hub's own record of the file agrees with what the mount served.
            let files = self.hub_files(&RepoRef::model("local/m").unwrap());
            let (listed, served) = &files[step.target()];
            if *served != sha(&want) || (step != Step::Resolve && listed.as_deref() != Some(sha(&want).as_str())) {
                cell.problems.push(format!("Hub sha256 {listed:?}/{served} differs"));
            }
        }
        drop(m);
    }

    /// A close of a newly written LFS-class file on a writable dataset mount: EIO within the
    /// documented bound, the bytes stay staged, and once the fault clears they land on the Hub
    /// (sha256 checked there) and a new close succeeds.
    fn write_cell(&self, cell: &mut Cell) {
        let step = cell.step;
        let name = format!("w-{}", format!("{step:?}").to_lowercase());
        let bucket = step == Step::BucketBatch;
        let spec = if bucket {
            format!("buckets/local/{name}")
        } else {
            format!("datasets/local/{name}")
        };
        let repo = RepoRef::parse(&spec).unwrap().0;
        self.create_dataset(&name, bucket);
        let m = self.mount(&spec, true, &name);
        let root = m.mountpoint.clone();
        std::fs::write(root.join("warm.txt"), b"warm\n").unwrap();
        // close() = preupload + Xet write token + one upload session + the commit, each bounded.
        let cfg = client_cfg(&self.hub);
        let upload_deadline = UPLOAD_TIMEOUT + Duration::from_secs(1);
        cell.bound = cfg.exchange_time_bound() * 3 + upload_deadline + SLACK;
        let data = pseudo(FILE_LEN, self.seed + 10 + step as u64);
        let after = pseudo(FILE_LEN, self.seed + 20 + step as u64);
        self.set_fault(step);
        let t = Instant::now();
        let (rc, errno) = write_and_close(&root.join("data.bin"), &data);
        cell.elapsed = t.elapsed();
        cell.errno = if rc == 0 { 0 } else { errno };
        if cell.errno != libc::EIO {
            cell.problems
                .push(format!("close gave {} (want EIO)", errno_name(cell.errno)));
        }
        if !m.vfs.dirty_paths().contains(&"data.bin".to_string()) && rc != 0 {
            cell.problems.push("the failed file is not kept staged".into());
        }
        match std::fs::read(root.join("data.bin")) {
            Ok(b) if b == data => {}
            Ok(_) => cell
                .problems
                .push("the mount shows other bytes after the failed close".into()),
            Err(e) => cell.problems.push(format!("reading back after the failed close: {e}")),
        }
        self.take_stats(cell);
        let (rc2, errno2) = write_and_close(&root.join("after.bin"), &after);
        if rc2 != 0 {
            cell.problems
                .push(format!("a close after the fault cleared gave {}", errno_name(errno2)));
        }
        let want = [("data.bin", sha(&data)), ("after.bin", sha(&after))];
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let files = self.hub_files(&repo);
            // A bucket lists no sha256 (its files are named by Xet hash): the served bytes decide.
            let landed = want.iter().all(|(p, s)| {
                files
                    .get(*p)
                    .is_some_and(|(listed, served)| (bucket || listed.as_deref() == Some(s.as_str())) && served == s)
            });
            if landed && m.vfs.dirty_paths().is_empty() {
                cell.recovered = rc2 == 0;
                break;
            }
            if Instant::now() > deadline {
                cell.problems.push(format!(
                    "written data never landed: Hub has {:?}, dirty {:?}",
                    files.keys().collect::<Vec<_>>(),
                    m.vfs.dirty_paths()
                ));
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        drop(m);
    }
}

/// Creates `path`, writes `data` and closes it with close(2) itself (Rust's drop would swallow the
/// error). Returns (rc, errno).
fn write_and_close(path: &Path, data: &[u8]) -> (i32, i32) {
    let mut f = match std::fs::File::create(path) {
        Ok(f) => f,
        Err(e) => return (-1, e.raw_os_error().unwrap_or(-1)),
    };
    if let Err(e) = f.write_all(data) {
        return (-1, e.raw_os_error().unwrap_or(-1));
    }
    let fd = std::os::fd::IntoRawFd::into_raw_fd(f);
    // SAFETY: fd was just taken from a File and is closed exactly once.
    let rc = unsafe { libc::close(fd) };
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    (rc, if rc == 0 { 0 } else { errno })
}

fn run_fault(rt: Arc<tokio::runtime::Runtime>, fault: Fault, seed: u64) -> Vec<Cell> {
    let hub = rt.block_on(LocalHub::start_temp(false)).expect("local hub");
    let bench = Bench {
        rt: rt.clone(),
        hub,
        fault,
        seed,
        dirs: tempfile::tempdir().unwrap(),
    };
    bench.seed_model();
    let mut cells = Vec::new();
    for step in Step::ALL {
        cells.push(bench.cell(step));
    }
    let Bench { hub, .. } = bench;
    rt.block_on(hub.stop());
    cells
}

#[test]
fn fault_matrix() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap(),
    );
    let started = Instant::now();
    let threads: Vec<_> = Fault::ALL
        .into_iter()
        .enumerate()
        .map(|(i, fault)| {
            let rt = rt.clone();
            std::thread::spawn(move || run_fault(rt, fault, 1000 * (i as u64 + 1)))
        })
        .collect();
    let mut cells: Vec<Cell> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    cells.sort_by_key(|c| (c.step as usize, c.fault as usize));
    println!();
    println!(
        "{:<20} {:<6} {:<8} {:<7} {:>9} {:>9} {:>9} {:>9}  recovered",
        "step", "fault", "outcome", "errno", "elapsed", "bound", "requests", "injected"
    );
    let mut failures = Vec::new();
    for c in &cells {
        let outcome = if c.problems.is_empty() { "as doc'd" } else { "FAIL" };
        println!(
            "{:<20} {:<6} {:<8} {:<7} {:>8.2}s {:>8.1}s {:>9} {:>9}  {}",
            c.step.name(),
            c.fault.name(),
            outcome,
            errno_name(c.errno),
            c.elapsed.as_secs_f64(),
            c.bound.as_secs_f64(),
            c.requests,
            c.injected,
            if c.recovered { "yes" } else { "no" }
        );
        for p in &c.problems {
            failures.push(format!("{} × {}: {p}", c.step.name(), c.fault.name()));
        }
    }
    println!("matrix took {:.1}s", started.elapsed().as_secs_f64());
    assert!(failures.is_empty(), "fault matrix failures:\n{}", failures.join("\n"));
}

/// The commit step × a 429 that asks for a long wait: the Hub's commit rate limit (the matrix's
/// own 429 asks for 1 s, which the HTTP layer waits out within the request). close() must fail
/// at once with EIO instead of retrying into the refusal, the file stays staged, the mount shows
/// until when it waits, nothing is sent meanwhile, and the file lands once the window opens.
#[test]
fn commit_step_under_the_hubs_commit_rate_limit() {
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
    );
    let hub = rt.block_on(LocalHub::start_temp(false)).expect("local hub");
    let bench = Bench {
        rt: rt.clone(),
        hub,
        fault: Fault::Throttle429,
        seed: 77,
        dirs: tempfile::tempdir().unwrap(),
    };
    let name = "w-commit-limit";
    bench.create_dataset(name, false);
    let window = 12;
    bench
        .hub
        .set_commit_limit(hubfs::local_hub::CommitLimit::new(1, window).unwrap());
    let m = bench.mount(&format!("datasets/local/{name}"), true, name);
    let root = m.mountpoint.clone();
    // The repo's one commit of the window.
    assert_eq!(write_and_close(&root.join("warm.txt"), b"warm\n"), (0, 0));
    let data = pseudo(FILE_LEN, 78);
    let t = Instant::now();
    let (rc, errno) = write_and_close(&root.join("data.bin"), &data);
    let took = t.elapsed();
    assert_eq!((rc, errno), (-1, libc::EIO), "close under the commit limit");
    let bound = TIMEOUT + SLACK;
    assert!(
        took < bound,
        "close took {took:?}, bound {bound:?}: no retry into the refusal"
    );
    let status = m.vfs.status_report().unwrap();
    assert!(status.rate_limited_until.is_some(), "{status:?}");
    assert_eq!(m.vfs.dirty_paths(), vec!["data.bin".to_string()]);
    let refused = |hub: &LocalHub| {
        rt.block_on(async {
            let v: serde_json::Value = reqwest::Client::new()
                .get(format!("{}/admin/limits", hub.endpoint()))
                .bearer_auth(DEFAULT_WRITE_TOKEN)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v["repos"][format!("datasets/local/{name}")]["refused"]
                .as_u64()
                .unwrap_or(0)
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(refused(&bench.hub), 1, "nothing is sent while the Hub says wait");
    // The window opens: the staged file lands, byte for byte.
    let repo = RepoRef::dataset(&format!("local/{name}")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(window + 15);
    loop {
        let files = bench.hub_files(&repo);
        if files.get("data.bin").is_some_and(|(_, served)| *served == sha(&data)) {
            break;
        }
        assert!(Instant::now() < deadline, "data.bin never landed: {:?}", files.keys());
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(m.vfs.status_report().unwrap().rate_limited_until.is_none());
    println!(
        "commit × 429 with Retry-After ({window} s window): close EIO in {:.2}s, 1 refusal, landed after the window",
        took.as_secs_f64()
    );
    drop(m);
    let Bench { hub, .. } = bench;
    rt.block_on(hub.stop());
}
