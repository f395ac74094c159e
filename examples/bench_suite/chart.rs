//! The PNG chart: every job that has a ceiling, as FUSE and NFS bars of their ratio to it, one
//! panel per network profile. Ratios put figures of different units (MB/s, IOPS, files/s) on one
//! axis; the table beside it has the absolute figures.

use std::path::Path;

use anyhow::{Context, anyhow};
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::report::{Cell, Report};

const WIDTH: u32 = 1500;
const LABEL_W: i32 = 470;
const BAR_H: i32 = 13;
const ROW_H: i32 = 2 * BAR_H + 10;
const HEAD_H: i32 = 40;
const FUSE_COLOR: RGBColor = RGBColor(52, 101, 164);
const NFS_COLOR: RGBColor = RGBColor(230, 126, 34);
const FAIL_COLOR: RGBColor = RGBColor(200, 30, 30);

/// Registers a TTF font for plotters' ab_glyph text (no system font lookup exists in this build).
/// `HUBFS_BENCH_FONT` names one; else DejaVu Sans from Debian's fonts-dejavu-core.
fn load_font() -> anyhow::Result<()> {
    let path = std::env::var("HUBFS_BENCH_FONT")
        .unwrap_or_else(|_| "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf".to_string());
    let bytes = std::fs::read(&path).with_context(|| format!("font {path} (apt-get install fonts-dejavu-core)"))?;
    // plotters keeps fonts for the life of the process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| anyhow!("{path} is not a usable font"))
}

/// A job's label and its FUSE and NFS ratios (None: not run; Err: failed).
type Bars = (String, Option<Result<f64, ()>>, Option<Result<f64, ()>>);

fn ratio(c: &Cell) -> Option<Result<f64, ()>> {
    match c {
        Cell::Done(f) => f.ratio().map(Ok),
        Cell::Failed(_) => Some(Err(())),
        Cell::NotRun => None,
    }
}

pub fn draw(report: &Report, subtitle: &str, path: &Path) -> anyhow::Result<()> {
    load_font()?;
    let panels: Vec<(String, Vec<Bars>)> = report
        .sections
        .iter()
        .map(|s| {
            let rows = s
                .rows
                .iter()
                .map(|r| (r.job.clone(), ratio(&r.fuse), ratio(&r.nfs)))
                .filter(|(_, f, n)| f.is_some() || n.is_some())
                .collect();
            (s.profile.clone(), rows)
        })
        .collect();
    let max = panels
        .iter()
        .flat_map(|(_, rows)| rows.iter())
        .flat_map(|(_, f, n)| [f, n])
        .filter_map(|r| r.as_ref().and_then(|r| r.ok()))
        .fold(1.25f64, f64::max)
        .min(3.0);
    // Axis in steps of 25%, up to the largest ratio (capped at 300%; longer bars are cut).
    let axis = (max * 4.0).ceil() / 4.0;
    let rows: i32 = panels.iter().map(|(_, r)| r.len() as i32).sum();
    let height = 90 + panels.len() as i32 * (HEAD_H + 30) + rows * ROW_H;
    let root = BitMapBackend::new(path, (WIDTH, height as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let font = |size: i32| ("sans-serif", size).into_font();
    let text = |s: &str, x: i32, y: i32, size: i32, color: &RGBColor| {
        root.draw(&Text::new(s.to_string(), (x, y), font(size).color(color)))
            .map_err(|e| anyhow!("{e}"))
    };
    let bar_x0 = LABEL_W;
    let bar_w = WIDTH as i32 - LABEL_W - 90;
    let x_of = |r: f64| bar_x0 + (bar_w as f64 * r.min(axis) / axis) as i32;
    text(
        &report.title.trim_start_matches("# ").replace("### ", ""),
        20,
        12,
        22,
        &BLACK,
    )?;
    text(&subtitle.replace("**", ""), 20, 40, 15, &RGBColor(80, 80, 80))?;
    // Legend.
    for (i, (name, color)) in [("FUSE", FUSE_COLOR), ("NFS", NFS_COLOR)].iter().enumerate() {
        let x = WIDTH as i32 - 260 + i as i32 * 120;
        root.draw(&Rectangle::new([(x, 16), (x + 24, 30)], color.filled()))
            .map_err(|e| anyhow!("{e}"))?;
        text(name, x + 30, 14, 16, &BLACK)?;
    }
    let mut y = 70;
    for (profile, rows) in &panels {
        text(&format!("Network: {profile} (bars: % of ceiling)"), 20, y, 18, &BLACK)?;
        y += HEAD_H - 10;
        let top = y;
        let bottom = y + rows.len() as i32 * ROW_H;
        // Grid: every 25%, 100% darker.
        let mut g = 0.0;
        while g <= axis + 1e-9 {
            let x = x_of(g);
            let (color, w) = if (g - 1.0).abs() < 1e-9 {
                (RGBColor(60, 60, 60), 2)
            } else {
                (RGBColor(215, 215, 215), 1)
            };
            root.draw(&PathElement::new(
                vec![(x, top - 4), (x, bottom)],
                color.stroke_width(w),
            ))
            .map_err(|e| anyhow!("{e}"))?;
            text(
                &format!("{:.0}%", g * 100.0),
                x - 14,
                bottom + 4,
                13,
                &RGBColor(90, 90, 90),
            )?;
            g += 0.25;
        }
        for (job, fuse, nfs) in rows {
            text(job, 20, y + BAR_H / 2 + 2, 14, &BLACK)?;
            for (i, (r, color)) in [(fuse, FUSE_COLOR), (nfs, NFS_COLOR)].into_iter().enumerate() {
                let by = y + i as i32 * BAR_H + 2;
                match r {
                    Some(Ok(v)) => {
                        let x1 = x_of(*v).max(bar_x0 + 1);
                        root.draw(&Rectangle::new([(bar_x0, by), (x1, by + BAR_H - 2)], color.filled()))
                            .map_err(|e| anyhow!("{e}"))?;
                        let cut = if *v > axis { " ›" } else { "" };
                        text(&format!("{:.0}%{cut}", v * 100.0), x1 + 4, by, 12, &BLACK)?;
                    }
                    Some(Err(())) => text("failed", bar_x0 + 4, by, 12, &FAIL_COLOR)?,
                    None => {}
                }
            }
            y += ROW_H;
        }
        y += 30;
    }
    root.present().map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}
