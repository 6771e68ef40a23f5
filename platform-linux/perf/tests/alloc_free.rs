//! The allocation-free steady state (issue 12): after warm-up, 1,000 executions (execution mode,
//! not `--loop`: one network and one barrier task per rank per execution, re-armed and
//! resubmitted) of an 8-byte all-reduce over the in-process transport allocate nothing, on any
//! thread, in both driver modes: worker threads with device threads, and caller-driven queues
//! with polled devices. Counted by this binary's global allocator while armed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use clap::Parser;
use proxy_perf::args::Args;
use proxy_perf::run::World;

/// Counts allocations (every thread) while [`ARMED`].
struct Counting;

static ARMED: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ARMED.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if ARMED.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One test at a time (the counter is process-wide).
static ONE: Mutex<()> = Mutex::new(());

fn steady_state_allocations(modes: &[&str]) -> (u64, u64) {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let mut argv = vec!["proxy-perf", "all-reduce", "--ranks", "2"];
    argv.extend_from_slice(modes);
    let args = Args::try_parse_from(argv).unwrap();
    let mut world = World::new(&args).unwrap_or_else(|e| panic!("{modes:?}: {e}"));
    ALLOCS.store(0, Ordering::SeqCst);
    let arm = |on: bool| ARMED.store(on, Ordering::SeqCst);
    let wrong = world
        .count_steady_state(8, 50, 1_000, &arm)
        .unwrap_or_else(|e| panic!("{modes:?}: {e}"));
    ARMED.store(false, Ordering::SeqCst);
    (ALLOCS.load(Ordering::SeqCst), wrong)
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
