//! `--plot FILE.svg`: two charts side by side, busbw (GB/s, linear) and time per collective
//! (µs, log-log) against size (log scale), out of place and in place, with `--compare`'s lines
//! over them ([`crate::compare`]); no font or system library is needed (plotters' SVG backend
//! with its built-in text estimate).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use proxy_collectives::planner::Collective;

use super::args::Args;
use super::compare::Series;
use super::run::{Measure, Row};

/// Width and height of the whole SVG in pixels (two charts of 800 × 560).
const SIZE: (u32, u32) = (1600, 560);

/// One line of both charts: label, colour, and per point (size, time µs, busbw GB/s).
struct Line {
    label: String,
    color: RGBColor,
    points: Vec<(f64, f64, f64)>,
}

/// Colours of the `--compare` lines, in turn.
const COMPARE_COLORS: [RGBColor; 4] = [GREEN, MAGENTA, CYAN, BLACK];

/// Draws `rows` as the two charts (module docs) into `path`, with `compare`'s lines
/// (`--compare`) over them.
///
/// # Errors
/// A message from the plotting backend or the file system.
pub fn write_plot(
    path: &Path,
    args: &Args,
    transport: &str,
    rows: &[Row],
    compare: &[Series],
) -> Result<(), String> {
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
    let mut lines: Vec<Line> = SIDES
        .iter()
        .map(|(label, color, side)| Line {
            label: (*label).to_owned(),
            color: *color,
            points: rows
                .iter()
                .map(|r| (r.size as f64, side(r).time_us, side(r).busbw))
                .collect(),
        })
        .collect();
    for (s, color) in compare.iter().zip(COMPARE_COLORS.iter().cycle()) {
        lines.push(Line {
            label: s.label.clone(),
            color: *color,
            points: s
                .points
                .iter()
                .map(|p| (p.size as f64, p.time_us, p.busbw))
                .collect(),
        });
    }
    let (left, right) = root.split_horizontally(SIZE.0 / 2);
    busbw_chart(&left, &lines)?;
    latency_chart(&right, &lines)?;
    root.present().map_err(|x| err(&x))?;
    Ok(())
}

/// One rank count's measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct RanksRow {
    /// Ranks.
    pub ranks: u32,
    /// The algorithm used.
    pub algorithm: &'static str,
    /// Time per collective out of place, µs.
    pub oop_us: f64,
    /// Time per collective in place, µs.
    pub ip_us: f64,
    /// The tuner's modelled time of that algorithm, µs.
    pub model_us: f64,
    /// Wrong elements (both sides).
    pub wrong: u64,
}

/// A `--compare-ranks` file's line: label and `(ranks, time µs)` points.
#[derive(Clone, Debug, PartialEq)]
pub struct RanksSeries {
    /// The file's name without extension.
    pub label: String,
    /// `(ranks, time µs)`.
    pub points: Vec<(f64, f64)>,
}

/// One line of a chart of `(x, y)` points: label, colour, points.
type XyLine = (String, RGBColor, Vec<(f64, f64)>);

/// `--ranks-sweep --plot`: time per collective against ranks (log-log), out of place and in
/// place and the tuner's model, with `compare`'s lines (`--compare-ranks`) over them.
///
/// # Errors
/// A message from the plotting backend or the file system.
pub fn write_ranks_plot(
    path: &Path,
    args: &Args,
    size: u64,
    rows: &[RanksRow],
    compare: &[RanksSeries],
) -> Result<(), String> {
    let c: Collective = args.collective.into();
    let root = SVGBackend::new(path, (SIZE.0 / 2, SIZE.1)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| err(&x))?;
    let mut lines: Vec<XyLine> = vec![
        (
            "proxy-perf out-of-place".into(),
            BLUE,
            rows.iter()
                .map(|r| (f64::from(r.ranks), r.oop_us))
                .collect(),
        ),
        (
            "proxy-perf in-place".into(),
            RED,
            rows.iter().map(|r| (f64::from(r.ranks), r.ip_us)).collect(),
        ),
        (
            "tuner's model".into(),
            RGBColor(128, 128, 128),
            rows.iter()
                .map(|r| (f64::from(r.ranks), r.model_us))
                .collect(),
        ),
    ];
    for (s, color) in compare.iter().zip(COMPARE_COLORS.iter().cycle()) {
        lines.push((s.label.clone(), *color, s.points.clone()));
    }
    let pts = || lines.iter().flat_map(|l| l.2.iter().copied());
    let pos = |f: fn(&(f64, f64)) -> f64| pts().map(move |p| f(&p)).filter(|v| *v > 0.0);
    let xmin = pos(|p| p.0).fold(f64::INFINITY, f64::min);
    let xmax = pos(|p| p.0).fold(0.0f64, f64::max);
    let ymin = pos(|p| p.1).fold(f64::INFINITY, f64::min);
    let ymax = pos(|p| p.1).fold(0.0f64, f64::max);
    let (xmin, xmax) = if xmin.is_finite() {
        (xmin / 1.2, (xmax * 1.2).max(xmin * 2.0))
    } else {
        (1.0, 2.0)
    };
    let (ymin, ymax) = if ymin.is_finite() {
        (ymin / 1.5, (ymax * 1.5).max(ymin * 10.0))
    } else {
        (1e-3, 1.0)
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "proxy-perf {}: {} B per collective against ranks",
                c.name(),
                human_bytes(size as f64)
            ),
            ("sans-serif", 18),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d((xmin..xmax).log_scale(), (ymin..ymax).log_scale())
        .map_err(|x| err(&x))?;
    chart
        .configure_mesh()
        .x_desc("ranks")
        .y_desc("time (us)")
        .draw()
        .map_err(|x| err(&x))?;
    for (label, color, p) in lines {
        let p = p.into_iter().filter(|q| q.0 > 0.0 && q.1 > 0.0).collect();
        series(&mut chart, p, &label, color)?;
    }
    legend(&mut chart)?;
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

/// The size axis (log scale) of `lines`.
fn size_range(lines: &[Line]) -> (f64, f64) {
    let sizes = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let xmin = sizes.clone().fold(f64::INFINITY, f64::min);
    let xmin = if xmin.is_finite() { xmin.max(1.0) } else { 1.0 };
    let xmax = sizes.fold(0.0f64, f64::max).max(xmin * 2.0);
    (xmin, xmax)
}

fn busbw_chart(area: &DrawingArea<SVGBackend<'_>, Shift>, lines: &[Line]) -> Result<(), String> {
    let (xmin, xmax) = size_range(lines);
    let ymax = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.2))
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
    for l in lines {
        let pts = l.points.iter().map(|p| (p.0, p.2)).collect();
        series(&mut chart, pts, &l.label, l.color)?;
    }
    legend(&mut chart)
}

fn latency_chart(area: &DrawingArea<SVGBackend<'_>, Shift>, lines: &[Line]) -> Result<(), String> {
    let (xmin, xmax) = size_range(lines);
    let times = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
    let ymin = times
        .clone()
        .filter(|t| *t > 0.0)
        .fold(f64::INFINITY, f64::min);
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
    for l in lines {
        let pts = l.points.iter().map(|p| (p.0, p.1.max(ymin))).collect();
        series(&mut chart, pts, &l.label, l.color)?;
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
