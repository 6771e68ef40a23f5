//! The per-op protocol records of a comm ([`OpPeak`], `progress::stats`): one filed per op info
//! when its block is started, and each op's peaks folded into it when the op is recycled or
//! its stream stopped.

use alloc::vec::Vec;

use crate::base::desc::NetOpInfo;
use crate::progress::op::{OpList, OpSide, ProxyOp, REQUEST_TRACKER_SIZE};
use crate::progress::stats::OpPeak;

/// Files the records of one accepted `start` on (`stream`, `bb`): one per op info of `ops`,
/// made or (same key) replaced with zero counters, following the proxy ops just built on
/// `built` (by their op counts), whose [`ProxyOp::peak_slot`] it sets. Allocates only for a
/// key not seen before.
///
/// A block's records are contiguous and by op (the key's last part), so one search finds where
/// op 0's goes and op `k`'s is `k` places on: a block started again with the ops it had
/// searches once, not once per op and again per built op.
pub(super) fn file_records(
    peaks: &mut Vec<OpPeak>,
    stream: u32,
    bb: u32,
    ops: &[NetOpInfo],
    built: &mut OpList,
) {
    let first = peaks.partition_point(|r| r.key() < (stream, bb, 0));
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
        // Records (stream, bb, 0..k) sit at first..first + k: the one at first + k is op k's
        // or a greater key, before which op k's goes.
        let i = first + k;
        match peaks.get_mut(i) {
            Some(r) if r.key() == rec.key() => *r = rec,
            _ => peaks.insert(i, rec),
        }
    }
    for opp in built.iter() {
        // SAFETY: ops on a stream's list are live and on no other list; the caller holds the
        // list mutably, and no other reference to the op exists meanwhile.
        let op = unsafe { &mut *opp };
        let Some(send) = side(op) else { continue };
        let Some(i) = find(peaks, op) else { continue };
        op.peak_slot = i as u32;
        if send {
            peaks[i].send_op_count = op.op_count;
        } else {
            peaks[i].recv_op_count = op.op_count;
        }
    }
}

/// The index of `op`'s record: its [`ProxyOp::peak_slot`] when the record there still has the
/// op's key, else by search; `None` when there is none.
fn find(peaks: &[OpPeak], op: &ProxyOp) -> Option<usize> {
    let key = op_key(op);
    let hint = op.peak_slot as usize;
    if peaks.get(hint).is_some_and(|r| r.key() == key) {
        return Some(hint);
    }
    peaks.binary_search_by_key(&key, OpPeak::key).ok()
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
    let Some(i) = find(peaks, op) else {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::op::Slot8;
    use crate::progress::sendrecv::{RECV_OP, SEND_OP};
    use alloc::boxed::Box;

    /// A send (`send`) or recv proxy op of (stream, bb, op), built by start number `count`.
    fn op(stream: u32, bb: u32, idx: u32, send: bool, count: u64) -> *mut ProxyOp {
        // SAFETY: an all-zero `ProxyOp` is valid (`ProxyOp::reset`).
        let mut op: Box<ProxyOp> = Box::new(unsafe { core::mem::zeroed() });
        op.transport_comm = Slot8(Some(if send { &SEND_OP } else { &RECV_OP }));
        op.stream = stream;
        op.basic_block_id = bb;
        op.net_op_idx = idx;
        op.op_count = count;
        Box::into_raw(op)
    }

    fn built(ops: &[*mut ProxyOp]) -> OpList {
        let mut l = OpList::new();
        for &o in ops {
            // SAFETY: each op is live (leaked box) and on no list.
            unsafe { l.push_back(o) };
        }
        l
    }

    fn free(mut l: OpList) {
        while let Some(o) = l.pop_front() {
            // SAFETY: every op of these tests is a leaked `Box` (`op`), freed once here.
            drop(unsafe { Box::from_raw(o) });
        }
    }

    fn keys(peaks: &[OpPeak]) -> alloc::vec::Vec<(u32, u32, u32)> {
        peaks.iter().map(OpPeak::key).collect()
    }

    /// The records stay sorted and unique as blocks are filed in any order and with more ops;
    /// an op's slot hint that a later filing moved still folds into the op's own record.
    #[test]
    fn records_stay_sorted_and_a_moved_hint_still_folds_into_its_own_record() {
        let info = NetOpInfo {
            tx_entry_cnt: 1,
            rx_entry_cnt: 1,
            ..NetOpInfo::default()
        };
        let mut peaks = alloc::vec::Vec::new();
        let mut b1 = built(&[op(1, 1, 0, true, 7), op(1, 1, 1, false, 8)]);
        file_records(&mut peaks, 1, 1, &[info, info], &mut b1);
        assert_eq!(keys(&peaks), [(1, 1, 0), (1, 1, 1)]);
        let s1: alloc::vec::Vec<*mut ProxyOp> = b1.iter().collect();
        let (p0, p1) = (s1[0], s1[1]);
        // SAFETY: the ops are live until `free`, and these are their only references.
        let (send1, recv1) = unsafe { (&mut *p0, &mut *p1) };
        assert_eq!((send1.peak_slot, recv1.peak_slot), (0, 1));
        assert_eq!((peaks[0].send_op_count, peaks[1].recv_op_count), (7, 8));

        // A block with a smaller key moves stream 1's records on by one: their hints are stale.
        let mut b0 = built(&[op(0, 1, 0, true, 9)]);
        file_records(&mut peaks, 0, 1, &[info], &mut b0);
        assert_eq!(keys(&peaks), [(0, 1, 0), (1, 1, 0), (1, 1, 1)]);
        send1.peak_outstanding = 5;
        recv1.max_recv_ahead = 3;
        fold_op(&mut peaks, send1);
        fold_op(&mut peaks, recv1);
        assert_eq!(peaks[0].peak_send, 0, "stream 0's record is not stream 1's");
        assert_eq!((peaks[1].peak_send, peaks[2].max_recv_ahead), (5, 3));

        // Filed again with one op more: the old records are replaced (counters zeroed), the
        // new one goes after them.
        let mut b2 = built(&[
            op(1, 1, 0, true, 10),
            op(1, 1, 1, false, 11),
            op(1, 1, 2, true, 12),
        ]);
        file_records(&mut peaks, 1, 1, &[info, info, info], &mut b2);
        assert_eq!(keys(&peaks), [(0, 1, 0), (1, 1, 0), (1, 1, 1), (1, 1, 2)]);
        assert_eq!(peaks[1].peak_send, 0);
        assert_eq!(
            (
                peaks[1].send_op_count,
                peaks[2].recv_op_count,
                peaks[3].send_op_count
            ),
            (10, 11, 12)
        );
        // The first filing's send op no longer owns its record (a later start's op does):
        // folding it changes nothing.
        fold_op(&mut peaks, send1);
        assert_eq!(peaks[1].peak_send, 0);
        for l in [b0, b1, b2] {
            free(l);
        }
    }
}
