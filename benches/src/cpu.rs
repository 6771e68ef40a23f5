//! The calling thread's CPU time and context switches (Linux: `CLOCK_THREAD_CPUTIME_ID`,
//! `getrusage(RUSAGE_THREAD)`).

/// CPU time and context switches of the calling thread so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadUsage {
    /// CPU time (user + system) in ns, from `CLOCK_THREAD_CPUTIME_ID`.
    pub cpu_ns: u64,
    /// Voluntary context switches (`ru_nvcsw`: the thread blocked or yielded to another).
    pub voluntary_cs: u64,
    /// Involuntary context switches (`ru_nivcsw`: the kernel preempted the thread).
    pub involuntary_cs: u64,
}

/// The calling thread's usage now. Zeros where the kernel call fails (never expected on Linux).
pub fn thread_usage() -> ThreadUsage {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux defines.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    let cpu_ns = if rc == 0 {
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    } else {
        0
    };
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { core::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; RUSAGE_THREAD is a Linux constant.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let (v, i) = if rc == 0 {
        (ru.ru_nvcsw as u64, ru.ru_nivcsw as u64)
    } else {
        (0, 0)
    };
    ThreadUsage {
        cpu_ns,
        voluntary_cs: v,
        involuntary_cs: i,
    }
}

impl ThreadUsage {
    /// `self - earlier`, field by field.
    pub fn since(&self, earlier: &ThreadUsage) -> ThreadUsage {
        ThreadUsage {
            cpu_ns: self.cpu_ns.saturating_sub(earlier.cpu_ns),
            voluntary_cs: self.voluntary_cs.saturating_sub(earlier.voluntary_cs),
            involuntary_cs: self.involuntary_cs.saturating_sub(earlier.involuntary_cs),
        }
    }
}

#[cfg(test)]
mod tests;
