//! Op descriptors: the three FIFOs a producer hands to `start` (docs/design.md §5).
//!
//! Our own `repr(C)` types, with the fields of the public Neuron header `nec.h`
//! (`net_ops_info_t`, `net_src_addr_t`, `net_dest_addr_t`) where they make sense without a
//! Neuron device. Addresses are carried as `u64` so the layout is the same on 32-bit targets.
//!
//! Seed: `enc_fifo_set` (`net_ops_info_fifo`, `src_addr_fifo`, `dest_addr_fifo`), §3.

/// Streams per comm: stream ids are `0..NUM_STREAMS`, in the two stream bits of a tag. The
/// one stream count of the engine (the driver's network tasks and the C ABI's
/// `NCCOM_NUM_STREAMS` use it). Seed: `proxyStateStream`, `ncclProxyState` × 4, §4.
pub const NUM_STREAMS: usize = 4;

/// Mark of a FIFO entry that is neither the last of its op nor of the execution.
pub const NET_TRANSFER: u32 = 0;
/// Mark of the last entry of an op.
pub const NET_OP_COMPLETE: u32 = 1;
/// Mark of the last entry of the last op of the execution (ends its op like
/// [`NET_OP_COMPLETE`]).
pub const EXEC_COMPLETE: u32 = 2;

/// Peer value meaning "no peer" (`-1`).
pub const NO_PEER: i32 = -1;

/// Largest entry count per op side: the entry index has 16 bits in the transport tag (docs/design.md §5).
pub const MAX_ENTRIES_PER_OP: u32 = 1 << 16;
/// Largest op `tag` + 1: the op tag has 14 bits in the transport tag.
pub const MAX_OP_TAG: u32 = 1 << 14;

/// One network op: what the device will send and receive, and the host-memory words of its
/// handshake (docs/design.md §5). 88 bytes, `repr(C)`.
///
/// Every `*_addr` is the address of a 4-byte-aligned `u32` in host memory the device reaches;
/// the `post_*` words are host indices (device → proxy), the `*_sem` words are semaphore
/// increment registers (proxy → device, written only through `nec_inc_semaphore`). An address of
/// 0 means absent; it must be present for every side the op has (`tx_entry_cnt > 0` → the send
/// words, `rx_entry_cnt > 0` → the recv words).
///
/// Seed: `net_ops_info_t` (nec.h), carried in `net_ops_info_fifo`, §3.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetOpInfo {
    /// Rank this op sends to, or [`NO_PEER`].
    pub send_peer: i32,
    /// Rank this op receives from, or [`NO_PEER`].
    pub recv_peer: i32,
    /// Tag shared with the partner op on the peer, `< 2^14` (the planner assigns it).
    pub tag: u32,
    /// Number of source-FIFO entries of this op (`0..=2^16`); > 0 makes a send proxy op.
    pub tx_entry_cnt: u32,
    /// Number of destination-FIFO entries of this op (`0..=2^16`); > 0 makes a recv proxy op.
    pub rx_entry_cnt: u32,
    /// The host indices wrap modulo this (0 = no wrap, i.e. 2^32).
    pub net_idx_loop_size: u32,
    /// At most this many outstanding send requests (0 = 128; at most 128).
    pub initial_send_credits: u32,
    /// With `early_recv_posting`, how many entries ahead of the host index receives may be posted.
    pub ending_recv_credits: u32,
    /// Non-zero: a send entry counts as complete once the transport has copied its payload.
    pub early_send_completion: u8,
    /// Non-zero: receives may be posted up to `ending_recv_credits` entries early.
    pub early_recv_posting: u8,
    /// Reserved, must be zero.
    pub reserved: [u8; 2],
    /// Element size in bytes (1, 2, 4 or 8): every entry size is a multiple of it.
    pub data_type_sz: u32,
    /// Address of the send side's host index (`post_send`).
    pub post_send_idx_addr: u64,
    /// Address of the recv side's host index (`post_recv`).
    pub post_recv_idx_addr: u64,
    /// Address of the send handshake semaphore increment register.
    pub send_handshake_sem_addr: u64,
    /// Address of the send-complete semaphore increment register.
    pub send_complete_sem_addr: u64,
    /// Address of the recv handshake semaphore increment register.
    pub recv_handshake_sem_addr: u64,
    /// Address of the recv-complete semaphore increment register.
    pub recv_complete_sem_addr: u64,
}

/// One source-FIFO entry: a buffer to send. 32 bytes, `repr(C)`.
///
/// Seed: `net_src_addr_t` (nec.h), carried in `src_addr_fifo`, §3.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetSrcAddr {
    /// Index of the op (in the `ops` slice of the same `start` call) this entry belongs to.
    pub net_op_idx: u32,
    /// [`NET_TRANSFER`], [`NET_OP_COMPLETE`] or [`EXEC_COMPLETE`].
    pub mark: u32,
    /// Host address of the payload.
    pub addr: u64,
    /// Payload size in bytes (a multiple of the op's `data_type_sz`; 0 is valid).
    pub size: u64,
    /// Destination rank, or [`NO_PEER`] for the op's `send_peer`.
    pub dest_rank: i32,
    /// Reserved, must be zero.
    pub reserved: u32,
}

/// One destination-FIFO entry: a buffer to receive into. 32 bytes, `repr(C)`.
///
/// Seed: `net_dest_addr_t` (nec.h), carried in `dest_addr_fifo`, §3.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetDestAddr {
    /// Index of the op (in the `ops` slice of the same `start` call) this entry belongs to.
    pub net_op_idx: u32,
    /// [`NET_TRANSFER`], [`NET_OP_COMPLETE`] or [`EXEC_COMPLETE`].
    pub mark: u32,
    /// Host address of the receive buffer.
    pub addr: u64,
    /// Exact size in bytes of the message expected (a multiple of `data_type_sz`; 0 is valid).
    pub size: u64,
    /// Source rank, or [`NO_PEER`] for the op's `recv_peer`.
    pub src_rank: i32,
    /// Reserved, must be zero.
    pub reserved: u32,
}

const _: () = assert!(core::mem::size_of::<NetOpInfo>() == 88);
const _: () = assert!(core::mem::size_of::<NetSrcAddr>() == 32);
const _: () = assert!(core::mem::size_of::<NetDestAddr>() == 32);
