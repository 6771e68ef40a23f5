//! Where the tool's threads run: rank device threads with `--pin` ([`rank_cpus`]) and the
//! caller-mode driving threads, always ([`caller_cpu`]).

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

#[cfg(test)]
mod tests {
    use super::caller_cpu;

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
