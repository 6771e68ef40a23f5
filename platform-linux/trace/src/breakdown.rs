//! Where an op's time goes, from a [`Trace`]: per op execution (one op's
//! HANDSHAKE → TRANSFER → DONE), the time
//! * `handshake`: waiting for the device's handshake (op state 1);
//! * `device`: from the handshake to the first post (waiting for the device to post an entry);
//! * `transport` (sends) / `peer` (receives): from the first post to the last completion (the
//!   transport moving a send; a receive waiting for the peer's data);
//! * `completion`: from the last transport completion to the op's DONE (crediting the device);
//!
//! and per network task execution `trigger`: waiting for the device's trigger words
//! (WAITING_DEVICE_TRIGGER → PROGRESSING). Means in µs, grouped by side and bytes per op. A
//! wait open at a recording window's mark counts from the mark.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use proxy_core::base::trace::{Kind, SEND};

use crate::Trace;

/// One op execution's phases in ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpTimes {
    /// `true` for a send op (from its posts).
    pub send: bool,
    /// Bytes completed.
    pub bytes: u64,
    /// Waiting for the device's handshake.
    pub handshake_ns: u64,
    /// From the handshake to the first post.
    pub device_ns: u64,
    /// From the first post to the last completion.
    pub transfer_ns: u64,
    /// From the last completion to DONE.
    pub completion_ns: u64,
}

impl OpTimes {
    /// The whole op execution (HANDSHAKE to DONE).
    pub fn total_ns(&self) -> u64 {
        self.handshake_ns + self.device_ns + self.transfer_ns + self.completion_ns
    }
}

#[derive(Default)]
struct OpRun {
    handshake: Option<u64>,
    transfer: Option<u64>,
    first_post: Option<u64>,
    last_complete: Option<u64>,
    send: bool,
    bytes: u64,
}

/// Every op execution of `trace` whose HANDSHAKE, TRANSFER, a post and DONE were all recorded.
pub fn op_times(trace: &Trace) -> Vec<OpTimes> {
    // By (rank, side, stream, block, op index): a send and a receive of one op info share
    // the index.
    let mut runs: HashMap<(u32, u8, u8, u32, u32), OpRun> = HashMap::new();
    let mut out = Vec::new();
    for r in &trace.records {
        let key = (r.rank, r.side, r.stream, r.block, r.op);
        match r.kind {
            Kind::Transition if r.machine == "op" => match r.to {
                1 => {
                    runs.insert(
                        key,
                        OpRun {
                            handshake: Some(r.ts_ns),
                            send: r.side == SEND,
                            ..OpRun::default()
                        },
                    );
                }
                2 => {
                    if let Some(o) = runs.get_mut(&key) {
                        o.transfer = Some(r.ts_ns);
                    }
                }
                0 => {
                    if let Some(o) = runs.remove(&key) {
                        if let (Some(h), Some(t), Some(p), Some(c)) =
                            (o.handshake, o.transfer, o.first_post, o.last_complete)
                        {
                            out.push(OpTimes {
                                send: o.send,
                                bytes: o.bytes,
                                handshake_ns: t.saturating_sub(h),
                                device_ns: p.saturating_sub(t),
                                transfer_ns: c.saturating_sub(p),
                                completion_ns: r.ts_ns.saturating_sub(c),
                            });
                        }
                    }
                }
                _ => {}
            },
            Kind::Post => {
                if let Some(o) = runs.get_mut(&key) {
                    o.first_post.get_or_insert(r.ts_ns);
                }
            }
            Kind::Mark => {
                // A recording window begins: a wait that began before it counts from here.
                for o in runs.values_mut() {
                    o.handshake = o.handshake.map(|h| h.max(r.ts_ns));
                }
            }
            Kind::Complete => {
                if let Some(o) = runs.get_mut(&key) {
                    o.last_complete = Some(r.ts_ns);
                    o.bytes += r.bytes;
                }
            }
            _ => {}
        }
    }
    out
}

/// Every network task execution's wait for its trigger words, in ns.
pub fn trigger_waits(trace: &Trace) -> Vec<u64> {
    let mut since: HashMap<(u32, u32), u64> = HashMap::new();
    let mut out = Vec::new();
    for r in &trace.records {
        if r.kind == Kind::Mark {
            for t in since.values_mut() {
                *t = (*t).max(r.ts_ns);
            }
            continue;
        }
        if !(r.kind == Kind::Transition && r.machine == "task" && r.entry == 0) {
            continue;
        }
        let key = (r.rank, r.op);
        // RunState: 2 WAITING_DEVICE_TRIGGER; leaving it ends the wait.
        if r.to == 2 {
            since.insert(key, r.ts_ns);
        } else if r.from == 2 {
            if let Some(t) = since.remove(&key) {
                out.push(r.ts_ns.saturating_sub(t));
            }
        }
    }
    out
}

/// The breakdown as `#` text lines (module docs).
pub fn text(trace: &Trace) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Latency breakdown of the traced executions (mean us; records {}, dropped {})",
        trace.drained.records, trace.drained.dropped
    );
    let waits = trigger_waits(trace);
    if !waits.is_empty() {
        let mean = waits.iter().sum::<u64>() as f64 / waits.len() as f64 / 1e3;
        let _ = writeln!(
            s,
            "#  network task waiting for the device trigger: {mean:.2} us (mean of {})",
            waits.len()
        );
    }
    let _ = writeln!(
        s,
        "#{:>5} {:>11} {:>6} {:>10} {:>9} {:>14} {:>11} {:>9}",
        "side", "bytes", "ops", "handshake", "device", "transport/peer", "completion", "total"
    );
    let mut groups: BTreeMap<(bool, u64), Vec<OpTimes>> = BTreeMap::new();
    for o in op_times(trace) {
        groups.entry((o.send, o.bytes)).or_default().push(o);
    }
    for ((send, bytes), v) in &groups {
        let n = v.len() as f64;
        let mean = |f: fn(&OpTimes) -> u64| v.iter().map(f).sum::<u64>() as f64 / n / 1e3;
        let _ = writeln!(
            s,
            "#{:>5} {:>11} {:>6} {:>10.2} {:>9.2} {:>14.2} {:>11.2} {:>9.2}",
            if *send { "send" } else { "recv" },
            bytes,
            v.len(),
            mean(|o| o.handshake_ns),
            mean(|o| o.device_ns),
            mean(|o| o.transfer_ns),
            mean(|o| o.completion_ns),
            mean(OpTimes::total_ns)
        );
    }
    s.pop();
    s
}
