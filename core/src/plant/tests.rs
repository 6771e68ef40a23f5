//! The protocol plants, caught by the crate's existing tests: each test here re-runs this
//! test binary on one existing test (`<test> --exact`) with [`PLANT_ENV`] set, and asserts
//! that it fails with the message its bug must produce.
extern crate std;

use std::string::String;

use super::*;

#[test]
fn first_panic_message_reads_the_default_hook() {
    let stderr = "running 1 test\n\
        thread 'x' (12) panicked at src/a.rs:1:2:\n\
        assertion `left == right` failed: exactly once\n  left: 1\n right: 2\n\
        note: run with `RUST_BACKTRACE=1`\n\
        thread 'x' (12) panicked at src/b.rs:3:4:\nsecond\n";
    assert_eq!(
        first_panic_message(stderr).as_deref(),
        Some("assertion `left == right` failed: exactly once\n  left: 1\n right: 2")
    );
    assert_eq!(first_panic_message("ok\n"), None);
}

/// Runs the existing test `test` in a child with `plant` selected; asserts it fails with a
/// first panic message that contains every one of `expected`. Then runs it without the
/// plant and asserts it passes (so the failure is the plant's).
fn caught_by(plant: Plant, test: &str, expected: &[&str]) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let run = |plant: Option<Plant>| {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env("RUST_BACKTRACE", "0")
            .env_remove(PLANT_ENV);
        if let Some(p) = plant {
            cmd.env(PLANT_ENV, p.name());
        }
        cmd.output().expect("run the child test")
    };
    let out = run(Some(plant));
    let msg = planted_failure(
        plant,
        test,
        out.status.success(),
        &String::from_utf8_lossy(&out.stdout),
        &String::from_utf8_lossy(&out.stderr),
    );
    std::println!("{plant:?}: {test} reported: {msg}");
    assert!(
        expected.iter().all(|e| msg.contains(e)),
        "{test} failed under {plant:?}, but not as expected ({expected:?}): {msg}"
    );
    assert!(run(None).status.success(), "{test} fails without the plant");
}

#[test]
fn names_round_trip_and_nothing_is_selected_here() {
    for &p in Plant::ALL {
        assert_eq!(Plant::from_name(p.name()), Some(p));
        assert_eq!(Plant::from_u8(p as u8), Some(p));
    }
    assert_eq!(Plant::from_name("NoSuchPlant"), None);
    // The parent test process never selects a plant (its tests run in parallel).
    if std::env::var_os(PLANT_ENV).is_none() {
        assert_eq!(selected(), None);
    }
}

/// Skipping the gate, the task leaves INIT for PROGRESSING with both trigger words still
/// armed (the device has written neither): the task test's first check of the gate fails.
#[test]
fn network_task_skipping_the_trigger_gate_is_caught() {
    caught_by(
        Plant::NetworkSkipsTriggerGate,
        "driver::task::tests::armed_trigger_blocks_progress_until_a_device_thread_writes_it",
        &["left: Progressing", "right: WaitingDeviceTrigger"],
    );
    // With no trigger ever written, the timeout test's task runs and succeeds instead of
    // timing out: it never waited for the device.
    caught_by(
        Plant::NetworkSkipsTriggerGate,
        "driver::task::tests::trigger_wait_times_out_and_stops_streams",
        &["left: Done", "right: Idle"],
    );
}

/// A loop size of 64 with up to 1000 entries: once the device's index wraps, the op reads a
/// delta of about 2^32, more entries than it has, and fails with `NRT_HW_ERROR`, which fails
/// the comm (sticky): its `progress` answers `NRT_NETWORK_PROXY_FAILURE`, the test's unwrap.
#[test]
fn send_recv_ignoring_the_index_wrap_is_caught() {
    caught_by(
        Plant::SendRecvIgnoresIndexWrap,
        "progress::sendrecv::tests::entry_counts_the_128_cap_and_index_wraparound",
        &["unwrap()", "NetworkProxyFailure"],
    );
}

/// Credits 3, the receiving device posting one entry a step and the sender every entry at
/// once: a fourth receive ahead of the host index is matched by data the device never
/// handed out, and the device finds that buffer written.
#[test]
fn send_recv_posting_beyond_the_ending_credits_is_caught() {
    caught_by(
        Plant::SendRecvPostsBeyondEndingCredits,
        "progress::sendrecv::tests::early_recv_posting_stays_within_credits",
        &["recv entry", "touched before the device posted it"],
    );
}

/// Without `early_send_completion`, the sending comm (which ticks before the receiver)
/// counts its copied entries complete while the receiver has not taken them: the sending
/// device finds the peer's destination without the entry.
#[test]
fn send_recv_completing_early_without_the_flag_is_caught() {
    caught_by(
        Plant::SendRecvEarlyCompletionWithoutFlag,
        "progress::sendrecv::tests::sizes_through_the_full_protocol",
        &["counted complete before the receiver had it"],
    );
}
