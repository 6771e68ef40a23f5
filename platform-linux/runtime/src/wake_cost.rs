//! The cost of blocking on this machine, measured: how long a parked thread takes to run again
//! after another thread unparks it.
//!
//! A waiter that spins for as long as a block-and-wake costs, and then blocks, never pays more
//! than twice what the best choice in hindsight would have (the 2-competitive rule of Karlin,
//! Manasse, McGeoch and Owicki, "Competitive randomized algorithms for non-uniform problems",
//! 1990/1994). So this is the spin budget where the configuration leaves the budget to the
//! machine: measured, not guessed.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Round trips of the measurement.
pub const ROUNDS: u32 = 200;

/// Longest time the measurement may take; past it, what was measured so far counts.
pub const MEASURE_LIMIT: Duration = Duration::from_millis(200);

/// The median one-way wake-up latency (half a park/unpark round trip between two threads) of
/// this machine, measured once per process ([`measure`]: at most [`MEASURE_LIMIT`]).
pub fn wake_latency() -> Duration {
    static CACHED: OnceLock<Duration> = OnceLock::new();
    *CACHED.get_or_init(|| measure(ROUNDS))
}

/// Measures `rounds` park/unpark round trips between this thread and a helper thread (each side
/// parks until the other flips a shared word, then wakes it) and answers half the median round
/// trip. Bounded by [`MEASURE_LIMIT`] (and by a 10 ms park per step, so a lost wake-up cannot
/// hang it); a thread that cannot be started answers 50 µs (the configuration's default budget).
pub fn measure(rounds: u32) -> Duration {
    let word = Arc::new(AtomicU32::new(0));
    let me = std::thread::current();
    let w = word.clone();
    let rounds = rounds.max(1);
    let start = Instant::now();
    let Ok(helper) = std::thread::Builder::new()
        .name("proxy-wake-cost".into())
        .spawn(move || {
            // Odd values are the helper's turn; 2 * rounds + 1 ends it.
            let mut next = 1;
            while next <= 2 * rounds + 1 {
                while w.load(Ordering::Acquire) < next {
                    std::thread::park_timeout(Duration::from_millis(10));
                }
                if w.load(Ordering::Acquire) > 2 * rounds {
                    return;
                }
                w.store(next + 1, Ordering::Release);
                me.unpark();
                next += 2;
            }
        })
    else {
        return Duration::from_micros(50);
    };
    let t = helper.thread().clone();
    let mut trips = Vec::with_capacity(rounds as usize);
    for i in 0..rounds {
        if start.elapsed() > MEASURE_LIMIT {
            break;
        }
        let t0 = Instant::now();
        word.store(2 * i + 1, Ordering::Release);
        t.unpark();
        while word.load(Ordering::Acquire) < 2 * i + 2 {
            std::thread::park_timeout(Duration::from_millis(10));
        }
        trips.push(t0.elapsed());
    }
    word.store(2 * rounds + 1, Ordering::Release);
    t.unpark();
    let _ = helper.join();
    trips.sort_unstable();
    trips
        .get(trips.len() / 2)
        .map_or(Duration::from_micros(50), |rt| *rt / 2)
}

#[cfg(test)]
mod tests;
