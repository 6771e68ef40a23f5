//! Bells of this library (`proxy_core::base::bell`, ABI 1.5): who tells a sleeping thread to
//! look again, so a worker waiting for its comms' devices naps instead of yielding, and a host
//! device's thread sleeps until the proxy moved.
//!
//! ```text
//!   host device / runtime ── host write ──► nrt_proxy_notify / HostWrite ──► comm's queue driver
//!   queue driver ── a slot's task moved ──► SlotRing ──► the comm's host device thread
//!                                                    └► (group comm) the group's other queues
//!   group barrier ── a rank arrived ──► DriverBell ──► every other rank's queue driver
//!   group barrier ── the leader passed ──► DeviceBell ──► every rank's host device thread
//! ```
//!
//! The in-memory transport lives in the progress half, behind the C ABI, and rings nothing when
//! a message arrives; the library rings for it: a rank's message is sent, and a rank's barrier
//! arrival made, inside a step of its queue's driver, and a step that moved makes the driver
//! ring the slot's bell
//! ([`ProxyQueue::slot_bell`](proxy_core::driver::queue::ProxyQueue::slot_bell)), which rings
//! the group's other queues. The group's in-process barrier has bells of its own for its
//! arrivals and for the leader's increments of the other ranks' barrier-done semaphores. A comm
//! between processes has no group: nothing rings its network completions (that is why the
//! worker naps only when the runtime says so, `worker_nap_us`).
//!
//! A bell is a hint: every rung thread re-checks its own condition, every sleep a bell ends is
//! bounded (the worker's nap: `worker_nap_us`; the host device's: the same, or
//! [`BELLED_NAP`](crate::bells::BELLED_NAP)), and both sleep / wake handshakes are
//! `driver::wake::WaitCell`'s (the queue's for its worker, one per comm for its host device
//! thread; loom models 2 and 3), so the library adds no handshake of its own.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

use proxy_core::base::bell::Bell;
use proxy_core::driver::queue::ProxyQueue;
use proxy_core::driver::wake::{ThreadPark, WaitCell};

/// The nap of a host device thread whose comm rings it, when the instance sets no
/// `worker_nap_us`: [`crate::types::NRT_PROXY_BELLED_NAP_US`].
pub const BELLED_NAP: Duration =
    Duration::from_micros(crate::types::NRT_PROXY_BELLED_NAP_US as u64);

/// Rings counted since the process started (diagnostics and tests; relaxed counters).
#[derive(Debug, Default)]
pub struct BellCounts {
    /// Rings of a queue's driver: a host device's host write or an `nrt_proxy_notify`.
    pub driver_rings: AtomicU64,
    /// Rings of a group peer's queue by a slot that moved.
    pub peer_rings: AtomicU64,
    /// Rings of a host device thread by a slot that moved.
    pub device_rings: AtomicU64,
    /// Naps of a host device thread (each ended by a ring or by its bound).
    pub device_naps: AtomicU64,
}

/// The process's ring counts.
pub static COUNTS: BellCounts = BellCounts {
    driver_rings: AtomicU64::new(0),
    peer_rings: AtomicU64::new(0),
    device_rings: AtomicU64::new(0),
    device_naps: AtomicU64::new(0),
};

fn count(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The bells of one comm: its queue (while joined) and its host device's thread (while one
/// runs a launch).
#[derive(Debug, Default)]
pub(crate) struct CommBells {
    /// The queue the comm is joined to (`None`: not joined); weak, so a bell never keeps a
    /// queue alive.
    queue: RwLock<Option<Weak<ProxyQueue>>>,
    /// The wake word of the comm's host device thread (`nrt_proxy_host_device_attach`): the
    /// thread naps on it while it waits for the proxy, the comm's moves notify it. The
    /// `WaitCell` protocol (loom models 2 and 3), so this library adds no sleep / wake
    /// handshake of its own; one waiter at a time: `device_claimed`.
    device: WaitCell,
    /// `true` while a host device is attached (a second attach is refused: one waiter).
    device_claimed: AtomicBool,
}

impl CommBells {
    /// Wires (`Some`) or unwires the comm's queue.
    pub(crate) fn set_queue(&self, q: Option<&Arc<ProxyQueue>>) {
        *self.queue.write().unwrap_or_else(PoisonError::into_inner) = q.map(Arc::downgrade);
    }

    fn queue(&self) -> Option<Arc<ProxyQueue>> {
        self.queue
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .and_then(Weak::upgrade)
    }

    /// Claims the comm for a host device; `false` when one is attached already.
    pub(crate) fn claim_device(&self) -> bool {
        self.device_claimed
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Gives the comm's host device claim back (the device was destroyed or moved).
    pub(crate) fn release_device(&self) {
        self.device_claimed.store(false, Ordering::Release);
    }

    /// The host device thread's nap: at most `ns`, ended at once by a ring that came since the
    /// thread's last nap or comes during it, or when `stop` is set (its setter rings too).
    pub(crate) fn device_nap(&self, ns: u64, stop: &AtomicBool) {
        count(&COUNTS.device_naps);
        self.device
            .park_timeout(&ThreadPark, || stop.load(Ordering::Acquire), Some(ns));
    }

    /// Wakes the comm's host device thread if it naps (or ends its next nap at once): one RMW
    /// when it does not sleep, a wake-up when it does.
    pub(crate) fn ring_device(&self) {
        // The claim is stored before the device's thread starts, and a ring that matters
        // follows the driver's acquire of a word that thread wrote; a ring that read the claim
        // stale would cost one bounded nap, never a hang (the skip only saves an RMW on comms
        // without a host device).
        if self.device_claimed.load(Ordering::Acquire) {
            count(&COUNTS.device_rings);
            self.device.notify();
        }
    }

    /// Wakes the driver of the comm's queue (a device wrote host words); nothing when the comm
    /// is not joined.
    pub(crate) fn ring_driver(&self) {
        if let Some(q) = self.queue() {
            count(&COUNTS.driver_rings);
            q.wake_driver();
        }
    }
}

/// The comms of one group, rung together when one of their slots moved.
#[derive(Debug, Default)]
pub(crate) struct GroupBells {
    members: RwLock<Vec<Weak<CommBells>>>,
}

impl GroupBells {
    /// Adds a comm of the group (comms gone are dropped from the list here).
    pub(crate) fn add(&self, c: &Arc<CommBells>) {
        let mut m = self.members.write().unwrap_or_else(PoisonError::into_inner);
        m.retain(|w| w.strong_count() > 0);
        m.push(Arc::downgrade(c));
    }
}

/// A comm's queue driver as a bell: wired once, at the comm's creation, into its rank's arrival
/// bell of the group's barrier (`SharedMemBarrier::arrival_bell`: another rank arrived).
pub(crate) struct DriverBell(pub(crate) Arc<CommBells>);

impl Bell for DriverBell {
    fn ring(&self) {
        self.0.ring_driver();
    }
}

/// A comm's host device thread as a bell: wired once, at the comm's creation, into its rank's
/// pass bell of the group's barrier (`SharedMemBarrier::pass_bell`: the leader raised the
/// rank's barrier-done semaphore).
pub(crate) struct DeviceBell(pub(crate) Arc<CommBells>);

impl Bell for DeviceBell {
    fn ring(&self) {
        self.0.ring_device();
    }
}

/// What a comm's slot rings after a tick in which one of its tasks moved
/// ([`ProxyQueue::slot_bell`]): the comm's host device (the proxy wrote what it waits for),
/// and for a group comm the other queues of the group (the step may have sent a message that a
/// peer's task waits for: the progress half's in-memory transport rings nothing itself). The
/// group's barrier rings for its arrivals and its pass ([`DriverBell`], [`DeviceBell`]).
pub(crate) struct SlotRing {
    pub(crate) comm: Arc<CommBells>,
    pub(crate) group: Option<Arc<GroupBells>>,
}

impl Bell for SlotRing {
    fn ring(&self) {
        self.comm.ring_device();
        let Some(g) = &self.group else {
            return;
        };
        // The ringing thread drives this comm's queue: it is awake, so its own queue is not
        // rung (a pending wake would cut its next nap short for nothing).
        let own = self.comm.queue();
        let members = g.members.read().unwrap_or_else(PoisonError::into_inner);
        // A queue shared by several comms of the group is rung once per comm: a wake of a
        // queue that is awake already is one RMW.
        for m in members.iter().filter_map(Weak::upgrade) {
            if let Some(q) = m.queue() {
                if own.as_ref().is_none_or(|o| !Arc::ptr_eq(o, &q)) {
                    count(&COUNTS.peer_rings);
                    q.wake_driver();
                }
            }
        }
    }
}

/// The bells of every live comm by handle (a B-tree: its nodes are pointed to at their start, so
/// memcheck calls an empty table reachable, not "possibly lost"), for `nrt_proxy_notify`, which any thread may call at
/// any time (it never holds a comm busy).
static BY_HANDLE: RwLock<Option<BTreeMap<usize, Arc<CommBells>>>> = RwLock::new(None);

/// Registers a new comm's bells under its handle.
pub(crate) fn register(handle: usize, b: Arc<CommBells>) {
    BY_HANDLE
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(BTreeMap::new)
        .insert(handle, b);
}

/// Forgets a destroyed comm's bells.
pub(crate) fn unregister(handle: usize) {
    if let Some(m) = BY_HANDLE
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .as_mut()
    {
        m.remove(&handle);
    }
}

/// Rings the driver of the comm `handle`; `false` when no live comm has that handle.
pub(crate) fn ring_by_handle(handle: usize) -> bool {
    let map = BY_HANDLE.read().unwrap_or_else(PoisonError::into_inner);
    match map.as_ref().and_then(|m| m.get(&handle)) {
        Some(b) => {
            b.ring_driver();
            true
        }
        None => false,
    }
}

/// What the driver of the queue `comm` is joined to last said it does (napping, yielding,
/// ticking...); `None` for a comm that is not live or not joined. For tests and diagnostics
/// (Rust only).
pub fn driver_activity(
    comm: *mut crate::types::NrtProxyComm,
) -> Option<proxy_core::driver::dump::DriverActivity> {
    let map = BY_HANDLE.read().unwrap_or_else(PoisonError::into_inner);
    let b = map.as_ref()?.get(&comm.addr())?;
    Some(b.queue()?.driver_activity())
}

/// Tells the proxy queue that drives `comm` that the comm's device wrote host words (a trigger
/// word, a host index, a handshake answer): its worker, napping because nothing moved, looks
/// again at once. For a runtime that plays or drives its own device; a library host device
/// attached to the comm (`nrt_proxy_host_device_attach`) rings by itself. Call it after the
/// writes (they must be visible to the proxy first: a release store or a fence). With every
/// device of an instance ringing, set `worker_nap_us` so its idle workers nap instead of
/// yielding. A comm that is not joined: nothing is rung.
///
/// Any thread, any time, also while another call on the comm runs (it takes no comm lock;
/// one table lookup and, when the worker sleeps, one wake-up).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown comm.
///
/// # Safety
/// None beyond the C contract (the handle is looked up, never dereferenced).
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_notify(
    comm: *mut crate::types::NrtProxyComm,
) -> proxy_abi::NRT_STATUS {
    proxy_abi::entry!(WHAT = "nrt_proxy_notify", {
        if ring_by_handle(comm.addr()) {
            Ok(())
        } else {
            log::error!(
                "{WHAT}: {:#x} is not a live comm of this library",
                comm.addr()
            );
            Err(proxy_core::base::status::NrtStatus::InvalidHandle)
        }
    })
}
