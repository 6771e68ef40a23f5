//! Comms: their config, `nrt_proxy_comm_create` (through the progress half's
//! `nccom_comm_create`, with a group's or a bootstrapped barrier), the progress half's handle of
//! a comm, destroy, and joining and leaving a proxy queue.

use std::collections::VecDeque;
use std::ptr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proxy_abi::*;
use proxy_bootstrap::{
    Bootstrap, BootstrapConfig, HostBarrier, HostBarrierConfig, SharedBootstrap,
};
use proxy_core::base::abort::AbortHandle;
use proxy_core::base::status::NrtStatus;
use proxy_core::driver::registry::Membership;
use proxy_core::driver::task::BarrierChannel;

use proxy_abi::boundary::{
    bad, c_handle_out, c_in, c_out, c_string, insert_live, remove_live, with_live,
};
use proxy_abi::entry;

use crate::bells::{CommBells, DeviceBell, DriverBell, SlotRing};
use crate::handles::{instance_of, with_comm, with_live_retrying, COMMS, GROUPS};
use crate::objects::{aborts, deadline_after, CommEntry};
use crate::types::*;

/// The progress half's C ABI version that first offers `NCCOM_TRANSPORT_SHM` (1.5).
const OWN_SHM_PROGRESS_ABI: u32 = 0x1_0005;

/// How long `nrt_proxy_comm_destroy` waits for a joined comm to leave its queue.
const DESTROY_LEAVE_TIMEOUT: Duration = Duration::from_secs(30);

/// Fills `*config` with the defaults: `struct_size`, `global_rank = NRT_PROXY_RANK_SAME`,
/// everything else 0 / NULL (the caller sets rank, nranks, comm id and the group or the
/// addresses).
///
/// Returns `NRT_SUCCESS`, or `NRT_INVALID` for a NULL `config`.
///
/// # Safety
/// `config` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_config_init(config: *mut NrtProxyCommConfig) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_comm_config_init", {
        // SAFETY: `config`: the C caller's pointer, valid or NULL by this function's contract.
        *unsafe { c_out(WHAT, "config", config) }? = NrtProxyCommConfig {
            struct_size: size_of::<NrtProxyCommConfig>() as u32,
            rank: 0,
            nranks: 0,
            comm_id: 0,
            global_rank: NRT_PROXY_RANK_SAME,
            flags: 0,
            group: ptr::null_mut(),
            provider: ptr::null(),
            root_addr: ptr::null(),
            barrier_root_addr: ptr::null(),
            bootstrap_timeout_ms: 0,
            callbacks: ptr::null(),
            drain_limit_ns: 0,
        };
        Ok(())
    })
}

/// The driver's barrier between processes: its own bootstrap at `root`, then a [`HostBarrier`]
/// of the comm over it (collective: every rank of the comm calls it), and its waiting flag
/// (`HostBarrier::waiting`: the comm's idle wait yields while it is set, `idle.rs`).
#[allow(clippy::type_complexity)]
fn process_barrier(
    what: &str,
    c: &NrtProxyCommConfig,
    root: &str,
) -> Result<(SharedBootstrap, Box<dyn BarrierChannel>, Arc<AtomicBool>), NrtStatus> {
    let fail = |e: &dyn std::fmt::Display, s: NrtStatus| {
        log::error!(
            "{what}: barrier bootstrap, rank {} of {}: {e}",
            c.rank,
            c.nranks
        );
        s
    };
    let mut bc = BootstrapConfig::from_env(Some(c.rank), Some(c.nranks), Some(root))
        .map_err(|e| fail(&e, e.status()))?;
    if c.bootstrap_timeout_ms != 0 {
        bc.timeout = Duration::from_millis(c.bootstrap_timeout_ms);
    }
    bc.comm_id = Some(c.comm_id);
    let boot = SharedBootstrap::new(Bootstrap::init(&bc).map_err(|e| fail(&e, e.status()))?);
    let hb = HostBarrier::setup(&boot, &HostBarrierConfig::new(c.comm_id))
        .map_err(|e| fail(&e, e.status()))?;
    let waiting = hb.waiting();
    Ok((boot, Box::new(hb), waiting))
}

/// Creates a comm through the loaded progress half (`nccom_comm_create`) and stores its handle
/// in `*out` (NULL on failure).
///
/// * `config->group` set: a rank of this process's group (in-memory transport; the group's
///   in-process barrier; rank 0 is the barrier leader). `nranks` must be the group's.
/// * `config->group` NULL: a rank of a comm between processes over libfabric (`provider`,
///   `root_addr`; collective and blocking, as `nccom_comm_create`), or, with `provider`
///   [`NRT_PROXY_PROVIDER_OWN_SHM`] (`"proxy-shm"`), over the engine's own shared memory
///   between the processes of one host (`NCCOM_TRANSPORT_SHM`: needs a progress half of C ABI
///   1.5, built with or without libfabric; bootstrapped from `root_addr` likewise). With
///   `barrier_root_addr`, the driver then bootstraps its own barrier channel (collective too;
///   every rank gives the same address); every rank is its own barrier leader.
///
/// The comm is not yet on a proxy queue: `nrt_proxy_comm_join` puts it there. It may also be
/// driven through the trampolines without joining (`nrt_proxy_comm_nccom`).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad instance or group; `NRT_INVALID` for a
/// NULL `config` / `out`, a wrong `struct_size`, a group of another instance or size, strings
/// with a group, a `provider` that is not UTF-8 or misspells `"proxy-shm"` (`"proxy_shm"`,
/// `"PROXY-SHM"`, `"proxyshm"`: refused naming the right one, not asked of libfabric),
/// `"proxy-shm"` over a progress half older than C ABI 1.5, and whatever `nccom_comm_create`
/// refuses (its status is returned: rank out of range, a rank taken twice, libfabric missing
/// from the progress half, ...); the bootstraps'
/// `NRT_TIMEOUT` / `NRT_NETWORK_PROXY_FAILURE`; `NRT_RESOURCE` when too many comms are live.
///
/// # Safety
/// `config` NULL or a readable `nrt_proxy_comm_config_t` (strings NULL or NUL-terminated,
/// `callbacks` NULL or a readable table); `out` NULL or writable. The comm follows the memory
/// contract of `nccom_proxy.h`.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_create(
    inst: *mut NrtProxy,
    config: *const NrtProxyCommConfig,
    out: *mut *mut NrtProxyComm,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_comm_create", {
        // SAFETY: `out`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_handle_out(WHAT, out) }?;
        let inst = instance_of(WHAT, inst)?;
        // SAFETY: `config`: the C caller's pointer, valid or NULL by this function's contract.
        let c = *unsafe { c_in(WHAT, "config", config) }?;
        if c.struct_size as usize != size_of::<NrtProxyCommConfig>() {
            return bad(
                WHAT,
                format_args!(
                    "config struct_size {} (this library: {}; fill it with \
                     nrt_proxy_comm_config_init)",
                    c.struct_size,
                    size_of::<NrtProxyCommConfig>()
                ),
            );
        }
        // SAFETY: the C contract: strings NULL or NUL-terminated.
        let barrier_root = unsafe { c_string(WHAT, "barrier_root_addr", c.barrier_root_addr) }?;
        let mut nc = NccomCommConfig {
            rank: c.rank,
            nranks: c.nranks,
            comm_id: c.comm_id,
            flags: c.flags,
            transport: NccomTransportDesc {
                kind: NCCOM_TRANSPORT_MEM,
                reserved: 0,
                mem_group: ptr::null_mut(),
                libfabric: NccomLibfabricDesc {
                    provider: ptr::null(),
                    root_addr: ptr::null(),
                    bootstrap_timeout_ms: 0,
                },
            },
            callbacks: c.callbacks,
            drain_limit_ns: c.drain_limit_ns,
        };
        let mut channel: Option<Box<dyn BarrierChannel>> = None;
        let mut group_bells = None;
        let bells = Arc::new(CommBells::default());
        let leader;
        if c.group.is_null() {
            // SAFETY: the C contract: strings NULL or NUL-terminated.
            let provider = unsafe { c_string(WHAT, "provider", c.provider) }?;
            let own_shm = provider.as_deref() == Some(NRT_PROXY_PROVIDER_OWN_SHM);
            if let Some(p) = provider
                .as_deref()
                .filter(|p| !own_shm && misspells_own_shm(p))
            {
                return bad(
                    WHAT,
                    format_args!(
                        "provider \"{p}\" is no libfabric provider; the engine's own shared \
                         memory is \"{NRT_PROXY_PROVIDER_OWN_SHM}\" (NRT_PROXY_PROVIDER_OWN_SHM)"
                    ),
                );
            }
            nc.transport.libfabric = NccomLibfabricDesc {
                provider: c.provider,
                root_addr: c.root_addr,
                bootstrap_timeout_ms: c.bootstrap_timeout_ms,
            };
            if own_shm {
                // The engine's own shared memory (NCCOM_TRANSPORT_SHM, progress half ABI 1.5):
                // bootstrapped from the same root and timeout, no provider.
                let v = inst.lib.abi_version();
                if v < OWN_SHM_PROGRESS_ABI {
                    return bad(
                        WHAT,
                        format_args!(
                            "provider \"{NRT_PROXY_PROVIDER_OWN_SHM}\" needs a progress half of \
                             C ABI 1.5 or later (NCCOM_TRANSPORT_SHM); the loaded one is {v:#x}"
                        ),
                    );
                }
                nc.transport.kind = NCCOM_TRANSPORT_SHM;
                nc.transport.libfabric.provider = ptr::null();
            } else {
                nc.transport.kind = NCCOM_TRANSPORT_LIBFABRIC;
            }
            leader = true;
            if inst.idle_block && own_shm {
                log::info!(
                    "{WHAT}: rank {}: NEURON_RT_PROXY_IDLE=block, but a comm over the own shared \
                     memory has no completion descriptor to sleep on: its driver yields",
                    c.rank
                );
            } else if inst.idle_block {
                let t = inst.lib.init();
                if t.comm_idle_arm.is_some() && t.comm_idle_available.is_some() {
                    nc.flags |= NCCOM_COMM_IDLE_WAIT;
                } else {
                    log::info!(
                        "{WHAT}: rank {}: NEURON_RT_PROXY_IDLE=block, but the progress half \
                         (C ABI {:#x}) predates the idle wait (1.4): its driver yields",
                        c.rank,
                        inst.lib.abi_version()
                    );
                }
            }
            if let Some(nap) = inst.cfg.worker_nap {
                log::warn!(
                    "{WHAT}: rank {}: worker_nap_us is set, and the network completions of a \
                     comm between processes ring no bell: its worker sees each up to {nap:?} \
                     late (use an instance without worker_nap_us for such comms)",
                    c.rank
                );
            }
        } else {
            if !c.provider.is_null() || !c.root_addr.is_null() || barrier_root.is_some() {
                return bad(
                    WHAT,
                    format_args!("a group comm with libfabric or barrier addresses"),
                );
            }
            let gh = c.group.addr();
            let (mem, endpoint, gb, barrier) =
                with_live_retrying(WHAT, "group", &GROUPS, gh, |g| {
                    if !Arc::ptr_eq(&g.inst, &inst) {
                        return bad(WHAT, format_args!("the group belongs to another instance"));
                    }
                    if g.nranks != c.nranks {
                        return bad(
                            WHAT,
                            format_args!("group of {} ranks, comm of {}", g.nranks, c.nranks),
                        );
                    }
                    let ep = g.barrier.endpoint(c.rank).inspect_err(|_| {
                        log::error!("{WHAT}: rank {} of a group of {}", c.rank, g.nranks);
                    })?;
                    Ok((g.mem.0.as_ptr(), ep, g.bells.clone(), g.barrier.clone()))
                })?;
            // The group barrier's bells of this rank, wired once (a comm created again for the
            // rank rewires them; a comm gone rings nothing: its queue and device are cleared).
            if let (Some(a), Some(p)) = (barrier.arrival_bell(c.rank), barrier.pass_bell(c.rank)) {
                a.wire(Some(Arc::new(DriverBell(bells.clone()))));
                p.wire(Some(Arc::new(DeviceBell(bells.clone()))));
            }
            group_bells = Some(gb);
            nc.transport.mem_group = mem;
            channel = Some(Box::new(endpoint));
            leader = c.rank == 0;
        }
        // SAFETY: `nc` is valid (strings and callbacks from the caller's config, per this
        // function's contract); the comm trusts the caller's addresses per the memory contract.
        let comm = unsafe { inst.lib.create_comm(&nc) }.inspect_err(|e| {
            log::error!(
                "{WHAT}: nccom_comm_create (rank {} of {}): {e}",
                c.rank,
                c.nranks
            );
        })?;
        let mut boot = None;
        let mut barrier_waiting = None;
        if let Some(root) = barrier_root {
            let (b, ch, waiting) = process_barrier(WHAT, &c, &root)?;
            boot = Some(b);
            channel = Some(ch);
            barrier_waiting = Some(waiting);
        }
        let idle = (nc.flags & NCCOM_COMM_IDLE_WAIT != 0)
            .then(|| crate::idle::CommIdle::of(inst.lib, comm.as_ptr().cast()))
            .flatten()
            .map(|wait| {
                Arc::new(proxy_core::driver::idle::Gated {
                    wait,
                    closed: barrier_waiting,
                })
            });
        if inst.idle_block && c.group.is_null() {
            log::info!(
                "{WHAT}: rank {}: idle: {}",
                c.rank,
                if idle.is_some() {
                    "blocks on the CQ descriptor"
                } else {
                    "yields (no CQ descriptor)"
                }
            );
        }
        let abort = AbortHandle::new();
        let nccom = comm.as_ptr().addr();
        if let Some(g) = &group_bells {
            g.add(&bells);
        }
        let entry = Box::new(CommEntry {
            inst: inst.clone(),
            member: None,
            comm,
            rank: c.rank,
            nranks: c.nranks,
            global_rank: if c.global_rank == NRT_PROXY_RANK_SAME {
                c.rank
            } else {
                c.global_rank
            },
            comm_id: c.comm_id,
            barrier: channel.map(|ch| Arc::new(Mutex::new(ch))),
            _boot: boot,
            leader,
            abort: abort.clone(),
            kept: Vec::new(),
            leftover: VecDeque::new(),
            async_error: NrtStatus::Success,
            last_error: String::new(),
            joined_once: false,
            poisoned: false,
            bells: bells.clone(),
            group_bells,
            idle,
        });
        let handle: *mut NrtProxyComm = insert_live(WHAT, "comm", &COMMS, entry)?;
        let h = handle.addr();
        crate::bells::register(h, bells);
        aborts().push((h, abort, nccom, inst.lib.init().comm_abort));
        log::debug!(
            "{WHAT}: comm {h:#x}: rank {} of {}, comm id {}",
            c.rank,
            c.nranks,
            c.comm_id
        );
        *out = handle;
        Ok(())
    })
}

/// The progress half's handle of a comm, for the trampolines (`ncclStartNetworkProxy`, ...):
/// a runtime that drives the seam itself. Do not drive a comm through the trampolines while it
/// has tasks on its proxy queue (the progress half refuses a second thread on a comm).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad comm; `NRT_INVALID` for a NULL `out`.
///
/// # Safety
/// `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_nccom(
    comm: *mut NrtProxyComm,
    out: *mut *mut NccomComm,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_comm_nccom", {
        // SAFETY: `out`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_handle_out(WHAT, out) }?;
        let p = with_comm(WHAT, comm, |e| Ok(e.comm.as_ptr()))?;
        *out = p.cast();
        Ok(())
    })
}

/// Destroys a comm: leaves its proxy queue first if it is joined (its tasks end `NRT_CLOSED`;
/// waits at most 30 s), then destroys the progress half's comm. The handle is invalid
/// afterwards; records not popped are dropped. A comm poisoned by a caught panic is leaked,
/// not freed (its state is unknown).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown comm;
/// `NRT_TIMEOUT` when the leave did not finish (the comm stays, call again); `NRT_FAILURE`
/// while another call uses it.
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_destroy(comm: *mut NrtProxyComm) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_comm_destroy", {
        let h = comm.addr();
        let poisoned = with_live(WHAT, "comm", &COMMS, h, |e| Ok(e.poisoned))?;
        if !poisoned {
            with_comm(WHAT, comm, |e| {
                if e.member.is_some() {
                    leave(WHAT, h, e, DESTROY_LEAVE_TIMEOUT.as_millis() as u64)?;
                }
                Ok(())
            })?;
        }
        let entry = remove_live(WHAT, "comm", &COMMS, h)?;
        aborts().retain(|(k, ..)| *k != h);
        crate::bells::unregister(h);
        if entry.poisoned {
            log::error!("{WHAT}: comm {h:#x} was poisoned by a panic; leaking it");
            std::mem::forget(entry);
            return Ok(());
        }
        let comm_id = entry.comm_id;
        let rank = entry.rank;
        let CommEntry { comm, .. } = *entry;
        comm.destroy().inspect_err(|e| {
            log::error!("{WHAT}: nccom_comm_destroy (comm {comm_id} rank {rank}): {e}");
        })
    })
}

/// Joins a comm to its proxy queue: the queue of group `global_rank / ranks_per_network_proxy`
/// of its instance, created (with its worker thread in thread mode) by its first comm and
/// shared by the others (refcounted; the last leave stops it).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad comm; `NRT_INVALID` for a comm that is
/// joined or was joined before (a left comm does not join again: create a new one); the
/// registry's status when the worker cannot start (`NRT_RESOURCE`, or `NRT_INVALID`), or
/// `NRT_RESOURCE` when the queue has no free slot.
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_join(comm: *mut NrtProxyComm) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_comm_join", {
        with_comm(WHAT, comm, |e| {
            if e.joined_once {
                return bad(
                    WHAT,
                    format_args!("comm {} rank {} joined before", e.comm_id, e.rank),
                );
            }
            let m = e.inst.registry.join(e.global_rank).inspect_err(|s| {
                log::error!("{WHAT}: rank {}: {s}", e.global_rank);
            })?;
            log::debug!(
                "{WHAT}: comm {} rank {}: group {}, slot {}",
                e.comm_id,
                e.rank,
                m.group(),
                m.slot.slot()
            );
            wire_slot(e, &m, true);
            if e.inst.idle_block {
                crate::idle::joined(m.slot.queue(), comm.addr(), e.idle.clone());
            }
            e.member = Some(m);
            e.joined_once = true;
            Ok(())
        })
    })
}

/// Wires (`on`) or unwires the comm's bells into its slot of the queue `m` (`bells.rs`): the
/// slot's moves ring the comm's host device and its group's other queues and devices, and the
/// comm's device rings the queue.
fn wire_slot(e: &CommEntry, m: &Membership, on: bool) {
    let q = m.slot.queue();
    let Some(slot) = q.slot_bell(m.slot.slot() as usize) else {
        return;
    };
    if on {
        slot.wire(Some(Arc::new(SlotRing {
            comm: e.bells.clone(),
            group: e.group_bells.clone(),
        })));
        e.bells.set_queue(Some(q));
    } else {
        slot.wire(None);
        e.bells.set_queue(None);
    }
}

/// The leave of a joined comm (`nrt_proxy_comm_leave`, `nrt_proxy_comm_destroy`).
fn leave(what: &str, h: usize, e: &mut CommEntry, timeout_ms: u64) -> Result<(), NrtStatus> {
    let m = e.member.take().ok_or_else(|| {
        log::error!("{what}: comm {} rank {} is not joined", e.comm_id, e.rank);
        NrtStatus::Closed
    })?;
    // Unwired before the slot is given back (it may be taken by another comm at once).
    wire_slot(e, &m, false);
    if e.inst.idle_block {
        crate::idle::left(m.slot.queue(), h);
    }
    let waiter = e.waiter();
    match e
        .inst
        .registry
        .leave_until(m, &waiter, Some(deadline_after(timeout_ms)))
    {
        Ok(records) => {
            e.leftover.extend(records);
            e.kept.clear();
            Ok(())
        }
        Err((s, m)) => {
            log::warn!(
                "{what}: comm {} rank {}: leave: {s} after {timeout_ms} ms",
                e.comm_id,
                e.rank
            );
            wire_slot(e, &m, true);
            if e.inst.idle_block {
                crate::idle::joined(m.slot.queue(), h, e.idle.clone());
            }
            e.member = Some(m);
            Err(s)
        }
    }
}

/// Leaves the comm's proxy queue: its queued and active tasks end `NRT_CLOSED` (network tasks
/// that filed blocks tear their streams down first); the records not yet popped stay with the
/// comm for `nrt_proxy_try_pop`. Waits at most `timeout_ms` for the queue's driver.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad comm; `NRT_CLOSED` for a comm that is
/// not joined (never joined, or a second leave); `NRT_TIMEOUT` when the driver did not close the
/// comm's tasks in time (nothing lost: call again).
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_leave(
    comm: *mut NrtProxyComm,
    timeout_ms: u64,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_comm_leave", {
        with_comm(WHAT, comm, |e| leave(WHAT, comm.addr(), e, timeout_ms))
    })
}

/// `true` when `provider` is [`NRT_PROXY_PROVIDER_OWN_SHM`] spelled another way (case, `_`,
/// `-` or none between the words): a libfabric provider of that name does not exist, and its
/// `fi_getinfo` refusal would not say which name was meant.
fn misspells_own_shm(provider: &str) -> bool {
    let letters = provider
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase());
    letters.eq("proxyshm".chars())
}
