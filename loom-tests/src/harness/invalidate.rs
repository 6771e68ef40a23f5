//! Model 14: an invalidation request (`driver::inval`) — a slot's owner asks for a range to be
//! dropped from its comm's transport while the queue's worker runs; the worker applies it at its
//! next tick (the safe point) and answers (docs/design.md §9, "Invalidation while the driver
//! runs").
//!
//! Two scenarios over the real queue, its worker loop and `SlotHandle::invalidate_until`:
//! * [`invalidate_vs_worker`]: the worker starts (and parks when idle); the owner asks, without
//!   a deadline. Checked: the call answers success, and the model comm's "registrations
//!   dropped" word (a loom `UnsafeCell` the invalidate entry writes, as a transport's cache
//!   would change) is written, and visible, when the call returns: the invalidation reached the
//!   transport before the call returned. The worker is the only writer, the owner reads after the
//!   answer: any read not ordered after the write is a loom data race.
//! * [`invalidate_withdraw_vs_take`]: the owner's deadline has already passed, so it withdraws
//!   its request unless the worker has taken it. Checked: exactly one of the two: a call that
//!   answered `NRT_TIMEOUT` ("not applied") was never applied, one that answered success was
//!   applied once.

use std::ffi::c_void;

use proxy_core::base::status::NrtStatus;
use proxy_core::base::sync::{Arc, UnsafeCell};
use proxy_core::driver::inval::Invalidation;
use proxy_core::driver::queue::ProxyQueue;
use proxy_core::driver::task::CommHandle;

use super::driver::{new_queue, one_slot, run_worker};
use super::{thread, waiter};

/// A model comm: how many times its transport dropped the range.
pub struct ModelComm {
    dropped: UnsafeCell<u32>,
}

// SAFETY: `dropped` is written only by the thread the invalidation protocol lets into the comm
// (the worker at its safe point) and read by the owner after the answer; loom checks exactly
// that.
unsafe impl Sync for ModelComm {}
// SAFETY: as above.
unsafe impl Send for ModelComm {}

impl ModelComm {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            dropped: UnsafeCell::new(0),
        })
    }

    fn dropped(&self) -> u32 {
        // SAFETY: read by the owner after the protocol handed the comm back (loom flags a read
        // that is not ordered after the worker's write).
        self.dropped.with(|p| unsafe { *p })
    }

    fn request(&self) -> Invalidation {
        Invalidation {
            // SAFETY: the model comm outlives the queue's worker (joined before it is dropped).
            comm: unsafe { CommHandle::new(self as *const Self as *mut c_void) }
                .expect("a non-null comm"),
            invalidate: model_invalidate,
            addr: 0x1000,
            len: 0x2000,
        }
    }
}

/// The model's `nccom_comm_invalidate_range`: counts one drop of the range.
unsafe extern "C" fn model_invalidate(comm: *mut c_void, _addr: *const c_void, _len: usize) -> u32 {
    // SAFETY: the handle of a live ModelComm (`ModelComm::request`).
    let c = unsafe { &*(comm as *const ModelComm) };
    // SAFETY: the protocol lets one thread into the comm at a time (what the model checks).
    c.dropped.with_mut(|p| unsafe { *p += 1 });
    0
}

/// Scenario 1 (see the module docs).
pub fn invalidate_vs_worker() {
    let (queue, worker) = new_queue(one_slot());
    let comm = ModelComm::new();
    let mut h = ProxyQueue::join(&queue).expect("join a free slot");
    let w = thread::spawn(move || run_worker(worker));
    let r = h.invalidate_until(comm.request(), &waiter(0), None);
    assert_eq!(r, Ok(()), "the invalidation answers success");
    assert_eq!(
        comm.dropped(),
        1,
        "the invalidation reached the transport before the call returned"
    );
    assert!(h.leave(&waiter(0)).is_empty());
    queue.request_stop();
    w.join().expect("the worker");
    assert_eq!(comm.dropped(), 1, "applied once");
}

/// Scenario 2 (see the module docs).
pub fn invalidate_withdraw_vs_take() {
    let (queue, worker) = new_queue(one_slot());
    let comm = ModelComm::new();
    let mut h = ProxyQueue::join(&queue).expect("join a free slot");
    let w = thread::spawn(move || run_worker(worker));
    // A deadline already passed: the owner withdraws unless the worker took the request.
    let r = h.invalidate_until(comm.request(), &waiter(0), Some(0));
    match r {
        Ok(()) => assert_eq!(comm.dropped(), 1, "an answered invalidation was applied"),
        Err(NrtStatus::Timeout) => {}
        Err(e) => panic!("unexpected answer {e}"),
    }
    assert!(h.leave(&waiter(0)).is_empty());
    queue.request_stop();
    w.join().expect("the worker");
    let applied = comm.dropped();
    if r.is_err() {
        assert_eq!(applied, 0, "a withdrawn invalidation is never applied");
    } else {
        assert_eq!(applied, 1, "an answered invalidation is applied once");
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
