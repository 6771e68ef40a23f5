//! Time, handed in by the platform: `core` never reads a clock itself.

/// A monotonic clock in nanoseconds (any epoch). std platforms use `MonotonicClock`
/// (feature `std`); deterministic tests use [`ManualClock`].
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

/// The monotonic clock of every std user (the Linux runtime, the C library, tests): nanoseconds
/// of `std::time::Instant` since one process-wide epoch, the first read of any
/// `MonotonicClock` in the process, so every instance agrees. Feature `std`.
#[cfg(any(test, feature = "std"))]
#[derive(Debug, Default, Clone, Copy)]
pub struct MonotonicClock;

#[cfg(any(test, feature = "std"))]
impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let ns = EPOCH
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos();
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}
