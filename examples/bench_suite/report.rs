//! Results: one table per network profile with FUSE and NFS side by side, every figure beside its
//! ratio to its ceiling, the Hub's request and byte counts and the serving process's peak RSS.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;

use crate::procs::Frontend;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Bytes per second, shown in MB/s.
    Bps,
    Iops,
    FilesPerSec,
    Secs,
    /// A share of the file's bytes, in percent.
    Percent,
}

impl Unit {
    pub fn show(self, v: f64) -> String {
        match self {
            Unit::Bps => format!("{:.0} MB/s", v / 1e6),
            Unit::Iops => format!("{v:.0} IOPS"),
            Unit::FilesPerSec => format!("{v:.0} files/s"),
            Unit::Secs => format!("{v:.2} s"),
            Unit::Percent => format!("{v:.2}%"),
        }
    }
}

/// One measured figure and what it cost.
#[derive(Clone, Debug)]
pub struct Figure {
    pub value: f64,
    pub unit: Unit,
    /// The ceiling's figure in the same unit (higher is better), when the job has one.
    pub ceiling: Option<f64>,
    pub hub_requests: u64,
    pub hub_bytes: u64,
    pub peak_rss_mib: f64,
    /// CPU seconds of the serving process per GiB read (read jobs).
    pub cpu_per_gib: Option<f64>,
    /// Anything else worth a word (commits made, time until committed, requests per read).
    pub note: String,
}

impl Figure {
    pub fn ratio(&self) -> Option<f64> {
        self.ceiling.filter(|c| *c > 0.0).map(|c| self.value / c)
    }
}

#[derive(Clone, Debug)]
pub enum Cell {
    NotRun,
    Done(Figure),
    Failed(String),
}

#[derive(Clone, Debug)]
pub struct Row {
    pub job: String,
    /// What the ratio compares against, e.g. "FUSE/NFS memory server" or "Hub ranges".
    pub ceiling: String,
    pub fuse: Cell,
    pub nfs: Cell,
}

/// The jobs of one network profile.
#[derive(Clone, Debug, Default)]
pub struct Section {
    pub profile: String,
    /// Short name for progress lines.
    pub tag: &'static str,
    /// What this profile's jobs read and write.
    pub sizes: String,
    pub rows: Vec<Row>,
    /// Failures outside a job (a hubfs process that did not stop cleanly), counted as failures.
    pub problems: Vec<String>,
}

impl Section {
    pub fn problem(&mut self, front: Frontend, after: &str, e: anyhow::Error) {
        let msg = format!("{} process of \"{after}\" did not stop cleanly: {e:#}", front.name());
        println!("  [{}] {msg}", self.tag);
        self.problems.push(msg);
    }

    pub fn put(&mut self, job: &str, ceiling: &str, front: Frontend, cell: Cell) {
        let i = match self.rows.iter().position(|r| r.job == job) {
            Some(i) => i,
            None => {
                self.rows.push(Row {
                    job: job.to_string(),
                    ceiling: ceiling.to_string(),
                    fuse: Cell::NotRun,
                    nfs: Cell::NotRun,
                });
                self.rows.len() - 1
            }
        };
        match front {
            Frontend::Fuse => self.rows[i].fuse = cell,
            Frontend::Nfs => self.rows[i].nfs = cell,
        }
    }
}

/// A ceiling measured in this run: name, FUSE-side figure, NFS-side figure (as text).
#[derive(Clone, Debug)]
pub struct CeilingRow {
    pub name: String,
    pub fuse: String,
    pub nfs: String,
}

#[derive(Clone, Debug, Default)]
pub struct Report {
    pub title: String,
    pub header: Vec<String>,
    pub ceilings: Vec<CeilingRow>,
    pub sections: Vec<Section>,
}

fn cell_text(c: &Cell) -> [String; 6] {
    match c {
        Cell::NotRun => [
            "—".into(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        ],
        Cell::Failed(e) => {
            let short: String = e.chars().take(80).collect();
            [
                format!("**FAILED**: {}", short.replace('|', "/")),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]
        }
        Cell::Done(f) => {
            let mut v = f.unit.show(f.value);
            if !f.note.is_empty() {
                let _ = write!(v, " ({})", f.note);
            }
            let ratio = f.ratio().map_or("—".to_string(), |r| format!("{:.0}%", 100.0 * r));
            [
                v,
                ratio,
                f.hub_requests.to_string(),
                format!("{:.1}", f.hub_bytes as f64 / (1 << 20) as f64),
                format!("{:.0}", f.peak_rss_mib),
                f.cpu_per_gib.map_or("—".to_string(), |c| format!("{c:.2}")),
            ]
        }
    }
}

impl Report {
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{}\n", self.title);
        for h in &self.header {
            let _ = writeln!(s, "{h}");
        }
        let _ = writeln!(s, "\nCeilings, measured in the same run:\n");
        let _ = writeln!(s, "| ceiling | FUSE side | NFS side |\n|---|---|---|");
        for c in &self.ceilings {
            let _ = writeln!(s, "| {} | {} | {} |", c.name, c.fuse, c.nfs);
        }
        for sec in &self.sections {
            let _ = writeln!(s, "\nNetwork profile: **{}**. {}\n", sec.profile, sec.sizes);
            let _ = writeln!(
                s,
                "| job | FUSE | % of ceiling | Hub req | Hub MiB | peak RSS MiB | CPU-s/GiB | NFS | % of ceiling | Hub req | Hub MiB | peak RSS MiB | CPU-s/GiB | ceiling |"
            );
            let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|");
            for r in &sec.rows {
                let (f, n) = (cell_text(&r.fuse), cell_text(&r.nfs));
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    r.job, f[0], f[1], f[2], f[3], f[4], f[5], n[0], n[1], n[2], n[3], n[4], n[5], r.ceiling
                );
            }
            for p in &sec.problems {
                let _ = writeln!(s, "\n**FAILED**: {p}");
            }
        }
        s
    }

    /// Job runs that produced a figure (FUSE and NFS counted apart).
    pub fn passed(&self) -> usize {
        self.sections
            .iter()
            .flat_map(|sec| &sec.rows)
            .flat_map(|r| [&r.fuse, &r.nfs])
            .filter(|c| matches!(c, Cell::Done(_)))
            .count()
    }

    pub fn failures(&self) -> Vec<String> {
        let mut v = Vec::new();
        for sec in &self.sections {
            v.extend(sec.problems.iter().map(|p| format!("[{}] {p}", sec.tag)));
            for r in &sec.rows {
                for (front, c) in [("FUSE", &r.fuse), ("NFS", &r.nfs)] {
                    if let Cell::Failed(e) = c {
                        v.push(format!("[{}] {} / {front}: {e}", sec.profile, r.job));
                    }
                }
            }
        }
        v
    }
}

pub const BEGIN: &str = "<!-- bench-suite:begin (generated by ci/bench.sh --full; edit outside the markers) -->";
pub const END: &str = "<!-- bench-suite:end -->";

/// Replaces the text between the suite's markers in `doc` (appending the marked block when the
/// markers are not there yet), leaving every other section as it is.
pub fn update_doc(doc: &Path, body: &str) -> anyhow::Result<()> {
    let old = std::fs::read_to_string(doc).with_context(|| format!("reading {}", doc.display()))?;
    let block = format!("{BEGIN}\n{body}\n{END}");
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(a), Some(b)) if b > a => format!("{}{block}{}", &old[..a], &old[b + END.len()..]),
        _ => format!("{}\n{block}\n", old.trim_end()),
    };
    std::fs::write(doc, new).with_context(|| format!("writing {}", doc.display()))
}
