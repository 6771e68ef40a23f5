//! Issue 28 through C: `tests/c/exchange.c` (a C runtime, 2 ranks, worker threads and caller
//! mode, three executions) runs with the event trace on, by `NEURON_RT_PROXY_TRACE` (written at
//! the last `nrt_proxy_fini`) and by the API (`nrt_proxy_trace_start` / `_stop` / `_write`,
//! `EXCHANGE_TRACE`). The timeline is loaded with serde_json and must: name one process per
//! rank, nest as `proxy-perf --trace`'s does (`proxy_trace::testing::check_nesting`), and hold
//! the records of both libraries merged (the driver library's task spans and drive tokens, the
//! progress library's op spans, posts and completions, on the same thread tracks). The default
//! mask (`ops`) records each op and task as one span, begin to end; a small ring says how many events it dropped,
//! in the file and in the summary.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{compile, progress_library, run};
use proxy_trace::testing::{check_nesting, names_ranks};
use serde_json::Value;

/// A fresh scratch directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn load(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn exchange(out: &str, mode: &str) -> Command {
    let exe = compile("exchange", out, &["-pthread"]);
    let mut cmd = Command::new(exe);
    cmd.arg(progress_library()).arg(mode);
    cmd
}

/// The names of the events of phase `ph`.
fn names<'a>(doc: &'a Value, ph: &str) -> HashSet<&'a str> {
    doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == ph)
        .map(|e| e["name"].as_str().unwrap())
        .collect()
}

/// Both libraries' records in one timeline: task spans (driver library), op spans with posts
/// and completions (progress library); the 3 executions' transfers; one track per OS thread
/// (no thread named twice in a process), no op track without a rank. Returns the rank's
/// thread track names and whether it has `drive` spans (caller mode: the thread that drives
/// both ranks' queue, attributed to the last rank it served).
fn check_merged(doc: &Value, rank: u64) -> (Vec<String>, bool) {
    assert_eq!(doc["otherData"]["source"], "libnrt_proxy.so");
    let spans = names(doc, "X");
    for want in ["run", "wait-trigger", "handshake", "transfer"] {
        assert!(
            spans.contains(want),
            "rank {rank}: no {want} span: {spans:?}"
        );
    }
    let instants = names(doc, "i");
    assert!(
        instants.contains("post") && instants.contains("complete"),
        "{instants:?}"
    );
    let transfers = check_nesting(doc);
    // Per execution one send and one receive op per rank.
    assert_eq!(transfers.get(&rank), Some(&6), "rank {rank}: {transfers:?}");
    let ev = doc["traceEvents"].as_array().unwrap();
    let mut threads: Vec<String> = ev
        .iter()
        .filter(|e| e["name"] == "thread_name" && e["pid"].as_u64() == Some(rank))
        .filter(|e| e["tid"].as_u64().unwrap() < 1_000_000)
        .map(|e| e["args"]["name"].as_str().unwrap().to_owned())
        .collect();
    let n = threads.len();
    threads.sort();
    threads.dedup();
    assert_eq!(
        threads.len(),
        n,
        "rank {rank}: a thread with two tracks: {threads:?}"
    );
    let unattributed = u64::from(u32::MAX);
    assert!(
        !ev.iter().any(|e| e["pid"].as_u64() == Some(unattributed)
            && e["tid"]
                .as_u64()
                .is_some_and(|t| t >= proxy_trace::chrome::OP_TID)),
        "an op track without a rank"
    );
    let drive = ev
        .iter()
        .any(|e| e["name"] == "drive" && e["pid"].as_u64() == Some(rank));
    (threads, drive)
}

#[test]
fn the_env_var_writes_one_merged_timeline_per_rank() {
    let dir = scratch("trace-env");
    for mode in ["thread", "caller"] {
        let pattern = dir.join(format!("{mode}-%r.json"));
        let mut cmd = exchange("exchange_trace_env", mode);
        cmd.env("NEURON_RT_PROXY_TRACE", &pattern)
            .env("NEURON_RT_PROXY_TRACE_MASK", "all");
        assert!(run(cmd).contains("exchange: ok"));
        let mut drive = Vec::new();
        for r in 0..2u32 {
            let doc = load(&proxy_trace::path_for(&pattern, r));
            names_ranks(&doc, &[u64::from(r)]);
            let (threads, drives) = check_merged(&doc, u64::from(r));
            if mode == "thread" {
                // Each rank's proxy queue has its worker (which holds the drive token for life).
                assert!(threads.contains(&format!("proxy-g{r}")), "{threads:?}");
            }
            drive.push(drives);
        }
        if mode == "caller" {
            assert!(drive.contains(&true), "the caller's thread drives");
        }
    }
}

#[test]
fn the_api_writes_one_merged_timeline_of_both_ranks() {
    let dir = scratch("trace-api");
    let file = dir.join("both.json");
    let mut cmd = exchange("exchange_trace_api", "thread");
    cmd.env("EXCHANGE_TRACE", &file);
    let out = run(cmd);
    assert!(out.contains("exchange: ok"));
    assert!(out.contains(" 0 dropped, 1 files"), "{out}");
    let doc = load(&file);
    names_ranks(&doc, &[0, 1]);
    assert_eq!(doc["otherData"]["dropped"].as_u64(), Some(0));
    let records = doc["otherData"]["records"].as_u64().unwrap();
    assert!(out.contains(&format!("trace: {records} events")), "{out}");
    for r in 0..2 {
        let (threads, _) = check_merged(&doc, r);
        assert!(threads.contains(&format!("proxy-g{r}")), "{threads:?}");
    }
}

#[test]
fn the_default_mask_records_ops_only() {
    let dir = scratch("trace-ops");
    let pattern = dir.join("ops-%r.json");
    let mut cmd = exchange("exchange_trace_ops", "thread");
    cmd.env("NEURON_RT_PROXY_TRACE", &pattern);
    assert!(run(cmd).contains("exchange: ok"));
    let doc = load(&proxy_trace::path_for(&pattern, 0));
    // Each op and task as one span, begin to end: no steps in between, no drive, no sleep.
    // (An op re-armed at its last DONE begins again and stays open: an unfinished handshake.)
    let spans: HashSet<&str> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["args"]["unfinished"] != true)
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(spans.contains("op") && spans.contains("task"), "{spans:?}");
    for not in [
        "handshake",
        "transfer",
        "run",
        "wait-trigger",
        "drive",
        "sleep",
    ] {
        assert!(!spans.contains(not), "{not} in {spans:?}");
    }
    assert!(names(&doc, "i").iter().all(|n| *n == "recording window"));
    assert_eq!(doc["otherData"]["dropped"].as_u64(), Some(0));
}

#[test]
fn a_full_ring_says_how_many_events_it_dropped() {
    let dir = scratch("trace-full");
    let file = dir.join("full.json");
    let mut cmd = exchange("exchange_trace_full", "caller");
    cmd.env("EXCHANGE_TRACE", &file)
        .env("EXCHANGE_TRACE_CAPACITY", "20");
    let out = run(cmd);
    let doc = load(&file);
    let other = &doc["otherData"];
    // Two rings of 20 (driver and progress library), both full.
    assert_eq!(other["records"].as_u64(), Some(40), "{other}");
    let dropped = other["dropped"].as_u64().unwrap();
    assert!(dropped > 0, "{other}");
    assert!(
        out.contains(&format!(
            "trace: 40 events, 0 pending, {dropped} dropped, 1 files"
        )),
        "{out}"
    );
}

#[test]
fn a_bad_mask_fails_init() {
    let mut cmd = exchange("exchange_trace_bad", "thread");
    cmd.env("NEURON_RT_PROXY_TRACE", "/nonexistent/never.json")
        .env("NEURON_RT_PROXY_TRACE_MASK", "ops,step")
        .env_remove("LD_LIBRARY_PATH");
    let o = cmd.output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("NEURON_RT_PROXY_TRACE_MASK=ops,step"), "{err}");
}
