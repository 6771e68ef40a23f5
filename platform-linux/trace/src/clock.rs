//! The trace's clock: absolute, so that every copy of the core in a process (the driver and the
//! progress library each link one) stamps its records on the same time line.

use proxy_core::base::time::Clock;

/// `CLOCK_MONOTONIC` in ns since the system's boot (the same in every copy of the core and in
/// every process of the machine).
#[derive(Debug, Default, Clone, Copy)]
pub struct MonotonicNs;

impl Clock for MonotonicNs {
    fn now_ns(&self) -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        (ts.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec as u64)
    }
}

/// The clock the process's tracer stamps records with.
pub fn clock() -> &'static dyn Clock {
    static CLOCK: MonotonicNs = MonotonicNs;
    &CLOCK
}
