//! Protocol counters: what the send and recv proxy ops did with the `nec.h` options (credits,
//! the two early flags, the host-index wrap) and how the streams ran their basic blocks, so a
//! run can prove each option did work (docs/design.md §5, "Protocol counters").
//!
//! Counted on the thread that drives the comm, with plain integer adds and maxima: no atomics,
//! no allocation on the progress path. [`ProtocolStats`] is the comm's total since it was
//! created ([`Comm::protocol_stats`](crate::progress::comm::Comm::protocol_stats)); [`OpPeak`]
//! is one record per op info of the blocks filed
//! ([`Comm::op_peaks`](crate::progress::comm::Comm::op_peaks)).
//!
//! Seed: the counters are not in the seed; what they count is `netNeuronSendProxy` /
//! `netNeuronRecvProxy` (credits, early flags, host index), `ncclProxyStart` and
//! `check_basic_block_switch`, §3/§4.

use core::mem::size_of;

/// A comm's protocol counters, cumulative since the comm was created (`stop` and a failure
/// keep them). `#[repr(C)]`: the C ABI's `nccom_protocol_stats_t` has exactly this layout
/// (72 bytes), and a later version only appends fields (`size` says how many bytes are valid).
///
/// Seed: none (counts what `netNeuronSendProxy` / `netNeuronRecvProxy`, `ncclProxyStart` and
/// `check_basic_block_switch` do, §3/§4).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProtocolStats {
    /// Bytes of this struct the producer filled in ([`PROTOCOL_STATS_SIZE`] from this
    /// version; C versioning: a reader ignores fields past `size`).
    pub size: u32,
    /// Zero.
    pub reserved: u32,
    /// `start` calls accepted (each files one (stream, basic block)); a rejected call does not
    /// count. Seed: `neuronStartNetworkProxy`.
    pub starts: u64,
    /// Times a stream loaded a basic block other than the one it ran before (since its last
    /// `stop`): the next block of a schedule taken over when the previous one drained, or a
    /// pending block. Reloading the block that just drained (a loop over one block) is not a
    /// switch. Seed: `check_basic_block_switch` / `proxyReloadProxyArgs`, §3.
    pub block_switches: u64,
    /// Send entries counted to `send_complete` before their request finished at the transport
    /// (only with `early_send_completion`, for payloads the transport copied at post). Seed:
    /// `netNeuronSendProxy`, §5 "The two early flags".
    pub early_send_completions: u64,
    /// Receives posted for entries the device had not posted yet (beyond the op's host index;
    /// only with `early_recv_posting`). Seed: `netNeuronRecvProxy`, §5.
    pub recvs_posted_ahead: u64,
    /// The most entries any recv op had posted beyond its host index at once (at most its
    /// `ending_recv_credits`).
    pub max_recv_ahead: u64,
    /// Host-index wrap-arounds seen: reads of an op's host index that passed a multiple of its
    /// `net_idx_loop_size` (0 = 2^32). An op with `n` entries and loop size `L` sees `n / L`
    /// per execution. Seed: `netNeuronSendProxy` / `netNeuronRecvProxy`, §5.
    pub index_wraps: u64,
    /// The most send requests any one send op had outstanding at the transport at once (at
    /// most its `initial_send_credits`, 0 meaning 128).
    pub peak_outstanding_send: u64,
    /// The most receive requests any one recv op had outstanding at once (at most 128).
    pub peak_outstanding_recv: u64,
}

/// `size_of::<ProtocolStats>()` (72): what [`ProtocolStats::size`] says for this version.
pub const PROTOCOL_STATS_SIZE: u32 = size_of::<ProtocolStats>() as u32;

const _: () = assert!(size_of::<ProtocolStats>() == 72);

impl ProtocolStats {
    /// All counters zero, `size` set to [`PROTOCOL_STATS_SIZE`].
    pub const fn new() -> Self {
        Self {
            size: PROTOCOL_STATS_SIZE,
            reserved: 0,
            starts: 0,
            block_switches: 0,
            early_send_completions: 0,
            recvs_posted_ahead: 0,
            max_recv_ahead: 0,
            index_wraps: 0,
            peak_outstanding_send: 0,
            peak_outstanding_recv: 0,
        }
    }
}

/// What one op info of a filed block did: its two sides (send, recv) as `start` built them and
/// their counters, cumulative over the executions of the block since it was filed.
///
/// Kept by the comm, one record per filed (stream, basic block, op), in that order; a `start`
/// that files the same (stream, block) again replaces the records of its op indices (so a loop
/// over the same blocks does not grow the list). The counters are folded from the live ops when
/// an op finishes an execution (state 0) and when its stream is stopped, so they are current
/// once the block has drained or the task has ended.
///
/// 64-byte aligned: each record (96 bytes of fields) starts a cache line of its own; packed,
/// every other record began mid-line and shared that line with its neighbour (measured with
/// [`crate::progress::op::ProxyOp::peak_slot`]: 8 ranks in process, 8 B all-reduce, 12.2 µs
/// against 13.2).
///
/// Seed: none (counts what `netNeuronSendProxy` / `netNeuronRecvProxy` do, §4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(align(64))]
pub struct OpPeak {
    /// Stream, 0..=3.
    pub stream: u32,
    /// Basic block id.
    pub bb: u32,
    /// Index of the op info in its `start` call (`net_op_idx`).
    pub op: u32,
    /// Source entries (`tx_entry_cnt`; 0 = no send side).
    pub tx_entries: u32,
    /// Destination entries (`rx_entry_cnt`; 0 = no recv side).
    pub rx_entries: u32,
    /// Send credits as applied: `initial_send_credits`, 0 read as 128 (0 when no send side).
    pub send_credits: u32,
    /// `ending_recv_credits` as given (used only with `early_recv_posting`).
    pub ending_recv_credits: u32,
    /// Most send requests outstanding at once (≤ `send_credits`).
    pub peak_send: u32,
    /// Most receive requests outstanding at once (≤ 128).
    pub peak_recv: u32,
    /// Most receives posted beyond the host index at once (≤ `ending_recv_credits`).
    pub max_recv_ahead: u32,
    /// Send entries counted complete before the transport finished them
    /// (`early_send_completion`).
    pub early_send_completions: u64,
    /// Receives posted beyond the host index (`early_recv_posting`).
    pub recvs_ahead: u64,
    /// Host-index wrap-arounds seen, both sides together.
    pub wraps: u64,
    /// `op_count` of the send proxy op this record follows (`u64::MAX`: none).
    pub(crate) send_op_count: u64,
    /// `op_count` of the recv proxy op (`u64::MAX`: none).
    pub(crate) recv_op_count: u64,
    /// Wraps of the send side / the recv side (their sum is `wraps`).
    pub(crate) side_wraps: [u64; 2],
}

impl OpPeak {
    /// The record's key: (stream, basic block, op).
    pub fn key(&self) -> (u32, u32, u32) {
        (self.stream, self.bb, self.op)
    }
}
