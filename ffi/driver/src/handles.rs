//! The handle tables of this library (instances, groups, comms; plans and host devices have
//! theirs in `plan.rs` and `host_device.rs`), tagged with this loaded copy's [`instance_id`], and
//! the lookups every entry point goes through: [`with_comm`] (a comm held busy, a panic poisoning
//! it), [`instance_of`], and [`retry_busy`] for tables whose slots are held busy only briefly
//! ([`with_live_retrying`], [`remove_live_retrying`]).

use std::sync::{Arc, OnceLock};

use proxy_core::base::status::NrtStatus;

use proxy_abi::boundary::{call_guarded, lookup_status, with_live, Guarded};
use proxy_abi::handles::{HandleTable, InstanceId, LookupError};

use crate::objects::{CommEntry, Group, Instance};
use crate::types::*;

/// Handle kinds (bits 48..52 of a handle).
const KIND_INSTANCE: u8 = 1;
const KIND_GROUP: u8 = 2;
const KIND_COMM: u8 = 3;

pub(crate) static INSTANCES: HandleTable<Arc<Instance>> =
    HandleTable::with_instance(KIND_INSTANCE, instance_id);
pub(crate) static GROUPS: HandleTable<Box<Group>> =
    HandleTable::with_instance(KIND_GROUP, instance_id);
pub(crate) static COMMS: HandleTable<Box<CommEntry>> =
    HandleTable::with_instance(KIND_COMM, instance_id);

/// 64 random bits from the kernel (`getrandom`), or, should it fail, bits of the clock, the
/// pid and the address of a static (which differs per loaded copy).
fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom((&raw mut v).cast(), 8, 0) };
    if n == 8 {
        return v;
    }
    static ANCHOR: u8 = 0;
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32) ^ (&raw const ANCHOR as u64)
}

/// This loaded copy's instance id (`1..=0xFFE`, random once per copy) and the first generation
/// of its handle slots: the tag of every handle table of this library
/// (`proxy_abi::handles`), so a handle of another loaded copy is refused.
pub(crate) fn instance_id() -> InstanceId {
    static ID: OnceLock<InstanceId> = OnceLock::new();
    *ID.get_or_init(|| {
        let r = random_u64();
        InstanceId {
            id: (r & 0xFFF) as u16 % 0xFFE + 1,
            first_generation: (r >> 12) & ((1 << 35) - 1),
        }
    })
}

/// Number of live comms (tests and diagnostics).
pub fn live_comms() -> usize {
    COMMS.live()
}

/// Number of live groups (tests and diagnostics).
pub fn live_groups() -> usize {
    GROUPS.live()
}

/// Number of live instances (tests and diagnostics).
pub fn live_instances() -> usize {
    INSTANCES.live()
}

impl Guarded for CommEntry {
    fn poisoned(&mut self) -> &mut bool {
        &mut self.poisoned
    }

    /// A refused call is the comm's most recent failure, with its cause (the refusal's text
    /// names the argument or peer). Answers that are not failures (an empty queue, a wait that
    /// timed out) refuse nothing.
    fn note_failure(&mut self, what: &str, s: NrtStatus) {
        match proxy_abi::refusal::take_last() {
            Some(why) => self.last_error = format!("{why} ({})", s.as_str()),
            None if !matches!(
                s,
                NrtStatus::QueueEmpty | NrtStatus::QueueFull | NrtStatus::Timeout
            ) =>
            {
                self.last_error = format!("{what}: {}", s.as_str());
            }
            None => {}
        }
    }
}

/// Runs `f` on the live comm `comm` (holding it busy; [`call_guarded`]). A panic inside poisons
/// the comm: its state is unknown, so later calls on it answer `NRT_FAILURE` and destroy leaks it
/// rather than free it. A failure `f` answers becomes the comm's last error.
pub(crate) fn with_comm<R>(
    what: &str,
    comm: *mut NrtProxyComm,
    f: impl FnOnce(&mut CommEntry) -> Result<R, NrtStatus>,
) -> Result<R, NrtStatus> {
    keep_main_thread_handle();
    let h = comm.addr();
    with_live(what, "comm", &COMMS, h, |e| {
        // What this call refuses, and only that, is the cause `note_failure` records.
        proxy_abi::refusal::clear_last();
        call_guarded(what, "comm", h, &mut **e, f)
    })
}

/// Keeps the process's main thread's `std::thread::Thread` handle reachable from a static.
///
/// A comm call that waits (caller-driven progress, a wait for a record) parks the calling
/// thread, and std then makes that thread's `Thread` handle and keeps it in a thread-local. The
/// main thread of a C program never runs its thread-local destructors, so memcheck reports the
/// handle's 48 bytes as "possibly lost" at exit, which fails a runtime's valgrind gate
/// (`--errors-for-leak-kinds=definite,possible`). A clone held by a static makes it "still
/// reachable". Other threads free theirs when they exit. Once per thread; one static.
fn keep_main_thread_handle() {
    std::thread_local!(static SEEN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    if SEEN.with(|s| s.replace(true)) {
        return;
    }
    // SAFETY: gettid and getpid have no preconditions.
    if unsafe { libc::gettid() == libc::getpid() } {
        static MAIN: OnceLock<std::thread::Thread> = OnceLock::new();
        let _ = MAIN.set(std::thread::current());
    }
}

/// Most retries of a lookup that met a slot held BUSY by another call's short lookup.
const SHORT_BUSY_RETRIES: u32 = 1 << 16;

/// `op` (a lookup or a remove) on a table whose slots other calls hold BUSY only for a few
/// instructions (instances: an `Arc` clone; groups: reading their parts at comm creation):
/// `Busy` is retried (yielding, at most [`SHORT_BUSY_RETRIES`] times) instead of answered, so
/// that threads sharing an instance or a group never see a spurious `NRT_FAILURE`.
fn retry_busy<R>(mut op: impl FnMut() -> Result<R, LookupError>) -> Result<R, LookupError> {
    for _ in 0..SHORT_BUSY_RETRIES {
        match op() {
            Err(LookupError::Busy) => std::thread::yield_now(),
            r => return r,
        }
    }
    op()
}

/// [`with_live`] with [`retry_busy`]: `f` on the live object of `table` that `handle` (a `kind`
/// handle) names, for the call `what`, on a table whose slots are held busy only briefly.
///
/// # Errors
/// A failed lookup, as [`lookup_status`] answers it (logged); else `f`'s error.
pub(crate) fn with_live_retrying<T, R>(
    what: &str,
    kind: &str,
    table: &HandleTable<T>,
    handle: usize,
    mut f: impl FnMut(&mut T) -> Result<R, NrtStatus>,
) -> Result<R, NrtStatus> {
    retry_busy(|| table.with(handle, &mut f)).map_err(|e| lookup_status(what, kind, handle, e))?
}

/// [`remove_live`](proxy_abi::boundary::remove_live) with [`retry_busy`]: the destroy of an
/// object of a table whose slots are held busy only briefly.
///
/// # Errors
/// A failed lookup, as [`lookup_status`] answers it (logged).
pub(crate) fn remove_live_retrying<T>(
    what: &str,
    kind: &str,
    table: &HandleTable<T>,
    handle: usize,
) -> Result<T, NrtStatus> {
    retry_busy(|| table.remove(handle)).map_err(|e| lookup_status(what, kind, handle, e))
}

/// The live instance `inst` names, for the call `what`.
///
/// # Errors
/// `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown instance (logged).
pub(crate) fn instance_of(what: &str, inst: *mut NrtProxy) -> Result<Arc<Instance>, NrtStatus> {
    with_live_retrying(what, "instance", &INSTANCES, inst.addr(), |i| Ok(i.clone()))
}
