//! The two early flags on the combinations that gave wrong bytes in proxy-perf's matrix
//! (docs/design.md §5, "The `nec.h` options"): each run through the real engine over the
//! in-memory transport with polled devices, every output byte checked. (The polled devices'
//! lockstep order did not show either bug here; the planner's unit test
//! `early_credits_promise_only_buffers_free_at_the_handshake` does.)

mod blocks;

use std::sync::Mutex;
use std::time::Duration;

use blocks::{assert_completed, assert_counters, run};
use proxy_collectives::planner::{Algorithm, Collective, DataType, PlanParams};

/// The harness's `start` counter is process-wide: one run at a time.
static LOCK: Mutex<()> = Mutex::new(());

/// All-reduce (ring) over 3 ranks in 3 blocks with early receive (2 credits) and early send:
/// the device's early-send overwrite of a send source must never touch a range a receive may
/// land in.
#[test]
fn all_reduce_both_early_flags_three_ranks() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let chunk = 4096u64;
    let mut p = PlanParams::new(
        Collective::AllReduce,
        3 * 3 * 6 * chunk / 4,
        DataType::F32,
        0,
        3,
    );
    p.chunk_bytes = chunk;
    p.algorithm = Algorithm::Ring;
    p.blocks = 3;
    p.nec.early_recv = 2;
    p.nec.early_send = true;
    p.nec.credits = 128;
    for _ in 0..5 {
        let out = run(&p, 2, 1, Duration::from_secs(20));
        assert_completed(&p, &out, 2, 1);
        assert_counters(&p, &out);
    }
}

/// In-place all-to-all over 3 ranks with early receive: a receive lands where the data for
/// that peer waits to be copied out, so the planner grants no credits there.
#[test]
fn all_to_all_in_place_early_recv() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let chunk = 1024u64;
    let mut p = PlanParams::new(Collective::AllToAll, 6 * chunk / 4, DataType::F32, 0, 3);
    p.chunk_bytes = chunk;
    p.in_place = true;
    p.nec.early_recv = 2;
    for _ in 0..3 {
        let out = run(&p, 1, 1, Duration::from_secs(20));
        assert_completed(&p, &out, 1, 1);
        assert_counters(&p, &out);
    }
}
