//! Bells: how a thread that made a change tells the thread that may be sleeping on it to look
//! again: a device that wrote a host word rings its proxy queue's worker, an in-memory send
//! rings the receiver's driving thread, a worker that made progress rings the devices of its
//! ranks.
//!
//! A bell is a hint, never the data: the rung thread re-checks its own condition, and every
//! sleep a bell can end is a bounded nap (so a bell that is not wired, or a ring that lands
//! just before the sleep, costs at most one nap of latency, never a hang). The sleep / wake
//! protocol underneath (no lost wake-up between "nothing to do" and the sleep) is
//! [`crate::driver::wake::WaitCell`]'s for a proxy queue's worker and the platform parker's
//! token for a device thread.
//!
//! Rings are cheap when nobody sleeps: a bell that wakes a `WaitCell` is one RMW, one that
//! unparks a std thread one swap; a system call only when the thread is asleep.

use crate::base::sync::{DiagAtomicU32, DiagOrdering, PlainArc};

/// Something to ring after a change that a sleeping thread may wait for.
pub trait Bell: Send + Sync {
    /// Tells the thread behind the bell to look again (never blocks).
    fn ring(&self);
}

/// A bell wired after the thing that rings it exists (a fabric's mailboxes are made before the
/// threads that drive them; a queue's slot before the device of the rank that joins it), and
/// rewired when that changes. A ring while nothing is wired does nothing.
///
/// Rings take a reader lock (`spin::RwLock`: two RMWs, never skipped by a concurrent ring);
/// [`BellSlot::wire`] a writer lock, held for one pointer swap. A ring while nothing is wired
/// reads one word and takes no lock (every in-memory send rings its receiver's slot, wired or
/// not); a ring racing with the wire may see either side of it.
#[derive(Default)]
pub struct BellSlot {
    bell: spin::RwLock<Option<PlainArc<dyn Bell>>>,
    /// 1 while a bell is wired (written under the writer lock). Not a loom atomic, as the lock
    /// is not one either: wiring happens before the threads that ring start.
    wired: DiagAtomicU32,
}

impl core::fmt::Debug for BellSlot {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BellSlot")
            .field("wired", &self.is_wired())
            .finish()
    }
}

impl BellSlot {
    /// An unwired slot.
    pub const fn new() -> Self {
        Self {
            bell: spin::RwLock::new(None),
            wired: DiagAtomicU32::new(0),
        }
    }

    /// Wires `bell` (`None` unwires), returning the bell wired before.
    pub fn wire(&self, bell: Option<PlainArc<dyn Bell>>) -> Option<PlainArc<dyn Bell>> {
        let mut slot = self.bell.write();
        // Release: a ring that reads 1 finds the bell under its reader lock anyway; the
        // ordering only keeps the hint from running ahead of the slot.
        self.wired
            .store(u32::from(bell.is_some()), DiagOrdering::Release);
        core::mem::replace(&mut *slot, bell)
    }

    /// `true` while a bell is wired.
    pub fn is_wired(&self) -> bool {
        self.bell.read().is_some()
    }

    /// Rings the wired bell, if any.
    #[inline]
    pub fn ring(&self) {
        if self.wired.load(DiagOrdering::Acquire) == 0 {
            return;
        }
        if let Some(b) = &*self.bell.read() {
            b.ring();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
