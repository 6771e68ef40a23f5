//! The one backoff policy of the project: how a wait that polls pauses between its polls.
//!
//! A [`Backoff`] runs through three stages under a [`BackoffPolicy`]: `spins` CPU pauses
//! (`spin_loop`: the answer is usually a few hundred nanoseconds away), then `yields` yields of
//! the CPU (another thread on this core may be the one that answers), then naps that start at
//! `nap_ns` and double up to `max_nap_ns` (nothing is coming soon: give the core away). A wait
//! that sees progress calls [`Backoff::reset`] and spins again. The platform says how to yield
//! and nap ([`Pause`]; on std `StdPause`, `yield_now` and `sleep`; a waiter another thread
//! unparks naps on its parker, `driver::wake::ParkPause`), so the policy also runs on bare metal.
//!
//! ```text
//!   reset ──► SPIN (spins × spin_loop) ──► YIELD (yields × yield_now) ──► NAP (nap_ns, ×2 each, ≤ max_nap_ns)
//!     ▲                                                                      │
//!     └───────────────────────────── progress seen ──────────────────────────┘
//! ```
//!
//! Why our own and not crossbeam-utils' `Backoff`: that one spins and yields only (it never
//! sleeps, so a wait on a crowded host keeps a core busy), its step counts are fixed, and it
//! reads no budget; the waits here need naps bounded by a deadline (a drain limit, a bootstrap
//! timeout) and policies that differ per wait (a device thread spins 64 times, the bootstrap not
//! at all).
//!
//! Used by: the bootstrap's polls (`proxy-bootstrap`), the emulated device's waits
//! (`proxy-emulator`), the comm's teardown drain (`progress::comm`), and the libfabric
//! transport's spacing of send posts a peer keeps refusing (its waits double by the same rule,
//! [`Backoff::next_nap`]).
//!
//! Seed: none (the seed's proxy thread spins or sleeps a fixed time); docs/design.md §4.

/// The stages of a [`Backoff`] (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// CPU pauses (`spin_loop`) before the first yield.
    pub spins: u32,
    /// Yields of the CPU before the first nap.
    pub yields: u32,
    /// The first nap, in ns (at least 1).
    pub nap_ns: u64,
    /// The longest nap, in ns (naps double up to it).
    pub max_nap_ns: u64,
}

/// How the platform yields the CPU and naps (a [`Backoff`] spins by itself).
pub trait Pause {
    /// Gives the CPU to another runnable thread, if any.
    fn yield_now(&self);

    /// Sleeps about `ns` nanoseconds (a wake-up may end it early; the caller polls again).
    fn nap(&self, ns: u64);
}

/// What one [`Backoff::pause`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// A CPU pause.
    Spun,
    /// A yield of the CPU.
    Yielded,
    /// A nap of this many ns.
    Napped(u64),
}

/// One wait's position in its [`BackoffPolicy`] (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    policy: BackoffPolicy,
    spun: u32,
    yielded: u32,
    nap_ns: u64,
}

impl Backoff {
    /// A fresh wait under `policy`: it spins first.
    pub const fn new(policy: BackoffPolicy) -> Self {
        Self {
            policy,
            spun: 0,
            yielded: 0,
            nap_ns: 0,
        }
    }

    /// Starts over (the wait saw progress): spin again, naps from `nap_ns` again.
    pub fn reset(&mut self) {
        *self = Self::new(self.policy);
    }

    /// `true` once spinning and yielding are over (every further pause naps).
    pub fn napping(&self) -> bool {
        self.spun >= self.policy.spins && self.yielded >= self.policy.yields
    }

    /// The length of the next nap in ns, advancing the doubling (`nap_ns`, `2 × nap_ns`, ... up
    /// to `max_nap_ns`), without pausing: for a caller that waits by other means (a post
    /// spacing that answers "not now" until the time has passed).
    pub fn next_nap(&mut self) -> u64 {
        let p = &self.policy;
        let ns = if self.nap_ns == 0 {
            p.nap_ns.max(1)
        } else {
            self.nap_ns.saturating_mul(2)
        };
        self.nap_ns = ns.min(p.max_nap_ns.max(p.nap_ns).max(1));
        self.nap_ns
    }

    /// One pause: a spin, a yield or a nap, as the wait has gone on.
    pub fn pause(&mut self, pause: &dyn Pause) -> Pace {
        self.pause_at_most(pause, u64::MAX)
    }

    /// [`Backoff::pause`] with a nap of at most `max_ns` (a deadline's distance; at least 1).
    pub fn pause_at_most(&mut self, pause: &dyn Pause, max_ns: u64) -> Pace {
        if self.spun < self.policy.spins {
            self.spun += 1;
            crate::base::sync::spin_loop();
            return Pace::Spun;
        }
        if self.yielded < self.policy.yields {
            self.yielded += 1;
            pause.yield_now();
            return Pace::Yielded;
        }
        let ns = self.next_nap().min(max_ns.max(1));
        pause.nap(ns);
        Pace::Napped(ns)
    }
}

/// The std platform's [`Pause`]: `std::thread::yield_now`, and naps by `std::thread::sleep`.
#[cfg(any(test, feature = "std"))]
#[derive(Clone, Copy, Debug, Default)]
pub struct StdPause;

#[cfg(any(test, feature = "std"))]
impl Pause for StdPause {
    fn yield_now(&self) {
        std::thread::yield_now();
    }

    fn nap(&self, ns: u64) {
        std::thread::sleep(core::time::Duration::from_nanos(ns));
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
