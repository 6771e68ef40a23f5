extern crate std;

use super::*;
use crate::base::time::ManualClock;

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
    let r = crate::base::sync::Arc::new(TraceRing::new(cap));
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
    let mut per = [0u32; 4];
    let d = r.drain(|x| {
        let t = (x.op / 10_000) as usize;
        // Each writer's records are in its own order.
        assert_eq!(x.op % 10_000, per[t]);
        assert_eq!(x.bytes, u64::from(x.op) * 8);
        per[t] += 1;
    });
    assert_eq!(d.records, cap);
    assert_eq!(d.dropped, 4 * each as usize - cap);
    assert_eq!(per.iter().sum::<u32>() as usize, cap);
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
