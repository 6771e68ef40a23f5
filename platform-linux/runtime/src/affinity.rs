//! CPU affinity of worker threads: CPU-list parsing and pinning with `core_affinity`.
//!
//! Seed: `ncclSetAffinity` + `sched_setaffinity` before `enc_proxy_queue::start`, §2
//! (`NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY`).

use std::fmt;

/// A malformed CPU list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuListError(String);

impl fmt::Display for CpuListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CpuListError {}

/// Most CPUs a list may name (a guard against `0-4294967295`).
pub const MAX_CPUS: usize = 4096;

/// Parses a CPU list like `0,2-3` (comma-separated CPUs and inclusive ranges, spaces allowed)
/// into CPUs in the order given.
///
/// # Errors
/// An empty list or item, a non-number, a descending range, a CPU ≥ [`MAX_CPUS`].
///
/// # Examples
/// ```
/// use proxy_runtime::affinity::parse_cpu_list;
/// assert_eq!(parse_cpu_list("0, 2-3").unwrap(), [0, 2, 3]);
/// assert!(parse_cpu_list("3-1").is_err());
/// ```
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, CpuListError> {
    let num = |t: &str| -> Result<usize, CpuListError> {
        let n: usize = t
            .trim()
            .parse()
            .map_err(|_| CpuListError(format!("{t:?} is not a CPU number")))?;
        if n >= MAX_CPUS {
            return Err(CpuListError(format!("CPU {n} is above {}", MAX_CPUS - 1)));
        }
        Ok(n)
    };
    if s.trim().is_empty() {
        return Err(CpuListError("empty CPU list".into()));
    }
    let mut out = Vec::new();
    for item in s.split(',') {
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(CpuListError(format!("descending range {a}-{b}")));
                }
                out.extend(a..=b);
            }
            None => out.push(num(item)?),
        }
    }
    Ok(out)
}

/// The CPUs this process may run on (its affinity mask), or `None` when it cannot be read.
pub fn allowed_cpus() -> Option<Vec<usize>> {
    core_affinity::get_core_ids().map(|ids| ids.into_iter().map(|c| c.id).collect())
}

/// Pins the calling thread to `cpu`; `false` when the kernel refuses.
pub fn pin_current_thread(cpu: usize) -> bool {
    core_affinity::set_for_current(core_affinity::CoreId { id: cpu })
}

#[cfg(test)]
mod tests;
