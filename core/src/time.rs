//! Time, handed in by the platform: `core` never reads a clock itself.

/// A monotonic clock in nanoseconds (any epoch). The platform implements it over
/// `std::time::Instant`; tests use [`ManualClock`].
pub trait Clock: Send + Sync {
    /// Nanoseconds since an arbitrary fixed point; never decreases.
    fn now_ns(&self) -> u64;
}

/// A clock that moves only when told to (deterministic tests).
#[derive(Debug, Default)]
pub struct ManualClock {
    now: spin::Mutex<u64>,
}

impl ManualClock {
    /// A clock at `start_ns`.
    pub const fn new(start_ns: u64) -> Self {
        Self {
            now: spin::Mutex::new(start_ns),
        }
    }

    /// Moves the clock forward by `ns`.
    pub fn advance(&self, ns: u64) {
        *self.now.lock() += ns;
    }

    /// Sets the clock to `ns` (must not go backwards).
    pub fn set(&self, ns: u64) {
        let mut now = self.now.lock();
        debug_assert!(ns >= *now, "ManualClock moved backwards");
        *now = ns;
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        *self.now.lock()
    }
}

/// A clock that never advances: bounded waits then count polls instead of time.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoClock;

impl Clock for NoClock {
    fn now_ns(&self) -> u64 {
        0
    }
}
