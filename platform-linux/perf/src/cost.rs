//! What a stretch of the run cost this process: context switches (voluntary: a thread blocked;
//! involuntary: the scheduler took its CPU) and CPU time, over all its threads, from
//! `getrusage(RUSAGE_SELF)`.

use std::time::Duration;

/// This process's counters at one moment ([`ProcCost::now`]), or the difference of two.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcCost {
    /// Voluntary context switches (`ru_nvcsw`).
    pub voluntary: u64,
    /// Involuntary context switches (`ru_nivcsw`).
    pub involuntary: u64,
    /// User plus system CPU time.
    pub cpu: Duration,
}

impl ProcCost {
    /// The counters now; zeros if `getrusage` fails (it cannot for `RUSAGE_SELF`).
    pub fn now() -> Self {
        // SAFETY: a zeroed rusage is a valid out-parameter.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: RUSAGE_SELF and a valid out-parameter.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
            return Self::default();
        }
        let tv = |t: libc::timeval| {
            Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.max(0) as u32) * 1000)
        };
        Self {
            voluntary: ru.ru_nvcsw.max(0) as u64,
            involuntary: ru.ru_nivcsw.max(0) as u64,
            cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        }
    }

    /// What happened between `earlier` and `self` (saturating).
    pub fn since(&self, earlier: &ProcCost) -> ProcCost {
        ProcCost {
            voluntary: self.voluntary.saturating_sub(earlier.voluntary),
            involuntary: self.involuntary.saturating_sub(earlier.involuntary),
            cpu: self.cpu.saturating_sub(earlier.cpu),
        }
    }

    /// Context switches per collective (voluntary, involuntary) over `n` collectives.
    pub fn switches_per(&self, n: u64) -> (f64, f64) {
        let n = n.max(1) as f64;
        (self.voluntary as f64 / n, self.involuntary as f64 / n)
    }

    /// CPU time as a percentage of one CPU over `wall`.
    pub fn cpu_percent(&self, wall: Duration) -> f64 {
        if wall.is_zero() {
            return 0.0;
        }
        100.0 * self.cpu.as_secs_f64() / wall.as_secs_f64()
    }
}

#[cfg(test)]
mod tests;
