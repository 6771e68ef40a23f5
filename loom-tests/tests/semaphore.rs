//! Model 6: the semaphore reverse edge (`nec_inc_semaphore`), proxy thread → device thread.
#![cfg(loom)]

use loom_tests::harness::{semaphore_edge, RealSemaphore};
use loom_tests::loom_finds_failure;
use loom_tests::twins::semaphore::RelaxedSemaphore;

#[test]
fn semaphore_counts_never_run_ahead_of_completions() {
    loom::model(|| {
        // SAFETY: the model passes only addresses of live AtomicU32s it owns.
        semaphore_edge(RealSemaphore(unsafe {
            proxy_core::progress::device::DirectHostWords::new()
        }))
    });
}

#[test]
fn semaphore_twin_with_relaxed_increment_is_caught() {
    assert!(
        loom_finds_failure(|| semaphore_edge(RelaxedSemaphore)),
        "loom missed the Relaxed increment"
    );
}
