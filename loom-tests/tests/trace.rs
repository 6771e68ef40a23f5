//! Model 16: the event-trace ring (writers against a concurrent drain; two writers on one lane).
#![cfg(loom)]

use loom_tests::harness::trace::{trace_lane_shared, trace_writers_vs_drain};
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

#[test]
fn two_writers_sharing_a_lane_never_share_a_slot() {
    check(PREEMPTIONS, trace_lane_shared);
}

/// `TraceRing::claim` takes the lane's next slot by a load and a plain store: both writers of
/// the lane can claim one slot and write its record at once.
#[test]
fn plant_lane_claim_by_load_store_is_caught() {
    assert_loom_catches(
        Plant::TraceLaneClaimByLoadStore,
        PREEMPTIONS,
        &["Causality violation"],
        trace_lane_shared,
    );
}
