//! Model 18: the central barrier's release (`driver::task::barrier::central`), what the host
//! barrier between processes runs on its shared-memory words.
#![cfg(loom)]

use loom_tests::harness::central::central_barrier;
use loom_tests::{assert_loom_catches, check};
use proxy_core::plant::Plant;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 3;

#[test]
fn every_member_sees_every_payload_and_each_generation_is_released_once() {
    check(PREEMPTIONS, central_barrier);
}

/// `arrive` adds with `Relaxed`: the last member's release does not carry the earlier
/// member's payload.
#[test]
fn plant_relaxed_count_is_caught() {
    assert_loom_catches(
        Plant::CentralCountRelaxed,
        PREEMPTIONS,
        &["Causality violation"],
        central_barrier,
    );
}
