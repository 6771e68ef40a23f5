//! Model 18: the central barrier's release (`driver::task::barrier::central`), two members
//! over two generations across the wrap of the generation and the count.

use super::thread;
use proxy_core::base::sync::{Arc, AtomicU32, UnsafeCell};
use proxy_core::driver::task::barrier::central::{arrive, is_released};

/// Members of the modelled barrier.
const MEMBERS: usize = 2;
/// The first generation: the last before the wrap (the second is 0).
const FIRST: u32 = u32::MAX;

struct Shared {
    count: AtomicU32,
    released: AtomicU32,
    /// Per generation, per member: what the member wrote before it arrived.
    payload: [[UnsafeCell<u32>; MEMBERS]; 2],
    /// Per generation: how many arrivals released it.
    releases: [AtomicU32; 2],
}

// SAFETY: each payload cell is written by its member before it arrives and read by the other
// member after it saw the generation released: the protocol under test orders them.
unsafe impl Sync for Shared {}

/// One member's two generations: write its payload, arrive, wait for the release, read the
/// other member's payload.
fn member(s: &Shared, me: usize) {
    for k in 0..2 {
        let g = FIRST.wrapping_add(k as u32);
        let mine = 100 * k as u32 + me as u32;
        // SAFETY: only this member writes its cell, before its arrival (see `Shared`).
        s.payload[k][me].with_mut(|p| unsafe { *p = mine });
        if arrive(&s.count, &s.released, g, MEMBERS as u32) {
            s.releases[k].fetch_add(1, proxy_core::base::sync::Ordering::Relaxed);
        }
        let mut spins = 0u32;
        while !is_released(&s.released, g) {
            spins += 1;
            assert!(
                spins < if cfg!(loom) { 1_000 } else { 10_000_000 },
                "member {me} never saw generation {g} released"
            );
            thread::yield_now();
        }
        let other = 1 - me;
        // SAFETY: the other member wrote it before its arrival, which the release orders
        // before this read (what the model checks).
        let v = s.payload[k][other].with(|p| unsafe { *p });
        assert_eq!(
            v,
            100 * k as u32 + other as u32,
            "member {me}, generation {g}"
        );
    }
}

/// The model body: two members, two generations each; every member reads the other's payload
/// after each release, and each generation is released exactly once.
pub fn central_barrier() {
    let s = Arc::new(Shared {
        count: AtomicU32::new(FIRST.wrapping_sub(1).wrapping_mul(MEMBERS as u32)),
        released: AtomicU32::new(FIRST.wrapping_sub(1)),
        payload: [
            [UnsafeCell::new(0), UnsafeCell::new(0)],
            [UnsafeCell::new(0), UnsafeCell::new(0)],
        ],
        releases: [AtomicU32::new(0), AtomicU32::new(0)],
    });
    let t = {
        let s = s.clone();
        thread::spawn(move || member(&s, 1))
    };
    member(&s, 0);
    t.join().unwrap();
    for k in 0..2 {
        assert_eq!(
            s.releases[k].load(proxy_core::base::sync::Ordering::Relaxed),
            1,
            "generation {k} released once"
        );
    }
    assert!(is_released(&s.released, FIRST.wrapping_add(1)));
}
