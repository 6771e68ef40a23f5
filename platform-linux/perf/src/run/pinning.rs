//! Where the tool's threads run: rank device threads with `--pin` ([`rank_cpus`]) and the
//! caller-mode driving threads, always ([`caller_cpu`]), and which ranks that makes share a
//! CPU ([`caller_groups`]).

use proxy_collectives::planner::HostMap;

/// With `pin`, rank `r`'s device and proxy thread share CPU `r mod ncpus` (the pairs that hand
/// off most often then switch on one core instead of waiting for a remote one to be scheduled).
pub fn rank_cpus(n: u32, pin: bool) -> Vec<Option<usize>> {
    let ids = if pin {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    (0..n as usize)
        .map(|r| (!ids.is_empty()).then(|| ids[r % ids.len()].id))
        .collect()
}

/// The CPU (an index into the usable CPUs, `0..cpus`) of caller-mode driving thread `t` of
/// the `threads` that drive this host's proxy queues (every process of the run counted; `t` is
/// taken modulo `threads`); `None`, not pinned, with one thread or one CPU.
///
/// When the threads fit (`threads ≤ cpus`), thread `t` gets CPU `t` of its own. When they do
/// not, consecutive threads share a CPU in blocks (`t · cpus / threads`: 4 threads on 2 CPUs
/// are 0, 0, 1, 1), so every CPU carries the same number of threads. Left to the scheduler, 4
/// spinning rank processes on 2 CPUs sometimes sit 3 on one CPU, and a collective then waits
/// out that CPU's time slices: measured on 2 CPUs, 8 B all-reduces of 4 processes over tcp
/// took from 32 to 49 µs unpinned, varying row to row, and 31–36 µs pinned (BENCHMARKS.md,
/// two sittings). Blocks rather
/// than round robin: consecutive ranks are the partners of recursive doubling's first step
/// and of a host's first reduce, and hand off on one CPU (shm: 7.7–8.2 µs in blocks,
/// 8.6–10.3 round robin).
pub fn caller_cpu(t: usize, threads: usize, cpus: usize) -> Option<usize> {
    if threads <= 1 || cpus <= 1 {
        return None;
    }
    let t = t % threads;
    Some(if threads <= cpus {
        t
    } else {
        t * cpus / threads
    })
}

/// The groups of consecutive ranks whose caller-mode driving threads share a CPU
/// ([`caller_cpu`]; the planner's `PlanParams::cpu_groups`): `ranks` ranks of one host, `per`
/// to a driving thread (rank `r` on thread `r / per`), `threads` threads on `cpus` CPUs.
/// `None` when the threads are not pinned or every rank is on one CPU. With one rank per
/// thread and more threads than CPUs these are the planner's `HostMap::cpu_blocks`; taken from
/// [`caller_cpu`] itself, they are the pinning's also with several ranks per thread.
pub fn caller_groups(ranks: u32, per: u32, threads: usize, cpus: usize) -> Option<HostMap> {
    let mut sizes: Vec<u32> = Vec::new();
    let mut last = None;
    for r in 0..ranks {
        let cpu = caller_cpu((r / per.max(1)) as usize, threads, cpus)?;
        match sizes.last_mut() {
            Some(s) if last == Some(cpu) => *s += 1,
            _ => sizes.push(1),
        }
        last = Some(cpu);
    }
    (sizes.len() >= 2).then(|| HostMap::new(&sizes)).flatten()
}

#[cfg(test)]
mod tests {
    use super::{caller_cpu, caller_groups};
    use proxy_collectives::planner::HostMap;

    #[test]
    fn ranks_that_share_a_cpu_form_consecutive_groups() {
        let g = |sizes: &[u32]| HostMap::new(sizes);
        // 4 rank processes on 2 CPUs: 0, 1 | 2, 3.
        assert_eq!(caller_groups(4, 1, 4, 2), g(&[2, 2]));
        // 8 ranks, 4 to a thread, 2 threads on 2 CPUs: a thread's ranks share its CPU.
        assert_eq!(caller_groups(8, 4, 2, 2), g(&[4, 4]));
        // 5 on 2: blocks of 3 and 2; 6 threads on 4 CPUs: 2, 1, 2, 1.
        assert_eq!(caller_groups(5, 1, 5, 2), g(&[3, 2]));
        assert_eq!(caller_groups(6, 1, 6, 4), g(&[2, 1, 2, 1]));
        // Not pinned (one thread or one CPU): no groups.
        assert_eq!(caller_groups(4, 4, 1, 2), None);
        assert_eq!(caller_groups(4, 1, 4, 1), None);
    }

    #[test]
    fn caller_threads_take_a_cpu_each_or_share_them_in_equal_blocks() {
        let map = |threads: usize, cpus: usize| -> Vec<Option<usize>> {
            (0..threads).map(|t| caller_cpu(t, threads, cpus)).collect()
        };
        assert_eq!(map(2, 2), [Some(0), Some(1)]);
        assert_eq!(map(3, 8), [Some(0), Some(1), Some(2)]);
        assert_eq!(map(4, 2), [Some(0), Some(0), Some(1), Some(1)]);
        assert_eq!(
            map(8, 3),
            [0, 0, 0, 1, 1, 1, 2, 2].map(Some),
            "3 CPUs carry 3, 3 and 2 of 8 threads"
        );
        // Every CPU carries ⌊T/C⌋ or ⌈T/C⌉ threads.
        for threads in 2..40 {
            for cpus in 2..9 {
                let mut per = vec![0usize; cpus];
                for c in map(threads, cpus) {
                    per[c.expect("pinned")] += 1;
                }
                let (lo, hi) = (threads / cpus, threads.div_ceil(cpus));
                assert!(
                    per.iter().all(|&k| k == lo || k == hi),
                    "{threads} threads on {cpus} CPUs: {per:?}"
                );
            }
        }
        // A global rank beyond the host's threads wraps.
        assert_eq!(caller_cpu(5, 4, 2), Some(0));
        assert_eq!(caller_cpu(0, 1, 2), None);
        assert_eq!(caller_cpu(1, 4, 1), None);
    }
}
