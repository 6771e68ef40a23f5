//! Issue 28: `proxy-perf --trace` writes a Chrome Trace Event timeline that loads, has one
//! process per rank, and in which every op's events nest: per op track, `handshake` and
//! `transfer` spans one after the other without overlap, every `post` and `complete` of an
//! entry inside a `transfer`, each entry completed after it was posted.

use std::collections::HashMap;
use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_proxy-perf");

/// The op tracks' first tid (`trace::chrome`).
const OP_TID: u64 = 2_000_000;

fn run(extra: &[&str]) -> (i32, String, String) {
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

fn load(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    let _ = std::fs::remove_file(path);
    serde_json::from_str(&text).unwrap()
}

/// Checks one document; returns the transfer spans per pid.
fn check_nesting(doc: &Value) -> HashMap<u64, usize> {
    assert_eq!(
        doc["otherData"]["dropped"].as_u64(),
        Some(0),
        "{}",
        doc["otherData"]
    );
    assert_eq!(doc["otherData"]["pending"].as_u64(), Some(0));
    let ev = doc["traceEvents"].as_array().unwrap();
    assert!(!ev.is_empty());
    // Per (pid, tid) op track: spans and instants in time order.
    let mut tracks: HashMap<(u64, u64), Vec<&Value>> = HashMap::new();
    for e in ev {
        let ph = e["ph"].as_str().unwrap();
        assert!(["X", "i", "C", "M"].contains(&ph), "{e}");
        assert!(e["name"].is_string() && e["pid"].is_u64(), "{e}");
        if ph != "M" {
            assert!(e["ts"].as_f64().unwrap() >= 0.0, "{e}");
        }
        if ph == "X" {
            assert!(e["dur"].as_f64().unwrap() >= 0.0, "{e}");
        }
        let tid = e["tid"].as_u64().unwrap_or(0);
        if tid >= OP_TID && ph != "M" {
            tracks
                .entry((e["pid"].as_u64().unwrap(), tid))
                .or_default()
                .push(e);
        }
    }
    assert!(!tracks.is_empty(), "no op track");
    let mut transfers: HashMap<u64, usize> = HashMap::new();
    let eps = 1e-3;
    for ((pid, tid), mut evs) in tracks {
        evs.sort_by(|a, b| {
            a["ts"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["ts"].as_f64().unwrap())
        });
        let spans: Vec<(f64, f64, &str)> = evs
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| {
                let ts = e["ts"].as_f64().unwrap();
                (
                    ts,
                    ts + e["dur"].as_f64().unwrap(),
                    e["name"].as_str().unwrap(),
                )
            })
            .collect();
        for w in spans.windows(2) {
            assert!(
                w[0].1 <= w[1].0 + eps,
                "{pid}/{tid}: overlapping spans {w:?}"
            );
            // A transfer follows its handshake; a handshake follows a transfer.
            assert_ne!(w[0].2, w[1].2, "{pid}/{tid}: {spans:?}");
        }
        *transfers.entry(pid).or_default() += spans.iter().filter(|s| s.2 == "transfer").count();
        let mut posted: HashMap<u64, f64> = HashMap::new();
        for e in evs.iter().filter(|e| e["ph"] == "i") {
            let ts = e["ts"].as_f64().unwrap();
            assert!(
                spans
                    .iter()
                    .any(|s| s.2 == "transfer" && s.0 - eps <= ts && ts <= s.1 + eps),
                "{pid}/{tid}: {e} outside every transfer {spans:?}"
            );
            assert!(e["args"]["bytes"].as_u64().unwrap() > 0, "{e}");
            let entry = e["args"]["entry"].as_u64().unwrap();
            match e["name"].as_str().unwrap() {
                "post" => {
                    posted.insert(entry, ts);
                }
                "complete" => {
                    let p = posted.remove(&entry).unwrap_or_else(|| {
                        panic!("{pid}/{tid}: entry {entry} completed, not posted")
                    });
                    assert!(p <= ts + eps);
                }
                other => panic!("{other} on an op track"),
            }
        }
        assert!(
            posted.is_empty(),
            "{pid}/{tid}: posted, never completed: {posted:?}"
        );
    }
    transfers
}

fn names_ranks(doc: &Value, ranks: &[u64]) {
    let ev = doc["traceEvents"].as_array().unwrap();
    for &r in ranks {
        let name = format!("rank {r}");
        assert!(
            ev.iter().any(|e| e["name"] == "process_name"
                && e["pid"].as_u64() == Some(r)
                && e["args"]["name"] == name.as_str()),
            "no process named {name}"
        );
    }
}

#[test]
fn two_ranks_merged_trace_nests_in_both_modes() {
    for modes in [
        ["--driver", "thread", "--device", "thread"],
        ["--driver", "caller", "--device", "polled"],
    ] {
        let path = std::env::temp_dir().join(format!(
            "proxy-perf-{}-trace-{}.json",
            std::process::id(),
            modes[1]
        ));
        let p = path.to_str().unwrap();
        let mut a = vec![
            "all-reduce",
            "--ranks",
            "2",
            "-b",
            "8",
            "-e",
            "8K",
            "-f",
            "1024",
            "-n",
            "5",
            "-w",
            "1",
            "--trace",
            p,
        ];
        a.extend_from_slice(&modes);
        let (code, out, err) = run(&a);
        assert_eq!(code, 0, "{out}\n{err}");
        let doc = load(&path);
        names_ranks(&doc, &[0, 1]);
        let transfers = check_nesting(&doc);
        // Direct all-reduce at 2 ranks: a send and a receive op per rank per execution; one
        // checked execution per side and size: 2 sizes × 2 sides × 2 ops.
        assert_eq!(transfers.get(&0), Some(&8), "{modes:?}: {transfers:?}");
        assert_eq!(transfers.get(&1), Some(&8), "{modes:?}: {transfers:?}");
        // The breakdown: a send and a receive row per size, 4 ops each (2 ranks × 2 sides).
        let rows: Vec<Vec<&str>> = out
            .lines()
            .skip_while(|l| !l.starts_with("# Latency breakdown"))
            .filter(|l| l.starts_with("# send") || l.starts_with("# recv"))
            .map(|l| l.trim_start_matches('#').split_whitespace().collect())
            .collect();
        assert_eq!(rows.len(), 4, "{out}");
        for r in &rows {
            assert_eq!(r[2], "4", "{r:?}\n{out}");
        }
        assert!(out.contains("waiting for the device trigger"), "{out}");
    }
}

#[test]
fn per_rank_files_hold_their_rank_only() {
    let dir = std::env::temp_dir();
    let pattern = dir.join(format!("proxy-perf-{}-trace-%r.json", std::process::id()));
    let (code, out, err) = run(&[
        "send-recv",
        "--ranks",
        "2",
        "-b",
        "1K",
        "-e",
        "1K",
        "-n",
        "3",
        "-w",
        "0",
        "--trace",
        pattern.to_str().unwrap(),
        "--trace-all",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    for r in 0..2u64 {
        let path = dir.join(format!("proxy-perf-{}-trace-{r}.json", std::process::id()));
        let doc = load(&path);
        names_ranks(&doc, &[r]);
        let pids: Vec<u64> = doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] != "recording window")
            .map(|e| e["pid"].as_u64().unwrap())
            .collect();
        assert!(pids.iter().all(|&p| p == r), "rank {r}: {pids:?}");
        let transfers = check_nesting(&doc);
        // --trace-all, -w 0: 3 timed + 1 checked execution per side; send-recv's ring at 2 ranks
        // gives every rank a send and a receive op.
        assert_eq!(transfers.get(&r), Some(&16), "rank {r}: {transfers:?}");
    }
}

#[test]
fn trace_without_anything_to_record_is_refused() {
    let (code, _, err) = run(&["all-reduce", "-c", "0", "--trace", "/tmp/never.json"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--trace records the checked executions"),
        "{err}"
    );
}

/// Ranks as processes over libfabric: every process writes its rank's file (`%r`), each with
/// its own clock, and its op events nest; a pattern without `%r` is refused.
#[cfg(feature = "libfabric")]
#[test]
fn libfabric_processes_write_one_file_each() {
    let dir = std::env::temp_dir();
    let pattern = dir.join(format!(
        "proxy-perf-{}-trace-fi-%r.json",
        std::process::id()
    ));
    let out = Command::new(BIN)
        .args([
            "all-reduce",
            "--transport",
            "libfabric",
            "--provider",
            "tcp",
            "--ranks",
            "2",
            "-b",
            "8",
            "-e",
            "8",
            "-n",
            "3",
            "-w",
            "1",
            "--trace",
            pattern.to_str().unwrap(),
        ])
        .env("NEURON_RT_BOOTSTRAP_TIMEOUT", "30")
        .env("NEURON_RT_EXEC_TIMEOUT", "20")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in 0..2u64 {
        let path = dir.join(format!(
            "proxy-perf-{}-trace-fi-{r}.json",
            std::process::id()
        ));
        let doc = load(&path);
        names_ranks(&doc, &[r]);
        // One execution per side, a send and a receive op.
        assert_eq!(check_nesting(&doc).get(&r), Some(&4), "rank {r}");
    }
    let (code, _, err) = run(&[
        "all-reduce",
        "--transport",
        "libfabric",
        "--trace",
        "/tmp/merged.json",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("%r"), "{err}");
}
