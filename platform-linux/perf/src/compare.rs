//! `--compare FILE`: another run's results to overlay on `--plot`: a `proxy-perf --json` file,
//! an nccl-tests table (its stdout: 13 columns, `size count type redop root` then time, algbw,
//! busbw and `#wrong` out of place and in place) or an OSU latency table (`size` and the
//! average latency in µs, further columns ignored; busbw is then computed as size / time × the
//! collective's bus factor, as nccl-tests defines it).

use std::path::Path;

/// One point of a compared run: size in bytes, time per collective in µs, busbw in GB/s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Bytes (the table's size column).
    pub size: u64,
    /// Time per collective in µs.
    pub time_us: f64,
    /// Bus bandwidth in GB/s (1e9).
    pub busbw: f64,
}

/// One compared line: a label (`FILE out-of-place`, ...) and its points by size.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The legend's label.
    pub label: String,
    /// The points, in the file's order.
    pub points: Vec<Point>,
}

/// Reads `path` (module docs); `bus_factor` is this run's collective's factor (for OSU tables).
///
/// # Errors
/// The I/O error, or a message when the file is none of the three formats or has no rows.
pub fn read(path: &Path, bus_factor: f64) -> Result<Vec<Series>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--compare {}: {e}", path.display()))?;
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let series = if text.trim_start().starts_with('{') {
        from_json(&text, &name)
    } else {
        from_table(&text, &name, bus_factor)
    }
    .map_err(|e| format!("--compare {}: {e}", path.display()))?;
    if series.iter().all(|s| s.points.is_empty()) {
        return Err(format!("--compare {}: no rows", path.display()));
    }
    Ok(series)
}

/// A `proxy-perf --json` document.
fn from_json(text: &str, name: &str) -> Result<Vec<Series>, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let rows = v["rows"]
        .as_array()
        .ok_or("a JSON file without \"rows\" (not proxy-perf --json)")?;
    let side = |key: &str| Series {
        label: format!("{name} {}", key.replace('_', "-")),
        points: rows
            .iter()
            .filter_map(|r| {
                Some(Point {
                    size: r["size"].as_u64()?,
                    time_us: r[key]["time_us"].as_f64()?,
                    busbw: r[key]["busbw_gbps"].as_f64()?,
                })
            })
            .collect(),
    };
    Ok(vec![side("out_of_place"), side("in_place")])
}

/// An nccl-tests or OSU text table.
fn from_table(text: &str, name: &str, bus_factor: f64) -> Result<Vec<Series>, String> {
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        // A data row starts with a size.
        .filter(|f| f.first().is_some_and(|s| s.parse::<u64>().is_ok()))
        .collect();
    if rows.is_empty() {
        return Err("no data rows (a line that starts with a size)".into());
    }
    let num = |s: &str| s.parse::<f64>().ok();
    if rows.iter().all(|f| f.len() >= 13) {
        // nccl-tests: size count type redop root | time algbw busbw #wrong | time ...
        let side = |label: &str, t: usize| Series {
            label: format!("{name} {label}"),
            points: rows
                .iter()
                .filter_map(|f| {
                    Some(Point {
                        size: f[0].parse().ok()?,
                        time_us: num(f[t])?,
                        busbw: num(f[t + 2])?,
                    })
                })
                .collect(),
        };
        return Ok(vec![side("out-of-place", 5), side("in-place", 9)]);
    }
    if rows.iter().all(|f| f.len() >= 2) {
        // OSU: size, average latency (µs), ...
        let points = rows
            .iter()
            .filter_map(|f| {
                let size: u64 = f[0].parse().ok()?;
                let time_us = num(f[1])?;
                let busbw = if time_us > 0.0 {
                    size as f64 / (time_us * 1e-6) / 1e9 * bus_factor
                } else {
                    0.0
                };
                Some(Point {
                    size,
                    time_us,
                    busbw,
                })
            })
            .collect();
        return Ok(vec![Series {
            label: name.to_owned(),
            points,
        }]);
    }
    Err("neither an nccl-tests table (13 columns) nor an OSU table (size, latency)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_tests_table() {
        let t = "# nccl-tests\n#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n\
                           8             2     float     sum      -1    10.00    0.00    0.00      0    12.00    0.00    0.00      0\n\
                     1048576        262144     float     sum      -1   100.00   10.49   15.73      0   110.00    9.53   14.30      0\n\
                 # Avg bus bandwidth    : 1.0\n";
        let s = from_table(t, "nccl.txt", 1.5).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].label, "nccl.txt out-of-place");
        assert_eq!(
            s[0].points[1],
            Point {
                size: 1_048_576,
                time_us: 100.0,
                busbw: 15.73
            }
        );
        assert_eq!(s[1].points[0].time_us, 12.0);
    }

    #[test]
    fn osu_table_computes_busbw() {
        let t = "# OSU MPI Allreduce Latency Test v7.3\n# Size       Avg Latency(us)\n8                       2.50\n1000000               500.00\n";
        let s = from_table(t, "osu.txt", 1.0).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].points[0].time_us, 2.5);
        // 1e6 B in 500 µs: 2 GB/s.
        assert!((s[0].points[1].busbw - 2.0).abs() < 1e-9);
    }

    #[test]
    fn proxy_perf_json() {
        let j = r#"{"rows": [{"size": 8, "out_of_place": {"time_us": 2.5, "busbw_gbps": 0.003},
                    "in_place": {"time_us": 2.6, "busbw_gbps": 0.002}}]}"#;
        let s = from_json(j, "run.json").unwrap();
        assert_eq!(s[0].label, "run.json out-of-place");
        assert_eq!(
            s[1].points,
            [Point {
                size: 8,
                time_us: 2.6,
                busbw: 0.002
            }]
        );
        assert!(from_json("{}", "x").is_err());
        assert!(from_table("hello world\n", "x", 1.0).is_err());
    }
}
