//! A [`Trace`] as Chrome Trace Event JSON (`{"traceEvents": [...]}`), which
//! `chrome://tracing`, Perfetto (ui.perfetto.dev) and speedscope open.
//!
//! One pid per rank (named `rank R`), and in it these tracks (tids):
//! * one per recording thread (tids 1, 2, ... in the order the threads first appear; named by
//!   the thread: `rank-0`, `proxy-1`, ...; one OS thread is one track whichever copy of the
//!   core recorded it): `drive`
//!   spans (ph `X`) while the thread holds a queue's drive token, `sleep` spans while it is
//!   parked;
//! * two per task kind (`network task (even)` / `(odd)` by the task id's parity, as the next
//!   execution's task may wait while this one runs): `wait-trigger` (the task waits for the
//!   device's trigger words), `run` (progressing or idle), `closing`;
//! * one per op (`stream S block B op I send|recv`): `handshake` (waiting for the device's handshake, op state
//!   1), `transfer` (posting and testing entries, state 2), and instants (ph `i`) `post` and
//!   `complete` per FIFO entry inside the transfer; with the class `ops` without `steps` one
//!   `op` span from begin to end (and a task's `task` span). An op's end begins its next
//!   handshake (the walk re-arms it at once; that re-arm is recorded with `steps` only): a
//!   recorded arm that follows (the next execution's `start`) replaces it;
//! * a counter (ph `C`) `bytes in flight` per rank: posted and not yet completed.
//!
//! A mark (ph `i`, scope global, `recording window`) starts each recording window; spans open
//! at a mark (an op re-armed at the end of the previous traced execution waits for its next
//! handshake while nothing is recorded) start at the mark.
//!
//! `ts` and `dur` are µs (floats) since the first record; `args` carry the ids (comm, op,
//! block, stream, entry, peer, task) and bytes. A span whose end was not recorded (a task or op
//! that never finished, or one still open when recording stopped) ends at the last record with
//! `"unfinished": true` in its args.

use std::collections::HashMap;

use proxy_core::base::trace::{Kind, Record, NONE, SEND};
use serde_json::{json, Value};

use crate::Trace;

/// Track ids of the task tracks (`TASK_TID + kind`), below the op tracks.
const TASK_TID: u64 = 1_000_000;
/// Track ids of the op tracks (`OP_TID + stream * 4096 + op index`).
pub const OP_TID: u64 = 2_000_000;

/// The op states' codes (`OpState`: 0 DONE, 1 HANDSHAKE, 2 TRANSFER).
const OP_DONE: u8 = 0;
const OP_HANDSHAKE: u8 = 1;
const OP_TRANSFER: u8 = 2;
/// The task run states' codes (`RunState`: ABI values).
const TASK_PROGRESSING: u8 = 1;
const TASK_WAITING: u8 = 2;
const TASK_IDLE: u8 = 3;
const TASK_CLOSING: u8 = 5;

/// The rank's pid (ranks not known go to pid `u32::MAX`, named `unattributed`).
fn pid(r: &Record) -> u64 {
    u64::from(r.rank)
}

/// An open span: its name, start and the record that opened it.
#[derive(Clone, Copy)]
struct Open {
    name: &'static str,
    start: u64,
    rec: Record,
    /// An op's handshake its previous end implies (no arm recorded): left out when still open
    /// at the end (the op's last re-arm, not a stall).
    implied: bool,
}

/// Builds the events of `trace`; `only_rank`: just that rank's (one file per rank).
pub fn events(trace: &Trace, only_rank: Option<u32>) -> Vec<Value> {
    let t0 = trace.records.first().map_or(0, |r| r.ts_ns);
    let us = |ns: u64| (ns.saturating_sub(t0)) as f64 / 1e3;
    let mut out = Vec::new();
    let mut named: HashMap<(u64, u64), String> = HashMap::new();
    let mut ranks: Vec<u32> = Vec::new();
    // Open spans by key: thread tracks (pid, tid, what), tasks, ops.
    let mut open: HashMap<(u64, u64, u8), Open> = HashMap::new();
    let mut in_flight: HashMap<u32, u64> = HashMap::new();
    // Thread ids (OS thread ids) as small tids, in order of appearance.
    let mut tids: HashMap<u32, u64> = HashMap::new();
    let span = |out: &mut Vec<Value>, o: Open, end: u64, tid: u64, args: Value| {
        out.push(json!({
            "name": o.name, "cat": "proxy", "ph": "X", "pid": pid(&o.rec), "tid": tid,
            "ts": us(o.start), "dur": (end.saturating_sub(o.start)) as f64 / 1e3, "args": args,
        }));
    };
    for r in &trace.records {
        if r.kind == Kind::Mark {
            // A recording window begins: waits that began before it (while nothing was
            // recorded) are counted from here. Global: on the first rank's (or the file's).
            for o in open.values_mut() {
                o.start = o.start.max(r.ts_ns);
            }
            out.push(json!({
                "name": "recording window", "cat": "proxy", "ph": "i", "s": "g",
                "pid": u64::from(only_rank.unwrap_or(0)), "tid": 0, "ts": us(r.ts_ns),
                "args": { "mark": r.op },
            }));
            continue;
        }
        if only_rank.is_some_and(|k| k != r.rank) {
            continue;
        }
        if !ranks.contains(&r.rank) {
            ranks.push(r.rank);
        }
        let p = pid(r);
        let next = tids.len() as u64 + 1;
        let thread_tid = *tids.entry(r.thread).or_insert(next);
        named.entry((p, thread_tid)).or_insert_with(|| {
            trace
                .threads
                .get(&r.thread)
                .cloned()
                .unwrap_or_else(|| format!("thread {}", r.thread))
        });
        match r.kind {
            Kind::TokenTake | Kind::Sleep => {
                let name = if r.kind == Kind::TokenTake {
                    "drive"
                } else {
                    "sleep"
                };
                open.insert(
                    (p, thread_tid, r.kind as u8),
                    Open {
                        name,
                        start: r.ts_ns,
                        rec: *r,
                        implied: false,
                    },
                );
            }
            Kind::TokenRelease | Kind::Wake => {
                let opened = if r.kind == Kind::TokenRelease {
                    Kind::TokenTake
                } else {
                    Kind::Sleep
                };
                if let Some(o) = open.remove(&(p, thread_tid, opened as u8)) {
                    span(&mut out, o, r.ts_ns, thread_tid, json!({ "queue": r.op }));
                }
            }
            Kind::Transition if r.machine == "task" => {
                // Two tracks per kind, by the task id's parity: the next execution's task may
                // wait for its trigger while this one runs.
                let parity = u64::from(r.op % 2);
                let tid = TASK_TID + u64::from(r.entry.min(2)) * 2 + parity;
                // A transition taken on a thread of no or another rank (the main thread
                // settling the tasks after a failure) continues the open span of the same
                // task (comm, id, kind) in the state it leaves, in whichever rank it is.
                let p = if open.contains_key(&(p, tid, 0)) {
                    p
                } else {
                    let left = task_span(r.from);
                    open.iter()
                        .find(|(k, o)| {
                            k.1 == tid
                                && o.rec.op == r.op
                                && o.rec.comm == r.comm
                                && Some(o.name) == left
                        })
                        .map_or(p, |(k, _)| k.0)
                };
                named.entry((p, tid)).or_insert_with(|| {
                    let kind = match r.entry {
                        0 => "network task",
                        1 => "barrier task",
                        _ => "task",
                    };
                    format!("{kind} ({})", if parity == 0 { "even" } else { "odd" })
                });
                let key = (p, tid, 0);
                // Leaving a span state closes its span; entering one opens the next.
                let next = task_span(r.to);
                let same = open.get(&key).map(|o| Some(o.name) == next);
                if same != Some(true) {
                    if let Some(mut o) = open.remove(&key) {
                        // Left from another state than the span's: the steps in between were
                        // not recorded (mask `ops` without `steps`): the task as a whole.
                        if task_span(r.from) != Some(o.name) {
                            o.name = "task";
                        }
                        let args =
                            json!({ "comm": o.rec.comm, "task": o.rec.op, "slot": o.rec.block });
                        span(&mut out, o, r.ts_ns, tid, args);
                    }
                    if let Some(name) = next {
                        open.insert(
                            key,
                            Open {
                                name,
                                start: r.ts_ns,
                                rec: *r,
                                implied: false,
                            },
                        );
                    }
                }
            }
            Kind::Transition if r.machine == "op" => {
                let tid = op_tid(r);
                named.entry((p, tid)).or_insert_with(|| op_track_name(r));
                let key = (p, tid, 0);
                // A handshake still open when the op enters HANDSHAKE again was abandoned: a
                // re-armed op that went back to its pool (`ProxyOp::reset` clears the state
                // without a transition) and was taken again. It is left out.
                let abandoned = open
                    .get(&key)
                    .is_some_and(|o| o.name == "handshake" && r.to == OP_HANDSHAKE);
                if abandoned {
                    open.remove(&key);
                }
                if let Some(mut o) = open.remove(&key) {
                    // Left from another state than the span's (HANDSHAKE → TRANSFER not
                    // recorded: mask `ops` without `steps`): the op as a whole.
                    if o.rec.to != r.from {
                        o.name = "op";
                    }
                    let args = json!({
                        "comm": o.rec.comm, "op": o.rec.op, "block": o.rec.block,
                        "stream": o.rec.stream, "peer": o.rec.peer,
                    });
                    span(&mut out, o, r.ts_ns, tid, args);
                }
                let next = match r.to {
                    OP_HANDSHAKE => Some("handshake"),
                    OP_TRANSFER => Some("transfer"),
                    // The walk re-arms an op the tick it reaches DONE (its re-arm is recorded
                    // with `steps` only, `ProxyOp::recycle_in`): the op's next execution
                    // begins here, unless a recorded arm follows (it replaces this one).
                    OP_DONE => Some("handshake"),
                    _ => None,
                };
                if let Some(name) = next {
                    let rec = if r.to == OP_DONE {
                        Record {
                            from: OP_DONE,
                            to: OP_HANDSHAKE,
                            edge: 4,
                            ..*r
                        }
                    } else {
                        *r
                    };
                    open.insert(
                        key,
                        Open {
                            name,
                            start: r.ts_ns,
                            rec,
                            implied: r.to == OP_DONE,
                        },
                    );
                }
            }
            Kind::Mark => {}
            Kind::Transition => {
                out.push(json!({
                    "name": format!("{} edge {}", r.machine, r.edge), "cat": "proxy", "ph": "i",
                    "s": "t", "pid": p, "tid": thread_tid, "ts": us(r.ts_ns),
                    "args": { "from": r.from, "to": r.to },
                }));
            }
            Kind::Post | Kind::Complete => {
                let tid = op_tid(r);
                named.entry((p, tid)).or_insert_with(|| op_track_name(r));
                out.push(json!({
                    "name": r.kind.name(), "cat": "proxy", "ph": "i", "s": "t",
                    "pid": p, "tid": tid, "ts": us(r.ts_ns),
                    "args": {
                        "comm": r.comm, "op": r.op, "block": r.block, "stream": r.stream,
                        "entry": r.entry, "peer": r.peer, "bytes": r.bytes,
                        "side": if r.side == SEND { "send" } else { "recv" },
                    },
                }));
                let f = in_flight.entry(r.rank).or_insert(0);
                *f = if r.kind == Kind::Post {
                    f.saturating_add(r.bytes)
                } else {
                    f.saturating_sub(r.bytes)
                };
                out.push(json!({
                    "name": "bytes in flight", "ph": "C", "pid": p, "ts": us(r.ts_ns),
                    "args": { "bytes": *f },
                }));
            }
        }
    }
    // Spans still open at the end (a task or op that never finished: a stalled device, a
    // dead peer) end at the last record, marked `unfinished`; an op's handshake that only its
    // previous end implies is left out.
    let last = trace.records.last().map_or(t0, |r| r.ts_ns);
    let mut still: Vec<_> = open.into_iter().filter(|(_, o)| !o.implied).collect();
    still.sort_by_key(|(k, o)| (o.start, *k));
    for ((_, tid, _), o) in still {
        let args = json!({
            "unfinished": true, "comm": o.rec.comm, "op": o.rec.op, "block": o.rec.block,
            "stream": o.rec.stream, "peer": o.rec.peer,
        });
        span(&mut out, o, last, tid, args);
    }
    let mut meta = Vec::new();
    for k in ranks {
        let name = if k == NONE {
            "unattributed".to_string()
        } else {
            format!("rank {k}")
        };
        meta.push(json!({ "name": "process_name", "ph": "M", "pid": u64::from(k), "args": { "name": name } }));
        meta.push(json!({ "name": "process_sort_index", "ph": "M", "pid": u64::from(k), "args": { "sort_index": k } }));
    }
    let mut names: Vec<_> = named.into_iter().collect();
    names.sort();
    for ((p, tid), name) in names {
        meta.push(json!({ "name": "thread_name", "ph": "M", "pid": p, "tid": tid, "args": { "name": name } }));
    }
    meta.extend(out);
    meta
}

/// The span a task is in while in run state `code` (`None`: INIT, DONE).
fn task_span(code: u8) -> Option<&'static str> {
    match code {
        TASK_WAITING => Some("wait-trigger"),
        TASK_PROGRESSING | TASK_IDLE => Some("run"),
        TASK_CLOSING => Some("closing"),
        _ => None,
    }
}

/// The op track of `r`: one per (stream, block, op index); blocks are filed together, so their
/// ops wait for their handshakes at once.
fn op_tid(r: &Record) -> u64 {
    let block = u64::from(r.block % 64);
    let side = u64::from(r.side == SEND);
    OP_TID + ((u64::from(r.stream) * 64 + block) * 256 + u64::from(r.op % 256)) * 2 + side
}

fn op_track_name(r: &Record) -> String {
    let side = if r.side == SEND { "send" } else { "recv" };
    format!("stream {} block {} op {} {side}", r.stream, r.block, r.op)
}

/// The whole JSON document: `{"traceEvents": [...], "displayTimeUnit": "ns", "otherData":
/// {...}}` with `source` (who wrote it) and the drain's counts (records, pending, dropped: a
/// truncated ring says here how many events it lost) in `otherData`.
pub fn document(trace: &Trace, only_rank: Option<u32>, source: &str) -> Value {
    json!({
        "traceEvents": events(trace, only_rank),
        "displayTimeUnit": "ns",
        "otherData": {
            "source": source,
            "records": trace.drained.records,
            "pending": trace.drained.pending,
            "dropped": trace.drained.dropped,
        },
    })
}
