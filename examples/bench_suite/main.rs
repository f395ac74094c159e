//! The fio benchmark suite: hubfs over FUSE and over NFS side by side, each figure beside a ceiling
//! measured in the same run, on two network profiles (loopback; 30 ms + 200 Mbit/s per connection).
//!
//! It starts an in-process local Hub, seeds it, measures the ceilings (a FUSE filesystem and an NFS
//! server serving memory, fio on the local disk for writes, raw Range throughput of the Hub), then
//! runs fio against `hubfs mount` and `hubfs serve-nfs` child processes: read-only jobs on fresh
//! (cold) processes and re-reads, then writable jobs. Per job it counts the Hub's requests and bytes
//! and the serving process's peak RSS. Prints a Markdown table; `--doc` puts it into
//! docs/BENCHMARKS.md between markers and `--chart` draws the PNG.
//!
//! Run through `bash ci/bench.sh --smoke|--full`, which installs fio (with its nfs engine) and builds.
//! Needs root (FUSE, dropping the page cache). Exits non-zero when any job failed.

mod chart;
mod fio;
mod hub;
mod jobs;
mod procs;
mod report;

use std::path::PathBuf;

use anyhow::{Context, bail};

/// Sizes and durations of one profile of the suite.
#[derive(Clone, Debug)]
pub struct Sizes {
    pub smoke: bool,
    pub big: u64,
    pub huge: u64,
    pub five: u64,
    pub small_files: usize,
    pub write: u64,
    pub write_files: usize,
    pub rand_secs: f64,
    /// Repetitions of ceiling measurements (median).
    pub passes: usize,
}

impl Sizes {
    /// The realistic network makes every small file cost several 30 ms round trips and uploads
    /// crawl at 25 MB/s per stream: fewer small files and a smaller sequential write there.
    pub fn for_profile(&self, p: hub::Profile) -> Sizes {
        let mut s = self.clone();
        if p == hub::Profile::Realistic && !s.smoke {
            s.small_files = s.small_files.min(200);
            s.write_files = s.write_files.min(1000);
            s.write = s.write.min(256 << 20);
        }
        s
    }

    pub fn describe(&self) -> String {
        format!(
            "Reads: {}, {}, 5 × {}, {} small files; writes: {}, {} small files.",
            jobs::size_text(self.big),
            jobs::size_text(self.huge),
            jobs::size_text(self.five),
            self.small_files,
            jobs::size_text(self.write),
            self.write_files
        )
    }

    fn smoke() -> Sizes {
        Sizes {
            smoke: true,
            big: 8 << 20,
            huge: 32 << 20,
            five: 1 << 20,
            small_files: 40,
            write: 8 << 20,
            write_files: 100,
            rand_secs: 1.0,
            passes: 1,
        }
    }

    fn full() -> Sizes {
        Sizes {
            smoke: false,
            big: 100 << 20,
            huge: 1 << 30,
            five: 10 << 20,
            small_files: 1000,
            write: 1 << 30,
            write_files: 10_000,
            rand_secs: 5.0,
            passes: 3,
        }
    }
}

pub struct Args {
    pub sizes: Sizes,
    pub hubfs: PathBuf,
    pub fio: PathBuf,
    pub work: PathBuf,
    pub doc: Option<PathBuf>,
    pub chart: Option<PathBuf>,
    /// Where the chart is linked from in the doc (relative to the doc).
    pub chart_link: Option<String>,
    pub build: String,
}

fn usage() -> &'static str {
    "usage: bench_suite --smoke|--full --hubfs PATH --fio PATH [--work DIR] [--doc FILE] [--chart FILE.png \
     [--chart-link REL]] [--build NAME]"
}

fn parse_args() -> anyhow::Result<Args> {
    let mut sizes = None;
    let (mut hubfs, mut fio, mut doc, mut chart, mut link) = (None, None, None, None, None);
    let mut work = PathBuf::from("/var/tmp");
    let mut build = "unknown".to_string();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || it.next().with_context(|| format!("{a} needs a value; {}", usage()));
        match a.as_str() {
            "--smoke" => sizes = Some(Sizes::smoke()),
            "--full" => sizes = Some(Sizes::full()),
            "--hubfs" => hubfs = Some(PathBuf::from(val()?)),
            "--fio" => fio = Some(PathBuf::from(val()?)),
            "--work" => work = PathBuf::from(val()?),
            "--doc" => doc = Some(PathBuf::from(val()?)),
            "--chart" => chart = Some(PathBuf::from(val()?)),
            "--chart-link" => link = Some(val()?),
            "--build" => build = val()?,
            _ => bail!("unknown argument {a}; {}", usage()),
        }
    }
    Ok(Args {
        sizes: sizes.context(usage())?,
        hubfs: hubfs.context(usage())?,
        fio: fio.context(usage())?,
        work,
        doc,
        chart,
        chart_link: link,
        build,
    })
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let started = std::time::Instant::now();
    let report = match jobs::run(&args, &rt) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bench_suite: {e:#}");
            std::process::exit(1);
        }
    };
    let md = report.markdown();
    println!("\n{md}");
    if let Some(png) = &args.chart {
        let subtitle = report.header.first().cloned().unwrap_or_default();
        chart::draw(&report, &subtitle, png)?;
        println!("chart: {}", png.display());
    }
    if let Some(doc) = &args.doc {
        let mut body = md.clone();
        if let Some(link) = &args.chart_link {
            body.push_str(&format!(
                "\n![FUSE and NFS figures as a share of their ceilings]({link})\n"
            ));
        }
        report::update_doc(doc, &body)?;
        println!("updated {}", doc.display());
    }
    let failures = report.failures();
    println!("suite took {:.0} s", started.elapsed().as_secs_f64());
    // The summary line ci/test.sh counts.
    println!("bench: {} passed, {} failed", report.passed(), failures.len());
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("FAILED {f}");
        }
        eprintln!("{} job(s) failed", failures.len());
        std::process::exit(1);
    }
    Ok(())
}
