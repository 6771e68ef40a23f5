//! `--plot FILE.svg`: two charts side by side, busbw (GB/s, linear) and time per collective
//! (µs, log-log) against size (log scale), out of place and in place; no font or system library
//! is needed (plotters' SVG backend with its built-in text estimate).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use proxy_collectives::planner::Collective;

use super::args::Args;
use super::run::{Measure, Row};

/// Width and height of the whole SVG in pixels (two charts of 800 × 560).
const SIZE: (u32, u32) = (1600, 560);

/// Draws `rows` as the two charts (module docs) into `path`.
///
/// # Errors
/// A message from the plotting backend or the file system.
pub fn write_plot(path: &Path, args: &Args, transport: &str, rows: &[Row]) -> Result<(), String> {
    let c: Collective = args.collective.into();
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|x| err(&x))?;
    let title = format!(
        "proxy-perf {}: {} ranks, {}, {}",
        c.name(),
        args.ranks,
        transport,
        if args.loop_mode {
            "loop"
        } else {
            "per execution"
        }
    );
    let root = root
        .titled(&title, ("sans-serif", 22))
        .map_err(|x| err(&x))?;
    let (left, right) = root.split_horizontally(SIZE.0 / 2);
    busbw_chart(&left, rows)?;
    latency_chart(&right, rows)?;
    root.present().map_err(|x| err(&x))?;
    Ok(())
}

fn err(e: &dyn std::fmt::Display) -> String {
    format!("plot: {e}")
}

/// Picks one side's measure of a row.
type Side = fn(&Row) -> &Measure;

/// The sides drawn: label, colour, which measure.
const SIDES: [(&str, RGBColor, Side); 2] = [
    ("out-of-place", BLUE, |r| &r.oop),
    ("in-place", RED, |r| &r.ip),
];

/// The size axis (log scale) of `rows`.
fn size_range(rows: &[Row]) -> (f64, f64) {
    let xmin = rows.iter().map(|r| r.size).min().unwrap_or(1).max(1) as f64;
    let xmax = (rows.iter().map(|r| r.size).max().unwrap_or(2) as f64).max(xmin * 2.0);
    (xmin, xmax)
}

fn busbw_chart(area: &DrawingArea<SVGBackend<'_>, Shift>, rows: &[Row]) -> Result<(), String> {
    let (xmin, xmax) = size_range(rows);
    let ymax = rows
        .iter()
        .map(|r| r.oop.busbw.max(r.ip.busbw))
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption("bus bandwidth", ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..ymax)
        .map_err(|x| err(&x))?;
    chart
        .configure_mesh()
        .x_desc("size (bytes)")
        .y_desc("busbw (GB/s)")
        .x_label_formatter(&|v| human_bytes(*v))
        .draw()
        .map_err(|x| err(&x))?;
    for (label, color, side) in SIDES {
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .map(|r| (r.size as f64, side(r).busbw))
            .collect();
        series(&mut chart, pts, label, color)?;
    }
    legend(&mut chart)
}

fn latency_chart(area: &DrawingArea<SVGBackend<'_>, Shift>, rows: &[Row]) -> Result<(), String> {
    let (xmin, xmax) = size_range(rows);
    let times = rows.iter().flat_map(|r| [r.oop.time_us, r.ip.time_us]);
    let ymin = times.clone().fold(f64::INFINITY, f64::min).max(1e-3);
    let ymin = if ymin.is_finite() { ymin / 1.5 } else { 1e-3 };
    let ymax = times.fold(0.0f64, f64::max).max(ymin * 10.0) * 1.5;
    let mut chart = ChartBuilder::on(area)
        .caption("time per collective", ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d((xmin..xmax).log_scale(), (ymin..ymax).log_scale())
        .map_err(|x| err(&x))?;
    chart
        .configure_mesh()
        .x_desc("size (bytes)")
        .y_desc("time (us)")
        .x_label_formatter(&|v| human_bytes(*v))
        .draw()
        .map_err(|x| err(&x))?;
    for (label, color, side) in SIDES {
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .map(|r| (r.size as f64, side(r).time_us.max(ymin)))
            .collect();
        series(&mut chart, pts, label, color)?;
    }
    legend(&mut chart)
}

/// One line with its points and legend entry.
fn series<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    pts: Vec<(f64, f64)>,
    label: &str,
    color: RGBColor,
) -> Result<(), String>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    chart
        .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
        .map_err(|x| err(&x))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    chart
        .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
        .map_err(|x| err(&x))?;
    Ok(())
}

fn legend<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
) -> Result<(), String>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|x| err(&x))
}

/// `8`, `64K`, `1M`, `2G` for an axis label.
fn human_bytes(v: f64) -> String {
    let v = v.round() as u64;
    if v >= 1 << 30 && v.is_multiple_of(1 << 30) {
        format!("{}G", v >> 30)
    } else if v >= 1 << 20 && v.is_multiple_of(1 << 20) {
        format!("{}M", v >> 20)
    } else if v >= 1 << 10 && v.is_multiple_of(1 << 10) {
        format!("{}K", v >> 10)
    } else {
        format!("{v}")
    }
}
