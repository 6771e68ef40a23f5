//! The allocation-free steady state (issue 12): after warm-up, 1,000 executions (execution mode,
//! not `--loop`: one network and one barrier task per rank per execution, re-armed and
//! resubmitted) of an 8-byte all-reduce over the in-process transport allocate nothing, on any
//! thread, in both driver modes: worker threads with device threads, and caller-driven queues
//! with polled devices; also with event recording on (issue 28). Counted by this binary's global
//! allocator while armed.

use std::sync::Mutex;

use clap::Parser;
use proxy_alloc_count::CountingAlloc;
use proxy_perf::args::Args;
use proxy_perf::run::World;

/// Counts allocation calls on every thread while armed ([`CountingAlloc::arm_all_threads`]).
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// One test at a time (the counter is process-wide).
static ONE: Mutex<()> = Mutex::new(());

fn steady_state_allocations(modes: &[&str]) -> (u64, u64) {
    steady_state_allocations_traced(modes, None)
}

/// [`steady_state_allocations`] with the event tracer installed and switched `on` for the run
/// when `trace` is `Some(on)` (under the same lock: no other run sees it on).
fn steady_state_allocations_traced(modes: &[&str], trace: Option<bool>) -> (u64, u64) {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let tracer = trace.map(|on| {
        let t = proxy_perf::trace::tracer().unwrap();
        t.set_on(on);
        t
    });
    let mut argv = vec!["proxy-perf", "all-reduce", "--ranks", "2"];
    argv.extend_from_slice(modes);
    let args = Args::try_parse_from(argv).unwrap();
    let mut world = World::new(&args).unwrap_or_else(|e| panic!("{modes:?}: {e}"));
    // The counter counts: an allocation while armed is seen.
    ALLOC.take_armed_calls();
    ALLOC.arm_all_threads(true);
    drop(std::hint::black_box(Vec::<u8>::with_capacity(1)));
    ALLOC.arm_all_threads(false);
    assert!(
        ALLOC.take_armed_calls() >= 1,
        "the counting allocator counts"
    );
    let arm = |on: bool| ALLOC.arm_all_threads(on);
    let wrong = world
        .count_steady_state(8, 50, 1_000, &arm)
        .unwrap_or_else(|e| panic!("{modes:?}: {e}"));
    ALLOC.arm_all_threads(false);
    if let Some(t) = tracer {
        t.set_on(false);
    }
    (ALLOC.armed_calls(), wrong)
}

#[test]
fn worker_threads_and_device_threads_allocate_nothing_per_execution() {
    let (allocs, wrong) = steady_state_allocations(&["--driver", "thread", "--device", "thread"]);
    assert_eq!(wrong, 0, "the checked execution after the counted ones");
    assert_eq!(allocs, 0, "allocations in 1,000 executions after warm-up");
}

#[test]
fn caller_driven_queues_and_polled_devices_allocate_nothing_per_execution() {
    let (allocs, wrong) = steady_state_allocations(&["--driver", "caller", "--device", "polled"]);
    assert_eq!(wrong, 0, "the checked execution after the counted ones");
    assert_eq!(allocs, 0, "allocations in 1,000 executions after warm-up");
}

/// Issue 28: event recording allocates nothing either: with the tracer installed and on, the
/// worker-mode steady state records into the preallocated ring (every thread has recorded in
/// the warm-up, which registers its id and name) and allocates nothing; installed and off, the
/// caller-mode one (whose rank threads are new for every run) allocates nothing. Then the
/// records are there, none dropped.
#[test]
fn event_recording_allocates_nothing_per_execution() {
    let modes = ["--driver", "thread", "--device", "thread"];
    let (allocs, wrong) = steady_state_allocations_traced(&modes, Some(true));
    let tracer = proxy_perf::trace::tracer().unwrap();
    assert_eq!(wrong, 0);
    assert_eq!(
        allocs, 0,
        "allocations in 1,000 recorded executions after warm-up"
    );
    let d = tracer.ring().drain(|_| {});
    // At least a post and a completion per rank per execution.
    assert!(d.records >= 4 * 1_000, "{d:?}");
    assert_eq!((d.pending, d.dropped), (0, 0), "{d:?}");
    let (allocs, wrong) = steady_state_allocations(&["--driver", "caller", "--device", "polled"]);
    assert_eq!(wrong, 0);
    assert_eq!(
        allocs, 0,
        "allocations in 1,000 executions, tracer installed and off"
    );
    assert_eq!(
        tracer.ring().drain(|_| {}).records,
        d.records,
        "off records nothing"
    );
}
