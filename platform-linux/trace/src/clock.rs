//! The trace's clock: absolute, so that every copy of the core in a process (the driver and the
//! progress library each link one) stamps its records on the same time line, and cheap, as it
//! is read once per recorded event.
//!
//! On x86_64 with an invariant TSC (`constant_tsc` and `nonstop_tsc` in `/proc/cpuinfo`) it is
//! [`TscClock`]: `rdtsc` (about 22 ns on this VM against 60 ns for `clock_gettime`),
//! calibrated against `CLOCK_MONOTONIC` once, when the tracer is created (a 10 ms window), and
//! re-fitted at every drain ([`refine`]: a second anchor taken then), so that a record's time
//! is `CLOCK_MONOTONIC` within the anchors' jitter (tens of ns) whichever copy of the core
//! stamped it. Elsewhere, [`MonotonicNs`]. The core reads no clock of its own: this is the
//! platform's `Clock`; a firmware keeps its own.

use std::sync::OnceLock;

use proxy_core::base::time::Clock;

/// `CLOCK_MONOTONIC` in ns since the system's boot (the same in every copy of the core and in
/// every process of the machine).
#[derive(Debug, Default, Clone, Copy)]
pub struct MonotonicNs;

impl Clock for MonotonicNs {
    fn now_ns(&self) -> u64 {
        monotonic_ns()
    }
}

fn monotonic_ns() -> u64 {
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

/// The time stamp counter.
#[cfg(target_arch = "x86_64")]
fn ticks() -> u64 {
    // SAFETY: `rdtsc` has no preconditions on x86_64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// One (TSC, `CLOCK_MONOTONIC`) pair read as close together as this thread manages: of 9
/// tries, the one whose clock read two TSC reads bracket most tightly.
#[cfg(target_arch = "x86_64")]
fn anchor() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..9 {
        let a = ticks();
        let ns = monotonic_ns();
        let b = ticks();
        let gap = b.wrapping_sub(a);
        if gap < best.0 {
            best = (gap, a + gap / 2, ns);
        }
    }
    (best.1, best.2)
}

/// The TSC as ns of `CLOCK_MONOTONIC`: `ns0 + (tsc - tsc0) * mult / 2^32`, `mult` from a
/// calibration window (x86_64 with an invariant TSC only: [`TscClock::calibrate`]).
#[derive(Debug, Clone, Copy)]
pub struct TscClock {
    tsc0: u64,
    ns0: u64,
    /// ns per tick, fixed point 32.32.
    mult: u64,
}

impl TscClock {
    /// Calibrates against `CLOCK_MONOTONIC` over `window_ns` (spinning), or `None` when the
    /// TSC is not invariant (or this is not x86_64).
    pub fn calibrate(window_ns: u64) -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
            let flags = info.lines().find(|l| l.starts_with("flags"))?;
            let has = |f: &str| flags.split_whitespace().any(|w| w == f);
            if !(has("constant_tsc") && has("nonstop_tsc")) {
                return None;
            }
            let (tsc0, ns0) = anchor();
            while monotonic_ns().saturating_sub(ns0) < window_ns {
                std::hint::spin_loop();
            }
            let (tsc1, ns1) = anchor();
            let mult = fit(tsc0, ns0, tsc1, ns1)?;
            Some(Self { tsc0, ns0, mult })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = window_ns;
            None
        }
    }

    /// The tick count a time this clock answered came from (exact to a tick).
    fn ticks_of(&self, ns: u64) -> u64 {
        let d = u128::from(ns.saturating_sub(self.ns0)) << 32;
        self.tsc0 + (d / u128::from(self.mult.max(1))) as u64
    }
}

/// `(ns1 - ns0) / (tsc1 - tsc0)` as 32.32 fixed point; `None` when the ticks did not advance.
fn fit(tsc0: u64, ns0: u64, tsc1: u64, ns1: u64) -> Option<u64> {
    let dt = tsc1.checked_sub(tsc0).filter(|&d| d > 0)?;
    let dn = ns1.checked_sub(ns0)?;
    u64::try_from((u128::from(dn) << 32) / u128::from(dt)).ok()
}

impl Clock for TscClock {
    fn now_ns(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            let d = ticks().saturating_sub(self.tsc0);
            self.ns0 + ((u128::from(d) * u128::from(self.mult)) >> 32) as u64
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            monotonic_ns()
        }
    }
}

/// The clock the process's tracer stamps records with: [`TscClock`] where the TSC is invariant
/// (calibrated at the first call, 10 ms), else [`MonotonicNs`]. `NEURON_RT_PROXY_TRACE_CLOCK=monotonic`
/// picks [`MonotonicNs`].
pub fn clock() -> &'static dyn Clock {
    static MONO: MonotonicNs = MonotonicNs;
    match tsc() {
        Some(t) => t,
        None => &MONO,
    }
}

/// The calibrated TSC clock, when [`clock`] uses it.
fn tsc() -> Option<&'static TscClock> {
    static TSC: OnceLock<Option<TscClock>> = OnceLock::new();
    TSC.get_or_init(|| {
        let off = std::env::var("NEURON_RT_PROXY_TRACE_CLOCK").is_ok_and(|v| v == "monotonic");
        if off {
            None
        } else {
            TscClock::calibrate(10_000_000)
        }
    })
    .as_ref()
}

/// A map of the times [`clock`] stamped up to now onto `CLOCK_MONOTONIC` re-fitted with an
/// anchor taken now: with [`TscClock`] the tick rate is taken from the calibration's first
/// anchor to this one (so a time is off by the anchors' jitter at most, however long the
/// recording ran); with [`MonotonicNs`] the identity.
pub fn refine() -> impl Fn(u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    let fitted = tsc().and_then(|c| {
        let (tsc1, ns1) = anchor();
        fit(c.tsc0, c.ns0, tsc1, ns1).map(|m| (*c, m))
    });
    #[cfg(not(target_arch = "x86_64"))]
    let fitted: Option<(TscClock, u64)> = None;
    move |ns| match fitted {
        Some((c, m)) => {
            let d = c.ticks_of(ns).saturating_sub(c.tsc0);
            c.ns0 + ((u128::from(d) * u128::from(m)) >> 32) as u64
        }
        None => ns,
    }
}
