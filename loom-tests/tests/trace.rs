//! Model 16: the event-trace ring (writers against a concurrent drain).
#![cfg(loom)]

use loom_tests::harness::trace::trace_writers_vs_drain;
use loom_tests::{assert_loom_catches, check};
use proxy_core::plant::Plant;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 3;

#[test]
fn a_drain_sees_only_whole_records_and_the_full_ring_drops() {
    check(PREEMPTIONS, trace_writers_vs_drain);
}

/// `TraceRing::push` publishes the slot with `Relaxed`: the concurrent drain may read the
/// record before its write is visible.
#[test]
fn plant_ready_relaxed_is_caught() {
    assert_loom_catches(
        Plant::TraceReadyRelaxed,
        PREEMPTIONS,
        &["Causality violation"],
        trace_writers_vs_drain,
    );
}
