//! The C ABI of the driver half: `libnrt_proxy.so`, the seed's libnrt role as a shared library
//! that `dlopen`s a progress half (`libnccom_proxy.so`, the libnccom role) and turns its passive
//! progress function into running collectives: proxy queues per group of ranks, worker threads
//! or caller-driven progress, network and barrier tasks, trigger words and 24-byte status
//! records. Header: `ffi/driver/include/nrt_proxy.h` (cbindgen, from this file and
//! `src/types.rs`); it includes `nccom_proxy.h` for the FIFO entry types.
//!
//! ```text
//!  C runtime ── nrt_proxy_* ──► this library ── registry, proxy queues, workers (proxy-runtime)
//!                                   │  network task ── seam table ─► neuronStartNetworkProxy ...
//!                                   │  comms, device callbacks ─────► nccom_comm_create ...
//!                                   └─ dlopen(progress_lib | $NEURON_RT_PROXY_PROGRESS_LIB |
//!                                             <own dir>/libnccom_proxy.so.1 |
//!                                             "libnccom_proxy.so.1"), ABI major checked
//! ```
//! The library exports no progress-half symbol: the comms, the seam and the device callbacks
//! are reached only through the loaded library's handle ([`proxy_runtime::loader`]).
//!
//! # The C contract
//! * **Handles** (`nrt_proxy_t`, `nrt_proxy_group_t`, `nrt_proxy_comm_t`, `nrt_proxy_plan_t`)
//!   are opaque, generation-checked and carry the instance id of the loaded copy of the library
//!   (`proxy_abi::handles`, tagged with [`instance_id`]): NULL, destroyed, never-created
//!   and other copies' handles answer `NRT_INVALID_HANDLE` and are never dereferenced.
//! * **Threads**: see the README's table. One thread at a time per comm (a concurrent call on
//!   the same comm answers `NRT_FAILURE`), except `nrt_proxy_comm_abort` (any thread, any time).
//!   Different comms, groups and instances are independent.
//! * **Memory**: FIFO arrays, schedules and word lists are copied at submit; the buffers and
//!   host words they name must stay valid until the task's final record is popped (or the comm
//!   left). Host words are 4-byte aligned `uint32_t`s accessed only atomically.
//! * **No panic crosses the ABI**: every entry point runs under `catch_unwind` and answers
//!   `NRT_FAILURE` with a log line.
//! * **Logs**: stderr through the `log` facade; `NEURON_RT_LOG_LEVEL` (default `ERROR`),
//!   `RUST_LOG` for finer filters. `nrt_proxy_init` logs the version and the resolved
//!   configuration at `INFO`.
//!
//! Seed: libnrt's `ncclInit` (the `dlopen("libnccom.so")` and slot table), `enc_proxy_queue`,
//! the trampolines `ncclStartNetworkProxy` / `ncclNetworkProxyProgress` (nrt:0x1c1aa0) /
//! `ncclStopNetworkProxy`, §1–§3.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![allow(non_snake_case)]

pub mod host_device;
mod locate;
pub mod plan;
pub mod types;

use std::collections::VecDeque;
use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use proxy_abi::*;
use proxy_bootstrap::{
    Bootstrap, BootstrapConfig, HostBarrier, HostBarrierConfig, SharedBootstrap,
};
use proxy_core::base::abort::AbortHandle;
use proxy_core::base::host_word::HostWord;
use proxy_core::base::status::NrtStatus;
use proxy_core::base::time::{Clock, MonotonicClock};
use proxy_core::driver::inval::Invalidation;
use proxy_core::driver::queue::{DriveMode, QueueConfig, TaskBox, Tick};
use proxy_core::driver::record::{RunState, TaskRecord};
use proxy_core::driver::registry::Membership;
use proxy_core::driver::task::{
    BarrierChannel, BarrierTask, BarrierTaskSpec, BarrierTicket, BlockFifos, CommHandle,
    NetworkTask, NetworkTaskSpec, SharedMemBarrier,
};
use proxy_core::driver::trigger::{TriggerWords, MAX_TRIGGER_WORDS};
use proxy_runtime::dump::{dump_all, DumpSignal, SIGNAL_DUMP_WAIT};
use proxy_runtime::loader::{LoadedComm, LoadedMemGroup, ProgressLib};
use proxy_runtime::{Config, LinuxRegistry};

pub use host_device::*;
pub use plan::*;
use proxy_abi::boundary::{
    bad, c_in, c_out, c_slice, c_string, guard, lookup_status, panic_message,
};
use proxy_abi::handles::{HandleTable, InstanceId, LookupError};
pub use types::*;

/// The environment variable naming the progress half to load when the config does not.
pub const PROGRESS_LIB_ENV: &str = "NEURON_RT_PROXY_PROGRESS_LIB";
/// The progress half loaded when neither the config nor the environment names one: its SONAME.
pub const PROGRESS_LIB_SONAME: &str = "libnccom_proxy.so.1";
/// How long `nrt_proxy_comm_destroy` waits for a joined comm to leave its queue.
const DESTROY_LEAVE_TIMEOUT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Objects and their handle tables
// ---------------------------------------------------------------------------------------------

/// A library instance: the loaded progress half, the resolved configuration, the registry.
struct Instance {
    lib: &'static ProgressLib,
    cfg: Config,
    /// The handler of `cfg.dump_signal` (dumps this registry); dropped (removed, its watcher
    /// joined) before the registry.
    _dump_signal: Option<DumpSignal>,
    /// Shared with the dump handler's watcher thread (which holds it only while it dumps).
    registry: Arc<LinuxRegistry>,
}

/// The variables `nrt_proxy_init` reads from the process environment itself: the process-wide
/// settings the C configuration has no field for (libnrt reads them at init).
const INIT_ENV: [&str; 2] = [
    "NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY",
    "NEURON_RT_PROXY_DUMP_SIGNAL",
];

/// A group of this process's ranks: the in-memory transport group of the progress half and the
/// in-process barrier.
struct Group {
    inst: Arc<Instance>,
    nranks: u32,
    mem: SendMemGroup,
    barrier: SharedMemBarrier,
}

/// A [`LoadedMemGroup`], movable between threads (its handle is only passed to the library,
/// which checks it; the library is loaded for the life of the process).
struct SendMemGroup(LoadedMemGroup<'static>);
// SAFETY: the group handle is an opaque integer the progress library looks up in its own
// thread-safe table; nothing dereferences it here.
unsafe impl Send for SendMemGroup {}

/// A barrier endpoint shared by a comm's successive barrier tasks (the endpoint counts
/// generations; each task takes its channel by value). One barrier task of a comm runs at a
/// time (tasks of a slot run in order), so the lock is never contended.
struct SharedChannel(Arc<Mutex<Box<dyn BarrierChannel>>>);

impl BarrierChannel for SharedChannel {
    fn arrive(&mut self) -> Result<BarrierTicket, NrtStatus> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .arrive()
    }

    fn poll(&mut self, ticket: BarrierTicket) -> Result<bool, NrtStatus> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .poll(ticket)
    }
}

/// A comm of this library.
struct CommEntry {
    inst: Arc<Instance>,
    /// Declared before `comm`: a membership's tasks carry the comm's handle, so the slot is
    /// given back (tasks closed) before the comm is destroyed, also on an unplanned drop.
    member: Option<Membership>,
    comm: LoadedComm<'static>,
    rank: u32,
    global_rank: u32,
    comm_id: u32,
    /// This rank's barrier endpoint (`None`: no barrier channel).
    barrier: Option<Arc<Mutex<Box<dyn BarrierChannel>>>>,
    /// The driver's bootstrap between processes (kept for the barrier's life).
    _boot: Option<SharedBootstrap>,
    /// `true` on the rank that increments the barrier-done semaphores.
    leader: bool,
    /// The driver's abort word, carried by every task of the comm.
    abort: AbortHandle,
    /// Tasks submitted with `NRT_PROXY_TASK_KEEP` that came back, awaiting a resubmit.
    kept: Vec<TaskBox>,
    /// Records collected by a leave, handed out by the next pops.
    leftover: VecDeque<TaskRecord>,
    /// The first failure seen in a record (`Success`: none).
    async_error: NrtStatus,
    /// The most recent failure of a call on the comm or of a task record, with its cause.
    last_error: String,
    /// Set once `nrt_proxy_comm_join` succeeded (a second join is refused).
    joined_once: bool,
    /// A panic was caught inside a call on this comm: its state is unknown.
    poisoned: bool,
}

/// Handle kinds (bits 48..52 of a handle).
const KIND_INSTANCE: u8 = 1;
const KIND_GROUP: u8 = 2;
const KIND_COMM: u8 = 3;

static INSTANCES: HandleTable<Arc<Instance>> =
    HandleTable::with_instance(KIND_INSTANCE, instance_id);
static GROUPS: HandleTable<Box<Group>> = HandleTable::with_instance(KIND_GROUP, instance_id);
static COMMS: HandleTable<Box<CommEntry>> = HandleTable::with_instance(KIND_COMM, instance_id);

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

/// The abort side table: what `nrt_proxy_comm_abort` reads, so an abort never waits for (or is
/// refused by) a call that holds the comm's slot BUSY. Entry: (comm handle, the driver's abort
/// word, the progress half's comm handle, its `nccom_comm_abort`).
type AbortEntry = (
    usize,
    AbortHandle,
    usize,
    Option<proxy_abi::NccomCommAbortFn>,
);
static ABORTS: Mutex<Vec<AbortEntry>> = Mutex::new(Vec::new());

fn aborts() -> MutexGuard<'static, Vec<AbortEntry>> {
    ABORTS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Every progress half loaded so far, by the name it was loaded with (loaded once per name, for
/// the life of the process, as the seed's runtime does).
static LIBS: Mutex<Vec<(PathBuf, &'static ProgressLib)>> = Mutex::new(Vec::new());
/// The first progress half loaded: the one the exported trampolines call.
static DEFAULT_LIB: OnceLock<&'static ProgressLib> = OnceLock::new();

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

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Host words from a C array of pointers: each non-null and 4-byte aligned.
///
/// # Safety
/// As [`c_slice`]; each word must follow the memory contract (crate docs).
unsafe fn host_words(
    what: &str,
    name: &str,
    ptr: *const *mut NccomHostWord,
    len: usize,
) -> Result<Vec<HostWord>, NrtStatus> {
    // SAFETY: the caller's contract.
    let ps = unsafe { c_slice(what, name, ptr, len) }?;
    ps.iter()
        .enumerate()
        .map(|(i, p)| {
            // SAFETY: the C contract: a host word the caller keeps live and accesses atomically.
            unsafe { HostWord::from_addr(*p as usize as u64) }.ok_or_else(|| {
                log::error!("{what}: {name}[{i}] = {p:p} is NULL or not 4-byte aligned");
                NrtStatus::Invalid
            })
        })
        .collect()
}

fn trigger_words(what: &str, words: &[HostWord]) -> Result<TriggerWords, NrtStatus> {
    if words.len() > MAX_TRIGGER_WORDS {
        return bad(
            what,
            format_args!(
                "{} trigger words (at most {MAX_TRIGGER_WORDS})",
                words.len()
            ),
        );
    }
    TriggerWords::new(words)
}

fn ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
}

/// A task's no-progress limit from its `timeout_ms`.
fn task_timeout(inst: &Instance, timeout_ms: u64) -> Option<u64> {
    match timeout_ms {
        NRT_PROXY_TIMEOUT_DEFAULT => inst.cfg.timeout_ns(),
        NRT_PROXY_TIMEOUT_NONE => None,
        ms => Some(ms_to_ns(ms)),
    }
}

/// The deadline `timeout_ms` from now, on the waiters' clock.
fn deadline_after(timeout_ms: u64) -> u64 {
    MonotonicClock.now_ns().saturating_add(ms_to_ns(timeout_ms))
}

/// Runs `f` on the live comm `comm` (holding it busy). A panic inside poisons the comm: its
/// state is unknown, so later calls on it answer `NRT_FAILURE` and destroy leaks it rather than
/// free it.
fn with_comm<R>(
    what: &str,
    comm: *mut NrtProxyComm,
    f: impl FnOnce(&mut CommEntry) -> Result<R, NrtStatus>,
) -> Result<R, NrtStatus> {
    keep_main_thread_handle();
    let h = comm.addr();
    COMMS
        .with(h, |e| {
            if e.poisoned {
                log::error!("{what}: comm {h:#x} is poisoned by an earlier panic");
                return Err(NrtStatus::Failure);
            }
            proxy_abi::refusal::clear_last();
            match catch_unwind(AssertUnwindSafe(|| f(e))) {
                Ok(Err(s)) => {
                    // A refused call is the comm's most recent failure, with its cause (the
                    // refusal's text names the argument or peer). Answers that are not failures
                    // (an empty queue, a wait that timed out) refuse nothing.
                    match proxy_abi::refusal::take_last() {
                        Some(why) => e.last_error = format!("{why} ({})", s.as_str()),
                        None if !matches!(
                            s,
                            NrtStatus::QueueEmpty | NrtStatus::QueueFull | NrtStatus::Timeout
                        ) =>
                        {
                            e.last_error = format!("{what}: {}", s.as_str());
                        }
                        None => {}
                    }
                    Err(s)
                }
                Ok(r) => r,
                Err(p) => {
                    e.poisoned = true;
                    log::error!(
                        "{what}: caught a panic in comm {h:#x} ({}); comm poisoned, returning \
                         NRT_FAILURE",
                        panic_message(&*p)
                    );
                    Err(NrtStatus::Failure)
                }
            }
        })
        .map_err(|e| lookup_status(what, "comm", h, e))?
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

fn instance_of(what: &str, inst: *mut NrtProxy) -> Result<Arc<Instance>, NrtStatus> {
    let h = inst.addr();
    retry_busy(|| INSTANCES.with(h, |i| i.clone()))
        .map_err(|e| lookup_status(what, "instance", h, e))
}

impl CommEntry {
    fn member(&mut self, what: &str) -> Result<&mut Membership, NrtStatus> {
        self.member.as_mut().ok_or_else(|| {
            log::error!(
                "{what}: comm {} rank {} is not joined to a proxy queue (never joined, or left)",
                self.comm_id,
                self.rank
            );
            NrtStatus::Closed
        })
    }

    fn waiter(&self) -> proxy_core::driver::wake::Waiter<'static> {
        proxy_runtime::worker::waiter(self.inst.cfg.spin)
    }

    /// Notes a record handed to the caller: a failure becomes the comm's last error (the most
    /// recent one) and, if it is the first, its async error (sticky, as NCCL's).
    fn note(&mut self, r: TaskRecord) -> NrtProxyTaskRecord {
        let s = r.status();
        if s != NrtStatus::Success {
            if self.async_error == NrtStatus::Success {
                self.async_error = s;
            }
            self.last_error = format!(
                "task {} of comm {} (rank {}) ended {s}",
                r.task_id, self.comm_id, self.rank
            );
        }
        r.into()
    }

    /// Moves tasks that came back (`NRT_PROXY_TASK_KEEP`) from the slot to `kept`.
    fn collect_returned(&mut self) {
        if let Some(m) = self.member.as_mut() {
            while let Some(t) = m.slot.take_returned() {
                self.kept.push(t);
            }
        }
    }

    fn submit(&mut self, what: &str, task: TaskBox, keep: bool) -> Result<(), NrtStatus> {
        // Kept tasks that came back leave the slot's return ring (which bounds the tasks kept
        // out) for the comm's list.
        self.collect_returned();
        let m = self.member(what)?;
        let r = if keep {
            m.slot.submit_returning(task)
        } else {
            m.slot.submit(task)
        };
        r.map_err(|rej| {
            if rej.status == NrtStatus::QueueFull {
                log::debug!("{what}: queue full; the task stays with the caller");
            } else {
                log::error!("{what}: refused: {}", rej.status);
            }
            rej.status
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Version, status names, configuration, instances
// ---------------------------------------------------------------------------------------------

/// The ABI version of this library: `NRT_PROXY_ABI_VERSION`, `(major << 16) | minor`. A caller
/// built against a header with another major must not use the library.
#[no_mangle]
pub extern "C" fn nrt_proxy_abi_version() -> u32 {
    NRT_PROXY_ABI_VERSION
}

/// The name of a status value (`"NRT_SUCCESS"`, ...), or `"NRT_UNKNOWN_STATUS"`: the same table
/// as `libnccom_proxy.so`'s function of the same name. The string is static; never free it.
///
/// Seed: `nrt_get_status_as_str`.
#[no_mangle]
pub extern "C" fn nrt_get_status_as_str(status: NRT_STATUS) -> *const c_char {
    status_name(status).as_ptr()
}

fn default_config() -> NrtProxyConfig {
    let d = Config::default();
    NrtProxyConfig {
        struct_size: size_of::<NrtProxyConfig>() as u32,
        version: NRT_PROXY_CONFIG_VERSION,
        progress_lib: ptr::null(),
        ranks_per_network_proxy: d.ranks_per_network_proxy,
        drive_mode: NRT_PROXY_DRIVE_THREAD,
        spin_us: d.spin.as_micros() as u64,
        exec_timeout_ms: d.exec_timeout.map_or(0, |t| t.as_millis() as u64),
        one_thread_per_core: 0,
        early_completion: 0,
        queue_slots: 0,
        submit_capacity: 0,
        status_capacity: 0,
        reserved: 0,
    }
}

/// Fills `*config` with the defaults (`struct_size`, `version`, no progress-library path, one
/// rank per proxy, thread mode, 50 µs spin, 30 s task limit, default queue sizes).
///
/// Returns `NRT_SUCCESS`, or `NRT_INVALID` for a NULL `config`.
///
/// # Safety
/// `config` must be NULL or point to writable storage for an `nrt_proxy_config_t`.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_config_init(config: *mut NrtProxyConfig) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_config_init";
    guard(WHAT, || {
        // SAFETY: `config`: the C caller's pointer, valid or NULL by this function's contract.
        *unsafe { c_out(WHAT, "config", config) }? = default_config();
        Ok(())
    })
}

/// Fills `*config` with the defaults overridden by the environment:
/// `NEURON_RT_RANKS_PER_NETWORK_PROXY`, `NEURON_RT_ONE_THREAD_PER_CORE`,
/// `NEURON_RT_PROXY_SPIN_US`, `NEURON_RT_EXEC_TIMEOUT` (seconds), `NEURON_RT_PROXY_DRIVE_MODE`,
/// `NEURON_RT_DBG_PROXY_EARLY_COMPLETION` (the table of `proxy_runtime::Config`). The progress
/// library stays NULL (`nrt_proxy_init` reads `NEURON_RT_PROXY_PROGRESS_LIB` itself), and so do
/// the two process-wide settings `nrt_proxy_init` reads from the environment whatever the
/// config (`NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY`, `NEURON_RT_PROXY_DUMP_SIGNAL`); a
/// malformed value of either is refused here too.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a NULL `config` or a malformed variable (the log
/// names it; `*config` then holds the defaults).
///
/// # Safety
/// As [`nrt_proxy_config_init`].
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_config_from_env(config: *mut NrtProxyConfig) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_config_from_env";
    guard(WHAT, || {
        // SAFETY: `config`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_out(WHAT, "config", config) }?;
        *out = default_config();
        let c = Config::from_env().map_err(|e| {
            log::error!("{WHAT}: {e}");
            NrtStatus::Invalid
        })?;
        out.ranks_per_network_proxy = c.ranks_per_network_proxy;
        out.drive_mode = match c.drive_mode {
            DriveMode::Thread => NRT_PROXY_DRIVE_THREAD,
            DriveMode::Caller => NRT_PROXY_DRIVE_CALLER,
        };
        out.spin_us = u64::try_from(c.spin.as_micros()).unwrap_or(u64::MAX);
        out.exec_timeout_ms = c
            .exec_timeout
            .map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        out.one_thread_per_core = u32::from(c.one_thread_per_core);
        out.early_completion = u32::from(c.early_completion);
        Ok(())
    })
}

/// The runtime configuration of a checked C config.
fn resolve_config(what: &str, c: &NrtProxyConfig) -> Result<Config, NrtStatus> {
    if c.struct_size as usize != size_of::<NrtProxyConfig>()
        || c.version != NRT_PROXY_CONFIG_VERSION
    {
        return bad(
            what,
            format_args!(
                "config struct_size {} / version {} (this library: {} / {}; fill it with \
                 nrt_proxy_config_init)",
                c.struct_size,
                c.version,
                size_of::<NrtProxyConfig>(),
                NRT_PROXY_CONFIG_VERSION
            ),
        );
    }
    if c.reserved != 0 {
        return bad(what, format_args!("config.reserved is not 0"));
    }
    if c.ranks_per_network_proxy == 0 {
        return bad(what, format_args!("ranks_per_network_proxy is 0"));
    }
    let drive_mode = match c.drive_mode {
        NRT_PROXY_DRIVE_THREAD => DriveMode::Thread,
        NRT_PROXY_DRIVE_CALLER => DriveMode::Caller,
        m => return bad(what, format_args!("unknown drive_mode {m}")),
    };
    let flag = |name: &str, v: u32| match v {
        0 => Ok(false),
        1 => Ok(true),
        v => bad(what, format_args!("{name} is {v} (0 or 1)")),
    };
    let d = QueueConfig::default();
    let size = |v: u32, dflt: usize| if v == 0 { dflt } else { v as usize };
    let queue = QueueConfig {
        slots: size(c.queue_slots, d.slots),
        submit_capacity: size(c.submit_capacity, d.submit_capacity),
        status_capacity: size(c.status_capacity, d.status_capacity),
    };
    if queue.validate().is_err() {
        return bad(
            what,
            format_args!("queue sizes {queue:?}: capacities must be powers of two"),
        );
    }
    Ok(Config {
        ranks_per_network_proxy: c.ranks_per_network_proxy,
        one_thread_per_core: flag("one_thread_per_core", c.one_thread_per_core)?,
        cpu_affinity: Vec::new(),
        spin: Duration::from_micros(c.spin_us),
        exec_timeout: (c.exec_timeout_ms != 0).then(|| Duration::from_millis(c.exec_timeout_ms)),
        early_completion: flag("early_completion", c.early_completion)?,
        log_level: None,
        queue,
        drive_mode,
        dump_signal: None,
    })
}

/// Loads (once per name) the first of `names` that opens as a progress half of this ABI major
/// (`locate.rs` gives the order); logs at INFO which one it took.
///
/// # Errors
/// `NrtStatus::Invalid` when none does; the log names every one tried and why it failed.
fn load_first_progress_lib(
    what: &str,
    names: Vec<PathBuf>,
) -> Result<&'static ProgressLib, NrtStatus> {
    let mut libs = LIBS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut failures = Vec::new();
    for name in names {
        if let Some((_, lib)) = libs.iter().find(|(n, _)| *n == name) {
            return Ok(lib);
        }
        match ProgressLib::open(&name) {
            Ok(lib) => {
                let lib = lib.leak();
                log::info!("{what}: progress half {}", name.display());
                libs.push((name, lib));
                let _ = DEFAULT_LIB.set(lib);
                return Ok(lib);
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    log::error!(
        "{what}: cannot load the progress half (set config.progress_lib or {PROGRESS_LIB_ENV}, \
         or install {PROGRESS_LIB_SONAME} beside libnrt_proxy.so): {}",
        failures.join("; ")
    );
    Err(NrtStatus::Invalid)
}

/// Creates a library instance from `*config` (NULL: the defaults): loads the progress half
/// (`config->progress_lib`, else `$NEURON_RT_PROXY_PROGRESS_LIB`, else `libnccom_proxy.so.1`
/// beside this library, else `libnccom_proxy.so.1` by the dynamic linker's search: `locate.rs`;
/// each name is loaded once per process and never unloaded), checks that its
/// `nccom_abi_version()` major is `NCCOM_PROXY_ABI_VERSION_MAJOR`, builds the registry of proxy
/// queues, logs the versions and the resolved configuration (`INFO`), and stores the handle in
/// `*out` (NULL on failure). Several instances may live at once; the first progress half loaded
/// is the one the exported trampolines call.
///
/// Two process-wide settings come from the environment, as libnrt reads them at init, whatever
/// the config: `NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY` (a CPU list like `0,2-3`: each new
/// proxy queue's worker thread is pinned to the next CPU of the list, round robin) and
/// `NEURON_RT_PROXY_DUMP_SIGNAL` (`USR1` or `USR2`: the signal dumps every proxy queue of this
/// instance to the log, from a watcher thread; `nrt_proxy_fini` removes the handler once
/// nothing holds the instance).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID` for a NULL `out`, a config of another size or version,
/// a bad field or a malformed variable above (the log names it), a progress half that cannot
/// be loaded, lacks an entry point or has another ABI major; `NRT_RESOURCE` when too many
/// instances are live or the signal handler cannot be installed.
///
/// # Safety
/// `config` NULL or a readable `nrt_proxy_config_t` (its `progress_lib` NULL or
/// NUL-terminated); `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_init(
    config: *const NrtProxyConfig,
    out: *mut *mut NrtProxy,
) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_init";
    guard(WHAT, || {
        // SAFETY: `out`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_out(WHAT, "out", out) }?;
        *out = ptr::null_mut();
        let c = if config.is_null() {
            default_config()
        } else {
            // SAFETY: `config`: the C caller's pointer, valid or NULL by this function's contract.
            *unsafe { c_in(WHAT, "config", config) }?
        };
        let mut cfg = resolve_config(WHAT, &c)?;
        let env = Config::from_lookup(|k| {
            INIT_ENV
                .contains(&k)
                .then(|| std::env::var(k).ok())
                .flatten()
        })
        .map_err(|e| {
            log::error!("{WHAT}: {e}");
            NrtStatus::Invalid
        })?;
        cfg.cpu_affinity = env.cpu_affinity;
        cfg.dump_signal = env.dump_signal;
        // SAFETY: the C contract (NULL or NUL-terminated).
        let path = unsafe { c_string(WHAT, "config.progress_lib", c.progress_lib) }?;
        let explicit = path.or_else(|| {
            std::env::var(PROGRESS_LIB_ENV)
                .ok()
                .filter(|s| !s.is_empty())
        });
        let own_dir = locate::dir_of(nrt_proxy_init as *const c_void);
        let lib = load_first_progress_lib(WHAT, locate::candidates(explicit, own_dir))?;
        let registry = proxy_runtime::registry(&cfg).map_err(|e| {
            log::error!("{WHAT}: registry: {e}");
            NrtStatus::Invalid
        })?;
        let registry = Arc::new(registry);
        let dump_signal = match cfg.dump_signal {
            Some(sig) => {
                let weak = Arc::downgrade(&registry);
                let handler = DumpSignal::install(sig, move || {
                    if let Some(r) = weak.upgrade() {
                        dump_all(&r, SIGNAL_DUMP_WAIT);
                    }
                });
                Some(handler.map_err(|e| {
                    log::error!("{WHAT}: NEURON_RT_PROXY_DUMP_SIGNAL: {e}");
                    NrtStatus::Resource
                })?)
            }
            None => None,
        };
        let inst = Arc::new(Instance {
            lib,
            cfg,
            _dump_signal: dump_signal,
            registry,
        });
        let h = INSTANCES.insert(inst.clone()).map_err(|_| {
            log::error!("{WHAT}: too many live instances");
            NrtStatus::Resource
        })?;
        log::info!(
            "libnrt_proxy {} (C ABI {NRT_PROXY_ABI_VERSION:#x}, instance id {:#x}): progress \
             half {} (C ABI {:#x}); configuration {:?}",
            env!("CARGO_PKG_VERSION"),
            instance_id().id,
            lib.path().display(),
            lib.abi_version(),
            inst.cfg
        );
        *out = ptr::without_provenance_mut(h);
        Ok(())
    })
}

/// Destroys an instance handle. Groups and comms created from it keep working until they are
/// destroyed (they hold the instance's registry); the progress half stays loaded.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown instance.
///
/// # Safety
/// None beyond the C contract (the handle is checked, never dereferenced).
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_fini(inst: *mut NrtProxy) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_fini";
    guard(WHAT, || {
        let h = inst.addr();
        retry_busy(|| INSTANCES.remove(h)).map_err(|e| lookup_status(WHAT, "instance", h, e))?;
        // Refusals still only counted are reported now, not lost with the instance.
        proxy_abi::refusal::flush();
        Ok(())
    })
}

/// Sets (or, with NULL, clears) the loaded progress half's process-wide device callbacks
/// (`nccom_register_device_callbacks`), used by comms created later without their own table.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad instance; the progress half's status
/// (`NRT_INVALID` for a table without `nec_inc_semaphore`).
///
/// # Safety
/// `callbacks` NULL or a table that stays readable for the life of the process (its members
/// with their declared signatures).
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_register_device_callbacks(
    inst: *mut NrtProxy,
    callbacks: *const NccomDeviceCallbacks,
) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_register_device_callbacks";
    guard(WHAT, || {
        let inst = instance_of(WHAT, inst)?;
        let cb = if callbacks.is_null() {
            None
        } else {
            // SAFETY: `callbacks`: the C caller's pointer, valid or NULL by this function's contract.
            Some(unsafe { c_in(WHAT, "callbacks", callbacks) }?)
        };
        inst.lib.register_device_callbacks(cb)
    })
}

// ---------------------------------------------------------------------------------------------
// Groups
// ---------------------------------------------------------------------------------------------

/// Creates a group of `nranks` ranks of this process: an in-memory transport group of the
/// progress half (`nccom_mem_group_create`) and an in-process barrier. Each rank's comm is
/// created with `group` set.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad instance; `NRT_INVALID` for a NULL
/// `out` or `nranks` out of range; `NRT_RESOURCE` when too many groups are live.
///
/// # Safety
/// `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_group_create(
    inst: *mut NrtProxy,
    nranks: u32,
    out: *mut *mut NrtProxyGroup,
) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_group_create";
    guard(WHAT, || {
        // SAFETY: `out`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_out(WHAT, "out", out) }?;
        *out = ptr::null_mut();
        let inst = instance_of(WHAT, inst)?;
        let mem = inst.lib.mem_group(nranks).inspect_err(|e| {
            log::error!("{WHAT}: nccom_mem_group_create({nranks}): {e}");
        })?;
        let barrier = SharedMemBarrier::new(nranks)?;
        let g = Box::new(Group {
            inst,
            nranks,
            mem: SendMemGroup(mem),
            barrier,
        });
        let h = GROUPS.insert(g).map_err(|_| {
            log::error!("{WHAT}: too many live groups");
            NrtStatus::Resource
        })?;
        *out = ptr::without_provenance_mut(h);
        Ok(())
    })
}

/// Destroys a group handle. Comms created over it keep working.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown group.
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_group_destroy(group: *mut NrtProxyGroup) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_group_destroy";
    guard(WHAT, || {
        let h = group.addr();
        retry_busy(|| GROUPS.remove(h)).map_err(|e| lookup_status(WHAT, "group", h, e))?;
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Comms
// ---------------------------------------------------------------------------------------------

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
    const WHAT: &str = "nrt_proxy_comm_config_init";
    guard(WHAT, || {
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
/// of the comm over it (collective: every rank of the comm calls it).
fn process_barrier(
    what: &str,
    c: &NrtProxyCommConfig,
    root: &str,
) -> Result<(SharedBootstrap, Box<dyn BarrierChannel>), NrtStatus> {
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
    Ok((boot, Box::new(hb)))
}

/// Creates a comm through the loaded progress half (`nccom_comm_create`) and stores its handle
/// in `*out` (NULL on failure).
///
/// * `config->group` set: a rank of this process's group (in-memory transport; the group's
///   in-process barrier; rank 0 is the barrier leader). `nranks` must be the group's.
/// * `config->group` NULL: a rank of a comm between processes over libfabric (`provider`,
///   `root_addr`; collective and blocking, as `nccom_comm_create`). With `barrier_root_addr`,
///   the driver then bootstraps its own barrier channel (collective too; every rank gives the
///   same address); every rank is its own barrier leader.
///
/// The comm is not yet on a proxy queue: `nrt_proxy_comm_join` puts it there. It may also be
/// driven through the trampolines without joining (`nrt_proxy_comm_nccom`).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad instance or group; `NRT_INVALID` for a
/// NULL `config` / `out`, a wrong `struct_size`, a group of another instance or size, strings
/// with a group, and whatever `nccom_comm_create` refuses (its status is returned: rank out of
/// range, a rank taken twice, libfabric missing from the progress half, ...); the bootstraps'
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
    const WHAT: &str = "nrt_proxy_comm_create";
    guard(WHAT, || {
        // SAFETY: `out`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_out(WHAT, "out", out) }?;
        *out = ptr::null_mut();
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
        let leader;
        if c.group.is_null() {
            nc.transport.kind = NCCOM_TRANSPORT_LIBFABRIC;
            nc.transport.libfabric = NccomLibfabricDesc {
                provider: c.provider,
                root_addr: c.root_addr,
                bootstrap_timeout_ms: c.bootstrap_timeout_ms,
            };
            leader = true;
        } else {
            if !c.provider.is_null() || !c.root_addr.is_null() || barrier_root.is_some() {
                return bad(
                    WHAT,
                    format_args!("a group comm with libfabric or barrier addresses"),
                );
            }
            let gh = c.group.addr();
            let (mem, endpoint) = retry_busy(|| {
                GROUPS.with(gh, |g| {
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
                    Ok((g.mem.0.as_ptr(), ep))
                })
            })
            .map_err(|e| lookup_status(WHAT, "group", gh, e))??;
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
        if let Some(root) = barrier_root {
            let (b, ch) = process_barrier(WHAT, &c, &root)?;
            boot = Some(b);
            channel = Some(ch);
        }
        let abort = AbortHandle::new();
        let nccom = comm.as_ptr().addr();
        let entry = Box::new(CommEntry {
            inst: inst.clone(),
            member: None,
            comm,
            rank: c.rank,
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
        });
        let h = COMMS.insert(entry).map_err(|_| {
            log::error!("{WHAT}: too many live comms");
            NrtStatus::Resource
        })?;
        aborts().push((h, abort, nccom, inst.lib.init().comm_abort));
        log::debug!(
            "{WHAT}: comm {h:#x}: rank {} of {}, comm id {}",
            c.rank,
            c.nranks,
            c.comm_id
        );
        *out = ptr::without_provenance_mut(h);
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
    const WHAT: &str = "nrt_proxy_comm_nccom";
    guard(WHAT, || {
        // SAFETY: `out`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_out(WHAT, "out", out) }?;
        *out = ptr::null_mut();
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
    const WHAT: &str = "nrt_proxy_comm_destroy";
    guard(WHAT, || {
        let h = comm.addr();
        let poisoned = COMMS
            .with(h, |e| e.poisoned)
            .map_err(|e| lookup_status(WHAT, "comm", h, e))?;
        if !poisoned {
            with_comm(WHAT, comm, |e| {
                if e.member.is_some() {
                    leave(WHAT, e, DESTROY_LEAVE_TIMEOUT.as_millis() as u64)?;
                }
                Ok(())
            })?;
        }
        let entry = COMMS
            .remove(h)
            .map_err(|e| lookup_status(WHAT, "comm", h, e))?;
        aborts().retain(|(k, ..)| *k != h);
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

// ---------------------------------------------------------------------------------------------
// Join, leave
// ---------------------------------------------------------------------------------------------

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
    const WHAT: &str = "nrt_proxy_comm_join";
    guard(WHAT, || {
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
            e.member = Some(m);
            e.joined_once = true;
            Ok(())
        })
    })
}

/// The leave of a joined comm (`nrt_proxy_comm_leave`, `nrt_proxy_comm_destroy`).
fn leave(what: &str, e: &mut CommEntry, timeout_ms: u64) -> Result<(), NrtStatus> {
    let m = e.member.take().ok_or_else(|| {
        log::error!("{what}: comm {} rank {} is not joined", e.comm_id, e.rank);
        NrtStatus::Closed
    })?;
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
    const WHAT: &str = "nrt_proxy_comm_leave";
    guard(WHAT, || {
        with_comm(WHAT, comm, |e| leave(WHAT, e, timeout_ms))
    })
}

// ---------------------------------------------------------------------------------------------
// Tasks
// ---------------------------------------------------------------------------------------------

/// Copies and checks the blocks of a network task.
///
/// # Safety
/// As `nrt_proxy_submit_network`.
unsafe fn copy_blocks(what: &str, blocks: &[NrtProxyBlock]) -> Result<Vec<BlockFifos>, NrtStatus> {
    if blocks.is_empty() {
        return bad(what, format_args!("no blocks"));
    }
    let mut out = Vec::with_capacity(blocks.len());
    for (i, b) in blocks.iter().enumerate() {
        if b.stream >= NCCOM_NUM_STREAMS {
            return bad(
                what,
                format_args!(
                    "block {i}: stream {} (must be < {NCCOM_NUM_STREAMS})",
                    b.stream
                ),
            );
        }
        if b.bb == NCCOM_BB_NONE {
            return bad(what, format_args!("block {i}: block id NCCOM_BB_NONE"));
        }
        if b.n_ops == 0 {
            return bad(what, format_args!("block {i}: empty op FIFO"));
        }
        // SAFETY: the C contract: each non-NULL array is readable for its length.
        let (ops, src, dst) = unsafe {
            (
                c_slice(what, "ops", b.ops, b.n_ops)?,
                c_slice(what, "src", b.src, b.n_src)?,
                c_slice(what, "dst", b.dst, b.n_dst)?,
            )
        };
        let tx: u64 = ops.iter().map(|o| u64::from(o.tx_entry_cnt)).sum();
        let rx: u64 = ops.iter().map(|o| u64::from(o.rx_entry_cnt)).sum();
        if tx != b.n_src as u64 || rx != b.n_dst as u64 {
            return bad(
                what,
                format_args!(
                    "block {i}: {} source / {} destination entries, the ops count {tx} / {rx}",
                    b.n_src, b.n_dst
                ),
            );
        }
        if tx == 0 && rx == 0 {
            return bad(
                what,
                format_args!("block {i}: zero-length FIFOs (no entries)"),
            );
        }
        out.push(BlockFifos {
            stream: b.stream,
            bb: b.bb,
            ops: ops.to_vec(),
            src: src.to_vec(),
            dst: dst.to_vec(),
        });
    }
    Ok(out)
}

/// Submits a network task on the comm's proxy queue. Everything the descriptor points to is
/// copied (the caller may free it when the call returns); the buffers and host words the FIFOs
/// name must stay valid until the task's record is popped. The caller arms the trigger words
/// (writes `0xFFFFFFFF`) before it submits.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad comm; `NRT_INVALID` for a NULL or
/// wrong-size descriptor, no blocks, stream ≥ 4, block id `NCCOM_BB_NONE`, an empty op FIFO,
/// NULL arrays with a length, FIFO lengths that differ from the ops' entry counts, a schedule
/// naming a block not in `blocks`, more than 4 trigger words, a NULL or misaligned trigger word,
/// unknown flags; `NRT_CLOSED` for a comm that is not joined; `NRT_QUEUE_FULL` when the comm's
/// ring is full (nothing was submitted: the task stays with the caller; pop records and submit
/// again).
///
/// # Safety
/// `task` NULL or a readable `nrt_proxy_network_task_t` whose arrays are readable for their
/// lengths; the memory contract for what the FIFOs name.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_submit_network(
    comm: *mut NrtProxyComm,
    task: *const NrtProxyNetworkTask,
) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_submit_network";
    guard(WHAT, || {
        with_comm(WHAT, comm, |e| {
            // SAFETY: `task`: the C caller's pointer, valid or NULL by this function's contract.
            let t = unsafe { c_in(WHAT, "task", task) }?;
            if t.struct_size as usize != size_of::<NrtProxyNetworkTask>() || t.reserved != 0 {
                return bad(
                    WHAT,
                    format_args!(
                        "task struct_size {} or reserved {}",
                        t.struct_size, t.reserved
                    ),
                );
            }
            let known = NRT_PROXY_TASK_WAIT_FOR_DEVICE | NRT_PROXY_TASK_SKIP | NRT_PROXY_TASK_KEEP;
            if t.flags & !known != 0 {
                return bad(WHAT, format_args!("unknown flags {:#x}", t.flags));
            }
            e.member(WHAT)?;
            // SAFETY: per this function's contract.
            let (blocks, schedule, words) = unsafe {
                let blocks = copy_blocks(WHAT, c_slice(WHAT, "blocks", t.blocks, t.n_blocks)?)?;
                let schedule = c_slice(WHAT, "schedule", t.schedule, t.n_schedule)?;
                let words = host_words(WHAT, "trigger_words", t.trigger_words, t.n_trigger_words)?;
                (blocks, schedule, words)
            };
            if let Some(b) = schedule
                .iter()
                .find(|s| !blocks.iter().any(|b| b.bb == **s))
            {
                return bad(
                    WHAT,
                    format_args!("the schedule names block {b}, which no block has"),
                );
            }
            // SAFETY: the comm's handle lives in the entry until after the membership left
            // (destroy leaves first; the entry's field order drops the membership first), which
            // ends every task carrying it; only the queue's driver calls the seam on it.
            let handle =
                unsafe { CommHandle::new(e.comm.as_ptr()) }.ok_or(NrtStatus::InvalidHandle)?;
            let net = NetworkTask::new(NetworkTaskSpec {
                task_id: t.task_id,
                comm: handle,
                comm_id: e.comm_id,
                seam: e.inst.lib.seam(),
                blocks,
                schedule: (!schedule.is_empty()).then(|| schedule.to_vec()),
                triggers: trigger_words(WHAT, &words)?,
                wait_for_device: t.flags & NRT_PROXY_TASK_WAIT_FOR_DEVICE != 0,
                skip: t.flags & NRT_PROXY_TASK_SKIP != 0 || e.inst.cfg.early_completion,
                timeout_ns: task_timeout(&e.inst, t.timeout_ms),
            })?
            .with_abort(e.abort.clone());
            e.submit(WHAT, Box::new(net), t.flags & NRT_PROXY_TASK_KEEP != 0)
        })
    })
}

/// Submits a barrier task: once its trigger words are written, the comm's ranks meet (the
/// group's in-process barrier, or the barrier between processes); then the leader increments
/// every barrier-done semaphore by 1.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad comm; `NRT_INVALID` for a NULL or
/// wrong-size descriptor, more than 4 trigger words, a NULL or misaligned word, unknown flags,
/// a comm without a barrier channel; `NRT_CLOSED` for a comm that is not joined;
/// `NRT_QUEUE_FULL` (the task stays with the caller).
///
/// # Safety
/// `task` NULL or a readable `nrt_proxy_barrier_task_t` whose arrays are readable for their
/// lengths; the words stay valid until the task's record is popped.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_submit_barrier(
    comm: *mut NrtProxyComm,
    task: *const NrtProxyBarrierTask,
) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_submit_barrier";
    guard(WHAT, || {
        with_comm(WHAT, comm, |e| {
            // SAFETY: `task`: the C caller's pointer, valid or NULL by this function's contract.
            let t = unsafe { c_in(WHAT, "task", task) }?;
            if t.struct_size as usize != size_of::<NrtProxyBarrierTask>() || t.reserved != 0 {
                return bad(
                    WHAT,
                    format_args!(
                        "task struct_size {} or reserved {}",
                        t.struct_size, t.reserved
                    ),
                );
            }
            if t.flags & !(NRT_PROXY_TASK_SKIP | NRT_PROXY_TASK_KEEP) != 0 {
                return bad(WHAT, format_args!("unknown flags {:#x}", t.flags));
            }
            e.member(WHAT)?;
            let Some(channel) = e.barrier.clone() else {
                return bad(
                    WHAT,
                    format_args!(
                        "comm {} has no barrier channel (no group, no barrier_root_addr)",
                        e.comm_id
                    ),
                );
            };
            // SAFETY: per this function's contract.
            let (words, done) = unsafe {
                (
                    host_words(WHAT, "trigger_words", t.trigger_words, t.n_trigger_words)?,
                    host_words(
                        WHAT,
                        "done_semaphores",
                        t.done_semaphores,
                        t.n_done_semaphores,
                    )?,
                )
            };
            let task = BarrierTask::new(BarrierTaskSpec {
                task_id: t.task_id,
                comm_id: e.comm_id,
                channel: Box::new(SharedChannel(channel)),
                triggers: trigger_words(WHAT, &words)?,
                leader: e.leader,
                done_semaphores: done,
                skip: t.flags & NRT_PROXY_TASK_SKIP != 0 || e.inst.cfg.early_completion,
                timeout_ns: task_timeout(&e.inst, t.timeout_ms),
            })
            .with_abort(e.abort.clone());
            e.submit(WHAT, Box::new(task), t.flags & NRT_PROXY_TASK_KEEP != 0)
        })
    })
}

/// Resubmits a finished task that was submitted with `NRT_PROXY_TASK_KEEP`, as task
/// `new_task_id`: same FIFOs, schedule, trigger words (armed again by the caller first),
/// barrier-done semaphores and flags; nothing is copied or allocated. Its record must have been
/// popped. After `NRT_QUEUE_FULL`, call again with the same two ids.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad comm; `NRT_INVALID` when no kept,
/// finished task has id `task_id`; `NRT_CLOSED` for a comm that is not joined;
/// `NRT_QUEUE_FULL` (the task stays kept).
///
/// # Safety
/// None beyond the C contract; the memory contract of the original submit still holds.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_resubmit(
    comm: *mut NrtProxyComm,
    task_id: u32,
    new_task_id: u32,
) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_resubmit";
    guard(WHAT, || {
        with_comm(WHAT, comm, |e| {
            e.member(WHAT)?;
            e.collect_returned();
            let i = e
                .kept
                .iter()
                .position(|t| {
                    t.record().task_id == task_id && t.record().state() == Some(RunState::Done)
                })
                .or_else(|| {
                    e.kept.iter().position(|t| {
                        t.record().task_id == new_task_id
                            && t.record().state() == Some(RunState::Init)
                    })
                });
            let Some(i) = i else {
                return bad(WHAT, format_args!("no kept, finished task {task_id} (submitted with NRT_PROXY_TASK_KEEP, its record popped)"));
            };
            let mut t = e.kept.swap_remove(i);
            if t.record().state() == Some(RunState::Done) {
                if let Err(s) = t.rearm(new_task_id) {
                    e.kept.push(t);
                    return Err(s);
                }
            }
            let m = e.member(WHAT)?;
            if let Err(rej) = m.slot.submit_returning(t) {
                e.kept.push(rej.task);
                return Err(rej.status);
            }
            Ok(())
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Records and progress
// ---------------------------------------------------------------------------------------------

/// Pops the next final status record of the comm's tasks, if one is ready (also after a leave:
/// the records it collected).
///
/// Returns `NRT_SUCCESS` with `*record` filled; `NRT_QUEUE_EMPTY` when none is ready;
/// `NRT_INVALID_HANDLE` for a bad comm; `NRT_INVALID` for a NULL `record`.
///
/// # Safety
/// `record` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_try_pop(
    comm: *mut NrtProxyComm,
    record: *mut NrtProxyTaskRecord,
) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_try_pop";
    guard(WHAT, || {
        with_comm(WHAT, comm, |e| {
            // SAFETY: `record`: the C caller's pointer, valid or NULL by this function's contract.
            let out = unsafe { c_out(WHAT, "record", record) }?;
            let r = match e.leftover.pop_front() {
                Some(r) => r,
                None => e
                    .member
                    .as_mut()
                    .and_then(|m| m.slot.try_pop_record())
                    .ok_or(NrtStatus::QueueEmpty)?,
            };
            *out = e.note(r);
            Ok(())
        })
    })
}

/// Waits at most `timeout_ms` for the next final record (spins for the spin budget, then
/// parks; in caller mode it drives the queue while the drive token is free).
///
/// Returns `NRT_SUCCESS` with `*record` filled; `NRT_TIMEOUT` (nothing lost);
/// `NRT_QUEUE_EMPTY` when no task is outstanding; `NRT_INVALID_HANDLE`; `NRT_INVALID` for a
/// NULL `record`; `NRT_CLOSED` for a comm that is not joined (and has no leftover records).
///
/// # Safety
/// `record` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_wait(
    comm: *mut NrtProxyComm,
    timeout_ms: u64,
    record: *mut NrtProxyTaskRecord,
) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_wait";
    guard(WHAT, || {
        with_comm(WHAT, comm, |e| {
            // SAFETY: `record`: the C caller's pointer, valid or NULL by this function's contract.
            let out = unsafe { c_out(WHAT, "record", record) }?;
            if let Some(r) = e.leftover.pop_front() {
                *out = e.note(r);
                return Ok(());
            }
            let waiter = e.waiter();
            let m = e.member(WHAT)?;
            if m.slot.outstanding() == 0 {
                return Err(NrtStatus::QueueEmpty);
            }
            let r = m
                .slot
                .wait_record_until(&waiter, Some(deadline_after(timeout_ms)))?;
            *out = e.note(r);
            Ok(())
        })
    })
}

/// Caller mode: one tick of the comm's proxy queue by the calling thread; `*tick` says what it
/// did (`NRT_PROXY_TICK_IDLE`, `_NO_PROGRESS`, `_PROGRESS`).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE`; `NRT_INVALID` for a NULL `tick`, a queue with a
/// worker thread, or one another thread is driving right now; `NRT_CLOSED` when not joined.
///
/// # Safety
/// `tick` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_tick(comm: *mut NrtProxyComm, tick: *mut u32) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_tick";
    guard(WHAT, || {
        with_comm(WHAT, comm, |e| {
            // SAFETY: `tick`: the C caller's pointer, valid or NULL by this function's contract.
            let out = unsafe { c_out(WHAT, "tick", tick) }?;
            let m = e.member(WHAT)?;
            let t = m.slot.queue().tick().inspect_err(|_| {
                proxy_abi::refusal::refuse(
                    WHAT,
                    "not the driver",
                    format_args!("the queue has a worker thread, or another thread drives it"),
                );
            })?;
            *out = match t {
                Tick::Park => NRT_PROXY_TICK_IDLE,
                Tick::NoProgress => NRT_PROXY_TICK_NO_PROGRESS,
                Tick::Continue => NRT_PROXY_TICK_PROGRESS,
            };
            Ok(())
        })
    })
}

/// Drives (caller mode, while the drive token is free) or waits for the queue until the final
/// record of task `task_id` is there, at most `timeout_ms`, and returns it; records of other
/// tasks met meanwhile stay for the next pops, in order.
///
/// Returns `NRT_SUCCESS` with `*record` filled; `NRT_TIMEOUT`; `NRT_QUEUE_EMPTY` when no task
/// is outstanding; `NRT_INVALID_HANDLE`; `NRT_INVALID` for a NULL `record`; `NRT_CLOSED` when
/// not joined.
///
/// # Safety
/// `record` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_drive_until(
    comm: *mut NrtProxyComm,
    task_id: u32,
    timeout_ms: u64,
    record: *mut NrtProxyTaskRecord,
) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_drive_until";
    guard(WHAT, || {
        with_comm(WHAT, comm, |e| {
            // SAFETY: `record`: the C caller's pointer, valid or NULL by this function's contract.
            let out = unsafe { c_out(WHAT, "record", record) }?;
            if let Some(i) = e.leftover.iter().position(|r| r.task_id == task_id) {
                let r = e.leftover.remove(i).ok_or(NrtStatus::Failure)?;
                *out = e.note(r);
                return Ok(());
            }
            let waiter = e.waiter();
            let m = e.member(WHAT)?;
            if m.slot.outstanding() == 0 {
                return Err(NrtStatus::QueueEmpty);
            }
            let r = m
                .slot
                .drive_until(task_id, Some(deadline_after(timeout_ms)), &waiter, None)?;
            *out = e.note(r);
            Ok(())
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Abort, invalidate, health, dump
// ---------------------------------------------------------------------------------------------

/// Requests an abort of a comm, from any thread at any time (also while another thread is in a
/// call on it): the comm's tasks end `NRT_CLOSED` at their next step, and the progress half's
/// comm is aborted (`nccom_comm_abort`: its seam calls answer `NRT_CLOSED`). A second abort
/// changes nothing. The comm must still leave and be destroyed.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown comm.
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_abort(comm: *mut NrtProxyComm) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_comm_abort";
    guard(WHAT, || {
        let h = comm.addr();
        let Some((_, abort, nccom, f)) = aborts().iter().find(|(k, ..)| *k == h).cloned() else {
            log::error!("{WHAT}: {h:#x} is not a live comm of this library");
            return Err(NrtStatus::InvalidHandle);
        };
        if !abort.abort() {
            log::info!("{WHAT}: comm {h:#x} was already aborted");
        }
        if let Some(f) = f {
            // SAFETY: the progress half checks its handle (a comm destroyed meanwhile answers
            // NRT_INVALID_HANDLE, never a dereference).
            let s = unsafe { f(ptr::without_provenance_mut(nccom)) };
            if s != NRT_SUCCESS && s != NRT_INVALID_HANDLE {
                log::warn!(
                    "{WHAT}: nccom_comm_abort: {}",
                    NrtStatus::from_code(s).unwrap_or(NrtStatus::Failure)
                );
            }
        }
        Ok(())
    })
}

/// The caller is about to free `[addr, addr + len)`: the progress half drops its transport's
/// cached registrations of the range (`nccom_comm_invalidate_range`). Works at any time, also
/// while tasks of the comm run: when it returns `NRT_SUCCESS`, no later post of the comm uses a
/// stale registration of the range, and registrations that requests in flight still use are
/// detached (closed when those requests complete; the memory itself must stay valid until the
/// tasks that post from it are popped, as always). Free the range only after `NRT_SUCCESS`.
///
/// A joined comm's invalidation is applied by the thread that drives its proxy queue, at the
/// start of its next tick, before it steps any task (docs/design.md §9, "Invalidation while the
/// driver runs"): in thread mode the call wakes the worker and waits for its answer; in caller
/// mode it waits for the thread that holds the drive token, or takes the free token and applies
/// it itself. It waits at most 10 s for a safe point. A comm that is
/// not joined (never joined, or left) is invalidated by the calling thread at once.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE`; the progress half's status (`NRT_INVALID` for a
/// NULL `addr`, a zero `len` or a wrapping range; `NRT_NETWORK_PROXY_FAILURE` when the provider
/// refused to close a registration); `NRT_TIMEOUT` when the queue's driver did not reach a safe
/// point in time: the range was **not** invalidated (do not free it yet; the last error and the
/// log name the driver's activity; call again); `NRT_FAILURE` for a progress half without the
/// entry (ABI 1.0), or while another thread is inside a call on the same comm.
///
/// # Safety
/// None beyond the C contract (the range is only compared).
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_invalidate_range(
    comm: *mut NrtProxyComm,
    addr: *const c_void,
    len: usize,
) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_comm_invalidate_range";
    guard(WHAT, || {
        with_comm(WHAT, comm, |e| {
            let waiter = e.waiter();
            let lib = e.inst.lib;
            let nccom = e.comm.as_ptr();
            let Some(m) = e.member.as_mut() else {
                // Not on a queue: no driver calls into the comm.
                return e.comm.invalidate_range(addr.cast(), len);
            };
            let Some(invalidate) = lib.invalidate_fn() else {
                return bad(
                    WHAT,
                    format_args!("the progress half has no nccom_comm_invalidate_range (ABI 1.0)"),
                );
            };
            // SAFETY: the comm's handle lives in the entry until after the membership left
            // (as for the network tasks, which carry the same handle).
            let comm = unsafe { CommHandle::new(nccom.cast()) }.ok_or(NrtStatus::InvalidHandle)?;
            let request = Invalidation {
                comm,
                invalidate,
                addr: addr.addr(),
                len,
            };
            m.slot
                .invalidate_until(request, &waiter, Some(deadline_after(INVALIDATE_TIMEOUT_MS)))
                .inspect_err(|s| {
                    if *s == NrtStatus::Timeout {
                        proxy_abi::refusal::refuse(
                            WHAT,
                            "driver busy",
                            format_args!(
                                "the proxy queue's driver did not reach a safe point within \
                                 {INVALIDATE_TIMEOUT_MS} ms (driver {}); the range {addr:p}+{len:#x} \
                                 was not invalidated: do not free it yet",
                                m.slot.queue().driver_activity().name()
                            ),
                        );
                    }
                })
        })
    })
}

/// How long `nrt_proxy_comm_invalidate_range` waits for the proxy queue's driver to reach a safe
/// point (the start of its next tick): 10 s.
const INVALIDATE_TIMEOUT_MS: u64 = 10_000;

/// The comm's health, as NCCL's `ncclCommGetAsyncError`: `*status` is `NRT_SUCCESS` while no
/// task of the comm has failed, `NRT_CLOSED` once it is aborted, else the status of the first
/// failed task record popped (`NRT_TIMEOUT`, `NRT_NETWORK_PROXY_FAILURE`, ...).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE`; `NRT_INVALID` for a NULL `status`.
///
/// # Safety
/// `status` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_get_async_error(
    comm: *mut NrtProxyComm,
    status: *mut NRT_STATUS,
) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_comm_get_async_error";
    guard(WHAT, || {
        with_comm(WHAT, comm, |e| {
            // SAFETY: `status`: the C caller's pointer, valid or NULL by this function's contract.
            let out = unsafe { c_out(WHAT, "status", status) }?;
            *out = if e.async_error != NrtStatus::Success {
                e.async_error.code()
            } else if let Some(s) = e.abort.aborted() {
                s.code()
            } else {
                NRT_SUCCESS
            };
            Ok(())
        })
    })
}

/// The comm's most recent failure as text (empty when none): a call on the comm that was
/// refused, with the refusal's cause and the argument or peer it names (`nrt_proxy_submit_network:
/// block 0 entry 3: src size 65536 above max 4096 (NRT_INVALID)`), or a task record that ended in
/// failure (`task 7 of comm 3 (rank 1) ended NRT_TIMEOUT`), whichever came last. A refusal of this
/// very call (NULL `buf`) is not recorded. Copied into `buf` (at most `len - 1` bytes and a NUL;
/// truncated to fit).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE`; `NRT_INVALID` for a NULL `buf` or a zero `len`.
///
/// # Safety
/// `buf` NULL or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_last_error(
    comm: *mut NrtProxyComm,
    buf: *mut c_char,
    len: usize,
) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_comm_last_error";
    guard(WHAT, || {
        // Checked outside the comm: this call's own refusal must not replace what it reports.
        if buf.is_null() || len == 0 {
            return bad(WHAT, format_args!("NULL buf or zero len"));
        }
        with_comm(WHAT, comm, |e| {
            let text = if !e.last_error.is_empty() {
                e.last_error.clone()
            } else if let Some(s) = e.abort.aborted() {
                format!("comm {} (rank {}) was aborted ({s})", e.comm_id, e.rank)
            } else {
                String::new()
            };
            let n = text.len().min(len - 1);
            // SAFETY: `buf` is writable for `len` bytes (the contract); `n + 1 <= len`.
            unsafe {
                ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
            Ok(())
        })
    })
}

/// Writes the state dump of the comm's proxy queue (every slot and task, the driver's
/// activity) to the log (target `proxy_dump`, level `WARN`), asking the queue's driver and
/// waiting at most `timeout_ms` for it (without an answer the requester writes what it can read).
///
/// Returns `NRT_SUCCESS` when the driver wrote it; `NRT_TIMEOUT` when it did not answer in time
/// (the partial dump was written); `NRT_INVALID_HANDLE`; `NRT_CLOSED` when not joined.
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_comm_dump(
    comm: *mut NrtProxyComm,
    timeout_ms: u64,
) -> NRT_STATUS {
    const WHAT: &str = "nrt_proxy_comm_dump";
    guard(WHAT, || {
        with_comm(WHAT, comm, |e| {
            let waiter = e.waiter();
            let m = e.member(WHAT)?;
            match m
                .slot
                .queue()
                .dump_until(&waiter, deadline_after(timeout_ms))
            {
                proxy_core::driver::dump::DumpOutcome::Written => Ok(()),
                proxy_core::driver::dump::DumpOutcome::NotAnswered
                | proxy_core::driver::dump::DumpOutcome::DriverGone => Err(NrtStatus::Timeout),
            }
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Trampolines
// ---------------------------------------------------------------------------------------------

fn default_lib(what: &str) -> Result<&'static ProgressLib, NrtStatus> {
    DEFAULT_LIB.get().copied().ok_or_else(|| {
        log::error!("{what}: no progress half loaded (call nrt_proxy_init first)");
        NrtStatus::Uninitialized
    })
}

/// Trampoline to the loaded progress half's `neuronStartNetworkProxy` (the first one loaded):
/// files one basic block's FIFOs on `stream` of `comm` (a handle from `nrt_proxy_comm_nccom`).
///
/// Returns the progress half's status; `NRT_UNINITIALIZED` before the first `nrt_proxy_init`.
///
/// # Safety
/// As `neuronStartNetworkProxy` (`nccom_proxy.h`).
///
/// Seed: `ncclStartNetworkProxy` (libnrt trampoline → `neuronStartNetworkProxy`), §3 B1.
#[no_mangle]
pub unsafe extern "C" fn ncclStartNetworkProxy(
    comm: *mut NccomComm,
    stream: u32,
    bb: u32,
    ops: *const NetOpInfo,
    n_ops: usize,
    src: *const NetSrcAddr,
    n_src: usize,
    dst: *const NetDestAddr,
    n_dst: usize,
) -> NRT_STATUS {
    const WHAT: &str = "ncclStartNetworkProxy";
    guard(WHAT, || {
        let lib = default_lib(WHAT)?;
        // SAFETY: the caller's contract; the progress half checks the handle and the arrays.
        NrtStatus::result_of_code(unsafe {
            (lib.seam().start)(comm.cast(), stream, bb, ops, n_ops, src, n_src, dst, n_dst)
        })
    })
}

/// Trampoline to `neuronNetworkProxyProgress`, with `bool` out-parameters as the seed's driver
/// side has them: the results are AND-ed into `*idle` / `*done` (seed both with `true` before a
/// round of calls); a failed call writes `false` to both.
///
/// Returns the progress half's status; `NRT_INVALID` for a NULL `idle` / `done`;
/// `NRT_UNINITIALIZED` before the first `nrt_proxy_init`.
///
/// # Safety
/// As `neuronNetworkProxyProgress`; `idle` / `done` NULL or writable `bool`s.
///
/// Seed: `ncclNetworkProxyProgress` (nrt:0x1c1aa0 → `neuronNetworkProxyProgress`), §3 B2.
#[no_mangle]
pub unsafe extern "C" fn ncclNetworkProxyProgress(
    comm: *mut NccomComm,
    stream: u32,
    bb: u32,
    idle: *mut bool,
    done: *mut bool,
) -> NRT_STATUS {
    const WHAT: &str = "ncclNetworkProxyProgress";
    guard(WHAT, || {
        // SAFETY: `idle`: the C caller's pointer, valid or NULL by this function's contract.
        let idle = unsafe { c_out(WHAT, "idle", idle) }?;
        // SAFETY: `done`: the C caller's pointer, valid or NULL by this function's contract.
        let done = unsafe { c_out(WHAT, "done", done) }?;
        let lib = default_lib(WHAT)?;
        // SAFETY: the caller's contract; the progress half checks the handle.
        unsafe { lib.seam().progress(comm.cast(), stream, bb, idle, done) }
    })
}

/// Trampoline to `neuronStopNetworkProxy`: tears `stream` of `comm` down.
///
/// Returns the progress half's status; `NRT_UNINITIALIZED` before the first `nrt_proxy_init`.
///
/// # Safety
/// As `neuronStopNetworkProxy`.
///
/// Seed: `ncclStopNetworkProxy` (libnrt trampoline → `neuronStopNetworkProxy`), §3 B3.
#[no_mangle]
pub unsafe extern "C" fn ncclStopNetworkProxy(comm: *mut NccomComm, stream: u32) -> NRT_STATUS {
    const WHAT: &str = "ncclStopNetworkProxy";
    guard(WHAT, || {
        let lib = default_lib(WHAT)?;
        // SAFETY: the caller's contract; the progress half checks the handle.
        unsafe { lib.seam().stop(comm.cast(), stream) }
    })
}
