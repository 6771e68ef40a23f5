//! Per-peer spacing of send posts that keep answering `-FI_EAGAIN`.
//!
//! On `tcp;ofi_rxm` (libfabric 1.17) a send to a peer whose process is gone answers
//! `-FI_EAGAIN` forever: rxm's connection to it was dropped, and every `fi_tsend` /
//! `fi_tinject` to it starts a new connection (a new tcp endpoint and socket whose `connect` is
//! refused, an error event on the event queue, the endpoint closed again), and never fails the
//! post. The transport retries a post answered `-FI_EAGAIN` at the next tick, so a survivor ran
//! thousands of such connect cycles per second (about 28,000 in the 3 s before its no-progress
//! timeout), and the provider's connection manager crashed in that churn about once in 30 runs
//! (docs/design.md §5, "tcp and a killed peer"). Back-pressure that lasts this long is not
//! ordinary back-pressure (a full transmit queue drains within microseconds on loopback), so
//! after [`STORM_AFTER`] of uninterrupted `-FI_EAGAIN` answers from one peer the transport
//! spaces that peer's send posts: it answers "not now" itself (after reading the CQ, as on any
//! back-pressure) until the wait has passed, the wait doubling from [`MIN_WAIT`] up to
//! [`MAX_WAIT`]. A post the provider accepts ends the streak. Receives are never spaced (they
//! name no peer and start no connection).
//!
//! ```text
//!   (1) -FI_EAGAIN ────────────────► STREAK(since)
//!   CLEAR ◄──(2) posted─────────────── │   │
//!     ▲                                │   └─(3) -FI_EAGAIN, still < STORM_AFTER since: STREAK
//!     │                                │ (4) -FI_EAGAIN, >= STORM_AFTER since
//!     │                                ▼
//!     └───────(5) posted ──────── SPACING(wait, until) ──(6) -FI_EAGAIN: wait doubled (<= MAX)
//!                                      (a post before `until` is answered "not now" unasked)
//! ```

use std::time::{Duration, Instant};

use proxy_core::base::backoff::{Backoff, BackoffPolicy};

/// Uninterrupted `-FI_EAGAIN` answers from one peer for this long start the spacing.
pub(crate) const STORM_AFTER: Duration = Duration::from_millis(50);
/// First wait between two spaced posts.
pub(crate) const MIN_WAIT: Duration = Duration::from_micros(100);
/// Longest wait between two spaced posts.
pub(crate) const MAX_WAIT: Duration = Duration::from_millis(10);

/// The waits between spaced posts: [`MIN_WAIT`] doubling to [`MAX_WAIT`], no spins or yields.
const SPACING: BackoffPolicy = BackoffPolicy {
    spins: 0,
    yields: 0,
    nap_ns: MIN_WAIT.as_nanos() as u64,
    max_nap_ns: MAX_WAIT.as_nanos() as u64,
};

/// Where one peer's send posts are (module diagram).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum PostPressure {
    /// The last send post to the peer was accepted (or there was none).
    #[default]
    Clear,
    /// Send posts answered `-FI_EAGAIN` since `since`, none accepted.
    Streak {
        /// The first `-FI_EAGAIN` of the streak.
        since: Instant,
    },
    /// The streak is older than [`STORM_AFTER`]: the next post is tried at `until`.
    Spacing {
        /// The first `-FI_EAGAIN` of the streak.
        since: Instant,
        /// The current wait.
        wait: Duration,
        /// The doubling of the waits (the project's one backoff, `base::backoff`, used for its
        /// nap sequence only: the transport never sleeps, it answers "not now").
        naps: Backoff,
        /// No post before this instant.
        until: Instant,
    },
}

/// What happened to a send post.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PostEvent {
    /// The provider accepted it.
    Posted,
    /// The provider answered `-FI_EAGAIN` (or shm's `-FI_ENOMEM`).
    Again,
}

impl PostPressure {
    /// `false` while spacing and `now` is before the next allowed post: answer "not now"
    /// without asking the provider.
    pub(crate) fn may_post(&self, now: Instant) -> bool {
        match *self {
            PostPressure::Spacing { until, .. } => now >= until,
            _ => true,
        }
    }

    /// The transition function: the state after `event` at `now`. Traces `A=>B` on a change of
    /// kind, and returns `true` when spacing starts (edge 4, for the caller's one log line).
    pub(crate) fn on(&mut self, event: PostEvent, now: Instant, peer: u32) -> bool {
        let next = match (*self, event) {
            (_, PostEvent::Posted) => PostPressure::Clear, // (2), (5)
            (PostPressure::Clear, PostEvent::Again) => PostPressure::Streak { since: now }, // (1)
            (PostPressure::Streak { since }, PostEvent::Again) => {
                if now.saturating_duration_since(since) < STORM_AFTER {
                    PostPressure::Streak { since } // (3)
                } else {
                    let mut naps = Backoff::new(SPACING);
                    let wait = Duration::from_nanos(naps.next_nap());
                    PostPressure::Spacing {
                        since,
                        wait,
                        naps,
                        until: now + wait,
                    } // (4)
                }
            }
            (
                PostPressure::Spacing {
                    since, mut naps, ..
                },
                PostEvent::Again,
            ) => {
                let wait = Duration::from_nanos(naps.next_nap());
                PostPressure::Spacing {
                    since,
                    wait,
                    naps,
                    until: now + wait,
                } // (6)
            }
        };
        let started = matches!(
            (*self, next),
            (PostPressure::Streak { .. }, PostPressure::Spacing { .. })
        );
        if std::mem::discriminant(self) != std::mem::discriminant(&next) {
            log::trace!(
                "send posts to rank {peer}: {}=>{}",
                self.name(),
                next.name()
            );
        }
        *self = next;
        started
    }

    fn name(&self) -> &'static str {
        match self {
            PostPressure::Clear => "CLEAR",
            PostPressure::Streak { .. } => "STREAK",
            PostPressure::Spacing { .. } => "SPACING",
        }
    }
}

#[cfg(test)]
mod tests;
