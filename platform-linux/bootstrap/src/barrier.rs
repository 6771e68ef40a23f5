//! Barriers over the bootstrap connections: blocking ([`Bootstrap::barrier`]), non-blocking
//! ([`Bootstrap::barrier_start`] / [`Bootstrap::barrier_poll`]), and the driver's
//! [`BarrierChannel`] over a [`SharedBootstrap`].

use std::sync::{Arc, Mutex, MutexGuard};

use proxy_core::driver::task::{BarrierChannel, BarrierTicket};
use proxy_core::NrtStatus;

use crate::wire::Frame;
use crate::*;

/// `true` when generation `a` is at `g` or later (wrapping compare).
pub(crate) const fn reached(a: u32, g: u32) -> bool {
    (a.wrapping_sub(g) as i32) >= 0
}

impl Bootstrap {
    /// Starts the next barrier generation (non-blocking): this rank has arrived. Poll the ticket
    /// with [`Bootstrap::barrier_poll`] until it answers `true` before starting another one.
    ///
    /// # Errors
    /// The sticky failure; [`BootstrapError::Config`] when this rank's previous barrier has not
    /// passed yet.
    pub fn barrier_start(&mut self) -> Result<BarrierTicket, BootstrapError> {
        self.check("barrier")?;
        if self.barrier_gen != self.released {
            return Err(BootstrapError::Config(format!(
                "rank {}: barrier_start while barrier {} has not passed",
                self.rank, self.barrier_gen
            )));
        }
        let gen = self.barrier_gen.wrapping_add(1);
        self.barrier_gen = gen;
        if let Role::Leaf { conn, .. } = &mut self.role {
            conn.queue(&Frame::Arrive { gen });
        }
        // A failure here is sticky and reported by `barrier_poll`, unless the generation was
        // released before it (then the barrier has passed).
        let _ = self.pump();
        Ok(BarrierTicket(gen))
    }

    /// `Ok(true)` once every rank has arrived at `ticket`'s generation (non-blocking: moves the
    /// connections' bytes once). A generation that was released stays passed, even after a
    /// later failure.
    ///
    /// # Errors
    /// The sticky failure; a lost peer or an abort; the needed peer closed its side.
    pub fn barrier_poll(&mut self, ticket: BarrierTicket) -> Result<bool, BootstrapError> {
        if reached(self.released, ticket.0) {
            return Ok(true);
        }
        let r = self.pump();
        // A generation released before a failure arrived has passed (the failure is sticky and
        // shows at the next call).
        if reached(self.released, ticket.0) {
            return Ok(true);
        }
        r?;
        if self.root_left() {
            let e = BootstrapError::Closed {
                rank: self.rank,
                what: format!("barrier {}: the root left", ticket.0),
            };
            return Err(self.fail(e));
        }
        Ok(false)
    }

    /// A whole barrier (blocking, bounded by the timeout).
    ///
    /// # Errors
    /// As [`Bootstrap::barrier_poll`], and [`BootstrapError::Timeout`] (the root names the ranks
    /// that have not arrived).
    pub fn barrier(&mut self) -> Result<(), BootstrapError> {
        let t = self.barrier_start()?;
        let what = move |b: &Self| match &b.role {
            Role::Root { peers } => {
                let m: Vec<usize> = peers
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.as_ref().is_some_and(|p| !reached(p.arrived, t.0)))
                    .map(|(r, _)| r)
                    .collect();
                format!("barrier {}: ranks {m:?} to arrive", t.0)
            }
            Role::Leaf { .. } => format!("barrier {}: the root to release it", t.0),
        };
        self.wait_for(&what, |b| b.barrier_poll(t))
    }
}

/// A [`Bootstrap`] shared between threads (the main thread's all-gathers, the worker's barrier
/// task).
///
/// A blocking call made through [`SharedBootstrap::lock`] holds the bootstrap for up to its
/// timeout: a barrier channel's `poll` then answers "not yet" (it only tries the lock), but its
/// `arrive` waits for the lock, stalling the worker that steps it. Do not run blocking
/// all-gathers or barriers while barrier tasks are in flight.
#[derive(Clone, Debug)]
pub struct SharedBootstrap {
    pub(crate) inner: Arc<Mutex<Bootstrap>>,
}

impl SharedBootstrap {
    /// Shares `b`.
    pub fn new(b: Bootstrap) -> Self {
        Self {
            inner: Arc::new(Mutex::new(b)),
        }
    }

    /// Locks the bootstrap (a poisoned lock is taken over: the bootstrap's own state is sticky).
    pub fn lock(&self) -> MutexGuard<'_, Bootstrap> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The bootstrap back, when this is the last handle (every barrier channel dropped);
    /// otherwise `self` again.
    ///
    /// # Errors
    /// `Err(self)` while another handle or a barrier channel exists.
    pub fn try_unwrap(self) -> Result<Bootstrap, Self> {
        match Arc::try_unwrap(self.inner) {
            Ok(m) => Ok(m.into_inner().unwrap_or_else(|p| p.into_inner())),
            Err(inner) => Err(Self { inner }),
        }
    }

    /// A barrier endpoint over the bootstrap connections. Successive barriers of the process
    /// are generations of one sequence: make one endpoint per process and reuse it (two
    /// endpoints used at once would share generations).
    pub fn barrier_channel(&self) -> BootstrapBarrier {
        BootstrapBarrier {
            inner: self.inner.clone(),
            logged: false,
        }
    }
}

/// A non-blocking barrier between the processes of a bootstrap: the driver's
/// [`BarrierChannel`] over the bootstrap connections (`arrive` once, then `poll` each step);
/// failures map to [`NrtStatus`] (and are logged once).
///
/// Seed: `enc_barrier` between processes, §3 ("Considerations"); docs/design.md §4.
#[derive(Debug)]
pub struct BootstrapBarrier {
    inner: Arc<Mutex<Bootstrap>>,
    logged: bool,
}

impl BootstrapBarrier {
    fn status(&mut self, e: &BootstrapError) -> NrtStatus {
        if !self.logged {
            self.logged = true;
            log::error!("barrier over the bootstrap failed: {e}");
        }
        e.status()
    }
}

impl BarrierChannel for BootstrapBarrier {
    /// Announces this process's arrival at its next barrier generation.
    fn arrive(&mut self) -> Result<BarrierTicket, NrtStatus> {
        let r = self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .barrier_start();
        r.map_err(|e| self.status(&e))
    }

    /// `Ok(true)` once every process has arrived at `ticket`'s generation. Answers `Ok(false)`
    /// without waiting when another thread holds the bootstrap.
    fn poll(&mut self, ticket: BarrierTicket) -> Result<bool, NrtStatus> {
        let r = match self.inner.try_lock() {
            Ok(mut b) => b.barrier_poll(ticket),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().barrier_poll(ticket),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(false),
        };
        r.map_err(|e| self.status(&e))
    }

    /// Nothing to ring: the processes' devices are each woken by their own process.
    fn passed(&mut self) {}
}
