//! Invalidation requests: a range a slot's owner is about to free, handed to the thread that
//! drives the slot's queue and applied to the comm at a safe point (docs/design.md §5, "Memory
//! registration", and §9, "Invalidation while the driver runs").
//!
//! A comm is used by one thread at a time: its queue's driver, while a task carrying it is
//! submitted. The memory registrations of its transport are part of that state, so a range the
//! caller is about to free cannot be dropped from another thread while the driver may be inside
//! the comm. Instead the slot's owner posts the request in its slot's cell and waits, bounded;
//! the driving thread applies it at the start of its next tick, before it steps any task (so
//! before any further post of the comm), and answers. Where no other thread can be inside the
//! comm the owner applies it itself: in caller mode with the drive token free (it takes the token
//! and ticks), when the calling thread is the token's holder (a drive hook), or when the queue's
//! worker is gone (`SlotHandle::invalidate_until`).
//!
//! The cell's state machine (one word, changed only by `InvalCell::transition`):
//! ```text
//!         (1) post: owner wrote the request (release)
//!   IDLE ───────────────────────────────────────────► POSTED
//!    ▲  ▲                                               │  │
//!    │  └──(5) withdraw: owner, CAS (deadline passed) ──┘  │ (2) take: driver, CAS (acquire)
//!    │                                                     ▼
//!    └──(4) collect: owner read the answer ◄── APPLIED ◄── TAKEN
//!                                          (3) answer: driver applied it, wrote the
//!                                              status (release)
//! ```
//! The request and the answer live in an `UnsafeCell` owned by whoever the state says: the owner
//! in IDLE, POSTED (until the take) and APPLIED; the driver in TAKEN. Withdraw and take are CASes
//! from POSTED, so exactly one wins: a withdrawn request is never applied, a taken one is always
//! answered. Loom model 14 (`loom-tests/tests/invalidate.rs`), plants
//! `InvalidateAnsweredBeforeApplied` and `InvalidateWithdrawByLoadStore`.
//!
//! Seed: none (the seed's comms register nothing); docs/design.md §9.

use core::ffi::c_void;

use crate::base::status::NrtStatus;
use crate::base::sync::{AtomicU32, Ordering, UnsafeCell};
use crate::driver::task::CommHandle;

/// `NRT_STATUS nccom_comm_invalidate_range(nccom_comm_t *comm, const void *addr, size_t len)`:
/// the progress half's entry that drops the comm's transport registrations of `[addr, addr +
/// len)` (bytes). The comm pointer is `void *` here, as in the seam table.
pub type InvalidateFn =
    unsafe extern "C" fn(comm: *mut c_void, addr: *const c_void, len: usize) -> u32;

/// One invalidation: the comm, the progress half's entry that applies it, and the range.
#[derive(Clone, Copy, Debug)]
pub struct Invalidation {
    /// The progress half's comm (the handle its network tasks carry).
    pub comm: CommHandle,
    /// The progress half's invalidate entry for `comm` (e.g.
    /// [`crate::seam::in_process_invalidate_range`] for a `*mut Comm`).
    pub invalidate: InvalidateFn,
    /// First byte of the range (an address of the caller's process).
    pub addr: usize,
    /// Length of the range in bytes.
    pub len: usize,
}

impl Invalidation {
    /// Calls the progress half's entry on the comm: the status it answers (`Invalid` for a
    /// NULL address, a zero length or a wrapping range; the transport's failure).
    ///
    /// # Safety
    /// The caller is the only thread that may be inside the comm now (its queue's driving
    /// thread, or a thread that knows no driver can be), and the comm is live
    /// ([`CommHandle::new`]'s contract).
    pub(crate) unsafe fn apply(&self) -> Result<(), NrtStatus> {
        // SAFETY: the caller's contract; the range is only compared by the progress half.
        NrtStatus::result_of_code(unsafe {
            (self.invalidate)(
                self.comm.as_ptr(),
                core::ptr::without_provenance(self.addr),
                self.len,
            )
        })
    }
}

/// The state of a slot's invalidation cell (module docs).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalState {
    /// No request.
    Idle = 0,
    /// A request waits for the driver.
    Posted = 1,
    /// The driver is applying it.
    Taken = 2,
    /// Applied; the answer waits for the owner.
    Applied = 3,
}

impl InvalState {
    fn from_u32(v: u32) -> Self {
        match v {
            0 => Self::Idle,
            1 => Self::Posted,
            2 => Self::Taken,
            _ => Self::Applied,
        }
    }
}

/// The edges of the cell's state machine (the numbers of the module diagram).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InvalEdge {
    /// (1) IDLE → POSTED, the owner.
    Post,
    /// (2) POSTED → TAKEN, the driver.
    Take,
    /// (3) TAKEN → APPLIED, the driver.
    Answer,
    /// (4) APPLIED → IDLE, the owner.
    Collect,
    /// (5) POSTED → IDLE, the owner (its deadline passed before the driver took it).
    Withdraw,
}

impl InvalEdge {
    const fn states(self) -> (InvalState, InvalState) {
        use InvalState as S;
        match self {
            Self::Post => (S::Idle, S::Posted),
            Self::Take => (S::Posted, S::Taken),
            Self::Answer => (S::Taken, S::Applied),
            Self::Collect => (S::Applied, S::Idle),
            Self::Withdraw => (S::Posted, S::Idle),
        }
    }
}

/// What the cell holds: the request (written by the owner in IDLE) and the answer (written by
/// the driver in TAKEN).
#[derive(Clone, Copy, Debug)]
struct Payload {
    request: Option<Invalidation>,
    answer: u32,
}

/// A slot's invalidation cell (module docs).
pub(crate) struct InvalCell {
    /// An [`InvalState`]; changed only by [`InvalCell::transition`].
    state: AtomicU32,
    payload: UnsafeCell<Payload>,
}

// SAFETY: `payload` is accessed only by the party the state word says owns it (module docs);
// every edge is an AcqRel RMW and every read of the state an acquire load, so the payload
// changes hands cleanly. `Invalidation` holds a comm handle, which is Send.
unsafe impl Sync for InvalCell {}
// SAFETY: as above.
unsafe impl Send for InvalCell {}

impl core::fmt::Debug for InvalCell {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("InvalCell")
            .field("state", &self.state())
            .finish()
    }
}

impl InvalCell {
    /// An IDLE cell.
    pub(crate) fn new() -> Self {
        Self {
            state: AtomicU32::new(InvalState::Idle as u32),
            payload: UnsafeCell::new(Payload {
                request: None,
                answer: 0,
            }),
        }
    }

    /// The current state (acquire: the payload written before it is visible).
    pub(crate) fn state(&self) -> InvalState {
        InvalState::from_u32(self.state.load(Ordering::Acquire))
    }

    /// The one transition function of the cell: takes `edge` by CAS of its `from` state to its
    /// `to` state (AcqRel), logging `state=A=>B` at trace level. `false` (nothing changed) when
    /// the cell is not in the edge's `from` state.
    pub(crate) fn transition(&self, slot: usize, edge: InvalEdge) -> bool {
        let (from, to) = edge.states();
        // PLANT: InvalidateWithdrawByLoadStore withdraws by a load and a store instead of a
        // CAS: the driver can take the request in between, apply it, and the owner still
        // answers that it was withdrawn (and may overwrite the cell while the driver reads it).
        plant!(InvalidateWithdrawByLoadStore => {
            if edge == InvalEdge::Withdraw {
                let posted = self.state.load(Ordering::Acquire) == from as u32;
                if posted {
                    self.state.store(to as u32, Ordering::Release);
                }
                return posted;
            }
        });
        let ok = self
            .state
            .compare_exchange(from as u32, to as u32, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if ok {
            log::trace!("slot={slot} invalidate state={from:?}=>{to:?}");
        }
        ok
    }

    /// The owner posts `request` (edge 1). `false` when the cell is not IDLE (nothing changed).
    pub(crate) fn post(&self, slot: usize, request: Invalidation) -> bool {
        if self.state() != InvalState::Idle {
            return false;
        }
        // SAFETY: IDLE: the owner (the caller) owns the payload until its release edge.
        self.payload.with_mut(|p| unsafe {
            (*p).request = Some(request);
            (*p).answer = NrtStatus::Failure.code();
        });
        self.transition(slot, InvalEdge::Post)
    }

    /// The owner collects the answer of an APPLIED cell (edge 4): `None` when it is not
    /// APPLIED.
    pub(crate) fn collect(&self, slot: usize) -> Option<Result<(), NrtStatus>> {
        if self.state() != InvalState::Applied {
            return None;
        }
        // SAFETY: APPLIED (acquired above): the owner owns the payload; the driver's answer was
        // released by its edge 3.
        let answer = self.payload.with_mut(|p| unsafe {
            (*p).request = None;
            (*p).answer
        });
        let moved = self.transition(slot, InvalEdge::Collect);
        debug_assert!(moved, "only the owner leaves APPLIED");
        Some(NrtStatus::result_of_code(answer))
    }

    /// The driving thread applies a POSTED request, if there is one (edges 2 and 3): `true` when
    /// it answered one (the caller then wakes the slot's owner). One load while IDLE.
    ///
    /// # Safety
    /// The caller holds the queue's drive token and is at a safe point (inside no comm of the
    /// queue), so it is the only thread that may be inside the request's comm.
    pub(crate) unsafe fn serve(&self, slot: usize) -> bool {
        if self.state.load(Ordering::Relaxed) != InvalState::Posted as u32 {
            return false;
        }
        if !self.transition(slot, InvalEdge::Take) {
            return false; // withdrawn in between
        }
        // SAFETY: TAKEN: the driver owns the payload (the owner's post was acquired by the take).
        let request = self.payload.with(|p| unsafe { (*p).request });
        let Some(request) = request else {
            log::error!("slot {slot}: an invalidation request without a range (bug)");
            debug_assert!(false, "posted without a request");
            // SAFETY: TAKEN, as above.
            self.payload
                .with_mut(|p| unsafe { (*p).answer = NrtStatus::Failure.code() });
            self.transition(slot, InvalEdge::Answer);
            return true;
        };
        // PLANT: InvalidateAnsweredBeforeApplied answers (APPLIED, success) before calling the
        // progress half: the owner returns, and frees the range, while the driver still holds the
        // stale registration (or has not dropped it yet).
        plant!(InvalidateAnsweredBeforeApplied => {
            // SAFETY: TAKEN, as above (the plant releases it early).
            self.payload.with_mut(|p| unsafe { (*p).answer = 0 });
            self.transition(slot, InvalEdge::Answer);
            // SAFETY: the caller's contract.
            let _ = unsafe { request.apply() };
            return true;
        });
        // SAFETY: the caller's contract (this thread drives the queue, at a safe point).
        let r = unsafe { request.apply() };
        if let Err(e) = r {
            log::warn!(
                "slot {slot}: invalidate {:#x}+{:#x} answered {e}",
                request.addr,
                request.len
            );
        }
        // SAFETY: TAKEN: the driver owns the payload until its release edge 3.
        self.payload
            .with_mut(|p| unsafe { (*p).answer = NrtStatus::from_result(r).code() });
        let moved = self.transition(slot, InvalEdge::Answer);
        debug_assert!(moved, "only the driver leaves TAKEN");
        true
    }
}
