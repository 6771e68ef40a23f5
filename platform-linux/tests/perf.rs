//! proxy-perf end to end (issue 6): correctness of every collective through the whole engine,
//! every reduction op, a planted fault, `--loop` recycling, and the table format.
//!
//! The matrix tests use the library (`perf::run::World`) to avoid a process per case; the
//! others run the `proxy-perf` binary. Every wait inside is bounded (the tool's wait policy
//! times out), and every loop here is a bounded `for`.

use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use proxy_core::planner::Collective;
use proxy_platform_linux::perf::args::Args;
use proxy_platform_linux::perf::run::World;

const BIN: &str = env!("CARGO_BIN_EXE_proxy-perf");

fn args(v: &[&str]) -> Args {
    let mut all = vec!["proxy-perf"];
    all.extend_from_slice(v);
    Args::try_parse_from(all).unwrap()
}

/// Runs `sizes` through a fresh world and asserts 0 wrong, out of place and in place.
fn check_sizes(a: &Args, sizes: &[u64]) {
    let mut w = World::new(a).unwrap_or_else(|e| panic!("{a:?}: {e}"));
    for &s in sizes {
        let row = w.row(s).unwrap_or_else(|e| panic!("{a:?} size {s}: {e}"));
        assert_eq!(row.oop.wrong, Some(0), "{a:?} size {s}: out of place");
        assert_eq!(row.ip.wrong, Some(0), "{a:?} size {s}: in place");
    }
}

/// Every collective × ranks {1,2,3,4} × sizes {1 element, a count that is a multiple of
/// neither nranks nor the chunk, 1 MiB} × {float, int32}: 0 wrong.
#[test]
fn every_collective_ranks_sizes_and_types() {
    let t0 = Instant::now();
    for c in [
        "all-reduce",
        "all-gather",
        "reduce-scatter",
        "broadcast",
        "send-recv",
        "all-to-all",
    ] {
        for ranks in 1..=4u32 {
            for (ty, elt) in [("float", 4u64), ("int32", 4)] {
                let r = ranks.to_string();
                let root = (ranks - 1).to_string();
                let a = args(&[
                    c, "--ranks", &r, "-d", ty, "-r", &root, "-n", "1", "-w", "0", "-c", "1",
                    "--chunk", "64K",
                ]);
                // 1 element (per rank block for the blocked collectives), 131083 elements
                // (odd, not a multiple of 3 or 4, nor of the 16384-element chunk), 1 MiB.
                let one = elt
                    * if matches!(c, "all-gather" | "reduce-scatter" | "all-to-all") {
                        u64::from(ranks)
                    } else {
                        1
                    };
                check_sizes(&a, &[one, 131_083 * elt, 1 << 20]);
            }
        }
    }
    assert!(
        t0.elapsed() < Duration::from_secs(170),
        "matrix too slow: {:?}",
        t0.elapsed()
    );
}

/// Every reduction op on float and int32 with 3 ranks, ring and direct: 0 wrong.
#[test]
fn every_reduction_op_with_three_ranks() {
    for c in ["all-reduce", "reduce-scatter"] {
        for ty in ["float", "int32"] {
            for op in ["sum", "prod", "min", "max"] {
                for algo in ["ring", "direct"] {
                    let a = args(&[
                        c, "--ranks", "3", "-d", ty, "-o", op, "--algo", algo, "-n", "1", "-w",
                        "0", "-c", "1", "--chunk", "4K",
                    ]);
                    check_sizes(&a, &[4 * 12_289]);
                }
            }
        }
    }
}

/// Other element types through the engine (f64, f16, bf16, u8).
#[test]
fn other_types() {
    for ty in ["double", "half", "bfloat16", "uint8"] {
        let a = args(&[
            "all-reduce",
            "--ranks",
            "3",
            "-d",
            ty,
            "-n",
            "1",
            "-w",
            "0",
            "-c",
            "1",
        ]);
        check_sizes(&a, &[8, 40_000]);
    }
}

fn run_bin(extra: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(extra)
        .output()
        .expect("run proxy-perf");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A planted fault (one flipped byte of one received chunk per execution) is detected:
/// #wrong > 0, the footer says FAILED, the exit status is non-zero.
#[test]
fn planted_fault_is_detected() {
    for c in ["all-reduce", "all-gather"] {
        let (code, out, err) = run_bin(&[
            c,
            "--ranks",
            "2",
            "-b",
            "64K",
            "-e",
            "64K",
            "-n",
            "2",
            "-w",
            "0",
            "-c",
            "1",
            "--fault-inject",
        ]);
        assert_eq!(code, 1, "{c}: exit status\n{out}\n{err}");
        assert!(out.contains("# Out of bounds values : "), "{out}");
        assert!(out.contains("FAILED"), "{out}");
        let row = out.lines().find(|l| !l.starts_with('#')).unwrap();
        let f: Vec<&str> = row.split_whitespace().collect();
        assert!(f[8].parse::<u64>().unwrap() > 0, "{row}");
        assert!(f[12].parse::<u64>().unwrap() > 0, "{row}");
    }
}

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `--loop` really recycles: seam `start` once per stream and block for the timed run while
/// all 20 iterations move data and the check passes; without `--loop`, once per iteration.
#[test]
fn loop_recycles_ops_instead_of_filing_again() {
    let dir = std::env::temp_dir();
    for (looped, name) in [(true, "loop"), (false, "exec")] {
        let path = dir.join(format!("proxy-perf-{}-{name}.json", std::process::id()));
        let p = path.to_str().unwrap();
        let mut a = vec![
            "all-reduce",
            "--ranks",
            "2",
            "-b",
            "256K",
            "-e",
            "256K",
            "-n",
            "20",
            "-w",
            "0",
            "-c",
            "1",
            "--json",
            p,
        ];
        if looped {
            a.push("--loop");
        }
        let (code, out, err) = run_bin(&a);
        assert_eq!(code, 0, "{out}\n{err}");
        let v = json(&path);
        let _ = std::fs::remove_file(&path);
        assert_eq!(v["mode"], if looped { "loop" } else { "execution" });
        for side in ["out_of_place", "in_place"] {
            let m = &v["rows"][0][side];
            let starts = m["timed_seam_starts"].as_u64().unwrap();
            // 2 ranks × 1 stream × 1 block, once for the whole timed run, or once per iteration.
            assert_eq!(starts, if looped { 2 } else { 2 * 20 }, "{side}: {m}");
            assert_eq!(
                m["timed_device_executions"].as_u64().unwrap(),
                2 * 20,
                "{m}"
            );
            let per = m["recv_bytes_per_execution"].as_u64().unwrap();
            assert!(per > 0);
            assert_eq!(m["timed_recv_bytes"].as_u64().unwrap(), 20 * per, "{m}");
            assert_eq!(m["wrong"].as_u64(), Some(0), "{m}");
        }
    }
}

/// The table parses: 13 columns per row, the footer, busbw = algbw × the collective's factor.
#[test]
fn table_parses() {
    for (c, coll) in [
        ("all-reduce", Collective::AllReduce),
        ("all-gather", Collective::AllGather),
        ("broadcast", Collective::Broadcast),
        ("all-to-all", Collective::AllToAll),
    ] {
        let (code, out, err) = run_bin(&[
            c, "--ranks", "3", "-b", "8", "-e", "256K", "-f", "8", "-n", "3", "-w", "1",
        ]);
        assert_eq!(code, 0, "{out}\n{err}");
        let rows: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(rows.len(), 6, "8, 64, 512, 4K, 32K, 256K\n{out}");
        let factor = coll.busbw_factor(3);
        for r in &rows {
            let f: Vec<&str> = r.split_whitespace().collect();
            assert_eq!(f.len(), 13, "{r}");
            assert_eq!(f[2], "float");
            for (alg, bus) in [(6, 7), (10, 11)] {
                let a: f64 = f[alg].parse().unwrap();
                let b: f64 = f[bus].parse().unwrap();
                assert!(
                    (b - a * factor).abs() <= 0.006 + 0.005 * factor,
                    "busbw {b} != algbw {a} × {factor}: {r}"
                );
            }
            assert_eq!(f[8], "0");
            assert_eq!(f[12], "0");
        }
        let titles = out
            .lines()
            .find(|l| l.contains("size") && l.contains("count"))
            .unwrap();
        assert_eq!(
            titles.trim_start_matches('#').split_whitespace().count(),
            13
        );
        assert!(out.contains("# Out of bounds values : 0 OK"), "{out}");
        assert!(out.contains("# Avg bus bandwidth    : "), "{out}");
    }
}

/// `-c 0` prints N/A in the #wrong columns.
#[test]
fn no_check_prints_na() {
    let (code, out, _) = run_bin(&[
        "send-recv",
        "--ranks",
        "2",
        "-b",
        "1K",
        "-e",
        "1K",
        "-c",
        "0",
    ]);
    assert_eq!(code, 0);
    let row = out.lines().find(|l| !l.starts_with('#')).unwrap();
    let f: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((f[8], f[12]), ("N/A", "N/A"), "{row}");
}

/// `--transport libfabric` is accepted and refused with a clear message until the backend is
/// built in.
#[test]
fn libfabric_transport_is_refused_clearly() {
    let (code, _, err) = run_bin(&["all-reduce", "--transport", "libfabric"]);
    assert_eq!(code, 2);
    assert!(err.contains("not built with libfabric"), "{err}");
}

/// `--plot` writes an SVG (no system fonts needed).
#[test]
fn plot_writes_svg() {
    let path = std::env::temp_dir().join(format!("proxy-perf-{}.svg", std::process::id()));
    let p = path.to_str().unwrap();
    let (code, out, err) = run_bin(&[
        "all-reduce",
        "--ranks",
        "2",
        "-b",
        "8",
        "-e",
        "64K",
        "-f",
        "16",
        "-n",
        "2",
        "-w",
        "0",
        "--plot",
        p,
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let svg = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        svg.starts_with("<svg") && svg.contains("busbw"),
        "{}",
        &svg[..svg.len().min(200)]
    );
}

/// Ranks share proxy queues per `NEURON_RT_RANKS_PER_NETWORK_PROXY` (here 2 ranks per group:
/// 4 ranks, 2 queues) and the results stay right, per execution and looped.
#[test]
fn ranks_share_proxy_queues_per_group() {
    for extra in [&[][..], &["--loop"][..]] {
        let mut v = vec![
            "all-reduce",
            "--ranks",
            "4",
            "-b",
            "4",
            "-e",
            "256K",
            "-f",
            "64",
            "-n",
            "3",
            "-w",
            "1",
        ];
        v.extend_from_slice(extra);
        let out = Command::new(BIN)
            .args(&v)
            .env("NEURON_RT_RANKS_PER_NETWORK_PROXY", "2")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{text}");
        assert!(text.contains("ranks per network proxy 2"), "{text}");
        assert!(text.contains("driver: 2 proxy queue(s)"), "{text}");
        assert!(text.contains("# Out of bounds values : 0 OK"), "{text}");
    }
}

/// The diagnostic direct engine gives the same results.
#[test]
fn direct_engine_diagnostic() {
    let a = args(&[
        "reduce-scatter",
        "--ranks",
        "3",
        "--engine",
        "direct",
        "-n",
        "2",
        "-w",
        "0",
        "-c",
        "1",
    ]);
    check_sizes(&a, &[12, 3 * 40_000]);
}
