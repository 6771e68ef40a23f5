//! The protocol skips stall the device, threaded and polled: with each planted bug of the proxy
//! (`proxy_core::plant`) selected, the planned all-reduce of `common` does not complete, and
//! each rank's device ends with a timeout naming the word it waited for. Without a plant the
//! same run completes (so the stall is the plant's).
//!
//! The plant selector is process-wide, so the tests of this binary take [`LOCK`] and select
//! their plant under it (and nothing of the engine runs outside a test's run).
//! Built with the feature `plants` only (`cargo test -p proxy-emulator --features plants`).

mod common;

use std::sync::{Mutex, MutexGuard};

use common::{assert_completed, assert_stalled, run, Mode, Stall, DEVICE_TIMEOUT};
use proxy_core::plant::{self, Plant};

static LOCK: Mutex<()> = Mutex::new(());

/// Selects `plant` for the life of the guard (none again after it).
struct Planted(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Planted {
    fn select(p: Option<Plant>) -> Self {
        let g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        plant::set(p);
        Self(g)
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        plant::set(None);
    }
}

fn stalls(p: Plant, mode: Mode, stall: Stall) {
    let _g = Planted::select(Some(p));
    assert_stalled(&run(mode, DEVICE_TIMEOUT), stall);
}

#[test]
fn without_a_plant_both_modes_complete() {
    let _g = Planted::select(None);
    assert_completed(&run(Mode::Threaded, DEVICE_TIMEOUT * 100));
    assert_completed(&run(Mode::Polled, DEVICE_TIMEOUT * 100));
}

#[test]
fn skipping_the_trigger_gate_stalls_the_threaded_device() {
    stalls(
        Plant::NetworkSkipsTriggerGate,
        Mode::Threaded,
        Stall::NetTrigger,
    );
}

#[test]
fn skipping_the_trigger_gate_stalls_the_polled_device() {
    stalls(
        Plant::NetworkSkipsTriggerGate,
        Mode::Polled,
        Stall::NetTrigger,
    );
}

#[test]
fn skipping_the_handshake_stalls_the_threaded_device() {
    stalls(
        Plant::SendRecvSkipsHandshake,
        Mode::Threaded,
        Stall::Handshake,
    );
}

#[test]
fn skipping_the_handshake_stalls_the_polled_device() {
    stalls(
        Plant::SendRecvSkipsHandshake,
        Mode::Polled,
        Stall::Handshake,
    );
}

#[test]
fn skipping_the_completion_stalls_the_threaded_device() {
    stalls(
        Plant::SendRecvSkipsCompletion,
        Mode::Threaded,
        Stall::Completion,
    );
}

#[test]
fn skipping_the_completion_stalls_the_polled_device() {
    stalls(
        Plant::SendRecvSkipsCompletion,
        Mode::Polled,
        Stall::Completion,
    );
}
