//! Model 16: the event-trace ring (`base::trace::TraceRing`): writers on two threads record
//! while a drain reads the ring, then a drain after the writers have stopped.
//!
//! [`trace_writers_vs_drain`]: two writers push (`TraceRing::push`: claim,
//! then write and publish) two records each into a 2-slot ring (so two
//! are dropped) while the main thread drains it until it has read a record. Checked: every record a drain hands out is
//! whole (its fields agree), the concurrent drain sees at most the 2 slots, the final drain sees
//! exactly 2 records, none pending, 2 dropped, and each writer's records in its own order.
//!
//! [`trace_lane_shared`]: two writers share one lane (`TraceRing::push_on` lane 0, as two
//! threads do once there are more recording threads than lanes) of a 4-slot ring handed out 2
//! slots at a time, two records each, while the main thread drains. The writers claim slots in
//! the lane's chunk with a compare-and-swap and race to install the next chunk (the loser's
//! record takes the first slot of the chunk it took, the rest is void). Checked: every drained
//! record is whole and drained once, and the final drain has every push recorded or counted
//! dropped (at least 2 recorded), none pending.

use proxy_core::base::sync::Arc;
use proxy_core::base::trace::{Kind, Record, TraceRing};

use super::thread;

/// Record `i` of writer `w`: every field derived from `(w, i)`, so a torn read shows.
fn rec(w: u32, i: u32) -> Record {
    Record {
        op: w,
        entry: i,
        bytes: u64::from(w * 100 + i),
        peer: w + i,
        ..Record::new(Kind::Post)
    }
}

fn check_whole(r: &Record) {
    assert_eq!(r.kind, Kind::Post, "a drained record is whole");
    assert_eq!(
        r.bytes,
        u64::from(r.op * 100 + r.entry),
        "a drained record is whole"
    );
    assert_eq!(r.peer, r.op + r.entry, "a drained record is whole");
}

/// The model body (see the module docs).
pub fn trace_writers_vs_drain() {
    let ring = Arc::new(TraceRing::new(2));
    let writers: Vec<_> = (0..2u32)
        .map(|w| {
            let ring = ring.clone();
            thread::spawn(move || {
                ring.push(rec(w, 0));
                ring.push(rec(w, 1));
            })
        })
        .collect();
    // Drain until a record shows (the writers always push one), so the model checks a drain
    // that reads a slot a writer has just published.
    loop {
        let during = ring.drain(check_whole);
        assert!(during.records + during.pending <= 2, "{during:?}");
        if during.records > 0 {
            break;
        }
        thread::yield_now();
    }
    for w in writers {
        w.join().unwrap();
    }
    let mut seen = Vec::new();
    let after = ring.drain(|r| {
        check_whole(r);
        seen.push((r.op, r.entry));
    });
    assert_eq!((after.records, after.pending, after.dropped), (2, 0, 2));
    for w in 0..2 {
        let mine: Vec<u32> = seen.iter().filter(|s| s.0 == w).map(|s| s.1).collect();
        assert!(mine.windows(2).all(|p| p[0] < p[1]), "{seen:?}");
    }
}

/// The model body of two writers on one lane (see the module docs).
pub fn trace_lane_shared() {
    let ring = Arc::new(TraceRing::with_lanes(4, 1, 2));
    let writers: Vec<_> = (0..2u32)
        .map(|w| {
            let ring = ring.clone();
            thread::spawn(move || {
                ring.push_on(0, rec(w, 0), |_| {});
                ring.push_on(0, rec(w, 1), |_| {});
            })
        })
        .collect();
    loop {
        let during = ring.drain(check_whole);
        assert!(during.records + during.pending <= 4, "{during:?}");
        if during.records > 0 {
            break;
        }
        thread::yield_now();
    }
    for w in writers {
        w.join().unwrap();
    }
    let mut seen = Vec::new();
    let after = ring.drain(|r| {
        check_whole(r);
        assert!(!seen.contains(&(r.op, r.entry)), "a record drained twice");
        seen.push((r.op, r.entry));
    });
    assert_eq!(after.records + after.dropped, 4, "{after:?}");
    assert!(after.records >= 2, "{after:?}");
    assert_eq!(after.pending, 0, "{after:?}");
}

#[cfg(all(test, not(loom)))]
mod tests;
