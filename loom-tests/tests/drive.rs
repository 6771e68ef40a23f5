//! Model 9: the drive token of a caller-mode queue. The owner's wait is a park without a
//! timeout: a lost wakeup on the token's release is a deadlock, which loom reports.
#![cfg(loom)]

use loom_tests::harness::driver::drive_token_handoff;
use loom_tests::{assert_loom_catches, check};
use proxy_core::plant::Plant;

/// Preemption bound of this model.
const PREEMPTIONS: usize = 3;

#[test]
fn drive_token_handoff_real() {
    check(PREEMPTIONS, drive_token_handoff);
}

#[test]
fn drive_token_handoff_plant_waiters_read_before_release_is_caught() {
    assert_loom_catches(
        Plant::DriveReleaseChecksWaitersFirst,
        PREEMPTIONS,
        &["deadlock"],
        drive_token_handoff,
    );
}
