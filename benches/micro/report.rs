//! After a measuring run, reads the median criterion recorded for every benchmark of this run
//! (`<criterion dir>/<group>/<id>/new/estimates.json`) and prints them as the Markdown tables of
//! docs/BENCHMARKS.md, with the snapshot-vs-rebuild ratios per directory size.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Where criterion writes: `$CRITERION_HOME`, else `<target dir>/criterion` (the bench binary is
/// `<target dir>/<profile>/deps/micro-<hash>`).
pub fn criterion_dir() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return Some(PathBuf::from(home));
    }
    let exe = std::env::current_exe().ok()?;
    Some(exe.ancestors().nth(3)?.join("criterion"))
}

/// The median of one benchmark in nanoseconds, if this run (started at `since`) measured it.
pub fn median_ns(dir: &Path, id: &str, since: SystemTime) -> Option<f64> {
    let file = dir.join(id).join("new").join("estimates.json");
    let modified = std::fs::metadata(&file).ok()?.modified().ok()?;
    if modified < since {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).ok()?).ok()?;
    v["median"]["point_estimate"].as_f64()
}

pub fn human(ns: f64) -> String {
    match ns {
        x if x < 1e3 => format!("{x:.1} ns"),
        x if x < 1e6 => format!("{:.2} µs", x / 1e3),
        x if x < 1e9 => format!("{:.2} ms", x / 1e6),
        x => format!("{:.2} s", x / 1e9),
    }
}

/// Prints the medians of `ids` (with a note each) and the ratio table of `ratios`
/// (`(label, snapshot id, rebuild id)`). Benchmarks this run did not measure are left out.
pub fn print(ids: &[(String, String)], ratios: &[(String, String, String)], since: SystemTime) {
    let Some(dir) = criterion_dir() else { return };
    let mut rows = Vec::new();
    for (id, note) in ids {
        if let Some(ns) = median_ns(&dir, id, since) {
            rows.push(format!("| `{id}` | {} | {note} |", human(ns)));
        }
    }
    if rows.is_empty() {
        return;
    }
    println!("\nMedians of this run (from {}):\n", dir.display());
    println!("| benchmark | median | what one iteration is |");
    println!("|---|---:|---|");
    for r in rows {
        println!("{r}");
    }
    let mut ratio_rows = Vec::new();
    for (label, snap, rebuild) in ratios {
        if let (Some(s), Some(r)) = (median_ns(&dir, snap, since), median_ns(&dir, rebuild, since)) {
            ratio_rows.push(format!("| {label} | {} | {} | {:.0}x |", human(s), human(r), r / s));
        }
    }
    if !ratio_rows.is_empty() {
        println!("\n| readdir | snapshot | rebuilt per page | rebuilt / snapshot |");
        println!("|---|---:|---:|---:|");
        for r in ratio_rows {
            println!("{r}");
        }
    }
}
