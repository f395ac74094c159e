//! The suite's jobs, in the order they run, and the ceilings each is compared to.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use hubfs::local_hub::{CommitLimit, DEFAULT_WRITE_TOKEN, LocalHub};

use crate::fio::{Fio, Job, Target, drop_caches};
use crate::hub::{self, Profile, ReadRepo};
use crate::procs::{Frontend, Hubfs, Spec};
use crate::report::{CeilingRow, Cell, Figure, Report, Section, Unit};
use crate::{Args, Sizes};

const MIB: u64 = 1 << 20;
const KIB: u64 = 1 << 10;

/// Figures of the memory servers (FUSE and NFS) and the local disk, measured once per run.
#[derive(Clone, Copy, Debug, Default)]
struct FsCeiling {
    seq_1m: f64,
    seq_128k: f64,
    rand: f64,
    rand16: f64,
}

/// The Hub's raw figures under one network profile.
#[derive(Clone, Copy, Debug, Default)]
struct HubCeiling {
    ranges: f64,
    small: f64,
}

struct Ctx<'a> {
    args: &'a Args,
    rt: &'a tokio::runtime::Runtime,
    hub: &'a LocalHub,
    ep: String,
    fio: Fio,
    work: tempfile::TempDir,
    repo: ReadRepo,
    fuse: FsCeiling,
    nfs: FsCeiling,
    disk_write: f64,
    disk_files: f64,
    /// Distinguishes the cache dirs and repos of successive processes.
    serial: std::cell::Cell<u32>,
}

pub fn size_text(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{} GiB", b >> 30)
    } else if b >= MIB {
        format!("{} MiB", b / MIB)
    } else {
        format!("{} KiB", b / KIB)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").parse::<u64>().unwrap_or(0))
        })
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "{cores} cores ({cpu}), {:.0} GiB, kernel {}",
        mem as f64 / (1 << 20) as f64,
        kernel.trim()
    )
}

pub fn run(args: &Args, rt: &tokio::runtime::Runtime) -> anyhow::Result<Report> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the suite needs root (FUSE mounts, dropping the page cache)");
    }
    let s = &args.sizes;
    // The suite measures the mounts, not the Hub's limits: the full profile writes 10,000 small files
    // into one repo's root (next to .gitattributes: past the Hub's 10,000 entries per folder) in as
    // many commits as the mount makes, so it asks the local Hub for no commit budget and no folder
    // limit.
    let hub = rt.block_on(LocalHub::start_temp_with(false, |c| {
        c.commit_limit = CommitLimit::UNLIMITED;
        c.dir_entry_limit = 0;
    }))?;
    let ep = hub.endpoint().to_string();
    println!("local Hub at {ep}; seeding the read repo");
    let t = Instant::now();
    let repo = rt.block_on(hub::seed_read_repo(&ep, s.big, s.huge, s.five, s.small_files))?;
    println!("seeded in {:.1} s", t.elapsed().as_secs_f64());
    let work = tempfile::tempdir_in(&args.work).context("work dir")?;
    let mut ctx = Ctx {
        args,
        rt,
        hub: &hub,
        ep,
        fio: Fio {
            bin: args.fio.clone(),
            // The longest full-run job (10,000 small files on loopback) takes about a minute; a
            // hang should cost little time (smoke jobs take seconds).
            timeout: Duration::from_secs(if s.smoke { 60 } else { 240 }),
            stuck_after_runtime: Duration::from_secs(30),
            read_bytes: Default::default(),
        },
        work,
        repo,
        fuse: FsCeiling::default(),
        nfs: FsCeiling::default(),
        disk_write: 0.0,
        disk_files: 0.0,
        serial: std::cell::Cell::new(0),
    };
    let mut report = Report {
        title: "### fio suite: FUSE and NFS against their ceilings".to_string(),
        ..Report::default()
    };
    let kind = if s.smoke {
        "**smoke run: small files, one pass; these are not benchmark figures**"
    } else {
        "full run"
    };
    report.header.push(format!(
        "Run of {} on {}; build: {}; {kind}.",
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        machine(),
        args.build
    ));
    report.header.push(format!(
        "Command: `bash ci/bench.sh {}`. Files: {} and {} Xet files, 5 × {}, {} files of 4 KiB; writes of {} and \
         {} files of 4 KiB. fio {} for FUSE (psync; io_uring for iodepth 16), fio's nfs engine (libnfs) for NFS. \
         Every hubfs process is `hubfs mount` / `hubfs serve-nfs` with default cache options and a fresh cache dir \
         (cold); Hub req/MiB are the local Hub's counters for the job, peak RSS is the hubfs process's VmHWM \
         reset before the job. The local Hub, hubfs and fio share the machine's cores.",
        if s.smoke { "--smoke" } else { "--full" },
        size_text(s.big),
        size_text(s.huge),
        size_text(s.five),
        s.small_files,
        size_text(s.write),
        s.write_files,
        fio_version(&args.fio),
    ));
    ctx.ceilings(&mut report)?;
    for profile in [Profile::Loopback, Profile::Realistic] {
        profile.apply(&hub)?;
        let hc = ctx.hub_ceiling()?;
        report.ceilings.push(CeilingRow {
            name: format!(
                "Hub, {}: 8 parallel 8 MiB ranges / sequential 4 KiB ranges (one connection)",
                profile.name()
            ),
            fuse: format!("{} / {}", Unit::Bps.show(hc.ranges), Unit::Iops.show(hc.small)),
            nfs: "same".into(),
        });
        let ps = s.for_profile(profile);
        let mut sec = Section {
            profile: profile.name().to_string(),
            tag: profile.tag(),
            sizes: ps.describe(),
            ..Section::default()
        };
        for front in [Frontend::Fuse, Frontend::Nfs] {
            ctx.read_jobs(&mut sec, front, hc, &ps);
            ctx.write_jobs(&mut sec, front, profile, &ps);
        }
        report.sections.push(sec);
    }
    hub.clear_faults();
    drop(ctx);
    rt.block_on(hub.stop());
    Ok(report)
}

fn fio_version(bin: &Path) -> String {
    std::process::Command::new(bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

impl Ctx<'_> {
    fn sizes(&self) -> &Sizes {
        &self.args.sizes
    }

    fn rand_time(&self) -> Duration {
        Duration::from_secs_f64(self.sizes().rand_secs)
    }

    /// Four read figures of a filesystem serving `file` from memory.
    fn fs_ceiling(&self, target: &Target, file: &str, size: u64) -> anyhow::Result<FsCeiling> {
        let passes = self.sizes().passes;
        let files = vec![file.to_string()];
        let seq = |bs: u64| -> anyhow::Result<f64> {
            let mut v = Vec::new();
            for _ in 0..passes {
                drop_caches();
                v.push(self.fio.run(target, &Job::new("read", bs, files.clone(), size))?.bw);
            }
            Ok(median(v))
        };
        let rand = |depth: u32| -> anyhow::Result<f64> {
            drop_caches();
            let job = Job::new("randread", 4 * KIB, files.clone(), size).depth(depth);
            Ok(self.fio.run(target, &job.timed(self.rand_time()))?.iops)
        };
        Ok(FsCeiling {
            seq_1m: seq(MIB)?,
            seq_128k: seq(128 * KIB)?,
            rand: rand(1)?,
            rand16: rand(16)?,
        })
    }

    fn ceilings(&mut self, report: &mut Report) -> anyhow::Result<()> {
        let size = self.sizes().huge;
        let mib = (size / MIB) as usize;
        println!("ceilings: FUSE memory filesystem ({mib} MiB)");
        let dir = tempfile::tempdir_in(self.work.path())?;
        let session = hubfs::fuse::ceiling::mount(dir.path(), mib)?;
        let fuse = self.fs_ceiling(&Target::Fuse(dir.path().to_path_buf()), "data.bin", size);
        session.umount_and_join()?;
        self.fuse = fuse?;
        println!("ceilings: NFS memory server");
        let (addr, task) = self
            .rt
            .block_on(hubfs::nfs::ceiling::serve(mib, "127.0.0.1:0".parse()?))?;
        let nfs = self.fs_ceiling(&Target::Nfs(addr), "data.bin", size);
        task.abort();
        self.nfs = nfs?;
        println!("ceilings: local disk writes");
        let disk = tempfile::tempdir_in(self.work.path())?;
        let target = Target::Fuse(disk.path().to_path_buf());
        let w = self.sizes().write;
        let mut v = Vec::new();
        for i in 0..self.sizes().passes {
            let job = Job::new("write", MIB, vec![format!("seq{i}.bin")], w);
            v.push(self.fio.run(&target, &job)?.bw);
        }
        self.disk_write = median(v);
        let n = self.sizes().write_files;
        let r = self
            .fio
            .run(&target, &Job::many("write", 4 * KIB, "f$filenum", n, 4 * KIB))?;
        self.disk_files = n as f64 / r.wall.as_secs_f64();
        let (f, n) = (self.fuse, self.nfs);
        let row = |name: &str, unit: Unit, a: f64, b: f64| CeilingRow {
            name: name.to_string(),
            fuse: unit.show(a),
            nfs: unit.show(b),
        };
        report.ceilings.extend([
            row("memory server, sequential 1 MiB reads", Unit::Bps, f.seq_1m, n.seq_1m),
            row(
                "memory server, sequential 128 KiB reads",
                Unit::Bps,
                f.seq_128k,
                n.seq_128k,
            ),
            row(
                "memory server, 4 KiB random reads, iodepth 1",
                Unit::Iops,
                f.rand,
                n.rand,
            ),
            row(
                "memory server, 4 KiB random reads, iodepth 16",
                Unit::Iops,
                f.rand16,
                n.rand16,
            ),
        ]);
        report.ceilings.push(CeilingRow {
            name: format!(
                "local disk (fio psync, page cache): sequential 1 MiB writes of {} / {} files of 4 KiB",
                size_text(w),
                self.sizes().write_files
            ),
            fuse: format!(
                "{} / {}",
                Unit::Bps.show(self.disk_write),
                Unit::FilesPerSec.show(self.disk_files)
            ),
            nfs: "same (the NFS memory server takes no writes)".into(),
        });
        Ok(())
    }

    /// Raw Hub figures under the current profile. The first pass over a Xet file makes the local
    /// Hub's blob origin reconstruct it once, so it is not measured.
    fn hub_ceiling(&self) -> anyhow::Result<HubCeiling> {
        let size = self.sizes().huge;
        self.rt.block_on(async {
            let url = hub::blob_url(&self.ep, &self.repo.id, "huge.bin").await?;
            hub::range_throughput(&url, size).await?;
            let mut v = Vec::new();
            for _ in 0..self.sizes().passes {
                v.push(hub::range_throughput(&url, size).await?);
            }
            let small = hub::small_request_rate(&url, size, self.rand_time()).await?;
            Ok(HubCeiling {
                ranges: median(v),
                small,
            })
        })
    }

    fn spec(&self, repo: &str, write: bool, close_stage: bool) -> Spec<'_> {
        let n = self.serial.get() + 1;
        self.serial.set(n);
        Spec {
            hubfs: &self.args.hubfs,
            endpoint: &self.ep,
            token: DEFAULT_WRITE_TOKEN,
            repo: repo.to_string(),
            cache_dir: self.work.path().join(format!("cache-{n}")),
            write,
            close_stage,
        }
    }

    /// Runs one job on `p` and files its figure (or its failure) under `job` in `sec`. `f` returns
    /// the figure and a note; Hub counters and peak RSS are taken around it.
    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        sec: &mut Section,
        front: Frontend,
        p: &Hubfs,
        job: &str,
        ceiling_name: &str,
        unit: Unit,
        ceiling: Option<f64>,
        f: impl FnOnce() -> anyhow::Result<(f64, String)>,
    ) -> bool {
        self.hub.reset_stats();
        p.reset_peak();
        self.fio.read_bytes.set(0);
        let cpu0 = p.cpu_secs();
        let cell = match f() {
            Ok((value, note)) => {
                let (hub_requests, hub_bytes) = hub::counters(self.hub);
                let read = self.fio.read_bytes.get();
                let fig = Figure {
                    value,
                    unit,
                    ceiling,
                    hub_requests,
                    hub_bytes,
                    peak_rss_mib: p.peak_mib(),
                    cpu_per_gib: (read > 0).then(|| (p.cpu_secs() - cpu0) / (read as f64 / (1u64 << 30) as f64)),
                    note,
                };
                let ratio = fig
                    .ratio()
                    .map_or(String::new(), |r| format!(" = {:.0}% of ceiling", r * 100.0));
                let cpu = fig.cpu_per_gib.map_or(String::new(), |c| format!("; {c:.2} CPU-s/GiB"));
                println!(
                    "  [{}] {:<4} {job}: {}{ratio}; {hub_requests} Hub req, {:.1} MiB; peak RSS {:.0} MiB{cpu} {}",
                    sec.tag,
                    front.name(),
                    unit.show(value),
                    hub_bytes as f64 / MIB as f64,
                    fig.peak_rss_mib,
                    fig.note
                );
                Cell::Done(fig)
            }
            Err(e) => {
                println!("  [{}] {:<4} {job}: FAILED: {e:#}", sec.tag, front.name());
                Cell::Failed(format!("{e:#}"))
            }
        };
        let ok = matches!(cell, Cell::Done(_));
        sec.put(job, ceiling_name, front, cell);
        ok
    }

    fn fail(&self, sec: &mut Section, front: Frontend, job: &str, ceiling_name: &str, e: anyhow::Error) {
        println!("  [{}] {:<4} {job}: FAILED: {e:#}", sec.tag, front.name());
        sec.put(job, ceiling_name, front, Cell::Failed(format!("{e:#}")));
    }

    fn fs(&self, front: Frontend) -> FsCeiling {
        match front {
            Frontend::Fuse => self.fuse,
            Frontend::Nfs => self.nfs,
        }
    }

    /// Runs one read step on `p`: the page cache is dropped first, so the kernel does not answer.
    fn read_step(&self, sec: &mut Section, front: Frontend, p: &Hubfs, st: &Step) -> bool {
        self.record(
            sec,
            front,
            p,
            &st.name,
            st.ceiling_name,
            st.unit,
            Some(st.ceiling),
            || {
                drop_caches();
                let r = self.fio.run(&p.target, &st.job)?;
                Ok(match st.measure {
                    Measure::Bandwidth => (r.bw, r.note.unwrap_or_default()),
                    Measure::Iops => (r.iops, r.note.unwrap_or_default()),
                    Measure::IopsPerRequest => {
                        let reads = (r.iops * r.runtime.as_secs_f64()).max(1.0);
                        let (reqs, _) = hub::counters(self.hub);
                        (r.iops, format!("{:.2} Hub req/read", reqs as f64 / reads))
                    }
                    Measure::FilesPerSec => (st.job.files.len() as f64 / r.wall.as_secs_f64(), String::new()),
                })
            },
        )
    }

    /// Read-only jobs in groups; every group starts a fresh hubfs process with an empty cache, so
    /// its first step is cold and the later ones are served by hubfs's caches (warm).
    fn read_jobs(&self, sec: &mut Section, front: Frontend, hc: HubCeiling, s: &Sizes) {
        let fs = self.fs(front);
        let (big, huge) = (size_text(s.big), size_text(s.huge));
        let file = |f: &str| vec![f.to_string()];
        let step = |name: String, ceiling_name, ceiling, measure, job| Step {
            unit: match measure {
                Measure::Bandwidth => Unit::Bps,
                Measure::Iops | Measure::IopsPerRequest => Unit::Iops,
                Measure::FilesPerSec => Unit::FilesPerSec,
            },
            name,
            ceiling_name,
            ceiling,
            measure,
            job,
        };
        let seq = |bs: u64, f: &str, size: u64| Job::new("read", bs, file(f), size);
        let rand = |depth: u32| {
            Job::new("randread", 4 * KIB, file("huge.bin"), s.huge)
                .depth(depth)
                .timed(self.rand_time())
        };
        const HUB: &str = "Hub ranges";
        const HUB4K: &str = "Hub 4 KiB requests";
        const MEM: &str = "memory server";
        use Measure::*;
        let groups = vec![
            vec![
                step(
                    format!("seq read 1 MiB, {big}, cold"),
                    HUB,
                    hc.ranges,
                    Bandwidth,
                    seq(MIB, "big.bin", s.big),
                ),
                step(
                    format!("re-read 1 MiB, {big}"),
                    MEM,
                    fs.seq_1m,
                    Bandwidth,
                    seq(MIB, "big.bin", s.big),
                ),
            ],
            vec![step(
                format!("seq read 128 KiB, {big}, cold"),
                HUB,
                hc.ranges,
                Bandwidth,
                seq(128 * KIB, "big.bin", s.big),
            )],
            vec![
                step(
                    format!("seq read 1 MiB, {huge}, cold"),
                    HUB,
                    hc.ranges,
                    Bandwidth,
                    seq(MIB, "huge.bin", s.huge),
                ),
                step(
                    format!("re-read 1 MiB, {huge}"),
                    MEM,
                    fs.seq_1m,
                    Bandwidth,
                    seq(MIB, "huge.bin", s.huge),
                ),
                step(
                    format!("4 KiB random read psync, {huge}, warm"),
                    MEM,
                    fs.rand,
                    Iops,
                    rand(1),
                ),
                step(
                    format!("4 KiB random read iodepth 16, {huge}, warm"),
                    MEM,
                    fs.rand16,
                    Iops,
                    rand(16),
                ),
            ],
            vec![step(
                format!("seq read 128 KiB, {huge}, cold"),
                HUB,
                hc.ranges,
                Bandwidth,
                seq(128 * KIB, "huge.bin", s.huge),
            )],
            vec![step(
                format!("4 KiB random read psync, {huge}, cold"),
                HUB4K,
                hc.small,
                IopsPerRequest,
                rand(1),
            )],
            vec![step(
                format!("5 × {}, 1 MiB reads, cold", size_text(s.five)),
                HUB,
                hc.ranges,
                Bandwidth,
                Job::new("read", MIB, self.repo.five.clone(), s.five),
            )],
            vec![step(
                format!("{} small files (4 KiB), cold", s.small_files),
                HUB4K,
                hc.small,
                FilesPerSec,
                Job::many(
                    "read",
                    4 * KIB,
                    "small/s$filenum.bin",
                    s.small_files,
                    self.repo.small_size,
                ),
            )],
        ];
        for group in groups {
            let spec = self.spec(&self.repo.id, false, false);
            let first = &group[0];
            match Hubfs::start(front, &spec, self.work.path()) {
                Ok(p) => {
                    // A failed cold step leaves nothing warm to measure.
                    let _ = group.iter().all(|st| self.read_step(sec, front, &p, st));
                    if let Err(e) = p.stop() {
                        sec.problem(front, &first.name, e);
                    }
                }
                Err(e) => self.fail(sec, front, &first.name, first.ceiling_name, e),
            }
        }
    }

    /// Writable jobs on a fresh dataset per frontend and profile; every file written is checked on
    /// the Hub (size, and sha256 for the large ones) before its figure counts.
    fn write_jobs(&self, sec: &mut Section, front: Frontend, profile: Profile, s: &Sizes) {
        let ws = size_text(s.write);
        let seq_job = format!("seq write 1 MiB, {ws}");
        let limit = Duration::from_secs(if profile == Profile::Realistic { 900 } else { 300 });
        const DISK: &str = "local disk";
        let Some((name, p)) = self.start_writable(sec, front, &seq_job, false) else {
            return;
        };
        // Content of its own (the serial is new for every process): the CAS dedups across repos.
        let seed = 100_000 + u64::from(self.serial.get());
        let job = Job::new("write", MIB, vec!["seq.bin".into()], s.write).seeded(seed);
        let seq_sha = match self.expected_sha(&job) {
            Ok(h) => h,
            Err(e) => return self.fail(sec, front, &seq_job, DISK, e),
        };
        let on_hub = |path: &str, sha: &str| {
            let (path, sha, size) = (path.to_string(), sha.to_string(), s.write);
            self.rt.block_on(hub::wait_for_files(&self.ep, &name, limit, move |f| {
                f.get(&path)
                    .is_some_and(|(n, h)| *n == size && h.as_deref() == Some(sha.as_str()))
            }))
        };
        let mut ended = Instant::now();
        let mut ended_at = SystemTime::now();
        let wrote = self.record(sec, front, &p, &seq_job, DISK, Unit::Bps, Some(self.disk_write), || {
            let r = self.fio.run(&p.target, &job)?;
            ended = Instant::now();
            ended_at = SystemTime::now();
            let note = format!(
                "fio {:.2} s, {:.2} s wall",
                r.runtime.as_secs_f64(),
                r.wall.as_secs_f64()
            );
            Ok((r.bw, note))
        });
        if wrote {
            // FUSE: close() of a file of its own, timed (close waits for the commit by default).
            // NFS has no close: the server commits a file 2 s after its last WRITE.
            let close_job = format!("close → committed, {ws}");
            self.record(sec, front, &p, &close_job, "", Unit::Secs, None, || match &p.target {
                Target::Fuse(dir) => {
                    let (secs, sha) = timed_close(&dir.join("close.bin"), s.write, seed)?;
                    on_hub("seq.bin", &seq_sha)?;
                    on_hub("close.bin", &sha)?;
                    Ok((secs, "close()".into()))
                }
                Target::Nfs(_) => {
                    on_hub("seq.bin", &seq_sha)?;
                    Ok((ended.elapsed().as_secs_f64(), "last WRITE → on the Hub".into()))
                }
            });
            // Let the status of the round that committed those writes land (the Hub shows a commit
            // a moment before its round rewrites the status file), so that `before` counts their
            // upload and the rewrite's figure only its own. An older status file read here made
            // one NFS run report the first upload as the rewrite's (99.81%).
            let _ = p.wait_settled(Some(ended_at), limit);
            std::thread::sleep(Duration::from_millis(200));
            let before = p.bytes_uploaded();
            let rewrite = format!("identical rewrite (dedup), {ws}");
            self.record(sec, front, &p, &rewrite, "", Unit::Percent, None, || {
                let (t, since) = (Instant::now(), SystemTime::now());
                self.fio.run(&p.target, &job)?;
                p.wait_settled(Some(since), limit)?;
                on_hub("seq.bin", &seq_sha)?;
                let up = p.bytes_uploaded().saturating_sub(before);
                let pct = 100.0 * up as f64 / s.write as f64;
                Ok((
                    pct,
                    format!("{up} B uploaded; committed after {:.2} s", t.elapsed().as_secs_f64()),
                ))
            });
        }
        if let Err(e) = p.stop() {
            sec.problem(front, &seq_job, e);
        }

        // Many small files: FUSE closes return once journaled (`--close stage`), so they are
        // committed in groups; NFS commits files in the background anyway.
        let files_job = format!("{} small files written (4 KiB)", s.write_files);
        let Some((name, p)) = self.start_writable(sec, front, &files_job, front == Frontend::Fuse) else {
            return;
        };
        self.record(
            sec,
            front,
            &p,
            &files_job,
            DISK,
            Unit::FilesPerSec,
            Some(self.disk_files),
            || {
                let before = self.rt.block_on(hub::commit_count(&self.ep, &name))?;
                let job = Job::many("write", 4 * KIB, "f$filenum", s.write_files, 4 * KIB)
                    .seeded(200_000 + u64::from(self.serial.get()));
                let names = job.files.clone();
                let t = Instant::now();
                let r = self.fio.run(&p.target, &job)?;
                p.wait_settled(Some(SystemTime::now()), limit)?;
                let check = |f: &std::collections::HashMap<String, (u64, Option<String>)>| {
                    names.iter().all(|n| f.get(n).is_some_and(|(size, _)| *size == 4 * KIB))
                };
                self.rt
                    .block_on(hub::wait_for_files(&self.ep, &name, Duration::from_secs(30), check))?;
                let all = t.elapsed().as_secs_f64();
                let commits = self.rt.block_on(hub::commit_count(&self.ep, &name))? - before;
                Ok((
                    s.write_files as f64 / r.wall.as_secs_f64(),
                    format!("{commits} commits; all on the Hub after {all:.1} s"),
                ))
            },
        );
        if let Err(e) = p.stop() {
            sec.problem(front, &files_job, e);
        }
    }

    /// fio writes the same bytes for the same job and seed: the sha256 hubfs must commit for `job`,
    /// from the same job run on the local disk.
    fn expected_sha(&self, job: &Job) -> anyhow::Result<String> {
        let dir = tempfile::tempdir_in(self.work.path())?;
        self.fio.run(&Target::Fuse(dir.path().to_path_buf()), job)?;
        hub::sha256_file(&dir.path().join(&job.files[0]))
    }

    /// A new dataset and a writable hubfs process on it; a failure is filed under `job`.
    fn start_writable(&self, sec: &mut Section, front: Frontend, job: &str, stage: bool) -> Option<(String, Hubfs)> {
        let name = format!("w{}", self.serial.get() + 1);
        let started = self.rt.block_on(hub::create_dataset(&self.ep, &name)).and_then(|repo| {
            let spec = self.spec(&repo, true, stage);
            Hubfs::start(front, &spec, self.work.path())
        });
        match started {
            Ok(p) => Some((name, p)),
            Err(e) => {
                self.fail(sec, front, job, "local disk", e);
                None
            }
        }
    }
}

/// How a read step's figure comes out of fio's report.
#[derive(Clone, Copy, Debug)]
enum Measure {
    Bandwidth,
    Iops,
    /// IOPS, noting the Hub requests each read cost (cold random reads).
    IopsPerRequest,
    /// Files of the job over the fio process's wall time (opening each file included).
    FilesPerSec,
}

/// One read job and what its figure is compared with.
struct Step {
    name: String,
    ceiling_name: &'static str,
    ceiling: f64,
    unit: Unit,
    measure: Measure,
    job: Job,
}

/// Writes `len` pseudo-random bytes to a new file in 1 MiB writes; returns the seconds close() took
/// and the sha256 of what was written.
fn timed_close(path: &Path, len: u64, seed: u64) -> anyhow::Result<(f64, String)> {
    use sha2::{Digest, Sha256};
    use std::io::Write;
    let mut h = Sha256::new();
    let mut f = std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
    let mut left = len;
    let mut i = 0u64;
    while left > 0 {
        let n = left.min(MIB) as usize;
        // Fresh pseudo-random bytes for every MiB: nothing dedups inside the file.
        let block = hubfs::local_hub::seed::demo_bytes(n, (seed << 32) + i);
        h.update(&block);
        f.write_all(&block)?;
        left -= n as u64;
        i += 1;
    }
    let fd = std::os::fd::IntoRawFd::into_raw_fd(f);
    let t = Instant::now();
    // SAFETY: fd was just taken from a File and is closed exactly once.
    let rc = unsafe { libc::close(fd) };
    let secs = t.elapsed().as_secs_f64();
    if rc != 0 {
        bail!("close: {}", std::io::Error::last_os_error());
    }
    Ok((secs, hex::encode(h.finalize())))
}
