//! Concurrency stress: 32 threads on one writable FUSE mount of a local-Hub dataset, for a bounded
//! time (`HUBFS_STRESS_SECS`, default 20), mixing whole-file writes, in-place overwrites, renames,
//! deletes, reads and listings. Each thread owns the files of its own folder, so the final content
//! of every path is known; reads and listings cross every folder. A watchdog fails the run with the
//! operation each thread is stuck in if no operation completes for `HUBFS_STRESS_HANG_SECS`
//! (default 30). At the end every file is checked on the Hub by sha256: nothing lost, nothing extra.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hubfs::hub_client::{HubClient, HubClientConfig, RepoRef, TreeEntry};
use hubfs::local_hub::{DEFAULT_WRITE_TOKEN, LocalHub};
use hubfs::process::session::{MountRequest, mount};
use hubfs::vfs::{BudgetSpec, CloseMode, VfsOptions, WriteOptions};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use serde_json::json;
use sha2::{Digest, Sha256};

const THREADS: usize = 32;
/// Files a thread may own at once (slot names `f0` … `f5`).
const SLOTS: usize = 6;

#[derive(Debug, Clone, Copy)]
enum Kind {
    Write,
    Overwrite,
    Rename,
    Delete,
    Read,
    List,
}

const KINDS: [Kind; 6] = [
    Kind::Write,
    Kind::Overwrite,
    Kind::Rename,
    Kind::Delete,
    Kind::Read,
    Kind::List,
];

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn env_secs(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What the threads share: progress for the watchdog, op counters and failures.
struct Shared {
    root: PathBuf,
    started: Instant,
    stop: AtomicBool,
    /// Milliseconds since `started` at which the last operation completed.
    last_progress: AtomicU64,
    /// What each thread is doing now (for the watchdog's report).
    doing: Vec<Mutex<String>>,
    ops: [AtomicU64; 6],
    /// Reads and listings of other threads' files that found them gone (renamed or deleted
    /// meanwhile): expected races, counted apart.
    races: AtomicU64,
    failures: Mutex<Vec<String>>,
}

impl Shared {
    fn done(&self, kind: Kind) {
        self.ops[kind as usize].fetch_add(1, Ordering::Relaxed);
        self.last_progress
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn fail(&self, msg: String) {
        eprintln!("stress failure: {msg}");
        self.failures.lock().push(msg);
    }

    /// A failure with the thread's last operations (oldest first) for the report.
    fn fail_after(&self, recent: &std::collections::VecDeque<String>, msg: String) {
        let ops: Vec<&str> = recent.iter().map(String::as_str).collect();
        self.fail(format!("{msg}\n    after: {}", ops.join("; ")))
    }
}

/// Content of a new file: small text (inline in the commit), a mid-size binary or a larger binary
/// (LFS class, uploaded through Xet).
fn content(rng: &mut rand::rngs::StdRng) -> Vec<u8> {
    let len = match rng.random_range(0..10) {
        0..=4 => rng.random_range(1..2_000),
        5..=7 => rng.random_range(10_000..100_000),
        _ => rng.random_range(200_000..600_000),
    };
    let mut b = hubfs::local_hub::seed::demo_bytes(len, rng.random());
    if len < 2_000 {
        // Text: no NUL bytes, so the Hub stores it inline.
        for x in b.iter_mut() {
            *x = b'a' + (*x % 26);
        }
    }
    b
}

/// What a thread leaves: the expected content of its files, and every sha256 each name held over
/// the run, oldest first, as `op:sha256` (a wrong read at the end says which earlier version it
/// served, and what made it).
struct Outcome {
    model: BTreeMap<String, Vec<u8>>,
    history: BTreeMap<String, Vec<String>>,
}

/// One thread's loop: its own folder `t{i}`, whose expected content it keeps in `model`.
fn worker(i: usize, sh: Arc<Shared>, seed: u64) -> Outcome {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = format!("t{i:02}");
    let own = sh.root.join(&dir);
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut history: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut held = |name: &str, data: &[u8], op: &str| {
        history
            .entry(name.to_string())
            .or_default()
            .push(format!("{op}:{}", sha(data)))
    };
    let doing = |what: String| *sh.doing[i].lock() = what;
    let mut recent: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    while !sh.stop.load(Ordering::Relaxed) {
        let kind = match rng.random_range(0..100) {
            0..=29 => Kind::Write,
            30..=39 => Kind::Overwrite,
            40..=49 => Kind::Rename,
            50..=54 => Kind::Delete,
            55..=79 => Kind::Read,
            _ => Kind::List,
        };
        let slot = |rng: &mut rand::rngs::StdRng| format!("f{}", rng.random_range(0..SLOTS));
        match kind {
            Kind::Write => {
                let name = slot(&mut rng);
                let data = content(&mut rng);
                doing(format!("write {dir}/{name} ({} bytes)", data.len()));
                match write_file(&own.join(&name), &data) {
                    Ok(()) => {
                        held(&name, &data, "write");
                        model.insert(name, data);
                    }
                    Err(e) => {
                        // What the mount shows for the path right after, for the report.
                        let stat = std::fs::metadata(own.join(&name)).map(|m| m.len());
                        let listed = list(&own).map(|l| l.contains(&name));
                        sh.fail_after(
                            &recent,
                            format!(
                                "write {dir}/{name}: {e} (stat then: {stat:?}; listed: {listed:?}; model has it: {})",
                                model.contains_key(&name)
                            ),
                        )
                    }
                }
            }
            Kind::Overwrite => {
                let Some(name) = pick(&model, &mut rng) else { continue };
                let cur = model.get_mut(&name).unwrap();
                let off = rng.random_range(0..=cur.len()) as u64;
                let patch = hubfs::local_hub::seed::demo_bytes(rng.random_range(1..5_000), rng.random());
                doing(format!("overwrite {dir}/{name} at {off}"));
                match overwrite(&own.join(&name), off, &patch) {
                    Ok(()) => {
                        let end = off as usize + patch.len();
                        if cur.len() < end {
                            cur.resize(end, 0);
                        }
                        cur[off as usize..end].copy_from_slice(&patch);
                        held(&name, cur, "overwrite");
                    }
                    Err(e) => sh.fail_after(&recent, format!("overwrite {dir}/{name}: {e}")),
                }
            }
            Kind::Rename => {
                let Some(from) = pick(&model, &mut rng) else { continue };
                let to = slot(&mut rng);
                if to == from {
                    continue;
                }
                doing(format!("rename {dir}/{from} -> {to}"));
                match std::fs::rename(own.join(&from), own.join(&to)) {
                    Ok(()) => {
                        let data = model.remove(&from).unwrap();
                        held(&to, &data, &format!("rename from {from}"));
                        model.insert(to, data);
                    }
                    Err(e) => sh.fail_after(&recent, format!("rename {dir}/{from} -> {to}: {e}")),
                }
            }
            Kind::Delete => {
                let Some(name) = pick(&model, &mut rng) else { continue };
                doing(format!("unlink {dir}/{name}"));
                match std::fs::remove_file(own.join(&name)) {
                    Ok(()) => {
                        model.remove(&name);
                    }
                    Err(e) => sh.fail_after(&recent, format!("unlink {dir}/{name}: {e}")),
                }
            }
            Kind::Read => {
                let other = rng.random_range(0..THREADS);
                let name = slot(&mut rng);
                let path = sh.root.join(format!("t{other:02}")).join(&name);
                doing(format!("read t{other:02}/{name}"));
                match std::fs::read(&path) {
                    Ok(got) if other == i => {
                        // Our own file: read-your-writes, byte for byte.
                        if model.get(&name).map(|m| sha(m)) != Some(sha(&got)) {
                            sh.fail_after(
                                &recent,
                                format!("read {dir}/{name}: {} bytes, not what was written", got.len()),
                            );
                        }
                    }
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                        if other == i && model.contains_key(&name) {
                            sh.fail_after(&recent, format!("read {dir}/{name}: ENOENT for a file we own"));
                        }
                        sh.races.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => sh.fail_after(&recent, format!("read t{other:02}/{name}: {e}")),
                }
            }
            Kind::List => {
                let other = rng.random_range(0..=THREADS);
                let path = if other == THREADS {
                    sh.root.clone()
                } else {
                    sh.root.join(format!("t{other:02}"))
                };
                doing(format!("list {}", path.display()));
                match list(&path) {
                    Ok(names) if other == i => {
                        let want: Vec<&String> = model.keys().collect();
                        let got: Vec<&String> = names.iter().collect();
                        if want != got {
                            sh.fail_after(&recent, format!("list {dir}: {got:?}, want {want:?}"));
                        }
                    }
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) && other != i => {
                        sh.races.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => sh.fail_after(&recent, format!("list {}: {e}", path.display())),
                }
            }
        }
        sh.done(kind);
        if recent.len() == 24 {
            recent.pop_front();
        }
        recent.push_back(sh.doing[i].lock().clone());
    }
    doing("finished".into());
    Outcome { model, history }
}

fn pick(model: &BTreeMap<String, Vec<u8>>, rng: &mut rand::rngs::StdRng) -> Option<String> {
    if model.is_empty() {
        return None;
    }
    model.keys().nth(rng.random_range(0..model.len())).cloned()
}

/// create/truncate, write, and close(2) with its result checked.
fn write_file(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(data)?;
    close(f)
}

fn overwrite(path: &Path, off: u64, patch: &[u8]) -> std::io::Result<()> {
    let f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all_at(patch, off)?;
    close(f)
}

fn close(f: std::fs::File) -> std::io::Result<()> {
    let fd = std::os::fd::IntoRawFd::into_raw_fd(f);
    // SAFETY: fd was just taken from a File and is closed exactly once.
    if unsafe { libc::close(fd) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn list(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<Vec<_>>>()?;
    names.sort();
    Ok(names)
}

/// Fails the run (the whole process: hung threads cannot be joined) when no operation completed
/// for `limit`, naming what every thread was doing.
fn watchdog(sh: Arc<Shared>, limit: Duration) {
    loop {
        std::thread::sleep(Duration::from_millis(500));
        if sh.stop.load(Ordering::Relaxed) && sh.doing.iter().all(|d| *d.lock() == "finished") {
            return;
        }
        let last = Duration::from_millis(sh.last_progress.load(Ordering::Relaxed));
        let idle = sh.started.elapsed().saturating_sub(last);
        if idle > limit {
            eprintln!("STRESS HANG: no operation completed for {idle:?} (limit {limit:?}); threads are in:");
            for (i, d) in sh.doing.iter().enumerate() {
                eprintln!("  thread {i:02}: {}", d.lock());
            }
            std::process::exit(101);
        }
    }
}

/// Path → sha256 of the bytes the Hub serves at the branch head.
fn hub_files(rt: &tokio::runtime::Runtime, hub: &LocalHub, repo: &RepoRef) -> BTreeMap<String, String> {
    let client = HubClient::new(HubClientConfig {
        endpoint: hub.endpoint().to_string(),
        token: hub.write_token(),
        timeout: Duration::from_secs(30),
        ..HubClientConfig::default()
    })
    .unwrap();
    let ep = hub.endpoint().to_string();
    rt.block_on(async {
        let head = client.repo_info(repo, "main").await.unwrap().sha;
        let http = reqwest::Client::new();
        let mut out = BTreeMap::new();
        for e in client.list_tree_recursive(repo, &head, "").await.unwrap() {
            if let TreeEntry::File { path, .. } = e {
                if path == ".gitattributes" {
                    continue;
                }
                let url = format!("{ep}/{}/resolve/{head}/{path}", repo.web_path());
                let r = http.get(url).bearer_auth(DEFAULT_WRITE_TOKEN).send().await.unwrap();
                assert!(r.status().is_success(), "{path}: {}", r.status());
                out.insert(path, sha(&r.bytes().await.unwrap()));
            }
        }
        out
    })
}

#[test]
fn thirty_two_threads_on_one_writable_mount() {
    let _ = tracing_subscriber::fmt()
        // Warnings by default: a failed run then shows why rounds failed (RUST_LOG overrides).
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("hubfs=warn")),
        )
        .with_test_writer()
        .try_init();
    let secs = env_secs("HUBFS_STRESS_SECS", 20);
    let hang = Duration::from_secs(env_secs("HUBFS_STRESS_HANG_SECS", 30));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    // The local Hub at its default commit limit (128 an hour per repo, as the real Hub), the mount
    // with the CLI's defaults (close uploads, commits planned within a budget of 64 an hour): 32
    // writers for HUBFS_STRESS_SECS stay within the Hub's limit (one commit per close would make
    // about 130 in 20 s and be refused).
    let hub = rt.block_on(LocalHub::start_temp(false)).expect("local hub");
    let ep = hub.endpoint().to_string();
    rt.block_on(async {
        let r = reqwest::Client::new()
            .post(format!("{ep}/api/repos/create"))
            .bearer_auth(DEFAULT_WRITE_TOKEN)
            .json(&json!({"name": "stress", "organization": "local", "type": "dataset"}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "create repo: {}", r.status());
    });
    let repo = RepoRef::dataset("local/stress").unwrap();
    let dirs = tempfile::tempdir().unwrap();
    let mnt = dirs.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let req = MountRequest {
        repo: "datasets/local/stress".into(),
        mountpoint: mnt,
        revision: None,
        client: HubClientConfig {
            endpoint: ep.clone(),
            token: hub.write_token(),
            timeout: Duration::from_secs(30),
            ..HubClientConfig::default()
        },
        vfs: VfsOptions {
            cache_dir: Some(dirs.path().join("cache")),
            disk_cache_bytes: 1 << 30,
            write: Some(WriteOptions {
                staging_root: dirs.path().join("staging"),
                status_dir: Some(dirs.path().join("mounts")),
                close: CloseMode::Upload,
                commit_budget: BudgetSpec::parse("64/3600").unwrap(),
                ..WriteOptions::default()
            }),
            ..VfsOptions::default()
        },
        allow_other: false,
    };
    let m = mount(req, &rt).expect("mount");
    for i in 0..THREADS {
        std::fs::create_dir(m.mountpoint.join(format!("t{i:02}"))).unwrap();
    }

    let sh = Arc::new(Shared {
        root: m.mountpoint.clone(),
        started: Instant::now(),
        stop: AtomicBool::new(false),
        last_progress: AtomicU64::new(0),
        doing: (0..THREADS).map(|_| Mutex::new("starting".into())).collect(),
        ops: Default::default(),
        races: AtomicU64::new(0),
        failures: Mutex::new(Vec::new()),
    });
    let dog = {
        let sh = sh.clone();
        std::thread::spawn(move || watchdog(sh, hang))
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|i| {
            let sh = sh.clone();
            std::thread::spawn(move || worker(i, sh, 0x5EED + i as u64))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(secs));
    sh.stop.store(true, Ordering::Relaxed);
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    let mut history: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut panics = Vec::new();
    for (i, w) in workers.into_iter().enumerate() {
        match w.join() {
            Ok(out) => {
                for (name, data) in out.model {
                    expected.insert(format!("t{i:02}/{name}"), sha(&data));
                }
                for (name, shas) in out.history {
                    history.insert(format!("t{i:02}/{name}"), shas);
                }
            }
            Err(e) => panics.push(format!("thread {i} panicked: {e:?}")),
        }
    }
    dog.join().unwrap();
    let ran = sh.started.elapsed();

    println!("\nstress: {THREADS} threads for {:.1}s", ran.as_secs_f64());
    let mut total = 0;
    for k in KINDS {
        let n = sh.ops[k as usize].load(Ordering::Relaxed);
        total += n;
        println!(
            "  {:<10} {:>7} ops  {:>8.1}/s",
            format!("{k:?}"),
            n,
            n as f64 / ran.as_secs_f64()
        );
    }
    println!(
        "  total      {total:>7} ops; {} reads/listings raced a rename or delete (ENOENT)",
        sh.races.load(Ordering::Relaxed)
    );
    assert!(panics.is_empty(), "{panics:?}");
    let failures = sh.failures.lock().clone();
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(total > THREADS as u64, "hardly any operation ran: {total}");

    // Pending work drains as at unmount (past the mount's budget, within the Hub's limit); then the
    // Hub must hold exactly the model.
    let settle = Instant::now();
    let deadline = settle + Duration::from_secs(90);
    let mut last = BTreeMap::new();
    loop {
        let _ = rt.block_on(m.vfs.drain(Duration::from_secs(30)));
        if m.vfs.dirty_paths().is_empty() {
            last = hub_files(&rt, &hub, &repo);
            if last == expected {
                break;
            }
        }
        if Instant::now() > deadline {
            // For each wrong path: which of its versions the Hub and the mount hold.
            let version = |p: &str, got: Option<&String>| -> String {
                let seen = history.get(p).map(Vec::as_slice).unwrap_or_default();
                match got {
                    None => "absent".into(),
                    Some(g) => match seen.iter().rposition(|h| h.ends_with(g.as_str())) {
                        Some(k) => {
                            let op = seen[k].rsplit_once(':').map_or("", |(op, _)| op);
                            format!("version {} of {} ({op})", k + 1, seen.len())
                        }
                        None => "no version it held".into(),
                    },
                }
            };
            let missing: Vec<String> = expected
                .iter()
                .filter(|(p, s)| last.get(*p) != Some(*s))
                .map(|(p, _)| {
                    let mounted = std::fs::read(m.mountpoint.join(p)).ok().map(|b| sha(&b));
                    format!(
                        "{p}: Hub has {}, mount shows {}",
                        version(p, last.get(p)),
                        version(p, mounted.as_ref())
                    )
                })
                .collect();
            let extra: Vec<_> = last.keys().filter(|p| !expected.contains_key(*p)).collect();
            panic!(
                "the Hub never matched the writers' files: {} wrong or missing:\n  {}\nextra {extra:?}, dirty {:?}",
                missing.len(),
                missing.join("\n  "),
                m.vfs.dirty_paths()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    println!(
        "  {} files checked on the Hub by sha256 ({:.1}s to settle after the run)",
        expected.len(),
        settle.elapsed().as_secs_f64()
    );
    let commits = hub
        .commit_stats()
        .remove("datasets/local/stress")
        .expect("the stress repo's commit counts");
    println!(
        "  {} commits ({} refused by the Hub's limit of 128 an hour)",
        commits.total, commits.refused
    );
    assert_eq!(
        commits.refused, 0,
        "the mount ran into the Hub's commit limit: {commits:?}"
    );
    // The mount shows the same bytes.
    for (p, s) in &expected {
        let mut b = Vec::new();
        std::fs::File::open(m.mountpoint.join(p))
            .unwrap()
            .read_to_end(&mut b)
            .unwrap();
        let got = sha(&b);
        let seen = history.get(p).map(Vec::as_slice).unwrap_or_default();
        let which = match seen.iter().rposition(|h| h.ends_with(got.as_str())) {
            Some(k) => format!("version {} of the {} this path held", k + 1, seen.len()),
            None => "no version this path held".into(),
        };
        assert_eq!(
            &got,
            s,
            "{p} through the mount ({} bytes read; that is {which})",
            b.len()
        );
    }
    m.unmount().unwrap();
    rt.block_on(hub.stop());
}
