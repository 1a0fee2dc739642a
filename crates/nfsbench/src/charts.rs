//! Charts in the paper's form, as SVG (plotters; no font files needed):
//! - `read-throughput-<transport>.svg`: MB/s vs read size, one line per reads in
//!   flight (the paper's figures 15 and 16);
//! - `read-throughput-all.svg`: both transports at the largest depth;
//! - `cpu-vs-throughput.svg`: CPU (client + server cores busy) vs MB/s, one point per
//!   grid cell and transport (figure 17);
//! - `cpu-per-gib.svg`: CPU s/GiB vs read size per transport at the largest depth.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::report::{Report, TransferMedian};

type ChartResult = Result<(), String>;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn kib(size: u32) -> f64 {
    f64::from(size) / 1024.0
}

struct Series {
    label: String,
    points: Vec<(f64, f64)>,
}

fn size_chart(path: &Path, title: &str, y_desc: &str, series: &[Series]) -> ChartResult {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (xmin, xmax) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    if xmin > xmax {
        return Ok(());
    }
    let ymax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|y| y.is_finite())
        .fold(0.0f64, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            ((xmin / 1.2)..(xmax * 1.2)).log_scale(),
            0.0..ymax.max(1e-9),
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("read size (KiB, log scale)")
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .map_err(err)?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(s.points.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

fn cpu_chart(path: &Path, reads: &[TransferMedian], transports: &[String]) -> ChartResult {
    let xmax = reads.iter().map(|m| m.mb_s).fold(0.0f64, f64::max) * 1.1;
    let ymax = reads
        .iter()
        .map(|m| m.cpu_busy)
        .filter(|y| y.is_finite())
        .fold(0.0f64, f64::max)
        * 1.1;
    if xmax <= 0.0 {
        return Ok(());
    }
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "CPU vs throughput, sequential READ (cf. paper fig. 17)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax.max(1e-9))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("throughput (MB/s)")
        .y_desc("CPU, client + server (cores busy; 2 = whole machine)")
        .draw()
        .map_err(err)?;
    for (i, t) in transports.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = reads
            .iter()
            .filter(|m| &m.transport == t && m.cpu_busy.is_finite())
            .map(|m| (m.mb_s, m.cpu_busy))
            .collect();
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(err)?
            .label(t.clone())
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// Draws every chart of `report` into `dir`; returns the files written.
pub fn draw(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let reads = &report.summary.reads;
    let mut transports: Vec<String> = reads.iter().map(|m| m.transport.clone()).collect();
    transports.dedup();
    let mut depths: Vec<usize> = reads.iter().map(|m| m.depth).collect();
    depths.sort_unstable();
    depths.dedup();
    let max_depth = depths.last().copied().unwrap_or(1);
    let mut out = Vec::new();
    for t in &transports {
        let series: Vec<Series> = depths
            .iter()
            .map(|&d| Series {
                label: format!("{d} in flight"),
                points: reads
                    .iter()
                    .filter(|m| &m.transport == t && m.depth == d)
                    .map(|m| (kib(m.size), m.mb_s))
                    .collect(),
            })
            .collect();
        let p = dir.join(format!("read-throughput-{t}.svg"));
        size_chart(
            &p,
            &format!("NFSv3 sequential READ over {t} (cf. paper figs. 15/16)"),
            "throughput (MB/s)",
            &series,
        )?;
        out.push(p);
    }
    let at_max = |t: &String, f: &dyn Fn(&TransferMedian) -> f64| Series {
        label: format!("{t}, {max_depth} in flight"),
        points: reads
            .iter()
            .filter(|m| &m.transport == t && m.depth == max_depth)
            .map(|m| (kib(m.size), f(m)))
            .collect(),
    };
    let all: Vec<Series> = transports.iter().map(|t| at_max(t, &|m| m.mb_s)).collect();
    let p = dir.join("read-throughput-all.svg");
    size_chart(
        &p,
        "NFSv3 sequential READ, transports compared",
        "throughput (MB/s)",
        &all,
    )?;
    out.push(p);
    let cpu: Vec<Series> = transports
        .iter()
        .map(|t| at_max(t, &|m| m.cpu_s_per_gib))
        .collect();
    let p = dir.join("cpu-per-gib.svg");
    size_chart(
        &p,
        "CPU per GiB read (client + server)",
        "CPU seconds per GiB",
        &cpu,
    )?;
    out.push(p);
    let p = dir.join("cpu-vs-throughput.svg");
    cpu_chart(&p, reads, &transports)?;
    out.push(p);
    Ok(out)
}
