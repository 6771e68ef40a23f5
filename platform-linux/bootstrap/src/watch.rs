//! Dead-peer detection for a comm's life ([`PeerWatch`], docs/design.md §9 "Liveness").
//!
//! The bootstrap connections stay open as long as a comm built over them lives. Every
//! connection has TCP keepalive and `TCP_USER_TIMEOUT` ([`crate::PEER_TIMEOUT`]), so the kernel
//! resets it when the peer's host stops answering; a killed process closes it at once. The
//! driving thread checks the connections without blocking, at most every
//! [`WATCH_INTERVAL`]: one non-blocking read per connection ([`Bootstrap::watch_peers`]),
//! taking the shared bootstrap only with `try_lock` (a blocking all-gather of the main thread,
//! or a host barrier's group barrier, holds it: the check is skipped, not waited for).
//!
//! ```text
//!   leaf 2 dies ──EOF/reset──► root: PeerLost{2} ──Lost{2}──► leaf 1, leaf 3: PeerLost{2}
//!   root dies   ──EOF/reset──► every leaf: PeerLost{0}
//! ```
//!
//! A peer that closed cleanly (`Bye`) is not lost: a leaf whose root said `Bye` has nothing
//! more to watch, and the root skips leaves that said it.

use std::sync::TryLockError;
use std::time::{Duration, Instant};

use proxy_core::NrtStatus;

use crate::*;

/// Default interval between two checks of a [`PeerWatch`] (a check costs one non-blocking
/// `read` per bootstrap connection).
pub const WATCH_INTERVAL: Duration = Duration::from_millis(5);

/// How long [`Bootstrap::abort`] watches for a lost peer before it reports its own failure
/// instead: a killed process's connections close at once (measured well under 10 ms here), so
/// a rank whose transport failed because a peer died sees that peer lost within it.
pub const ABORT_GRACE: Duration = Duration::from_millis(500);

impl Bootstrap {
    /// Ends this rank's part in the job after a failure the bootstrap did not see itself (a
    /// comm's task failed on the transport's own error): every peer is told, so that none
    /// waits for its exec timeout behind a clean `Bye` (MPI's `MPI_Abort`, NCCL's
    /// `ncclCommAbort` for the bootstrap). A peer lost at about the same time (the usual cause
    /// of a transport failure) is reported as lost, by rank: the connections are watched for at
    /// most [`ABORT_GRACE`] first. Otherwise every peer receives `Abort` naming this rank,
    /// `status` and `reason`. Sticky, like every failure; a later [`Bootstrap::close`] sends
    /// no `Bye`.
    ///
    /// Returns the failure the peers were told: [`BootstrapError::PeerLost`] (the lost rank),
    /// [`BootstrapError::Aborted`] (this rank's, or another rank's abort that arrived first),
    /// the earlier sticky failure, or [`BootstrapError::Closed`] when the bootstrap was
    /// already closed (nothing is sent then).
    pub fn abort(&mut self, status: NrtStatus, reason: &str) -> BootstrapError {
        if let Err(e) = self.check("abort") {
            return e;
        }
        let until = Instant::now() + ABORT_GRACE;
        loop {
            if let Err(e) = self.watch_peers() {
                return e;
            }
            if Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let err = BootstrapError::Aborted {
            rank: self.rank,
            origin: self.rank,
            status,
            reason: reason.to_owned(),
        };
        self.fail(err)
    }

    /// Reports `peer` lost on this rank's own word, for a loss the connections did not show
    /// (yet): the last act of a process about to end without reaching its watch again (the
    /// libfabric shm watchdog, whose process spins on the lock a dead peer's process held). A
    /// root tells every other leaf (`Lost{peer}`, written without blocking), so each reports
    /// `peer` lost instead of the root. A leaf has no one to tell: the root sees the leaf's own
    /// connection close and reports it.
    ///
    /// Returns the failure recorded: [`BootstrapError::PeerLost`] naming `peer`, or the earlier
    /// sticky failure, or [`BootstrapError::Closed`] (nothing is sent then).
    pub fn report_lost(&mut self, peer: u32, reason: &str) -> BootstrapError {
        if let Err(e) = self.check("report a lost peer") {
            return e;
        }
        self.fail(BootstrapError::PeerLost {
            rank: self.rank,
            peer,
            message: reason.to_owned(),
        })
    }

    /// Moves the connections' bytes once and reports a lost peer (non-blocking): what a
    /// [`PeerWatch`] calls. Unlike [`Bootstrap::check_alive`], a root that closed cleanly
    /// (`Bye`) and a closed bootstrap are not failures: there is just nothing left to watch.
    ///
    /// # Errors
    /// The sticky failure; [`BootstrapError::PeerLost`] naming the lost rank (on a leaf also
    /// when the root reports another leaf lost); an abort from another rank.
    pub fn watch_peers(&mut self) -> Result<(), BootstrapError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.closed {
            return Ok(());
        }
        self.pump()
    }
}

impl SharedBootstrap {
    /// [`Bootstrap::report_lost`] from a thread other than the watching one: the bootstrap is
    /// taken with `try_lock`, retried every millisecond for at most `within` (a thread blocked
    /// in a bootstrap collective may hold it). `false` when it stayed busy (nothing was sent).
    pub fn report_lost(&self, peer: u32, reason: &str, within: Duration) -> bool {
        let until = Instant::now() + within;
        loop {
            match self.inner.try_lock() {
                Ok(mut b) => {
                    b.report_lost(peer, reason);
                    return true;
                }
                Err(TryLockError::Poisoned(p)) => {
                    p.into_inner().report_lost(peer, reason);
                    return true;
                }
                Err(TryLockError::WouldBlock) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(TryLockError::WouldBlock) => return false,
            }
        }
    }
}

/// The dead-peer check of one comm over a [`SharedBootstrap`]: [`PeerWatch::check`] is cheap
/// enough to call from every progress round (a clock read when not due) and never blocks.
///
/// Holds a handle on the bootstrap, so the connections stay open while the watch lives (the
/// last handle dropped closes them with `Bye`). The failure is sticky: after the first error
/// every check returns it.
#[derive(Debug)]
pub struct PeerWatch {
    boot: SharedBootstrap,
    every: Duration,
    /// The earliest next check, ns of `CLOCK_MONOTONIC_COARSE` ([`coarse_ns`]).
    next: u64,
    /// Checks made (bootstrap taken) and skipped (bootstrap busy), for tests and logs.
    checks: u64,
    skipped: u64,
    failed: Option<BootstrapError>,
}

impl PeerWatch {
    /// A watch over `boot`, checking at most every [`WATCH_INTERVAL`].
    pub fn new(boot: &SharedBootstrap) -> Self {
        Self {
            boot: boot.clone(),
            every: WATCH_INTERVAL,
            next: 0,
            checks: 0,
            skipped: 0,
            failed: None,
        }
    }

    /// The same watch with another interval between checks (`Duration::ZERO`: every call).
    pub fn with_interval(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    /// The bootstrap this watch keeps open.
    pub fn bootstrap(&self) -> &SharedBootstrap {
        &self.boot
    }

    /// Checks made so far (the bootstrap was free), and checks skipped (it was busy).
    pub fn counts(&self) -> (u64, u64) {
        (self.checks, self.skipped)
    }

    /// When due, checks the bootstrap connections once without blocking (`try_lock`; a busy
    /// bootstrap is checked at the next due call).
    ///
    /// # Errors
    /// The first failure [`Bootstrap::watch_peers`] reported (logged once, naming the lost
    /// rank), then the same error at every call.
    pub fn check(&mut self) -> Result<(), BootstrapError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let now = coarse_ns();
        if now < self.next {
            return Ok(());
        }
        self.next = now.saturating_add(u64::try_from(self.every.as_nanos()).unwrap_or(u64::MAX));
        let r = match self.boot.inner.try_lock() {
            Ok(mut b) => b.watch_peers(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().watch_peers(),
            Err(TryLockError::WouldBlock) => {
                self.skipped += 1;
                return Ok(());
            }
        };
        self.checks += 1;
        if let Err(e) = r {
            match e.lost_rank() {
                Some(peer) => log::error!("peer watch: rank {peer} lost: {e}"),
                None => log::error!("peer watch: the bootstrap failed: {e}"),
            }
            self.failed = Some(e.clone());
            return Err(e);
        }
        Ok(())
    }
}

impl PeerWatch {
    /// [`PeerWatch::check`] as a transport's failure: `NRT_NETWORK_PROXY_FAILURE` naming the
    /// lost rank, the message led by the transport's name (`transport`), for the transports
    /// that run a watch from their `poll` (libfabric, `proxy-shm`).
    ///
    /// # Errors
    /// As [`PeerWatch::check`], converted.
    pub fn check_transport(
        &mut self,
        transport: &str,
    ) -> Result<(), proxy_core::progress::net::NetError> {
        self.check().map_err(|e| {
            let message = match e.lost_rank() {
                Some(r) => format!("{transport}: rank {r} lost (bootstrap): {e}"),
                None => format!("{transport}: the bootstrap failed: {e}"),
            };
            proxy_core::progress::net::NetError::failure(e.lost_rank(), message)
        })
    }
}

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds, `u64::MAX` if the clock cannot be read: the
/// watch's clock (and the libfabric shm watchdog's). It is read at every transport progress
/// call, where a full `clock_gettime` was 1 % of a crowded 8 B all-reduce's profile; its
/// resolution (the kernel's tick, 1–4 ms) stretches [`WATCH_INTERVAL`]'s 5 ms to at most 9.
pub fn coarse_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out-parameter.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } != 0 {
        // Not on Linux ≥ 2.6.32; were it to fail, the watch checks at every call.
        return u64::MAX;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}
