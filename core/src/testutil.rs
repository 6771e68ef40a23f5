//! Test support of the crate's own tests: host words, a waiter; the scripted seam is
//! `progress::testing::Script` (shared with other crates' tests through feature `testing`).

use alloc::boxed::Box;

pub use crate::progress::testing::{block, seam, Call, Script};

use crate::driver::wake::ThreadPark;
use crate::sync::AtomicU32;
use crate::time::MonotonicClock;

/// Words for tests: owns the atomics, hands out `HostWord`s that must not outlive it.
pub struct Words(Box<[AtomicU32]>);

impl Words {
    pub fn new(init: &[u32]) -> Self {
        Self(init.iter().map(|&v| AtomicU32::new(v)).collect())
    }

    pub fn get(&self, i: usize) -> crate::driver::trigger::HostWord {
        // SAFETY: every test keeps its `Words` alive (declared first) until its handles and the
        // tasks that carry them are gone.
        unsafe { crate::driver::trigger::HostWord::from_ref(&self.0[i]) }
    }
}

/// A waiter with a 20 µs spin budget.
pub fn waiter(clock: &MonotonicClock) -> crate::driver::wake::Waiter<'_> {
    crate::driver::wake::Waiter {
        park: &ThreadPark,
        clock,
        spin_ns: 20_000,
    }
}
