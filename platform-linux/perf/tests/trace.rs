//! Issue 28: `proxy-perf --trace` writes a Chrome Trace Event timeline that loads, has one
//! process per rank, and in which every op's events nest: per op track, `handshake` and
//! `transfer` spans one after the other without overlap, every `post` and `complete` of an
//! entry inside a `transfer`, each entry completed after it was posted.

mod common;
use common::argv;
use std::process::Command;

use proxy_trace::testing::{check_nesting, names_ranks};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_proxy-perf");

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
        let mut a = argv("all-reduce --ranks 2 -b 8 -e 8K -f 1024 -n 5 -w 1 --trace");
        a.push(p);
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
    let mut a = argv("send-recv --ranks 2 -b 1K -e 1K -n 3 -w 0 --trace");
    a.extend([pattern.to_str().unwrap(), "--trace-all"]);
    let (code, out, err) = run(&a);
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
    let (code, _, err) = run(&argv("all-reduce -c 0 --trace /tmp/never.json"));
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
    let mut a = argv(
        "all-reduce --transport libfabric --provider tcp --ranks 2 -b 8 -e 8 -n 3 -w 1 --trace",
    );
    a.push(pattern.to_str().unwrap());
    let out = Command::new(BIN)
        .args(&a)
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
    let (code, _, err) = run(&argv(
        "all-reduce --transport libfabric --trace /tmp/merged.json",
    ));
    assert_eq!(code, 2);
    assert!(err.contains("%r"), "{err}");
}
