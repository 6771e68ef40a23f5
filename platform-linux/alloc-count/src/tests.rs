use super::*;
use std::sync::Mutex;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// One test at a time: the armed-call count is process-wide.
static ONE: Mutex<()> = Mutex::new(());

#[test]
fn live_bytes_and_totals_follow_the_heap() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    const MIB8: usize = 8 << 20;
    let before = ALLOC.snapshot();
    let v = std::hint::black_box(Vec::<u8>::with_capacity(MIB8));
    let (live, total, calls) = ALLOC.snapshot().since(&before);
    drop(v);
    let (freed, _, _) = ALLOC.snapshot().since(&before);
    // Other threads (the harness) may allocate and free small amounts meanwhile.
    assert!(live > (MIB8 - (1 << 20)) as i64, "live +{live}");
    assert!(total >= MIB8 as u64 && calls >= 1, "{total} {calls}");
    assert!(freed < (1 << 20), "live after the drop +{freed}");
}

#[test]
fn a_thread_armed_alone_counts_only_its_own_calls() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    ALLOC.take_armed_calls();
    CountingAlloc::arm_this_thread(true);
    let v = std::hint::black_box(Vec::<u8>::with_capacity(8));
    CountingAlloc::arm_this_thread(false);
    drop(v);
    std::thread::spawn(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(8))))
        .join()
        .unwrap();
    assert_eq!(ALLOC.take_armed_calls(), 1, "this thread's one allocation");
}

#[test]
fn armed_on_every_thread_counts_other_threads() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        rx.recv().unwrap();
        drop(std::hint::black_box(Vec::<u8>::with_capacity(8)));
    });
    ALLOC.take_armed_calls();
    ALLOC.arm_all_threads(true);
    tx.send(()).unwrap();
    t.join().unwrap();
    ALLOC.arm_all_threads(false);
    // The other thread's allocation, and whatever else ran meanwhile (the harness).
    assert!(ALLOC.take_armed_calls() >= 1);
}
