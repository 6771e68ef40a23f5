//! Model bodies over proxy-core's real types. A planted run executes the same body with one
//! plant selected (`proxy_core::plant`, in the child process of `assert_loom_catches`). Each
//! body uses `proxy_core::base::sync` (loom's types under `--cfg loom`, std's otherwise), so under
//! plain `cargo test` it runs once on real threads.

use proxy_core::base::sync::{Arc, AtomicU32, Ordering, UnsafeCell};
use proxy_core::base::time::Clock;
use proxy_core::driver::wake::{Park, Waiter};

#[cfg(loom)]
pub(crate) use loom::thread;
#[cfg(not(loom))]
pub(crate) use std::thread;

pub mod abort;
pub mod central;
pub mod driver;
pub mod dump;
pub mod handles;
pub mod idle;
pub mod invalidate;
pub mod oneshot;
pub mod poller;
pub mod registry;
pub mod shm;
pub mod trace;
pub mod trigger;

/// The parker the model threads use: loom's park/unpark under `--cfg loom`, std's otherwise.
#[cfg(loom)]
pub type ModelPark = proxy_core::driver::wake::LoomPark;
/// The parker the model threads use: loom's park/unpark under `--cfg loom`, std's otherwise.
#[cfg(not(loom))]
pub type ModelPark = proxy_core::driver::wake::ThreadPark;

/// A clock that moves 1 µs each time it is read, so a waiter's spin budget runs out after a
/// few polls. A std atomic, not a loom one: it is test scaffolding, not part of any handoff, and
/// adds no branch points to the models.
#[derive(Debug, Default)]
pub struct TickClock(std::sync::atomic::AtomicU64);

impl Clock for TickClock {
    fn now_ns(&self) -> u64 {
        self.0
            .fetch_add(1_000, std::sync::atomic::Ordering::Relaxed)
    }
}

static TICK_CLOCK: TickClock = TickClock(std::sync::atomic::AtomicU64::new(0));

/// How a model's consumer waits: spin for `spin_ns` of [`TickClock`] time (under loom at most
/// `Waiter::MAX_SPINS` = 2 polls), then park with [`ModelPark`]. `spin_ns == 0` parks at once.
pub fn waiter(spin_ns: u64) -> Waiter<'static> {
    #[cfg(loom)]
    let park: &'static dyn Park = &proxy_core::driver::wake::LoomPark;
    #[cfg(not(loom))]
    let park: &'static dyn Park = &proxy_core::driver::wake::ThreadPark;
    Waiter {
        park,
        clock: &TICK_CLOCK,
        spin_ns,
    }
}

/// Model 1 — SPSC ring: a producer pushes 3 values through a 2-slot ring to a consumer on
/// another thread. Nothing lost, nothing duplicated, FIFO order; full and empty at the edges.
pub fn spsc_ring() {
    let (mut tx, mut rx) = proxy_core::base::ring::channel::<u32>(2);
    // Edges, single-threaded: empty then full.
    assert_eq!(rx.pop(), None);
    let producer = thread::spawn(move || {
        for v in 0..3u32 {
            let mut v = v;
            loop {
                match tx.push(v) {
                    Ok(()) => break,
                    Err(back) => {
                        v = back;
                        thread::yield_now();
                    }
                }
            }
        }
        // After 3 pushes into 2 slots at least one pop happened; fill to capacity and check
        // the full edge.
        tx
    });
    let mut got = Vec::new();
    while got.len() < 3 {
        match rx.pop() {
            Some(v) => got.push(v),
            None => thread::yield_now(),
        }
    }
    let mut tx = producer.join().unwrap();
    assert_eq!(got, [0, 1, 2], "FIFO, nothing lost or duplicated");
    assert_eq!(rx.pop(), None);
    assert!(tx.push(10).is_ok());
    assert!(tx.push(11).is_ok());
    assert_eq!(tx.push(12), Err(12), "full at capacity");
    assert_eq!(rx.pop(), Some(10));
}

/// Model 6 — semaphore reverse edge (`DirectHostWords::inc_semaphore`): the proxy thread
/// receives two entries (writes their payload) and counts each completion with
/// `inc_semaphore`; the device thread reads the count with acquire and then reads the payload
/// of every counted entry. The device never sees a count above what was completed, never reads
/// a payload that is not complete, and finally sees the total.
pub fn semaphore_edge() {
    use proxy_core::progress::device::{DeviceCallbacks, DirectHostWords};
    struct Shared {
        sem: AtomicU32,
        payload: [UnsafeCell<u32>; 2],
        edge: DirectHostWords,
    }
    // SAFETY: the payload cells are handed from the proxy thread to the device thread by the
    // semaphore protocol under test (that is what the model checks).
    unsafe impl Sync for Shared {}
    let shared = Arc::new(Shared {
        sem: AtomicU32::new(0),
        payload: [UnsafeCell::new(0), UnsafeCell::new(0)],
        // SAFETY: the model passes only the address of `sem`, a live AtomicU32 it owns.
        edge: unsafe { DirectHostWords::new() },
    });
    let proxy = {
        let s = shared.clone();
        thread::spawn(move || {
            for i in 0..2 {
                // SAFETY: the device reads entry i only after it sees the count pass i, which
                // the increment below publishes.
                s.payload[i].with_mut(|p| unsafe { *p = 100 + i as u32 });
                s.edge
                    .inc_semaphore(&s.sem as *const AtomicU32 as usize as u64, 1);
            }
        })
    };
    let mut seen = 0;
    let mut spins = 0;
    while seen < 2 {
        let c = shared.sem.load(Ordering::Acquire);
        assert!(c <= 2, "count {c} above the completed total");
        for i in seen..c {
            // SAFETY: entry i was counted; the acquire load above ordered its payload write.
            let v = shared.payload[i as usize].with(|p| unsafe { *p });
            assert_eq!(v, 100 + i);
        }
        seen = c;
        spins += 1;
        // Under loom each yield lets the proxy run; on real threads a loaded machine may not
        // schedule the proxy thread for many yields (a count bound, never a time bound).
        assert!(
            spins < if cfg!(loom) { 1_000 } else { 10_000_000 },
            "device never saw the total"
        );
        thread::yield_now();
    }
    proxy.join().unwrap();
    assert_eq!(shared.sem.load(Ordering::Acquire), 2);
}

#[cfg(all(test, not(loom)))]
mod tests;

/// Model 7b — in-memory transport handoff: a sender cancels a large (lent) send while the
/// receiver's worker claims it. Exactly one wins: either the bytes are copied whole and the
/// sender sees "done", or the receiver never copies and the sender sees "cancelled"; the sender
/// reuses its buffer only after `withdraw` says the receiver can no longer touch it.
pub fn handoff_cancel_vs_claim() {
    use proxy_core::progress::mem_transport::handoff::{
        Claim, LentBuf, Payload, SendShared, SendState,
    };
    struct Bufs {
        src: UnsafeCell<[u8; 4]>,
    }
    // SAFETY: `src` is read by the receiver (inside the claim) and rewritten by the sender only
    // after the handoff says the receiver is done with it: the protocol under test.
    unsafe impl Sync for Bufs {}
    let bufs = Arc::new(Bufs {
        src: UnsafeCell::new([1, 2, 3, 4]),
    });
    let src_ptr = bufs.src.with(|p| p as *const u8);
    let h = Arc::new(SendShared::new(
        7,
        Payload::Lent(LentBuf {
            ptr: src_ptr,
            len: 4,
        }),
    ));
    let receiver = {
        let h = h.clone();
        thread::spawn(move || {
            let mut dst = [0u8; 4];
            // SAFETY: `dst` is a live local of 4 bytes; this thread is the one receiver.
            let copied = unsafe { h.claim_and_copy(dst.as_mut_ptr(), 4) } == Claim::Copied(4);
            if copied {
                // Copied before the sender reused its buffer (a late copy would read 9s).
                assert_eq!(dst, [1, 2, 3, 4], "bytes arrive whole, before reuse");
            } else {
                assert_eq!(dst, [0; 4], "a withdrawn message is never copied");
            }
            copied
        })
    };
    let mut spins = 0;
    while !h.withdraw() {
        spins += 1;
        assert!(spins < 100, "withdraw never finished");
        thread::yield_now();
    }
    // The receiver can no longer touch the buffer: reuse it.
    bufs.src.with_mut(|p| {
        // SAFETY: `withdraw` returned true, so no receiver reads `src` any more.
        unsafe { *p = [9; 4] }
    });
    let copied = receiver.join().unwrap();
    assert_eq!(
        copied,
        h.state() == SendState::Done,
        "sender and receiver agree on the outcome"
    );
}
