//! The C ABI types of the progress half's shared library `libnccom_proxy.so`: `NRT_STATUS` and
//! its values, the marks, the opaque handles, the comm configuration with its tagged transport
//! descriptor, the `nec_*` device-callback table, and one function-pointer typedef per exported
//! entry point.
//!
//! This crate holds types (`no_std`), one table, the status names of [`status_name`], and the
//! generation-checked handle tables of both C libraries ([`handles`]; with the feature `std`,
//! also `boundary`: their logger and panic guard), so that both sides of
//! the binary boundary agree on them without depending on each other, both C libraries answer
//! `nrt_get_status_as_str` from the same table and check handles with the same code:
//! `proxy-ffi` (the library, which exports the functions and generates
//! `ffi/include/nccom_proxy.h` from these definitions with cbindgen), `proxy-driver-ffi` and
//! the driver's loader in `proxy-runtime` (which `dlopen`s the library and calls it through
//! the typedefs). `proxy-ffi` checks at compile time that every export has exactly its typedef.
//!
//! Names: Rust names here, C names in the header (`cbindgen.toml` renames, e.g.
//! [`NccomCommConfig`] → `nccom_comm_config_t`).
//!
//! Seed: the libnrt ↔ libnccom ABI (the `.bss` neuron-slot table filled at `dlopen`, the `nec_*`
//! reverse callbacks), §1; docs/design.md §8.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_void};

#[cfg(feature = "std")]
pub mod boundary;
pub mod handles;
#[cfg(feature = "std")]
pub mod refusal;

pub use proxy_core::base::desc::{NetDestAddr, NetOpInfo, NetSrcAddr};

// ---------------------------------------------------------------------------------------------
// Versions
// ---------------------------------------------------------------------------------------------

/// Major version of this C ABI: a library whose major differs from the header's is incompatible.
pub const NCCOM_PROXY_ABI_VERSION_MAJOR: u32 = 1;
/// Minor version of this C ABI: additions that keep every older call and layout valid. 1.1
/// added `neuronStopNetworkProxyStep`, `nccom_comm_invalidate_range` and `nccom_comm_abort`;
/// 1.2 added `nccom_comm_protocol_stats` (`nccom_protocol_stats_t`); 1.3 added the event
/// trace: `nccom_trace_start`, `nccom_trace_stop`, `nccom_trace_collect`
/// (`nccom_trace_record_t`, `nccom_trace_counts_t`, the `NCCOM_TRACE_*` classes); 1.4 added the
/// idle wait: the comm flag `NCCOM_COMM_IDLE_WAIT`, `nccom_comm_idle_available`,
/// `nccom_comm_idle_arm`, `nccom_comm_idle_sleep`, `nccom_comm_idle_kick` (`NCCOM_IDLE_*`);
/// 1.5 added the transport kind `NCCOM_TRANSPORT_SHM`.
pub const NCCOM_PROXY_ABI_VERSION_MINOR: u32 = 5;
/// `(major << 16) | minor`, what `nccom_abi_version()` returns.
pub const NCCOM_PROXY_ABI_VERSION: u32 = 0x0001_0005;

const _: () = assert!(
    NCCOM_PROXY_ABI_VERSION
        == (NCCOM_PROXY_ABI_VERSION_MAJOR << 16) | NCCOM_PROXY_ABI_VERSION_MINOR
);

// ---------------------------------------------------------------------------------------------
// Status codes
// ---------------------------------------------------------------------------------------------

/// The name of a status value (`c"NRT_SUCCESS"`, ...), or `c"NRT_UNKNOWN_STATUS"` for a value
/// `nrt_status.h` does not define: what `nrt_get_status_as_str` answers in both C libraries
/// (`libnccom_proxy.so` and `libnrt_proxy.so`).
///
/// Seed: `nrt_get_status_as_str`.
pub fn status_name(status: NRT_STATUS) -> &'static core::ffi::CStr {
    use proxy_core::base::status::NrtStatus;
    match NrtStatus::from_code(status) {
        Some(NrtStatus::Success) => c"NRT_SUCCESS",
        Some(NrtStatus::Failure) => c"NRT_FAILURE",
        Some(NrtStatus::Invalid) => c"NRT_INVALID",
        Some(NrtStatus::InvalidHandle) => c"NRT_INVALID_HANDLE",
        Some(NrtStatus::Resource) => c"NRT_RESOURCE",
        Some(NrtStatus::Timeout) => c"NRT_TIMEOUT",
        Some(NrtStatus::HwError) => c"NRT_HW_ERROR",
        Some(NrtStatus::QueueFull) => c"NRT_QUEUE_FULL",
        Some(NrtStatus::Uninitialized) => c"NRT_UNINITIALIZED",
        Some(NrtStatus::Closed) => c"NRT_CLOSED",
        Some(NrtStatus::QueueEmpty) => c"NRT_QUEUE_EMPTY",
        Some(NrtStatus::ExecBadInput) => c"NRT_EXEC_BAD_INPUT",
        Some(NrtStatus::CollPending) => c"NRT_COLL_PENDING",
        Some(NrtStatus::ExecHwErrCollectives) => c"NRT_EXEC_HW_ERR_COLLECTIVES",
        Some(NrtStatus::NetworkProxyFailure) => c"NRT_NETWORK_PROXY_FAILURE",
        None => c"NRT_UNKNOWN_STATUS",
    }
}

/// A runtime status code (`nrt_status.h`): every entry point returns one. `NRT_SUCCESS` (0) is
/// success; `nrt_get_status_as_str` names any value.
pub type NRT_STATUS = u32;

/// The call did what it was asked.
pub const NRT_SUCCESS: NRT_STATUS = 0;
/// An unclassified failure; also what a panic caught at the ABI boundary returns.
pub const NRT_FAILURE: NRT_STATUS = 1;
/// An argument is out of range or malformed (NULL pointer, stream >= 4, FIFO lengths that
/// differ, unknown mark, peer >= nranks, ...). The log line says which.
pub const NRT_INVALID: NRT_STATUS = 2;
/// The handle is not a live object: NULL, destroyed, or never created by this library.
pub const NRT_INVALID_HANDLE: NRT_STATUS = 3;
/// An allocation or a fixed-capacity table (live comms, live groups) is exhausted.
pub const NRT_RESOURCE: NRT_STATUS = 4;
/// A bounded wait ran out (stop's drain limit).
pub const NRT_TIMEOUT: NRT_STATUS = 5;
/// The host-memory device model reported an error (e.g. the device posted more entries than
/// an op has).
pub const NRT_HW_ERROR: NRT_STATUS = 6;
/// A bounded ring is full; the item stays with its producer.
pub const NRT_QUEUE_FULL: NRT_STATUS = 7;
/// Something has not been set up yet (comm creation: no `nec_inc_semaphore` anywhere).
pub const NRT_UNINITIALIZED: NRT_STATUS = 13;
/// The object was closed.
pub const NRT_CLOSED: NRT_STATUS = 14;
/// Nothing to take from a ring.
pub const NRT_QUEUE_EMPTY: NRT_STATUS = 15;
/// An execution's input is malformed.
pub const NRT_EXEC_BAD_INPUT: NRT_STATUS = 1002;
/// A collective is still in flight.
pub const NRT_COLL_PENDING: NRT_STATUS = 1100;
/// A collective failed on the device side.
pub const NRT_EXEC_HW_ERR_COLLECTIVES: NRT_STATUS = 1200;
/// The progress half failed: the comm's sticky fatal error (a transport error, a broken op
/// invariant). Every later progress call on that comm returns it.
pub const NRT_NETWORK_PROXY_FAILURE: NRT_STATUS = 1206;

// ---------------------------------------------------------------------------------------------
// Descriptor constants (docs/design.md §5)
// ---------------------------------------------------------------------------------------------

/// Mark of a FIFO entry that is neither the last of its op nor of the execution.
pub const NET_TRANSFER: u32 = 0;
/// Mark of the last entry of an op.
pub const NET_OP_COMPLETE: u32 = 1;
/// Mark of the last entry of the last op of the execution (ends its op like `NET_OP_COMPLETE`).
pub const EXEC_COMPLETE: u32 = 2;
/// Peer value meaning "no peer" / "the op's own peer" (`-1`) in op infos and FIFO entries
/// (the header spells it `(-1)` by hand).
pub const NCCOM_NO_PEER: i32 = -1;
/// Streams per comm: valid stream indices are `0 .. NCCOM_NUM_STREAMS`.
pub const NCCOM_NUM_STREAMS: u32 = 4;
/// Block id meaning "none"; not a valid `bb` for `neuronStartNetworkProxy`.
pub const NCCOM_BB_NONE: u32 = u32::MAX;
/// Value the device writes to an op's host index to say "ready" (in a trigger word the same
/// number means "not at the net stage yet"); the proxy answers by writing 0 and incrementing
/// the handshake semaphore by 1.
pub const NCCOM_HOST_WORD_READY: u32 = u32::MAX;

const _: () = {
    assert!(NET_TRANSFER == proxy_core::base::desc::NET_TRANSFER);
    assert!(NET_OP_COMPLETE == proxy_core::base::desc::NET_OP_COMPLETE);
    assert!(EXEC_COMPLETE == proxy_core::base::desc::EXEC_COMPLETE);
    assert!(NCCOM_NO_PEER == proxy_core::base::desc::NO_PEER);
    assert!(NCCOM_NUM_STREAMS as usize == proxy_core::base::desc::NUM_STREAMS);
    assert!(NCCOM_BB_NONE == proxy_core::progress::comm::BB_NONE);
    assert!(NCCOM_HOST_WORD_READY == proxy_core::base::host_word::HOST_INDEX_READY);
};

// ---------------------------------------------------------------------------------------------
// Handles
// ---------------------------------------------------------------------------------------------

/// A communicator's progress half (`nccom_comm_t`): opaque. A handle is never a pointer to
/// memory; the library looks it up in a table of live handles (with a generation), so a
/// destroyed handle or a pointer the library never handed out is answered with
/// `NRT_INVALID_HANDLE` without being dereferenced.
pub struct NccomComm {
    _opaque: [u8; 0],
}

/// A group of in-memory ranks in one process (`nccom_mem_group_t`): opaque, looked up like
/// [`NccomComm`]. Each rank of the group can be given to one comm.
pub struct NccomMemGroup {
    _opaque: [u8; 0],
}

/// A 32-bit host-memory word the device and the proxy share (`nccom_host_word_t`, which the
/// header defines as `volatile uint32_t`). Both sides must access it atomically (C11 atomics or
/// `__atomic` builtins on the C side).
pub type NccomHostWord = u32;

// ---------------------------------------------------------------------------------------------
// Device callbacks (the nec_* reverse edge)
// ---------------------------------------------------------------------------------------------

/// The device callbacks the proxy ops call (`nccom_device_callbacks_t`): the seed's `nec_*`
/// reverse edge from the progress half into the runtime.
///
/// Only `nec_inc_semaphore` is required. Every function is called from the thread that calls
/// `neuronNetworkProxyProgress` / `neuronStopNetworkProxy` on the comm, and must not call back
/// into this library.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NccomDeviceCallbacks {
    /// Adds `val` to the semaphore increment register at `addr` (wrapping), with at least
    /// release ordering: everything the proxy wrote before (received bytes) must be visible to
    /// a device that reads the new value with acquire. Required.
    ///
    /// Seed: `nec_inc_semaphore(volatile uint32_t *addr, uint32_t val)`.
    pub nec_inc_semaphore: Option<unsafe extern "C" fn(addr: *mut NccomHostWord, val: u32)>,
    /// Reads a host index at `addr` with acquire ordering. NULL: an atomic acquire load.
    pub nec_load_host_index: Option<unsafe extern "C" fn(addr: *mut NccomHostWord) -> u32>,
    /// Writes `val` to the host index at `addr` with release ordering. NULL: an atomic release
    /// store.
    pub nec_store_host_index: Option<unsafe extern "C" fn(addr: *mut NccomHostWord, val: u32)>,
}

// ---------------------------------------------------------------------------------------------
// Comm configuration
// ---------------------------------------------------------------------------------------------

/// Transport kind: ranks in this process linked by an in-memory group
/// (`nccom_transport_desc_t.mem_group`).
pub const NCCOM_TRANSPORT_MEM: u32 = 1;
/// Transport kind: libfabric (EFA, shm, tcp) with a bootstrap root address
/// (`nccom_transport_desc_t.libfabric`). Creation is collective (every rank calls
/// `nccom_comm_create`; each call blocks until all are connected). Only in libraries built with
/// the `libfabric` feature; others answer `NRT_INVALID`. Memory posted through such a comm may
/// be registered with the provider and stays registered until the comm is destroyed: do not
/// free a buffer and reuse its addresses for another one while the comm lives.
pub const NCCOM_TRANSPORT_LIBFABRIC: u32 = 2;
/// Transport kind (ABI 1.5): the engine's own shared memory between the processes of one host
/// (a segment per rank in `/dev/shm`, small messages inline, large ones read by cross-memory
/// attach; no lock in shared memory, so a dead peer hangs nobody). Bootstrapped like
/// libfabric: `nccom_transport_desc_t.libfabric`'s `root_addr` and `bootstrap_timeout_ms`;
/// its `provider` must be NULL. Creation is collective (every rank calls `nccom_comm_create`,
/// every rank on this host; each call blocks until every rank has mapped every segment). In
/// every build of the library; one older than 1.5 answers `NRT_INVALID`.
pub const NCCOM_TRANSPORT_SHM: u32 = 3;

/// Comm flag: check every buffer and host-word address given to `neuronStartNetworkProxy`
/// against ranges registered with `nccom_comm_register_memory` (an address outside them is
/// `NRT_INVALID`, and the log line names the range). Without it the caller vouches for every
/// address (see the header's memory contract).
pub const NCCOM_COMM_CHECK_ADDRESSES: u32 = 1;

/// Comm flag (ABI 1.4): open the comm's completion queue with a wait descriptor where the
/// transport offers one (libfabric tcp: `FI_WAIT_FD`), so that the thread driving the comm may
/// block on it when it has nothing to do (`nccom_comm_idle_arm` / `nccom_comm_idle_sleep`).
/// Ignored by the in-memory transport and by providers without one (shm): the comm then has no
/// idle wait (`nccom_comm_idle_available` answers 0). A library older than 1.4 refuses the flag
/// with `NRT_INVALID` (check `nccom_abi_version()` first).
pub const NCCOM_COMM_IDLE_WAIT: u32 = 2;

/// The libfabric part of a transport descriptor (`nccom_libfabric_desc_t`), also the bootstrap
/// of `NCCOM_TRANSPORT_SHM` (`root_addr`, `bootstrap_timeout_ms`; `provider` NULL). All zero
/// for other kinds.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NccomLibfabricDesc {
    /// Provider name (`"efa"`, `"shm"`, `"tcp;ofi_rxm"`), NUL-terminated; NULL: `FI_PROVIDER`,
    /// else efa, else shm when every rank is on this host, else tcp.
    pub provider: *const c_char,
    /// Bootstrap root `"ip:port"`, NUL-terminated; NULL: `NEURON_RT_ROOT_COMM_ID`.
    pub root_addr: *const c_char,
    /// Bound of comm creation's bootstrap waits in milliseconds; 0: `NEURON_RT_BOOTSTRAP_TIMEOUT`
    /// (seconds), else 120 s.
    pub bootstrap_timeout_ms: u64,
}

/// A tagged transport descriptor (`nccom_transport_desc_t`): `kind` says which of the other
/// fields is used; the fields of other kinds must be zero / NULL.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NccomTransportDesc {
    /// `NCCOM_TRANSPORT_MEM`, `NCCOM_TRANSPORT_LIBFABRIC` or `NCCOM_TRANSPORT_SHM` (ABI 1.5).
    pub kind: u32,
    /// Reserved, must be zero.
    pub reserved: u32,
    /// `NCCOM_TRANSPORT_MEM`: the group (from `nccom_mem_group_create`) whose rank `rank` this
    /// comm takes; the group's nranks must equal the comm's.
    pub mem_group: *mut NccomMemGroup,
    /// `NCCOM_TRANSPORT_LIBFABRIC`: provider and bootstrap root; `NCCOM_TRANSPORT_SHM`: the
    /// bootstrap root.
    pub libfabric: NccomLibfabricDesc,
}

/// What a comm is created with (`nccom_comm_config_t`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NccomCommConfig {
    /// This comm's rank, `< nranks`.
    pub rank: u32,
    /// Ranks in the comm, `1 ..= 65536` (an in-memory group: at most 256).
    pub nranks: u32,
    /// Id shared by every rank of the comm, `< 2^15` (it is in every transport tag).
    pub comm_id: u32,
    /// `0`, `NCCOM_COMM_CHECK_ADDRESSES`, `NCCOM_COMM_IDLE_WAIT` (ABI 1.4) or both; other bits
    /// are `NRT_INVALID`.
    pub flags: u32,
    /// Which transport, and its parameters.
    pub transport: NccomTransportDesc,
    /// Device callbacks for this comm (copied at creation), or NULL: the table registered with
    /// `nccom_register_device_callbacks`, else `nec_inc_semaphore` found with
    /// `dlsym(RTLD_DEFAULT, ...)` (the executable must export it, e.g. link with `-rdynamic`),
    /// else creation fails with `NRT_UNINITIALIZED`.
    pub callbacks: *const NccomDeviceCallbacks,
    /// `neuronStopNetworkProxy` waits at most this long (ns) for cancelled requests; 0: 1 s.
    pub drain_limit_ns: u64,
}

// ---------------------------------------------------------------------------------------------
// Protocol counters (ABI 1.2)
// ---------------------------------------------------------------------------------------------

/// A comm's protocol counters (`nccom_protocol_stats_t`, ABI 1.2), cumulative since the comm
/// was created; filled by `nccom_comm_protocol_stats`. Versioned by size: the caller sets
/// `size` to the bytes it has (`sizeof(nccom_protocol_stats_t)`), the library writes at most
/// that many and sets `size` to what it wrote; a later version only appends fields. Counted on
/// the thread that drives the comm (docs/design.md §5, "Protocol counters").
///
/// Seed: none (counts what `netNeuronSendProxy` / `netNeuronRecvProxy`, `ncclProxyStart` and
/// `check_basic_block_switch` do, §3/§4).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NccomProtocolStats {
    /// In: bytes the caller's struct has (at least 8). Out: bytes the library wrote.
    pub size: u32,
    /// Zero.
    pub reserved: u32,
    /// `neuronStartNetworkProxy` calls accepted (each files one (stream, basic block)).
    pub starts: u64,
    /// Loads by a stream of another basic block than the one it ran before (since its last
    /// stop); reloading the block that just drained is not counted.
    pub block_switches: u64,
    /// Send entries counted to `send_complete` before the transport finished them (only with
    /// `early_send_completion`, for payloads the transport copied at post).
    pub early_send_completions: u64,
    /// Receives posted for entries the device had not posted yet (`early_recv_posting`).
    pub recvs_posted_ahead: u64,
    /// The most receives any recv op had posted beyond its host index at once (at most its
    /// `ending_recv_credits`).
    pub max_recv_ahead: u64,
    /// Host-index wrap-arounds seen (`net_idx_loop_size`): an op with `n` entries and loop size
    /// `L` sees `n / L` per execution.
    pub index_wraps: u64,
    /// The most send requests any send op had outstanding at once (at most its
    /// `initial_send_credits`, 0 meaning 128).
    pub peak_outstanding_send: u64,
    /// The most receive requests any recv op had outstanding at once (at most 128).
    pub peak_outstanding_recv: u64,
}

const _: () = {
    use core::mem::{offset_of, size_of};
    use proxy_core::progress::stats::ProtocolStats as S;
    type C = NccomProtocolStats;
    assert!(size_of::<C>() == size_of::<S>());
    assert!(offset_of!(C, starts) == offset_of!(S, starts));
    assert!(offset_of!(C, block_switches) == offset_of!(S, block_switches));
    assert!(offset_of!(C, early_send_completions) == offset_of!(S, early_send_completions));
    assert!(offset_of!(C, recvs_posted_ahead) == offset_of!(S, recvs_posted_ahead));
    assert!(offset_of!(C, max_recv_ahead) == offset_of!(S, max_recv_ahead));
    assert!(offset_of!(C, index_wraps) == offset_of!(S, index_wraps));
    assert!(offset_of!(C, peak_outstanding_send) == offset_of!(S, peak_outstanding_send));
    assert!(offset_of!(C, peak_outstanding_recv) == offset_of!(S, peak_outstanding_recv));
};

impl From<proxy_core::progress::stats::ProtocolStats> for NccomProtocolStats {
    fn from(s: proxy_core::progress::stats::ProtocolStats) -> Self {
        Self {
            size: s.size,
            reserved: 0,
            starts: s.starts,
            block_switches: s.block_switches,
            early_send_completions: s.early_send_completions,
            recvs_posted_ahead: s.recvs_posted_ahead,
            max_recv_ahead: s.max_recv_ahead,
            index_wraps: s.index_wraps,
            peak_outstanding_send: s.peak_outstanding_send,
            peak_outstanding_recv: s.peak_outstanding_recv,
        }
    }
}

impl From<NccomProtocolStats> for proxy_core::progress::stats::ProtocolStats {
    fn from(s: NccomProtocolStats) -> Self {
        Self {
            size: s.size,
            reserved: 0,
            starts: s.starts,
            block_switches: s.block_switches,
            early_send_completions: s.early_send_completions,
            recvs_posted_ahead: s.recvs_posted_ahead,
            max_recv_ahead: s.max_recv_ahead,
            index_wraps: s.index_wraps,
            peak_outstanding_send: s.peak_outstanding_send,
            peak_outstanding_recv: s.peak_outstanding_recv,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Entry points, as function-pointer typedefs (for dlsym)
// ---------------------------------------------------------------------------------------------

/// `neuronStartNetworkProxy`: files one basic block's FIFOs on a stream (seed B1).
pub type NeuronStartNetworkProxyFn = unsafe extern "C" fn(
    comm: *mut NccomComm,
    stream: u32,
    bb: u32,
    ops: *const NetOpInfo,
    n_ops: usize,
    src: *const NetSrcAddr,
    n_src: usize,
    dst: *const NetDestAddr,
    n_dst: usize,
) -> NRT_STATUS;

/// `neuronNetworkProxyProgress`: one progress tick on a stream, AND-ed into `*idle` / `*done`
/// (seed B2, the seam call).
pub type NeuronNetworkProxyProgressFn = unsafe extern "C" fn(
    comm: *mut NccomComm,
    stream: u32,
    bb: u32,
    idle: *mut c_int,
    done: *mut c_int,
) -> NRT_STATUS;

/// `neuronStopNetworkProxy`: stream teardown (seed B3).
pub type NeuronStopNetworkProxyFn =
    unsafe extern "C" fn(comm: *mut NccomComm, stream: u32) -> NRT_STATUS;

/// `neuronStopNetworkProxyStep` (ABI 1.1, not in the seed): one bounded, non-blocking step of a
/// stream teardown; `*done` is 1 once the stream is torn down.
pub type NeuronStopNetworkProxyStepFn =
    unsafe extern "C" fn(comm: *mut NccomComm, stream: u32, done: *mut c_int) -> NRT_STATUS;

/// `nccom_abi_version`: the library's `NCCOM_PROXY_ABI_VERSION`.
pub type NccomAbiVersionFn = unsafe extern "C" fn() -> u32;

/// `nrt_get_status_as_str`: the name of a status value.
pub type NrtGetStatusAsStrFn = unsafe extern "C" fn(status: NRT_STATUS) -> *const c_char;

/// `nccom_register_device_callbacks`: sets (or, with NULL, clears) the process-wide callbacks.
pub type NccomRegisterDeviceCallbacksFn =
    unsafe extern "C" fn(callbacks: *const NccomDeviceCallbacks) -> NRT_STATUS;

/// `nccom_mem_group_create`: a group of `nranks` in-memory ranks.
pub type NccomMemGroupCreateFn =
    unsafe extern "C" fn(nranks: u32, out: *mut *mut NccomMemGroup) -> NRT_STATUS;

/// `nccom_mem_group_destroy`.
pub type NccomMemGroupDestroyFn = unsafe extern "C" fn(group: *mut NccomMemGroup) -> NRT_STATUS;

/// `nccom_comm_create`.
pub type NccomCommCreateFn =
    unsafe extern "C" fn(config: *const NccomCommConfig, out: *mut *mut NccomComm) -> NRT_STATUS;

/// `nccom_comm_destroy`.
pub type NccomCommDestroyFn = unsafe extern "C" fn(comm: *mut NccomComm) -> NRT_STATUS;

/// `nccom_comm_register_memory`.
pub type NccomCommRegisterMemoryFn =
    unsafe extern "C" fn(comm: *mut NccomComm, base: *const c_void, len: usize) -> NRT_STATUS;

/// `nccom_comm_invalidate_range` (ABI 1.1): drop the comm's transport registrations of a range
/// about to be freed.
pub type NccomCommInvalidateRangeFn =
    unsafe extern "C" fn(comm: *mut NccomComm, addr: *const c_void, len: usize) -> NRT_STATUS;

/// `nccom_comm_abort` (ABI 1.1): request an abort of a comm, from any thread.
pub type NccomCommAbortFn = unsafe extern "C" fn(comm: *mut NccomComm) -> NRT_STATUS;

/// `nccom_comm_protocol_stats` (ABI 1.2): copy a comm's protocol counters into `*out` (at most
/// `out->size` bytes; `size` is set to the bytes written).
pub type NccomCommProtocolStatsFn =
    unsafe extern "C" fn(comm: *mut NccomComm, out: *mut NccomProtocolStats) -> NRT_STATUS;

// ---------------------------------------------------------------------------------------------
// Idle wait (ABI 1.4)
// ---------------------------------------------------------------------------------------------

/// `nccom_comm_idle_arm`'s answer: completions are already queued; do not sleep, progress
/// again.
pub const NCCOM_IDLE_READY: u32 = 0;
/// `nccom_comm_idle_arm`'s answer: armed; nothing is queued and the descriptor will signal the
/// next completion: `nccom_comm_idle_sleep` may block.
pub const NCCOM_IDLE_ARMED: u32 = 1;
/// `nccom_comm_idle_arm`'s answer: nothing to sleep on (the comm has no idle wait, or its
/// transport closed): yield instead.
pub const NCCOM_IDLE_UNAVAILABLE: u32 = 2;

/// `nccom_comm_idle_available` (ABI 1.4): `*available` = 1 when the comm has a completion-queue
/// descriptor to block on.
pub type NccomCommIdleAvailableFn =
    unsafe extern "C" fn(comm: *mut NccomComm, available: *mut u32) -> NRT_STATUS;

/// `nccom_comm_idle_arm` (ABI 1.4): arm the comm's idle wait; `*armed` = one of `NCCOM_IDLE_*`.
pub type NccomCommIdleArmFn =
    unsafe extern "C" fn(comm: *mut NccomComm, armed: *mut u32) -> NRT_STATUS;

/// `nccom_comm_idle_sleep` (ABI 1.4): sleep on the armed idle wait at most `timeout_ns`;
/// `*woken` = 1 when the descriptor signalled or a kick came.
pub type NccomCommIdleSleepFn =
    unsafe extern "C" fn(comm: *mut NccomComm, timeout_ns: u64, woken: *mut u32) -> NRT_STATUS;

/// `nccom_comm_idle_kick` (ABI 1.4): end the comm's idle sleep in progress (or the next), from
/// any thread.
pub type NccomCommIdleKickFn = unsafe extern "C" fn(comm: *mut NccomComm) -> NRT_STATUS;

// ---------------------------------------------------------------------------------------------
// Event trace (ABI 1.3)
// ---------------------------------------------------------------------------------------------

/// Trace class: where an op and a collective's task begin and end (a few events per op and
/// collective). The default.
pub const NCCOM_TRACE_OPS: u32 = 1;
/// Trace class: the op and task state changes in between (handshake → transfer; waiting,
/// running, idle).
pub const NCCOM_TRACE_STEPS: u32 = 32;
/// Trace class: every transport post and completion of a FIFO entry.
pub const NCCOM_TRACE_TRANSPORT: u32 = 2;
/// Trace class: every other state machine's transitions.
pub const NCCOM_TRACE_TRANSITIONS: u32 = 4;
/// Trace class: the drive token taken and released.
pub const NCCOM_TRACE_DRIVE: u32 = 8;
/// Trace class: a driving thread's sleep and wake-up.
pub const NCCOM_TRACE_SLEEP: u32 = 16;
/// Every trace class.
pub const NCCOM_TRACE_ALL: u32 = 63;

const _: () = {
    use proxy_core::base::trace::mask;
    assert!(NCCOM_TRACE_OPS == mask::OPS && NCCOM_TRACE_TRANSPORT == mask::TRANSPORT);
    assert!(NCCOM_TRACE_TRANSITIONS == mask::TRANSITIONS && NCCOM_TRACE_DRIVE == mask::DRIVE);
    assert!(NCCOM_TRACE_SLEEP == mask::SLEEP && NCCOM_TRACE_ALL == mask::ALL);
    assert!(NCCOM_TRACE_STEPS == mask::STEPS);
};

/// One event of the library's trace ring (`nccom_trace_record_t`, ABI 1.3; 64 bytes), as
/// `nccom_trace_collect` copies it out: the core's `proxy_core::base::trace::Record` with the
/// machine's name inline. Ids not known at the recording site are `UINT32_MAX`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NccomTraceRecord {
    /// When, in ns of `CLOCK_MONOTONIC` (both C libraries stamp with the same clock).
    pub ts_ns: u64,
    /// Bytes of a post or completion (0 otherwise).
    pub bytes: u64,
    /// The recording thread's OS thread id (`gettid`).
    pub thread: u32,
    /// The comm's rank.
    pub rank: u32,
    /// The comm id.
    pub comm: u32,
    /// The op's index within its start call, a task's id, or a queue's id.
    pub op: u32,
    /// The basic block (ops) or the slot (tasks).
    pub block: u32,
    /// The FIFO entry of a post or completion (of an op transition the entries completed, of a
    /// task transition the task's kind).
    pub entry: u32,
    /// The peer rank of an op.
    pub peer: u32,
    /// The stream (0..=3), or 255.
    pub stream: u8,
    /// What happened: 0 transition, 1 token taken, 2 token released, 3 sleep, 4 wake, 5 post,
    /// 6 complete, 7 mark.
    pub kind: u8,
    /// A transition's state before.
    pub from: u8,
    /// A transition's state after.
    pub to: u8,
    /// 1 send, 0 receive, 255 not an op.
    pub side: u8,
    /// A transition's edge number in its machine's diagram.
    pub edge: u8,
    /// A transition's machine (`"op"`, `"task"`, ...), NUL-padded (not terminated at 14).
    pub machine: [c_char; 14],
}

const _: () = assert!(core::mem::size_of::<NccomTraceRecord>() == 64);

/// What `nccom_trace_collect` saw (`nccom_trace_counts_t`, ABI 1.3).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NccomTraceCounts {
    /// Records in the ring now (published).
    pub records: u64,
    /// Records copied into the caller's array (at most its capacity, in claim order).
    pub written: u64,
    /// Slots claimed by a writer that had not published them yet (recording was under way).
    pub pending: u64,
    /// Records dropped because the ring was full: the trace is truncated when not 0.
    pub dropped: u64,
}

/// `nccom_trace_start` (ABI 1.3): install the library's tracer (a ring of `capacity` records,
/// 0 for the default, at the first call) and record the classes of `mask` (0: the default).
pub type NccomTraceStartFn = unsafe extern "C" fn(mask: u32, capacity: usize) -> NRT_STATUS;

/// `nccom_trace_stop` (ABI 1.3): stop recording (the records stay).
pub type NccomTraceStopFn = unsafe extern "C" fn() -> NRT_STATUS;

/// `nccom_trace_collect` (ABI 1.3): copy the recorded events into `out[0..cap]` and the counts
/// into `*counts`.
pub type NccomTraceCollectFn = unsafe extern "C" fn(
    out: *mut NccomTraceRecord,
    cap: usize,
    counts: *mut NccomTraceCounts,
) -> NRT_STATUS;

#[cfg(test)]
mod tests;
