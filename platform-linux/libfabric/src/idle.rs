//! Blocking on the completion queue's wait object (`proxy_core::driver::idle`): a CQ opened
//! with `FI_WAIT_FD` ([`Options::cq_wait_fd`]) hands out a file descriptor
//! (`fi_control(FI_GETWAIT)`); a driver with nothing to do arms it with `fi_trywait` (which
//! answers `-FI_EAGAIN` while completions are already queued) and sleeps in `ppoll` until it is
//! readable, a kick (an eventfd another thread writes: a submission, a device's write) came, or
//! a bounded nap passed.
//!
//! What the providers here do (libfabric 1.17, measured): `tcp;ofi_rxm` opens such a CQ, and
//! the descriptor (rxm's wait set over the tcp sockets) wakes a sleeper when a message
//! arrives; **shm** answers `-FI_ENOSYS` to `FI_WAIT_FD` (nothing signals another process's
//! descriptor), so its CQ is opened without one and [`LibfabricTransport::idle_wait`] answers
//! `None`: its drivers keep yielding.
//!
//! Lifetime: the waiter shares the raw objects with the transport behind a mutex; the
//! transport's close takes them away first (before cancelling, draining, pooling or closing
//! anything), after which the waiter answers [`Armed::Unavailable`]. A sleep holds the mutex,
//! so a close waits for at most one nap.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use libfabric_sys as fi;
use proxy_core::driver::idle::{Armed, IdleWait};

use crate::*;

/// The longest sleep on the descriptor: what a wake-up that never comes (an event that does not
/// go through this CQ) costs at most.
pub const CQ_IDLE_MAX_NAP: Duration = Duration::from_millis(1);

/// How many arms in a row may answer [`Armed::Ready`] before the waiter answers
/// [`Armed::Unavailable`] instead (the driver yields) until an arm arms again or the transport
/// takes completions: completions that stay queued across that many ticks that found nothing
/// and read nothing are read by nobody now (the comm reads
/// its CQ only while it has ops; say a send completion that came after its op ended early, or an
/// earlier lease's on a pooled set), and answering `Ready` for them made the driver tick in a
/// busy loop until its next work began.
pub const CQ_READY_RUN_MAX: u32 = 16;

/// The objects a waiter uses, while the transport is open.
struct Raw {
    fabric: *mut fi::fid_fabric,
    cq: *mut fi::fid_cq,
    fd: i32,
}

/// A transport's completion queue as an [`IdleWait`] (see the module docs); made by
/// [`LibfabricTransport::idle_wait`]. Its kick is an eventfd the sleep polls beside the CQ's
/// descriptor.
pub struct CqIdleWait {
    raw: Mutex<Option<Raw>>,
    max_nap: Duration,
    /// Arms in a row that found completions queued since the transport last took some
    /// ([`CQ_READY_RUN_MAX`]; only the driving thread touches it).
    ready_run: AtomicU32,
    /// The kick's eventfd (non-blocking), or -1 when it could not be made (then a kick is a
    /// no-op and a sleep runs to its signal or its bound).
    kick_fd: i32,
}

impl Drop for CqIdleWait {
    fn drop(&mut self) {
        if self.kick_fd >= 0 {
            // SAFETY: our own descriptor, closed once.
            unsafe { libc::close(self.kick_fd) };
        }
    }
}

// SAFETY: the raw pointers are used only under the mutex, by the thread that drives the
// transport between its calls (the contract of `LibfabricTransport::idle_wait`), and are
// taken away by the transport's close before the objects go anywhere; the fd is a number.
unsafe impl Send for CqIdleWait {}
// SAFETY: as above.
unsafe impl Sync for CqIdleWait {}

impl std::fmt::Debug for CqIdleWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqIdleWait")
            .field("open", &self.lock().is_some())
            .field("max_nap", &self.max_nap)
            .finish()
    }
}

impl CqIdleWait {
    fn lock(&self) -> MutexGuard<'_, Option<Raw>> {
        self.raw.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The transport closes: no arm or sleep touches its objects after this returns.
    pub(crate) fn detach(&self) {
        *self.lock() = None;
    }

    /// The transport took completions from the CQ: whatever `arm` found queued so far was
    /// somebody's (the run of `Ready` answers starts again).
    pub(crate) fn took_completions(&self) {
        self.ready_run.store(0, Ordering::Relaxed);
    }

    /// `false` once the transport closed.
    pub fn is_open(&self) -> bool {
        self.lock().is_some()
    }
}

impl IdleWait for CqIdleWait {
    /// `fi_trywait` on the CQ: `Armed` on 0; on `-FI_EAGAIN` the provider's progress is run
    /// once (a CQ read of zero entries: no completion taken) and `fi_trywait` asked again,
    /// `Ready` when it still answers `-FI_EAGAIN` (completions queued), or `Unavailable` once
    /// more than [`CQ_READY_RUN_MAX`] arms in a row found them (nobody reads them now: the
    /// driver yields instead of ticking in a busy loop); `Unavailable` once the transport
    /// closed or on any other answer.
    fn arm(&self) -> Armed {
        let g = self.lock();
        let Some(r) = g.as_ref() else {
            return Armed::Unavailable;
        };
        // SAFETY: the objects are open (the close detaches first, under this lock) and only
        // the driving thread uses them now (`idle_wait`'s contract).
        let mut ret = unsafe { fi::fi_trywait_cq(r.fabric, r.cq) };
        if ret == -(fi::FI_EAGAIN as i32) {
            // The provider has work of its own (on tcp: a socket holds a peer's message that
            // no posted receive wants yet, say the next collective's, sent by a peer that is
            // ahead). Only a CQ read moves it (manual progress), and the comm reads its CQ
            // only while it has ops: without this read `fi_trywait` answered -FI_EAGAIN on
            // every arm until this rank's own device triggered, and the driver ticked in a
            // busy loop instead of sleeping (millions of arms per second; an 8 B all-reduce of
            // 4 processes on 2 CPUs in worker mode with `--wait sleep` took 0.5–2.8 ms, now
            // 0.3). A read of zero entries runs the provider's progress and takes no
            // completion: whatever it queued stays for the transport's next read.
            let mut none = core::mem::MaybeUninit::<fi::fi_cq_tagged_entry>::uninit();
            // SAFETY: as above; a read of zero entries writes nothing into `none`.
            unsafe { fi::fi_cq_read(r.cq, none.as_mut_ptr().cast(), 0) };
            // SAFETY: as above.
            ret = unsafe { fi::fi_trywait_cq(r.fabric, r.cq) };
        }
        match ret {
            0 => {
                self.ready_run.store(0, Ordering::Relaxed);
                Armed::Armed
            }
            e if e == -(fi::FI_EAGAIN as i32) => {
                let run = self.ready_run.load(Ordering::Relaxed).saturating_add(1);
                self.ready_run.store(run, Ordering::Relaxed);
                if run > CQ_READY_RUN_MAX {
                    Armed::Unavailable
                } else {
                    Armed::Ready
                }
            }
            _ => Armed::Unavailable,
        }
    }

    /// `ppoll` on the descriptor for at most `timeout_ns` (and [`CqIdleWait`]'s nap bound):
    /// `true` when it became readable.
    fn sleep(&self, timeout_ns: u64) -> bool {
        let g = self.lock();
        let Some(r) = g.as_ref() else {
            return false;
        };
        let nap = Duration::from_nanos(timeout_ns).min(self.max_nap);
        let ts = libc::timespec {
            tv_sec: nap.as_secs() as libc::time_t,
            tv_nsec: nap.subsec_nanos() as libc::c_long,
        };
        let mut pfd = [
            libc::pollfd {
                fd: r.fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.kick_fd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let nfds = if self.kick_fd >= 0 { 2 } else { 1 };
        // SAFETY: `nfds` valid pollfds and a valid timespec; no signal mask change.
        let n = unsafe { libc::ppoll(pfd.as_mut_ptr(), nfds, &ts, std::ptr::null()) };
        if nfds == 2 && pfd[1].revents & libc::POLLIN != 0 {
            let mut count = 0u64;
            // SAFETY: reads 8 bytes into `count` from our non-blocking eventfd (resets it).
            unsafe { libc::read(self.kick_fd, (&mut count as *mut u64).cast(), 8) };
        }
        n > 0
    }

    /// Writes the eventfd: the sleep in progress (or the next) returns.
    fn kick(&self) {
        if self.kick_fd < 0 {
            return;
        }
        let one = 1u64;
        // SAFETY: writes 8 bytes from `one` to our eventfd (non-blocking: a full counter
        // answers EAGAIN, and it is readable then anyway).
        unsafe { libc::write(self.kick_fd, (&one as *const u64).cast(), 8) };
    }
}

impl LibfabricTransport {
    /// This transport's completion queue as an idle wait for the thread that drives it, or
    /// `None` when its CQ has no descriptor (not asked with [`Options::cq_wait_fd`], or the
    /// provider has none: shm). Sleeps last at most [`CQ_IDLE_MAX_NAP`].
    ///
    /// # Safety
    /// The waiter's `arm` and `sleep` must be called only by the thread that drives this
    /// transport, between its calls (the queue's drive token: `ProxyQueue::idle_wait`), never
    /// while another thread posts to it or polls it: libfabric's `FI_THREAD_DOMAIN` leaves
    /// that serialization to the caller.
    pub unsafe fn idle_wait(&mut self) -> Option<Arc<CqIdleWait>> {
        if self.obj.cq_fd < 0 || self.closed {
            return None;
        }
        let w = self.idle.get_or_insert_with(|| {
            Arc::new(CqIdleWait {
                raw: Mutex::new(Some(Raw {
                    fabric: self.obj.fabric,
                    cq: self.obj.cq,
                    fd: self.obj.cq_fd,
                })),
                ready_run: AtomicU32::new(0),
                max_nap: CQ_IDLE_MAX_NAP,
                // SAFETY: eventfd has no memory preconditions.
                kick_fd: unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) },
            })
        });
        Some(w.clone())
    }

    /// `true` when the CQ was opened with a descriptor to block on.
    pub fn has_cq_wait_fd(&self) -> bool {
        self.obj.cq_fd >= 0
    }
}

#[cfg(test)]
mod tests;
