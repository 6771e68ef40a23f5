extern crate std;

use super::*;
use crate::base::time::ManualClock;
use std::boxed::Box;
use std::vec::Vec;

fn rec(op: u32) -> Record {
    Record {
        op,
        bytes: u64::from(op) * 8,
        ..Record::new(Kind::Post)
    }
}

// ---- the ring ------------------------------------------------------------------------------

#[test]
fn keeps_the_first_records_and_counts_the_dropped() {
    let r = TraceRing::new(3);
    assert_eq!(r.capacity(), 3);
    for i in 0..5 {
        assert_eq!(r.push(rec(i)), i < 3, "push {i}");
    }
    assert_eq!(r.dropped(), 2);
    let mut seen = Vec::new();
    let d = r.drain(|x| seen.push((x.op, x.bytes)));
    assert_eq!(seen, [(0, 0), (1, 8), (2, 16)]);
    assert_eq!(
        d,
        Drained {
            records: 3,
            pending: 0,
            dropped: 2
        }
    );
    // A drain does not empty the ring.
    assert_eq!(r.drain(|_| {}).records, 3);
}

#[test]
fn an_empty_ring_drains_nothing() {
    let r = TraceRing::new(0);
    assert_eq!(r.capacity(), 1, "at least one slot");
    assert_eq!(r.drain(|_| panic!("no record")), Drained::default());
}

#[test]
fn writers_on_threads_lose_nothing_until_full() {
    // Miri interprets every atomic of 6,000 pushes on 4 threads for minutes: a 100th of it.
    let (cap, each) = if cfg!(miri) {
        (40, 15u32)
    } else {
        (4000, 1500u32)
    };
    // Each writer on its own lane, as the platform arranges.
    let r =
        crate::base::sync::Arc::new(TraceRing::with_lanes(cap, 4, TraceRing::chunk_for(cap, 4)));
    let chunk = r.chunk();
    assert_eq!(chunk, if cfg!(miri) { 2 } else { 64 });
    let hs: Vec<_> = (0..4u32)
        .map(|t| {
            let r = r.clone();
            std::thread::spawn(move || {
                for i in 0..each {
                    r.push_on(t as usize, rec(t * 10_000 + i), |_| {});
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let mut per = [0u32; 4];
    let d = r.drain(|x| {
        let t = (x.op / 10_000) as usize;
        // Each writer's records are in its own order, none skipped.
        assert_eq!(x.op % 10_000, per[t]);
        assert_eq!(x.bytes, u64::from(x.op) * 8);
        per[t] += 1;
    });
    // Every push recorded or counted; the ring full up to the lanes' unused tails.
    assert_eq!(d.records + d.dropped, 4 * each as usize);
    assert!(d.records <= cap && d.records + 4 * chunk > cap, "{d:?}");
    assert_eq!(d.pending, 0);
    assert_eq!(per.iter().sum::<u32>() as usize, d.records);
}

#[test]
fn writers_sharing_one_lane_record_or_count_every_push() {
    let (cap, each) = if cfg!(miri) {
        (40, 15u32)
    } else {
        (4000, 1500u32)
    };
    let r = crate::base::sync::Arc::new(TraceRing::new(cap));
    assert_eq!((r.lanes(), r.chunk()), (1, if cfg!(miri) { 8 } else { 64 }));
    let hs: Vec<_> = (0..4u32)
        .map(|t| {
            let r = r.clone();
            std::thread::spawn(move || {
                for i in 0..each {
                    r.push(rec(t * 10_000 + i));
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let mut seen = std::collections::HashSet::new();
    let d = r.drain(|x| {
        assert_eq!(x.bytes, u64::from(x.op) * 8);
        assert!(seen.insert(x.op), "record {} twice", x.op);
    });
    // Races for a new chunk void the loser's rest of a chunk: fewer records, never a lost push.
    assert_eq!(d.records + d.dropped, 4 * each as usize);
    assert!(d.records <= cap, "{d:?}");
    assert_eq!(d.pending, 0);
}

#[test]
fn lanes_take_chunks_in_turn_and_their_unused_tails_are_not_pending() {
    let r = TraceRing::with_lanes(9, 2, 3);
    assert_eq!(
        (r.capacity(), r.lanes(), r.chunk()),
        (9, 2, 2),
        "chunks of a power of two"
    );
    let r = TraceRing::with_lanes(9, 2, 4);
    assert_eq!(r.chunk(), 4);
    assert!(r.push_on(0, rec(1), |_| {})); // chunk 0: slot 0
    assert!(r.push_on(1, rec(2), |_| {})); // chunk 1: slot 4
    assert!(r.push_on(0, rec(3), |_| {})); // slot 1
    assert!(r.push_on(0, rec(4), |_| {})); // slot 2
    assert!(r.push_on(0, rec(41), |_| {})); // slot 3
    assert!(r.push_on(0, rec(5), |_| {})); // chunk 2 (1 slot): slot 8
    assert!(r.is_full());
    assert!(
        !r.push_on(0, rec(6), |_| {}),
        "lane 0 used up its chunk and none is left"
    );
    assert!(r.push_on(3, rec(7), |_| {}), "lane 3 is lane 1: slot 5");
    assert!(r.push_on(1, rec(71), |_| {})); // slot 6
    let mut seen = Vec::new();
    let d = r.drain(|x| seen.push(x.op));
    assert_eq!(seen, [1, 3, 4, 41, 2, 7, 71, 5], "chunk by chunk");
    assert_eq!(
        d,
        Drained {
            records: 8,
            pending: 0,
            dropped: 1
        },
        "lane 1's slot 7 is unclaimed, not pending"
    );
    assert!(r.push_on(1, rec(8), |_| {}));
    assert!(!r.push_on(1, rec(9), |_| {}));
    assert_eq!(r.drain(|_| {}).records, 9);
    assert_eq!(r.dropped(), 2);
}

#[test]
fn chunks_are_a_quarter_of_a_lanes_share_up_to_64() {
    assert_eq!(TraceRing::chunk_for(1 << 20, 16), MAX_CHUNK);
    assert_eq!(TraceRing::chunk_for(800, 8), 16);
    assert_eq!(TraceRing::chunk_for(3, 1), 1);
    assert_eq!(TraceRing::chunk_for(3, 0), 1);
    assert_eq!(TraceRing::with_lanes(5, 0, 100).chunk(), 64);
}

// ---- the tracer ----------------------------------------------------------------------------

#[test]
fn tracer_stamps_time_and_thread_and_switches() {
    static CLOCK: ManualClock = ManualClock::new(1_000);
    let t = Tracer::new(8, &CLOCK, || 7);
    assert!(!t.is_on());
    assert!(t.record(rec(1)));
    CLOCK.advance(500);
    t.set_on(true);
    assert!(t.is_on());
    assert!(t.record(rec(2)));
    CLOCK.advance(1);
    assert!(t.mark(9));
    let mut seen = Vec::new();
    t.ring()
        .drain(|x| seen.push((x.ts_ns, x.thread, x.op, x.kind)));
    assert_eq!(
        seen,
        [
            (1_000, 7, 1, Kind::Post),
            (1_500, 7, 2, Kind::Post),
            (1_501, 7, 9, Kind::Mark)
        ]
    );
}

#[test]
fn an_open_tick_shares_one_clock_read_until_cleared() {
    static CLOCK: ManualClock = ManualClock::new(100);
    // Tick stamps need a `'static` tracer: boxed, handed out as a raw pointer, and given back
    // at the end (Miri's leak check).
    let raw_t = Box::into_raw(Box::new(Tracer::with_lanes(16, 2, &CLOCK, || 3, || 1)));
    // SAFETY: `raw_t` is live until the `Box::from_raw` at the end, after the last use.
    let t: &'static Tracer = unsafe { &*raw_t };
    let stamp = t.tick_stamp();
    assert!(stamp.is_some());
    let times = || {
        let mut v = Vec::new();
        t.ring().drain(|r| v.push(r.ts_ns));
        v
    };
    // Closed: every record reads the clock.
    t.record(rec(1));
    CLOCK.advance(10);
    t.record(rec(2));
    {
        let open = stamp.open();
        CLOCK.advance(10); // 120
        t.record(rec(3)); // reads: the tick's stamp
        CLOCK.advance(10);
        t.record(rec(4)); // shares 120
        t.record_fresh(rec(5)); // reads 130, the new stamp
        CLOCK.advance(10);
        t.record(rec(6)); // shares 130
        open.stamp().clear();
        t.record(rec(7)); // reads 140
        CLOCK.advance(10);
    }
    // Closed again when the guard dropped: 150.
    t.record(rec(8));
    assert_eq!(times(), [100, 110, 120, 120, 130, 130, 140, 150]);
    // A thread on a shared lane (at or past the lane count) never shares.
    let raw_shared = Box::into_raw(Box::new(Tracer::with_lanes(4, 2, &CLOCK, || 3, || 2)));
    // SAFETY: live until the `Box::from_raw` at the end.
    assert_eq!(unsafe { &*raw_shared }.tick_stamp(), TickStamp::NONE);
    let raw_one = Box::into_raw(Box::new(Tracer::new(4, &CLOCK, || 3)));
    // SAFETY: live until the `Box::from_raw` at the end.
    assert_eq!(unsafe { &*raw_one }.tick_stamp(), TickStamp::NONE);
    // A lane closed for a new owner does not hand on an open tick's stamp.
    let _open = stamp.open();
    t.record(rec(9));
    t.close_lane(1);
    CLOCK.advance(10);
    t.record(rec(10));
    let v = times();
    assert_eq!(&v[8..], [150, 160]);
    drop(_open);
    for raw in [raw_t, raw_shared, raw_one] {
        // SAFETY: each came from `Box::into_raw` above, once; the last handle on it (the
        // guard) is gone and no reference to it is used after this.
        drop(unsafe { Box::from_raw(raw) });
    }
}

#[test]
fn a_full_tracer_counts_every_drop() {
    static CLOCK: ManualClock = ManualClock::new(5);
    let t = Tracer::new(1, &CLOCK, || 1);
    assert!(!t.ring().is_full());
    assert!(t.record(rec(1)));
    assert!(t.ring().is_full());
    assert!(!t.record(rec(2)));
    assert!(!t.mark(3));
    assert_eq!(t.ring().dropped(), 2);
    assert_eq!(t.ring().drain(|_| {}).records, 1);
}

#[test]
fn kinds_have_names() {
    assert_eq!(Kind::Transition.name(), "transition");
    assert_eq!(Kind::Complete.name(), "complete");
    assert_eq!(Kind::Mark.name(), "mark");
    assert_eq!(Record::default().side, u8::MAX);
    assert_eq!(Record::default().kind, Kind::Transition);
    assert_eq!(Record::default().rank, NONE);
}

#[test]
fn a_record_is_72_bytes_on_64_bit_targets() {
    if cfg!(target_pointer_width = "64") {
        assert_eq!(core::mem::size_of::<Record>(), 72);
    }
}

// ---- classes -------------------------------------------------------------------------------

#[test]
fn masks_parse_from_names_and_numbers() {
    assert_eq!(mask::parse("ops"), Ok(mask::OPS));
    assert_eq!(
        mask::parse(" OPS, transport|sleep "),
        Ok(mask::OPS | mask::TRANSPORT | mask::SLEEP)
    );
    assert_eq!(mask::parse("all"), Ok(mask::ALL));
    assert_eq!(mask::parse("0x3"), Ok(mask::OPS | mask::TRANSPORT));
    assert_eq!(mask::parse("255"), Ok(mask::ALL));
    assert_eq!(mask::parse("ops,steps"), Ok(mask::OPS | mask::STEPS));
    assert_eq!(mask::parse("ops,step"), Err("step"));
    assert_eq!(mask::parse(""), Err(""));
}

#[test]
fn every_kind_has_a_class_of_the_mask() {
    assert_eq!(Kind::Post.class(), mask::TRANSPORT);
    assert_eq!(Kind::Complete.class(), mask::TRANSPORT);
    assert_eq!(Kind::TokenTake.class(), mask::DRIVE);
    assert_eq!(Kind::Wake.class(), mask::SLEEP);
    assert_eq!(Kind::Transition.class(), mask::TRANSITIONS);
    static CLOCK: ManualClock = ManualClock::new(0);
    let t = Tracer::new(2, &CLOCK, || 1);
    assert_eq!(t.mask(), mask::ALL);
    t.set_mask(mask::OPS | 0x1000);
    assert_eq!(t.mask(), mask::OPS, "unknown bits are dropped");
}
