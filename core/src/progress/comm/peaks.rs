//! The per-op protocol records of a comm ([`OpPeak`], `progress::stats`): one filed per op info
//! when its block is started, and each op's peaks folded into it when the op is recycled or
//! its stream stopped.

use alloc::vec::Vec;

use crate::base::desc::NetOpInfo;
use crate::progress::op::{OpList, OpSide, ProxyOp, REQUEST_TRACKER_SIZE};
use crate::progress::stats::OpPeak;

/// Files the records of one accepted `start` on (`stream`, `bb`): one per op info of `ops`,
/// made or (same key) replaced with zero counters, following the proxy ops just built on
/// `built` (by their op counts). Allocates only for a key not seen before.
pub(super) fn file_records(
    peaks: &mut Vec<OpPeak>,
    stream: u32,
    bb: u32,
    ops: &[NetOpInfo],
    built: &OpList,
) {
    for (k, o) in ops.iter().enumerate() {
        let rec = OpPeak {
            stream,
            bb,
            op: k as u32,
            tx_entries: o.tx_entry_cnt,
            rx_entries: o.rx_entry_cnt,
            send_credits: match (o.tx_entry_cnt, o.initial_send_credits) {
                (0, _) => 0,
                (_, 0) => REQUEST_TRACKER_SIZE as u32,
                (_, c) => c,
            },
            ending_recv_credits: o.ending_recv_credits,
            send_op_count: u64::MAX,
            recv_op_count: u64::MAX,
            ..OpPeak::default()
        };
        match peaks.binary_search_by_key(&rec.key(), OpPeak::key) {
            Ok(i) => peaks[i] = rec,
            Err(i) => peaks.insert(i, rec),
        }
    }
    for opp in built.iter() {
        // SAFETY: ops on a stream's list are live; the caller holds the stream mutably.
        let op = unsafe { &*opp };
        let Some(send) = side(op) else { continue };
        if let Ok(i) = peaks.binary_search_by_key(&op_key(op), OpPeak::key) {
            if send {
                peaks[i].send_op_count = op.op_count;
            } else {
                peaks[i].recv_op_count = op.op_count;
            }
        }
    }
}

/// `Some(true)` for a send proxy op, `Some(false)` for a recv proxy op, `None` otherwise.
fn side(op: &ProxyOp) -> Option<bool> {
    match op.transport_comm.0?.side {
        OpSide::Send => Some(true),
        OpSide::Recv => Some(false),
        OpSide::Neither => None,
    }
}

fn op_key(op: &ProxyOp) -> (u32, u32, u32) {
    (op.stream, op.basic_block_id, op.net_op_idx)
}

/// Copies a send or recv op's counters (cumulative since it was built) into its record, if
/// the record still follows that op (a later `start` of the same block replaced it otherwise).
/// Idempotent; called when the op finishes an execution and when its stream is stopped.
pub(super) fn fold_op(peaks: &mut [OpPeak], op: &ProxyOp) {
    let Some(send) = side(op) else { return };
    let Ok(i) = peaks.binary_search_by_key(&op_key(op), OpPeak::key) else {
        return;
    };
    let r = &mut peaks[i];
    if send && r.send_op_count == op.op_count {
        r.peak_send = op.peak_outstanding;
        r.early_send_completions = op.early_send_completions;
        r.side_wraps[0] = op.index_wraps;
    } else if !send && r.recv_op_count == op.op_count {
        r.peak_recv = op.peak_outstanding;
        r.recvs_ahead = op.recvs_ahead;
        r.max_recv_ahead = op.max_recv_ahead;
        r.side_wraps[1] = op.index_wraps;
    } else {
        return;
    }
    r.wraps = r.side_wraps[0] + r.side_wraps[1];
}
