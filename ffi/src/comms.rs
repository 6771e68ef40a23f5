//! The comms of the C ABI: their handle table, the abort side table, the lookup every call on
//! a comm goes through ([`with_comm`]), and their life: `nccom_comm_create` (the config checked,
//! the transport opened, the handle issued) and `nccom_comm_destroy`.

use std::sync::{Arc, Mutex};

use proxy_abi::*;
use proxy_core::base::abort::AbortHandle;
use proxy_core::base::status::NrtStatus;
use proxy_core::base::time::MonotonicClock;
use proxy_core::driver::idle::IdleWait;
use proxy_core::progress::comm::{Comm, CommConfig};
use proxy_core::progress::net::{Transport, MAX_COMM_ID, MAX_NRANKS};

use proxy_abi::boundary::{
    c_handle, c_handle_out, c_in, call_guarded, insert_live, remove_live, with_live, Guarded,
};
use proxy_abi::entry;
use proxy_abi::handles::HandleTable;

use crate::device;
use crate::init::GROUPS;
#[cfg(feature = "libfabric")]
use crate::libfabric;

/// A live comm of the C ABI.
pub(crate) struct CommEntry {
    pub(crate) comm: Comm,
    /// The comm's idle wait (`idle.rs`; libfabric with `NCCOM_COMM_IDLE_WAIT` and a provider
    /// with a CQ descriptor), armed and slept on only through [`with_comm`] (so no other call
    /// on the comm runs meanwhile).
    pub(crate) idle: Option<Arc<dyn IdleWait>>,
    /// A panic was caught inside a call on this comm: its state is unknown.
    poisoned: bool,
}

/// Every live comm created through [`nccom_comm_create`].
static COMMS: HandleTable<Box<CommEntry>> = HandleTable::new(0xC0CC);
/// The abort handle (and idle wait, for its kick) of every live comm, by comm handle: what
/// [`nccom_comm_abort`] and `nccom_comm_idle_kick` read, so that neither ever waits for (or is
/// refused by) the call that holds the comm's slot BUSY.
/// Inserted by `nccom_comm_create` after the comm's handle exists, removed by
/// `nccom_comm_destroy` after the comm left [`COMMS`]. An [`AbortHandle`] is a shared word
/// (`Arc`), so an abort that found it before a destroy removed it sets a word that outlives the
/// comm: harmless. A plain lock over a short vector (create, destroy and abort are cold paths;
/// the driving thread's progress never takes it).
static ABORTS: Mutex<Vec<SideEntry>> = Mutex::new(Vec::new());

/// An entry of the side table [`aborts`]: (comm handle, its abort handle, its idle wait).
pub(crate) type SideEntry = (usize, AbortHandle, Option<Arc<dyn IdleWait>>);

/// [`ABORTS`], locked (a poisoned lock is taken over: every critical section is a push, a
/// remove or a lookup, none leaves the vector half-changed).
pub(crate) fn aborts() -> std::sync::MutexGuard<'static, Vec<SideEntry>> {
    ABORTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The side-table entry of comm handle `h`: what `nccom_comm_abort` and `nccom_comm_idle_kick`
/// reach without the comm's handle slot (its abort handle and idle wait).
///
/// # Errors
/// `NRT_INVALID_HANDLE` (logged under `what`) when `h` is not a live comm of this library.
pub(crate) fn side_entry(what: &str, h: usize) -> Result<SideEntry, NrtStatus> {
    aborts()
        .iter()
        .find(|(k, ..)| *k == h)
        .cloned()
        .ok_or_else(|| {
            log::error!("{what}: {h:#x} is not a live comm of this library");
            NrtStatus::InvalidHandle
        })
}

/// Number of live comms (diagnostics and tests).
pub fn live_comms() -> usize {
    COMMS.live()
}

impl Guarded for CommEntry {
    fn poisoned(&mut self) -> &mut bool {
        &mut self.poisoned
    }
}

/// Runs `f` on the live comm `comm` (holding it busy), catching a panic inside as a poisoning
/// failure ([`call_guarded`]).
pub(crate) fn with_comm(
    what: &str,
    comm: *mut NccomComm,
    f: impl FnOnce(&mut Comm) -> Result<(), NrtStatus>,
) -> Result<(), NrtStatus> {
    with_entry(what, comm, |e| f(&mut e.comm))
}

/// As [`with_comm`], with the whole entry (the comm and its idle wait).
pub(crate) fn with_entry<R>(
    what: &str,
    comm: *mut NccomComm,
    f: impl FnOnce(&mut CommEntry) -> Result<R, NrtStatus>,
) -> Result<R, NrtStatus> {
    let h = c_handle(what, "comm", comm)?;
    with_live(what, "comm", &COMMS, h, |e| {
        call_guarded(what, "comm", h, &mut **e, f)
    })
}

fn validate_config(what: &str, cfg: &NccomCommConfig) -> Result<(), NrtStatus> {
    let bad = |msg: String| {
        log::error!("{what}: {msg}");
        Err(NrtStatus::Invalid)
    };
    if cfg.flags & !(NCCOM_COMM_CHECK_ADDRESSES | NCCOM_COMM_IDLE_WAIT) != 0 {
        return bad(format!("unknown flags {:#x}", cfg.flags));
    }
    if cfg.nranks == 0 || cfg.nranks > MAX_NRANKS || cfg.rank >= cfg.nranks {
        return bad(format!("rank {} of nranks {}", cfg.rank, cfg.nranks));
    }
    if cfg.comm_id >= MAX_COMM_ID {
        return bad(format!("comm id {} (must be < {MAX_COMM_ID})", cfg.comm_id));
    }
    let t = &cfg.transport;
    if t.reserved != 0 {
        return bad("transport.reserved is not zero".into());
    }
    let lf = &t.libfabric;
    let lf_zero = lf.provider.is_null() && lf.root_addr.is_null() && lf.bootstrap_timeout_ms == 0;
    match t.kind {
        NCCOM_TRANSPORT_MEM => {
            if t.mem_group.is_null() {
                return bad("NCCOM_TRANSPORT_MEM with a NULL mem_group".into());
            }
            if !lf_zero {
                return bad("NCCOM_TRANSPORT_MEM with non-zero libfabric fields".into());
            }
            Ok(())
        }
        NCCOM_TRANSPORT_LIBFABRIC if cfg!(feature = "libfabric") => {
            if !t.mem_group.is_null() {
                return bad("NCCOM_TRANSPORT_LIBFABRIC with a non-NULL mem_group".into());
            }
            // SAFETY: the C contract of `nccom_comm_config_t`: its strings are NULL or
            // NUL-terminated.
            unsafe { crate::bootstrap::validate(what, cfg) }
        }
        NCCOM_TRANSPORT_SHM => {
            if !t.mem_group.is_null() {
                return bad("NCCOM_TRANSPORT_SHM with a non-NULL mem_group".into());
            }
            if !lf.provider.is_null() {
                return bad("NCCOM_TRANSPORT_SHM with a libfabric provider".into());
            }
            // SAFETY: as above.
            unsafe { crate::bootstrap::validate(what, cfg) }
        }
        NCCOM_TRANSPORT_LIBFABRIC => bad(
            "this build of libnccom_proxy has no libfabric transport (build proxy-ffi with \
             --features libfabric, which needs libfabric-dev >= 1.17)"
                .into(),
        ),
        k => bad(format!("unknown transport kind {k}")),
    }
}

/// Creates a comm (rank, nranks, comm id, transport, device callbacks; see
/// `nccom_comm_config_t`) and stores its handle in `*out` (NULL on failure). Device callbacks:
/// `config->callbacks` if not NULL, else the registered table, else `nec_inc_semaphore` found
/// with `dlsym(RTLD_DEFAULT, ...)`.
///
/// `NCCOM_TRANSPORT_LIBFABRIC` (libraries built with the `libfabric` feature) is collective:
/// every rank of the comm calls this with the same `nranks`, `comm_id`, provider and root
/// address; rank 0 listens on the root address, and each call blocks until every rank is
/// connected (at most the bootstrap timeout: `bootstrap_timeout_ms`, else
/// `NEURON_RT_BOOTSTRAP_TIMEOUT`, else 120 s). `NCCOM_TRANSPORT_SHM` (ABI 1.5, every build) is
/// collective the same way, over the same bootstrap fields, every rank on this host.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a NULL `config` / `out`, unknown flags, rank >=
/// nranks, nranks out of range, comm id >= 2^15, an unknown transport kind, libfabric in a
/// build without it, a root address that does not parse, a comm id that differs from rank 0's,
/// a group whose nranks differs or whose rank was taken, a callbacks table without
/// `nec_inc_semaphore`; `NRT_INVALID_HANDLE` for a bad `mem_group`; `NRT_UNINITIALIZED` when
/// no `nec_inc_semaphore` can be found; `NRT_RESOURCE` when too many comms are live;
/// libfabric: `NRT_TIMEOUT` when a rank did not arrive in time; when a rank's endpoint could
/// not be opened or connected, that rank its own status (`NRT_INVALID` for a provider that is
/// not offered, the message listing those that are; `NRT_NETWORK_PROXY_FAILURE` for one that
/// refused) and every other rank `NRT_NETWORK_PROXY_FAILURE` naming it; shm:
/// `NRT_INVALID` when the ranks span hosts, `NRT_NETWORK_PROXY_FAILURE` when a rank cannot
/// create or map a segment or read a peer's memory (every rank reports it).
///
/// # Safety
/// `config` must be NULL or point to a readable `nccom_comm_config_t` (its `callbacks` NULL or
/// a readable table whose members have their declared signatures; its libfabric strings NULL
/// or NUL-terminated); `out` NULL or writable. The comm follows the memory contract of the
/// header.
#[no_mangle]
pub unsafe extern "C" fn nccom_comm_create(
    config: *const NccomCommConfig,
    out: *mut *mut NccomComm,
) -> NRT_STATUS {
    entry!(WHAT = "nccom_comm_create", {
        crate::trace::start_from_env();
        // SAFETY: `out`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_handle_out(WHAT, out) }?;
        // SAFETY: `config`: the C caller's pointer, valid or NULL by this function's contract.
        let cfg = *unsafe { c_in(WHAT, "config", config) }?;
        validate_config(WHAT, &cfg)?;
        let own = if cfg.callbacks.is_null() {
            None
        } else {
            // SAFETY: `cfg.callbacks`: the C caller's pointer, valid or NULL by this function's contract.
            Some(unsafe { c_in(WHAT, "config.callbacks", cfg.callbacks) }?)
        };
        let dev = device::resolve(own)?;
        let clock = Arc::new(MonotonicClock);
        if cfg.transport.kind == NCCOM_TRANSPORT_SHM {
            // SAFETY: the C contract of `nccom_comm_config_t` (strings NULL or NUL-terminated).
            let comm = unsafe { crate::shm::create(WHAT, &cfg, Arc::new(dev), clock) }?;
            return register_comm(WHAT, &cfg, comm, None, out);
        }
        #[cfg(feature = "libfabric")]
        if cfg.transport.kind == NCCOM_TRANSPORT_LIBFABRIC {
            // SAFETY: the C contract of `nccom_comm_config_t` (strings NULL or NUL-terminated).
            let (comm, idle) = unsafe { libfabric::create(WHAT, &cfg, Arc::new(dev), clock) }?;
            let idle = idle.map(|w| -> Arc<dyn IdleWait> { w });
            return register_comm(WHAT, &cfg, comm, idle, out);
        }
        // Last, because a rank's endpoint can be taken only once.
        let gh = cfg.transport.mem_group.addr();
        let transport = with_live(WHAT, "group", &GROUPS, gh, |fabric| {
            if fabric.nranks() != cfg.nranks {
                log::error!(
                    "{WHAT}: group has {} ranks, the comm {}",
                    fabric.nranks(),
                    cfg.nranks
                );
                return Err(NrtStatus::Invalid);
            }
            fabric.endpoint(cfg.rank).map_err(|e| {
                log::error!("{WHAT}: {e}");
                NrtStatus::Invalid
            })
        })?;
        let mut cc = CommConfig::new(cfg.rank, cfg.nranks, cfg.comm_id);
        if cfg.drain_limit_ns != 0 {
            cc.drain_limit_ns = cfg.drain_limit_ns;
        }
        let mut transport = transport;
        // Waits on another thread's copy give the CPU away instead of spinning on it.
        transport.set_relax(std::thread::yield_now);
        let transport: Box<dyn Transport> = Box::new(transport);
        let mut comm = Comm::new(cc, transport, Arc::new(dev), clock)?;
        comm.set_drain_relax(std::thread::yield_now);
        comm.set_drain_park(park_ns);
        register_comm(WHAT, &cfg, comm, None, out)
    })
}

/// The drain park hook of the library's comms (`Comm::set_drain_park`): a destroy or a C
/// caller's `neuronStopNetworkProxy` waiting on slow cancels sleeps, with backoff, instead of
/// yielding in a loop.
fn park_ns(ns: u64) {
    std::thread::sleep(std::time::Duration::from_nanos(ns));
}

/// The end of `nccom_comm_create`: the address mode, a handle, `*out`.
fn register_comm(
    what: &str,
    cfg: &NccomCommConfig,
    mut comm: Comm,
    idle: Option<Arc<dyn IdleWait>>,
    out: &mut *mut NccomComm,
) -> Result<(), NrtStatus> {
    if cfg.flags & NCCOM_COMM_CHECK_ADDRESSES == 0 {
        // SAFETY: the C contract (crate docs, header "memory contract"): the caller vouches
        // for every address it gives `neuronStartNetworkProxy`.
        unsafe { comm.trust_all_addresses() };
    }
    let abort = comm.abort_handle();
    let entry = Box::new(CommEntry {
        comm,
        idle: idle.clone(),
        poisoned: false,
    });
    let handle: *mut NccomComm = insert_live(what, "comm", &COMMS, entry)?;
    let h = handle.addr();
    let has_idle = idle.is_some();
    aborts().push((h, abort, idle));
    log::debug!(
        "{what}: comm {h:#x}: rank {} of {}, comm id {}, idle wait: {}",
        cfg.rank,
        cfg.nranks,
        cfg.comm_id,
        if has_idle { "CQ descriptor" } else { "none" }
    );
    *out = handle;
    Ok(())
}

/// Destroys a comm: stops its four streams (cancelling and draining requests in flight), closes
/// its transport and frees it. The handle, and every copy of it, is invalid afterwards.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed (double destroy) or unknown
/// comm; `NRT_FAILURE` for a comm in use by another thread.
///
/// # Safety
/// None beyond the C contract (the handle is checked, never dereferenced).
#[no_mangle]
pub unsafe extern "C" fn nccom_comm_destroy(comm: *mut NccomComm) -> NRT_STATUS {
    entry!(WHAT = "nccom_comm_destroy", {
        let h = c_handle(WHAT, "comm", comm)?;
        let entry = remove_live(WHAT, "comm", &COMMS, h)?;
        aborts().retain(|(k, ..)| *k != h);
        if entry.poisoned {
            log::error!("{WHAT}: comm {h:#x} was poisoned by a panic; leaking it");
            std::mem::forget(entry);
            return Ok(());
        }
        drop(entry);
        Ok(())
    })
}
