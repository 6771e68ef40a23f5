//! The timed iteration count of a size when `-n` is not given: calibrated so that the timed
//! loop lasts at least `--min-time`, as OSU and nccl-tests users expect (small sizes get
//! thousands of iterations; a fixed 20 measured the warm-up: 16 µs at 8 B where the steady
//! state is 2.5 µs).
//!
//! Batches of 1, 2, 4, ... untimed iterations run until one lasts an eighth of the minimum
//! time or the calibration as a whole has lasted the minimum time (the bound); the estimate is
//! the marginal time per iteration between the last two batches ([`per_iteration`]). Every batch is a collective
//! of every rank, so every rank must run the same batches: when the ranks are processes, each
//! batch's time is all-gathered over the bootstrap and the slowest process's time decides, the
//! same decision in every process (no process decides alone, nothing is sent besides the
//! times).

use super::*;
use crate::args::{MAX_ITERS, MIN_ITERS};

/// A calibration batch this long (as a fraction of the minimum time: 1/8) ends the
/// calibration: its time per iteration is the estimate.
const BATCH_FRACTION: u64 = 8;

/// The count for a loop of `min_ns` at `per_iter_ns` per iteration, in
/// [`MIN_ITERS`]`..=`[`MAX_ITERS`].
pub(crate) fn iters_for(min_ns: u64, per_iter_ns: f64) -> u32 {
    if per_iter_ns <= 0.0 {
        return MAX_ITERS;
    }
    let n = (min_ns as f64 / per_iter_ns).ceil();
    // `as` saturates a float beyond u32's range.
    (n as u32).clamp(MIN_ITERS, MAX_ITERS)
}

/// ns per iteration from the last calibration batch `(iterations, ns)` and the one before: the
/// marginal rate between them, which leaves out a fixed cost per batch (with `--loop` a batch
/// is one execution, whose setup is paid once however many iterations it runs); the last
/// batch's mean when there is no earlier batch or the times did not grow (noise).
pub(crate) fn per_iteration(previous: Option<(u32, u64)>, last: (u32, u64)) -> f64 {
    let mean = last.1 as f64 / f64::from(last.0.max(1));
    match previous {
        Some((b0, t0)) if last.0 > b0 && last.1 > t0 => {
            (last.1 - t0) as f64 / f64::from(last.0 - b0)
        }
        _ => mean,
    }
}

impl World {
    /// The slowest process's `ns` (this process's alone when the ranks share it).
    ///
    /// # Errors
    /// A message when the all-gather between processes fails or a process sent malformed data.
    pub(super) fn slowest_ns(&self, ns: u64) -> Result<u64, String> {
        let Some(peers) = &self.peers else {
            return Ok(ns);
        };
        let all = peers
            .lock()
            .all_gather(&ns.to_le_bytes())
            .map_err(|e| format!("sharing the calibration times of the processes: {e}"))?;
        all.iter()
            .enumerate()
            .map(|(p, b)| {
                <[u8; 8]>::try_from(b.as_slice())
                    .map(u64::from_le_bytes)
                    .map_err(|_| format!("process {p} sent a malformed time ({} bytes)", b.len()))
            })
            .try_fold(0, |m, t| t.map(|t| m.max(t)))
    }

    /// Runs `count` timed iterations of `prep` (`count` executions, or with `--loop` one
    /// execution of `count` program executions) and returns the elapsed time.
    pub(super) fn timed(&mut self, prep: &Prepared, count: u32) -> Result<Duration, String> {
        if self.args.loop_mode {
            self.run_execs(prep, 1, count)
        } else {
            self.run_execs(prep, count, 1)
        }
    }

    /// The timed count of `prep`'s size: `-n` when given, else calibrated (module docs; after
    /// the warm-up, whose executions it adds to).
    ///
    /// # Errors
    /// A message when an execution fails or the processes cannot share their times.
    pub(super) fn iterations(&mut self, prep: &Prepared) -> Result<u32, String> {
        if let Some(n) = self.args.fixed_iters() {
            return Ok(n);
        }
        let min_ns = u64::from(self.args.min_time_ms.max(1)) * 1_000_000;
        let (mut batch, mut total_ns) = (1u32, 0u64);
        let mut previous: Option<(u32, u64)> = None;
        loop {
            let local = self.timed(prep, batch)?;
            let ns = self.slowest_ns(u64::try_from(local.as_nanos()).unwrap_or(u64::MAX))?;
            total_ns = total_ns.saturating_add(ns);
            if ns >= min_ns / BATCH_FRACTION || total_ns >= min_ns || batch >= MAX_ITERS {
                return Ok(iters_for(min_ns, per_iteration(previous, (batch, ns))));
            }
            previous = Some((batch, ns));
            batch = batch.saturating_mul(2).min(MAX_ITERS);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_covers_the_minimum_time_within_bounds() {
        // 50 ms at 2.5 µs: 20 000 iterations.
        assert_eq!(iters_for(50_000_000, 2_500.0), 20_000);
        // Rounds up: 10 ms at 3 µs is 3333.3.
        assert_eq!(iters_for(10_000_000, 3_000.0), 3_334);
        // A slow size gets the floor, a free one the ceiling.
        assert_eq!(iters_for(50_000_000, 20_000_000.0), MIN_ITERS);
        assert_eq!(iters_for(50_000_000, 0.0), MAX_ITERS);
        assert_eq!(iters_for(u64::MAX, 1.0), MAX_ITERS);
    }

    #[test]
    fn the_estimate_leaves_out_a_fixed_cost_per_batch() {
        // 1 ms per batch plus 2 µs per iteration: batches of 64 and 128.
        let t = |n: u64| 1_000_000 + 2_000 * n;
        assert_eq!(per_iteration(Some((64, t(64))), (128, t(128))), 2_000.0);
        // No earlier batch, or a time that did not grow: the mean.
        assert_eq!(per_iteration(None, (4, 8_000)), 2_000.0);
        assert_eq!(per_iteration(Some((2, 9_000)), (4, 8_000)), 2_000.0);
    }
}
