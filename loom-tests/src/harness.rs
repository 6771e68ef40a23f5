//! Model bodies, generic over the handoff under test, so a real handoff and its planted-bug
//! twin run the same model. Each body uses `proxy_core::sync` (loom's types under `--cfg loom`,
//! std's otherwise), so under plain `cargo test` it runs once on real threads.

use proxy_core::sync::{Arc, AtomicU32, Ordering, UnsafeCell};

#[cfg(loom)]
use loom::thread;
#[cfg(not(loom))]
use std::thread;

/// An SPSC ring as the model sees it.
pub trait Spsc: Send + 'static {
    /// The producing handle.
    type Tx: Send + 'static;
    /// The consuming handle.
    type Rx: Send + 'static;
    /// A ring of `capacity` slots.
    fn channel(capacity: usize) -> (Self::Tx, Self::Rx);
    /// Push, giving the value back when full.
    fn push(tx: &mut Self::Tx, v: u32) -> Result<(), u32>;
    /// Pop, `None` when empty.
    fn pop(rx: &mut Self::Rx) -> Option<u32>;
}

/// The shipping ring.
pub struct RealRing;

impl Spsc for RealRing {
    type Tx = proxy_core::ring::Producer<u32>;
    type Rx = proxy_core::ring::Consumer<u32>;
    fn channel(capacity: usize) -> (Self::Tx, Self::Rx) {
        proxy_core::ring::channel(capacity)
    }
    fn push(tx: &mut Self::Tx, v: u32) -> Result<(), u32> {
        tx.push(v)
    }
    fn pop(rx: &mut Self::Rx) -> Option<u32> {
        rx.pop()
    }
}

/// Model 1 — SPSC ring: a producer pushes 3 values through a 2-slot ring to a consumer on
/// another thread. Nothing lost, nothing duplicated, FIFO order; full and empty at the edges.
pub fn spsc_ring<R: Spsc>() {
    let (mut tx, mut rx) = R::channel(2);
    // Edges, single-threaded: empty then full.
    assert_eq!(R::pop(&mut rx), None);
    let producer = thread::spawn(move || {
        for v in 0..3u32 {
            let mut v = v;
            loop {
                match R::push(&mut tx, v) {
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
        match R::pop(&mut rx) {
            Some(v) => got.push(v),
            None => thread::yield_now(),
        }
    }
    let mut tx = producer.join().unwrap();
    assert_eq!(got, [0, 1, 2], "FIFO, nothing lost or duplicated");
    assert_eq!(R::pop(&mut rx), None);
    assert!(R::push(&mut tx, 10).is_ok());
    assert!(R::push(&mut tx, 11).is_ok());
    assert_eq!(R::push(&mut tx, 12), Err(12), "full at capacity");
    assert_eq!(R::pop(&mut rx), Some(10));
}

/// A semaphore increment register as the model sees it.
pub trait SemaphoreEdge: Send + Sync + 'static {
    /// `nec_inc_semaphore(addr, val)`.
    fn inc(&self, word: &AtomicU32, val: u32);
}

/// The shipping reverse edge: `proxy_core::device::DirectHostWords::inc_semaphore`.
pub struct RealSemaphore(pub proxy_core::device::DirectHostWords);

impl SemaphoreEdge for RealSemaphore {
    fn inc(&self, word: &AtomicU32, val: u32) {
        use proxy_core::device::DeviceCallbacks;
        self.0
            .inc_semaphore(word as *const AtomicU32 as usize as u64, val);
    }
}

/// Model 6 — semaphore reverse edge: the proxy thread receives two entries (writes their
/// payload) and counts each completion with `inc_semaphore`; the device thread reads the count
/// with acquire and then reads the payload of every counted entry. The device never sees a
/// count above what was completed, never reads a payload that is not complete, and finally sees
/// the total.
pub fn semaphore_edge<S: SemaphoreEdge>(edge: S) {
    struct Shared<S> {
        sem: AtomicU32,
        payload: [UnsafeCell<u32>; 2],
        edge: S,
    }
    // SAFETY: the payload cells are handed from the proxy thread to the device thread by the
    // semaphore protocol under test (that is what the model checks).
    unsafe impl<S: Sync> Sync for Shared<S> {}
    let shared = Arc::new(Shared {
        sem: AtomicU32::new(0),
        payload: [UnsafeCell::new(0), UnsafeCell::new(0)],
        edge,
    });
    let proxy = {
        let s = shared.clone();
        thread::spawn(move || {
            for i in 0..2 {
                // SAFETY: the device reads entry i only after it sees the count pass i, which
                // the increment below publishes.
                s.payload[i].with_mut(|p| unsafe { *p = 100 + i as u32 });
                s.edge.inc(&s.sem, 1);
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
        assert!(spins < 1000, "device never saw the total");
        thread::yield_now();
    }
    proxy.join().unwrap();
    assert_eq!(shared.sem.load(Ordering::Acquire), 2);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn ring_model_body_runs_on_real_threads() {
        for _ in 0..100 {
            spsc_ring::<RealRing>();
        }
    }

    #[test]
    fn semaphore_model_body_runs_on_real_threads() {
        // SAFETY: the model passes only addresses of live AtomicU32s it owns.
        semaphore_edge(RealSemaphore(unsafe {
            proxy_core::device::DirectHostWords::new()
        }));
    }
}
