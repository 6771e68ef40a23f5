//! The mode rule: which drive mode fits this host, counting every busy thread on it, not only
//! this process's.
//!
//! A host-driven engine shares its cores with the runtime's own threads, the other rank
//! processes on the host and the device's host threads. Worker mode adds a thread per proxy
//! queue; caller mode adds none (the comms' own threads drive). The rule weighs both against
//! the CPUs this process may really use:
//!
//! * **CPUs**: the affinity mask (`sched_getaffinity`), lowered to the cgroup's CPU quota when
//!   one is set (cgroup v2 `cpu.max`, or v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`), rounded
//!   up: [`host_cpus`].
//! * **Processes on the host**: from the launcher ([`local_processes_from_env`]: this project's
//!   `NEURON_RT_PROXY_LOCAL_RANKS`, Open MPI's `OMPI_COMM_WORLD_LOCAL_SIZE`, MPICH/Hydra's
//!   `MPI_LOCALNRANKS`, PMIx's `PMIX_LOCAL_SIZE`, SLURM's `SLURM_TASKS_PER_NODE` at
//!   `SLURM_NODEID`), or from whoever launched the ranks itself (a tool that starts every
//!   rank knows), else 1.
//!
//! Then ([`advise`]):
//! 1. worker mode when its busy threads fit on the CPUs (the seed's shape);
//! 2. else caller mode when its busy threads fit;
//! 3. else the mode with fewer busy threads (caller on a tie), and no wait spins: a waiter
//!    yields or blocks (a spinning waiter on an oversubscribed host takes the CPU from the
//!    thread it waits for). Which of the two is the caller's choice (proxy-perf: `--wait`;
//!    on the 2-CPU VM of BENCHMARKS.md yielding is the faster).

use std::fmt;

use proxy_core::driver::queue::DriveMode;

/// The CPUs this process may use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostCpus {
    /// CPUs the rule counts: `affinity`, lowered to `quota` rounded up; at least 1.
    pub usable: usize,
    /// CPUs in this thread's affinity mask.
    pub affinity: usize,
    /// The cgroup's CPU quota in CPUs (`quota / period`), when one is set.
    pub quota: Option<f64>,
}

impl HostCpus {
    /// `usable` from an affinity count and an optional quota (in CPUs).
    pub fn new(affinity: usize, quota: Option<f64>) -> Self {
        let by_quota = quota
            .filter(|q| q.is_finite() && *q > 0.0)
            .map_or(usize::MAX, |q| q.ceil() as usize);
        Self {
            usable: affinity.min(by_quota).max(1),
            affinity: affinity.max(1),
            quota,
        }
    }
}

impl fmt::Display for HostCpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} CPUs (affinity {}", self.usable, self.affinity)?;
        match self.quota {
            Some(q) => write!(f, ", cgroup quota {q:.2})"),
            None => write!(f, ", no cgroup quota)"),
        }
    }
}

/// The CPUs of this process: its affinity mask, lowered to its cgroup's CPU quota.
pub fn host_cpus() -> HostCpus {
    HostCpus::new(affinity_cpus(), cgroup_quota())
}

fn affinity_cpus() -> usize {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most
    // `size_of::<cpu_set_t>()` bytes into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; `set` is valid for writes of its size.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return std::thread::available_parallelism().map_or(1, |n| n.get());
    }
    // SAFETY: `set` was filled by sched_getaffinity.
    (unsafe { libc::CPU_COUNT(&set) }).max(1) as usize
}

/// The CPU quota of this process's cgroup in CPUs (`None`: none, or not readable).
fn cgroup_quota() -> Option<f64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    // cgroup v2: "0::/path"; walk up: a parent's limit bounds us too.
    if let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::")) {
        let mut dir = std::path::PathBuf::from("/sys/fs/cgroup").join(path.trim_start_matches('/'));
        let mut best: Option<f64> = None;
        loop {
            if let Ok(s) = std::fs::read_to_string(dir.join("cpu.max")) {
                if let Some(q) = parse_cpu_max(&s) {
                    best = Some(best.map_or(q, |b: f64| b.min(q)));
                }
            }
            if dir == std::path::Path::new("/sys/fs/cgroup") || !dir.pop() {
                break;
            }
        }
        return best;
    }
    // cgroup v1: the cpu controller's quota and period.
    let path = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
        ctrl.split(',').any(|c| c == "cpu").then_some(path)
    })?;
    for root in ["/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"] {
        let dir = std::path::Path::new(root).join(path.trim_start_matches('/'));
        let read = |f: &str| -> Option<i64> {
            std::fs::read_to_string(dir.join(f))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        if let (Some(q), Some(p)) = (read("cpu.cfs_quota_us"), read("cpu.cfs_period_us")) {
            return (q > 0 && p > 0).then(|| q as f64 / p as f64);
        }
    }
    None
}

/// Parses cgroup v2 `cpu.max` (`"max 100000"` or `"150000 100000"`) into CPUs.
pub fn parse_cpu_max(s: &str) -> Option<f64> {
    let mut it = s.split_whitespace();
    let (quota, period) = (it.next()?, it.next()?);
    if quota == "max" {
        return None;
    }
    let (q, p): (f64, f64) = (quota.parse().ok()?, period.parse().ok()?);
    (q > 0.0 && p > 0.0).then(|| q / p)
}

/// How many rank processes share this host, and who said so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalProcesses {
    /// Processes of the job on this host (≥ 1).
    pub count: u32,
    /// Where the count comes from (an environment variable's name, or the launching tool).
    pub source: &'static str,
}

impl LocalProcesses {
    /// One process, nobody said otherwise.
    pub const ALONE: Self = Self {
        count: 1,
        source: "assumed",
    };
}

/// Variables launchers set to the number of processes of the job on this host, in the order
/// they are read.
pub const LOCAL_SIZE_VARS: [&str; 4] = [
    "NEURON_RT_PROXY_LOCAL_RANKS",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MPI_LOCALNRANKS",
    "PMIX_LOCAL_SIZE",
];

/// The processes of the job on this host, from the launcher's environment: the first of
/// [`LOCAL_SIZE_VARS`] that is set, else SLURM's `SLURM_TASKS_PER_NODE` (e.g. `2(x3),1`) at
/// index `SLURM_NODEID`. `Ok(None)` when none is set.
///
/// # Errors
/// A set variable whose value is not a count ≥ 1 (the message names it and its value).
pub fn local_processes_from_env() -> Result<Option<LocalProcesses>, String> {
    local_processes_from(|k| std::env::var(k).ok())
}

/// [`local_processes_from_env`] over any lookup (for tests).
///
/// # Errors
/// As [`local_processes_from_env`].
pub fn local_processes_from(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<LocalProcesses>, String> {
    for var in LOCAL_SIZE_VARS {
        if let Some(v) = get(var) {
            return match v.trim().parse::<u32>() {
                Ok(n) if n >= 1 => Ok(Some(LocalProcesses {
                    count: n,
                    source: var,
                })),
                _ => Err(format!("{var}={v:?}: not a process count >= 1")),
            };
        }
    }
    let (Some(tasks), Some(node)) = (get("SLURM_TASKS_PER_NODE"), get("SLURM_NODEID")) else {
        return Ok(None);
    };
    let bad = || format!("SLURM_TASKS_PER_NODE={tasks:?} at SLURM_NODEID={node:?}: malformed");
    let node: usize = node.trim().parse().map_err(|_| bad())?;
    let mut seen = 0usize;
    for item in tasks.split(',') {
        let (n, reps) = match item.split_once("(x") {
            Some((n, r)) => (n, r.strip_suffix(')').ok_or_else(bad)?),
            None => (item, "1"),
        };
        let n: u32 = n.trim().parse().map_err(|_| bad())?;
        let reps: usize = reps.trim().parse().map_err(|_| bad())?;
        if node < seen + reps {
            return if n >= 1 {
                Ok(Some(LocalProcesses {
                    count: n,
                    source: "SLURM_TASKS_PER_NODE",
                }))
            } else {
                Err(bad())
            };
        }
        seen += reps;
    }
    Err(bad())
}

/// What the rule weighs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModeInputs {
    /// The CPUs this process may use.
    pub cpus: HostCpus,
    /// Processes of the job on this host (each assumed shaped like this one).
    pub processes: LocalProcesses,
    /// Busy threads of one process in worker mode (its workers, its device threads, its
    /// submitting threads).
    pub worker_threads: usize,
    /// Busy threads of one process in caller mode (the threads that drive, its device threads).
    pub caller_threads: usize,
}

/// The rule's answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModeAdvice {
    /// The mode to run.
    pub mode: DriveMode,
    /// Busy threads on the host in worker mode.
    pub worker_threads: usize,
    /// Busy threads on the host in caller mode.
    pub caller_threads: usize,
    /// `true` when the chosen mode's threads fit on the CPUs; `false`: the host is
    /// oversubscribed either way, and no wait should spin (yield or block instead).
    pub fits: bool,
    /// The inputs.
    pub inputs: ModeInputs,
}

/// The mode rule (module docs).
pub fn advise(inputs: ModeInputs) -> ModeAdvice {
    let procs = inputs.processes.count.max(1) as usize;
    let worker_threads = procs.saturating_mul(inputs.worker_threads);
    let caller_threads = procs.saturating_mul(inputs.caller_threads);
    let cpus = inputs.cpus.usable;
    let (mode, fits) = if worker_threads <= cpus {
        (DriveMode::Thread, true)
    } else if caller_threads <= cpus {
        (DriveMode::Caller, true)
    } else if worker_threads < caller_threads {
        (DriveMode::Thread, false)
    } else {
        (DriveMode::Caller, false)
    };
    ModeAdvice {
        mode,
        worker_threads,
        caller_threads,
        fits,
        inputs,
    }
}

impl fmt::Display for ModeAdvice {
    /// E.g. `caller (worker mode needs 12 busy threads on this host, caller mode 4; 4
    /// processes here (OMPI_COMM_WORLD_LOCAL_SIZE); 2 CPUs (affinity 2, no cgroup quota);
    /// neither fits: fewer threads, no spinning)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = match self.mode {
            DriveMode::Thread => "worker",
            DriveMode::Caller => "caller",
        };
        let why = match (self.fits, self.mode) {
            (true, DriveMode::Thread) => "worker mode fits",
            (true, DriveMode::Caller) => "caller mode fits",
            (false, _) => "neither fits: fewer threads, no spinning",
        };
        write!(
            f,
            "{mode} (worker mode needs {} busy threads on this host, caller mode {}; {} \
             process(es) here ({}); {}; {why})",
            self.worker_threads,
            self.caller_threads,
            self.inputs.processes.count,
            self.inputs.processes.source,
            self.inputs.cpus
        )
    }
}

#[cfg(test)]
mod tests;
