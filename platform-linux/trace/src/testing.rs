//! The timeline checks shared by the tests of `proxy-perf --trace` and of the C libraries'
//! trace (feature `testing`): a Chrome Trace document loaded with `serde_json` nests as
//! [`crate::chrome`] promises.

use std::collections::HashMap;

use serde_json::Value;

use crate::chrome::OP_TID;

/// Checks one document: `otherData` says nothing was dropped or pending, every event has a
/// known phase, a name, a pid, `ts >= 0` and `dur >= 0`; on every op track the `handshake` and
/// `transfer` spans alternate without overlap and every `post` and `complete` lies inside a
/// `transfer`, each entry completed after it was posted and none left posted. Returns the
/// transfer spans per pid. Panics (a test assertion) otherwise.
pub fn check_nesting(doc: &Value) -> HashMap<u64, usize> {
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

/// Checks that `doc` names a process `rank R` for every R of `ranks`.
pub fn names_ranks(doc: &Value, ranks: &[u64]) {
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
