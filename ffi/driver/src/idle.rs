//! Idle waits of the driver half (`proxy_core::driver::idle`), opt-in with
//! `NEURON_RT_PROXY_IDLE=block` (default `yield`): a proxy queue's driving thread (its worker,
//! or a caller in `nrt_proxy_wait` / `nrt_proxy_drive_until`) that found nothing to do blocks
//! on its comm's completion-queue descriptor instead of yielding.
//!
//! The descriptor belongs to the progress half: a libfabric comm is created with
//! `NCCOM_COMM_IDLE_WAIT` (progress half ABI 1.4; an older one lacks the entry points and its
//! comms simply have no idle wait), and [`CommIdle`] calls its `nccom_comm_idle_arm` /
//! `_sleep` / `_kick` through the loaded library. A comm without a descriptor (in-memory, shm)
//! has none.
//!
//! A queue may serve several comms; blocking on one comm's descriptor would miss the others'
//! completions, so the wait wired into a queue ([`QueueIdle`]) sleeps only while the queue
//! serves exactly one comm and that comm has a descriptor, and answers
//! [`Armed::Unavailable`] (the driver yields) otherwise, and while the comm's barrier between
//! processes waits (the other processes' arrivals come over the driver's bootstrap sockets,
//! which signal no descriptor; `HostBarrier::waiting`). Wired at the comm's join, unwired when
//! the queue's last such comm leaves.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use proxy_abi::*;
use proxy_core::base::status::NrtStatus;
use proxy_core::driver::idle::{Armed, Gated, IdleWait};
use proxy_core::driver::queue::ProxyQueue;
use proxy_runtime::loader::ProgressLib;

/// The environment variable choosing what an idle driver does: `yield` (the default) or
/// `block` (on its comm's completion-queue descriptor, where it has one).
pub const IDLE_ENV: &str = "NEURON_RT_PROXY_IDLE";

/// `true` for `block`, `false` for `yield` or an empty value (either case).
///
/// # Errors
/// Any other value: a message naming the variable and the values it takes.
pub(crate) fn parse_idle(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "block" => Ok(true),
        "yield" | "" => Ok(false),
        _ => Err(format!("{IDLE_ENV}={v:?}: block or yield")),
    }
}

/// [`IDLE_ENV`] of the process environment (unset: `yield`).
///
/// # Errors
/// As [`parse_idle`].
pub(crate) fn idle_blocks_from_env() -> Result<bool, String> {
    std::env::var(IDLE_ENV).map_or(Ok(false), |v| parse_idle(&v))
}

/// One comm's idle wait through the progress half's C ABI (module docs).
pub(crate) struct CommIdle {
    /// The progress half's comm handle (opaque; checked by the library at every call).
    nccom: *mut NccomComm,
    arm: NccomCommIdleArmFn,
    sleep: NccomCommIdleSleepFn,
    kick: NccomCommIdleKickFn,
}

impl CommIdle {
    /// The idle wait of `nccom`, a comm of `lib`, when `lib` has the ABI 1.4 entries and the
    /// comm has a descriptor (`nccom_comm_idle_available`); else `None` (logged at debug).
    pub(crate) fn of(lib: &'static ProgressLib, nccom: *mut NccomComm) -> Option<Self> {
        let t = lib.init();
        let (Some(available), Some(arm), Some(sleep), Some(kick)) = (
            t.comm_idle_available,
            t.comm_idle_arm,
            t.comm_idle_sleep,
            t.comm_idle_kick,
        ) else {
            return None;
        };
        let mut has = 0u32;
        // SAFETY: a live comm of `lib` (the library checks the handle anyway); `has` is a
        // writable local.
        let s = unsafe { available(nccom, &mut has) };
        if let Err(e) = NrtStatus::result_of_code(s) {
            log::warn!("nccom_comm_idle_available: {e}: the comm's driver yields when idle");
            return None;
        }
        (has == 1).then_some(Self {
            nccom,
            arm,
            sleep,
            kick,
        })
    }

    fn handle(&self) -> *mut NccomComm {
        self.nccom
    }
}

impl IdleWait for CommIdle {
    /// `nccom_comm_idle_arm`; `Unavailable` on any failed call (a comm in use by another
    /// thread, or destroyed).
    fn arm(&self) -> Armed {
        let mut a = NCCOM_IDLE_UNAVAILABLE;
        // SAFETY: the comm handle (checked by the library); `a` is a writable local.
        let s = unsafe { (self.arm)(self.handle(), &mut a) };
        match (s, a) {
            (NRT_SUCCESS, NCCOM_IDLE_ARMED) => Armed::Armed,
            (NRT_SUCCESS, NCCOM_IDLE_READY) => Armed::Ready,
            _ => Armed::Unavailable,
        }
    }

    /// `nccom_comm_idle_sleep` (at most 1 ms per call in the progress half).
    fn sleep(&self, timeout_ns: u64) -> bool {
        let mut woken = 0u32;
        // SAFETY: as in `arm`.
        let s = unsafe { (self.sleep)(self.handle(), timeout_ns, &mut woken) };
        s == NRT_SUCCESS && woken == 1
    }

    /// `nccom_comm_idle_kick` (any thread).
    fn kick(&self) {
        // SAFETY: the comm handle (checked by the library).
        unsafe { (self.kick)(self.handle()) };
    }
}

/// A comm's idle wait, unavailable while its barrier between processes waits
/// (`HostBarrier::waiting`; module docs).
pub(crate) type GatedIdle = Gated<CommIdle>;

/// The idle wait wired into one proxy queue: its comms (by driver handle) and their waits
/// (module docs).
pub(crate) struct QueueIdle {
    members: Mutex<Vec<(usize, Option<Arc<GatedIdle>>)>>,
}

impl QueueIdle {
    fn members(&self) -> MutexGuard<'_, Vec<(usize, Option<Arc<GatedIdle>>)>> {
        self.members.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The wait to block on: the one comm's, when the queue serves exactly one.
    fn sole(&self) -> Option<Arc<GatedIdle>> {
        match self.members().as_slice() {
            [(_, Some(w))] => Some(w.clone()),
            _ => None,
        }
    }
}

impl IdleWait for QueueIdle {
    fn arm(&self) -> Armed {
        self.sole().map_or(Armed::Unavailable, |w| w.arm())
    }

    fn sleep(&self, timeout_ns: u64) -> bool {
        self.sole().is_some_and(|w| w.sleep(timeout_ns))
    }

    fn kick(&self) {
        let waits: Vec<_> = self
            .members()
            .iter()
            .filter_map(|(_, w)| w.clone())
            .collect();
        for w in waits {
            w.kick();
        }
    }
}

// SAFETY: `CommIdle` holds function pointers of a library loaded for the life of the process,
// and an opaque handle the library looks up (never dereferenced here).
unsafe impl Send for CommIdle {}
// SAFETY: as above; the library's idle entry points take any thread (arm and sleep are
// serialized with the comm's other calls by the library's handle slot).
unsafe impl Sync for CommIdle {}

/// The wait wired into each queue that serves a comm of an instance with
/// `NEURON_RT_PROXY_IDLE=block`, by queue address.
static QUEUES: Mutex<Vec<(usize, Arc<QueueIdle>)>> = Mutex::new(Vec::new());

fn queues() -> MutexGuard<'static, Vec<(usize, Arc<QueueIdle>)>> {
    QUEUES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Comm `comm` (driver handle) joined `q` with `wait` (`None`: no descriptor): counted in the
/// queue's wait, which is wired while any of the queue's comms has a descriptor (a queue of
/// comms without one keeps its worker's nap or yield as before).
pub(crate) fn joined(q: &Arc<ProxyQueue>, comm: usize, wait: Option<Arc<GatedIdle>>) {
    let key = Arc::as_ptr(q).addr();
    let mut all = queues();
    let qi = match all.iter().find(|(k, _)| *k == key) {
        Some((_, qi)) => qi.clone(),
        None => {
            let qi = Arc::new(QueueIdle {
                members: Mutex::new(Vec::new()),
            });
            all.push((key, qi.clone()));
            qi
        }
    };
    qi.members().push((comm, wait));
    rewire(q, &qi);
}

/// Comm `comm` left `q` (or is about to): no longer counted; the queue's wait is unwired with
/// its last comm that has a descriptor.
pub(crate) fn left(q: &Arc<ProxyQueue>, comm: usize) {
    let key = Arc::as_ptr(q).addr();
    let mut all = queues();
    let Some(i) = all.iter().position(|(k, _)| *k == key) else {
        return;
    };
    let qi = all[i].1.clone();
    let empty = {
        let mut m = qi.members();
        m.retain(|(c, _)| *c != comm);
        m.is_empty()
    };
    rewire(q, &qi);
    if empty {
        all.swap_remove(i);
    }
}

/// Wires `qi` into `q` while any of its comms has a descriptor, else unwires it (this library
/// alone wires the idle slots of its queues).
fn rewire(q: &ProxyQueue, qi: &Arc<QueueIdle>) {
    let any = qi.members().iter().any(|(_, w)| w.is_some());
    if any != q.idle_wait().is_wired() {
        q.idle_wait()
            .wire(any.then(|| -> Arc<dyn IdleWait> { qi.clone() }));
    }
}

#[cfg(test)]
mod tests;
