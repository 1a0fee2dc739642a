//! Charts in the paper's form, as SVG (plotters; no font files needed):
//! - `read-throughput-<transport>.svg`: MB/s vs read size, one line per reads in
//!   flight (the paper's figures 15 and 16);
//! - `read-throughput-all.svg`: both transports at the largest depth;
//! - `cpu-vs-throughput.svg`: CPU (client + server cores busy) vs MB/s at 4 reads in
//!   flight (or the nearest depth run), one line per transport through the read sizes
//!   (figure 17, which used 4 reads-ahead);
//! - `cpu-per-gib.svg`: client and server CPU s/GiB vs read size at 1 read in flight
//!   (or the smallest depth run), per transport (figure 18, "no read-ahead").

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::report::{Report, TransferMedian};

type ChartResult = Result<(), String>;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// The x coordinate of a read size: log2 of KiB (the axis is labelled in KiB).
fn kib(size: u32) -> f64 {
    (f64::from(size) / 1024.0).log2()
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
        .build_cartesian_2d((xmin - 0.3)..(xmax + 0.3), 0.0..ymax.max(1e-9))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("read size (KiB, log scale)")
        .y_desc(y_desc)
        .x_labels(((xmax - xmin).round() as usize + 1).max(2))
        .x_label_formatter(&|x| {
            let k = 2f64.powf(x.round());
            if (x - x.round()).abs() < 0.05 {
                format!("{k:.0}")
            } else {
                String::new()
            }
        })
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

fn cpu_chart(
    path: &Path,
    all: &[TransferMedian],
    transports: &[String],
    depth: usize,
) -> ChartResult {
    let reads: Vec<&TransferMedian> = all.iter().filter(|m| m.depth == depth).collect();
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
            format!("CPU vs throughput, sequential READ, {depth} in flight (cf. paper fig. 17)"),
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
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(format!("{t} (points: read sizes, small to large)"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
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
    let min_depth = depths.first().copied().unwrap_or(1);
    let mut cpu: Vec<Series> = Vec::new();
    for t in &transports {
        for (who, f) in [
            (
                "client",
                &(|m: &TransferMedian| m.client_cpu_s_per_gib) as &dyn Fn(&TransferMedian) -> f64,
            ),
            ("server", &|m: &TransferMedian| m.server_cpu_s_per_gib),
        ] {
            cpu.push(Series {
                label: format!("{t} {who}"),
                points: reads
                    .iter()
                    .filter(|m| &m.transport == t && m.depth == min_depth)
                    .map(|m| (kib(m.size), f(m)))
                    .collect(),
            });
        }
    }
    let p = dir.join("cpu-per-gib.svg");
    size_chart(
        &p,
        &format!("CPU per GiB read, {min_depth} in flight (cf. paper fig. 18)"),
        "CPU seconds per GiB",
        &cpu,
    )?;
    out.push(p);
    let p = dir.join("cpu-vs-throughput.svg");
    let fig17_depth = depths
        .iter()
        .copied()
        .min_by_key(|d| d.abs_diff(4))
        .unwrap_or(1);
    cpu_chart(&p, reads, &transports, fig17_depth)?;
    out.push(p);
    Ok(out)
}
