//! Model 12: a queue's dump request word — a request from another thread vs the driving thread
//! serving it; and a parked worker woken to write a requested dump.
#![cfg(loom)]

use loom_tests::harness::dump::{dump_request_vs_serve, parked_worker_serves_a_dump};
use loom_tests::{assert_loom_catches, check};
use proxy_core::plant::Plant;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 3;

#[test]
fn a_dump_answers_only_requests_made_before_it_began() {
    check(PREEMPTIONS, dump_request_vs_serve);
}

#[test]
fn a_parked_worker_wakes_to_write_a_requested_dump() {
    check(2, parked_worker_serves_a_dump);
}

/// `DumpRequests::serve` reading the request count after the dump: a request made while the
/// dump is written is marked answered by a dump that did not see what the requester did first.
#[test]
fn plant_dump_served_read_after_dump_is_caught() {
    assert_loom_catches(
        Plant::DumpServedReadAfterDump,
        PREEMPTIONS,
        &["a dump that answers a request shows what was done before the request"],
        dump_request_vs_serve,
    );
}
