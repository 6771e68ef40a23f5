//! The send and recv proxy ops: the per-op transport state machines on the `nec.h` host-memory
//! handshake (docs/design.md §5).
//!
//! Both kinds run the op state machine drawn at [`OpState`]: edge 2 (handshake) and edge 3
//! (last entry completed) are taken here, in `step`; the walk in `Comm::progress` recycles.
//!
//! Seed: `netNeuronSendProxy` (nccom:0x4e510), `netNeuronRecvProxy` (nccom:0x4fe20), the
//! requestTracker 128-rings, §1/§4 (owned by send-recv-prims in the seed).

use crate::base::desc::{NetOpInfo, NO_PEER};
use crate::base::host_word::HOST_INDEX_READY;
use crate::base::status::NrtStatus;
use crate::base::trace;
use crate::progress::net::make_tag;
use crate::progress::net::TestOutcome;
use crate::progress::op::{
    OpCtx, OpKind, OpSide, OpState, ProxyOp, Slot8, TrackedRequest, FLAG_EARLY_RECV_POSTING,
    FLAG_EARLY_SEND_COMPLETION, REQUEST_TRACKER_SIZE,
};

/// The send op kind (`netNeuronSendProxy`).
pub static SEND_OP: OpKind = OpKind {
    name: "send",
    side: OpSide::Send,
    progress: send_progress,
};
/// The recv op kind (`netNeuronRecvProxy`).
pub static RECV_OP: OpKind = OpKind {
    name: "recv",
    side: OpSide::Recv,
    progress: recv_progress,
};

fn init_common(op: &mut ProxyOp, info: &NetOpInfo, index: u32, entry_base: u32) {
    op.net_op_idx = index;
    op.tag = info.tag;
    op.entry_base = entry_base;
    op.loop_size = info.net_idx_loop_size;
    op.data_type_sz = info.data_type_sz;
    op.early_credits = info.ending_recv_credits;
    op.flags = 0;
    // Protocol counters: since this op was built (kept across recycles).
    op.peak_outstanding = 0;
    op.max_recv_ahead = 0;
    op.early_send_completions = 0;
    op.recvs_ahead = 0;
    op.index_wraps = 0;
}

/// Builds a send proxy op for op info `info` (index `index` in its `start` call) whose source
/// entries start at `entry_base` of the block.
pub(crate) fn init_send(op: &mut ProxyOp, info: &NetOpInfo, index: u32, entry_base: u32) {
    op.progress = Slot8(Some(SEND_OP.progress));
    op.transport_comm = Slot8(Some(&SEND_OP));
    init_common(op, info, index, entry_base);
    op.peer = info.send_peer;
    op.n_entries = info.tx_entry_cnt;
    op.max_outstanding = match info.initial_send_credits {
        0 => REQUEST_TRACKER_SIZE as u32,
        c => c,
    };
    if info.early_send_completion != 0 {
        op.flags |= FLAG_EARLY_SEND_COMPLETION;
    }
    op.host_idx_addr = info.post_send_idx_addr;
    op.handshake_sem_addr = info.send_handshake_sem_addr;
    op.complete_sem_addr = info.send_complete_sem_addr;
}

/// Builds a recv proxy op for op info `info` whose destination entries start at `entry_base`.
pub(crate) fn init_recv(op: &mut ProxyOp, info: &NetOpInfo, index: u32, entry_base: u32) {
    op.progress = Slot8(Some(RECV_OP.progress));
    op.transport_comm = Slot8(Some(&RECV_OP));
    init_common(op, info, index, entry_base);
    op.peer = info.recv_peer;
    op.n_entries = info.rx_entry_cnt;
    op.max_outstanding = REQUEST_TRACKER_SIZE as u32;
    if info.early_recv_posting != 0 {
        op.flags |= FLAG_EARLY_RECV_POSTING;
    }
    op.host_idx_addr = info.post_recv_idx_addr;
    op.handshake_sem_addr = info.recv_handshake_sem_addr;
    op.complete_sem_addr = info.recv_complete_sem_addr;
}

/// Progress of a send proxy op (the seed's `netNeuronSendProxy`).
///
/// # Errors
/// A transport error (`NetworkProxyFailure` or the transport's status), a request cancelled
/// behind the op's back, or a device that posted more entries than the op has (`HwError`).
pub fn send_progress(op: &mut ProxyOp, ctx: &mut OpCtx<'_>) -> Result<(), NrtStatus> {
    step(op, ctx, true)
}

/// Progress of a recv proxy op (the seed's `netNeuronRecvProxy`).
///
/// # Errors
/// As [`send_progress`], plus a received size different from the entry's size (truncation).
pub fn recv_progress(op: &mut ProxyOp, ctx: &mut OpCtx<'_>) -> Result<(), NrtStatus> {
    step(op, ctx, false)
}

/// Wrap-arounds of a host index that counts modulo `loop_size` (0 = 2^32) when it advances by
/// `delta` entries from the raw value `last`: how many multiples of the loop size it passed
/// (0 or 1, as the device never has `loop_size` or more entries posted and not completed).
fn host_wraps(last: u32, delta: u32, loop_size: u32) -> u64 {
    if loop_size == 0 {
        u64::from(last.checked_add(delta).is_none())
    } else {
        (u64::from(last % loop_size) + u64::from(delta)) / u64::from(loop_size)
    }
}

/// Entries posted by the device since the last read, from a host index that counts posted
/// entries modulo `loop_size` (0 = 2^32).
fn host_delta(raw: u32, last: u32, loop_size: u32) -> u32 {
    if loop_size == 0 {
        raw.wrapping_sub(last)
    } else {
        let l = u64::from(loop_size);
        ((u64::from(raw) % l + l - u64::from(last) % l) % l) as u32
    }
}

fn step(op: &mut ProxyOp, ctx: &mut OpCtx<'_>, send: bool) -> Result<(), NrtStatus> {
    op.idle = 1;
    op.ticks = op.ticks.wrapping_add(1);
    match op.state() {
        OpState::HANDSHAKE => {
            if ctx.device.load_host_index(op.host_idx_addr) != HOST_INDEX_READY {
                return Ok(());
            }
            // Device ready: take the index back to 0, then tell the device (it starts posting
            // only after it sees the handshake semaphore, so the 0 is in place first).
            ctx.device.store_host_index(op.host_idx_addr, 0);
            op.last_host_idx = 0;
            op.pre_post_fifo_idx = 0;
            // PLANT: SendRecvSkipsHandshake never increments the handshake semaphore: the
            // device waits for it forever.
            plant!(
                SendRecvSkipsHandshake,
                (),
                ctx.device.inc_semaphore(op.handshake_sem_addr, 1)
            );
            op.idle = 0;
            op.set_state_in(OpState::TRANSFER, ctx.rank, ctx.comm_id)
        }
        OpState::TRANSFER => transfer(op, ctx, send),
        OpState::DONE => Ok(()),
        other => {
            log::error!(
                "{} op {}: invalid state {other:?}",
                op.kind_name(),
                op.net_op_idx
            );
            Err(NrtStatus::NetworkProxyFailure)
        }
    }
}

fn transfer(op: &mut ProxyOp, ctx: &mut OpCtx<'_>, send: bool) -> Result<(), NrtStatus> {
    let n = op.n_entries;
    // Entries the device has posted so far (the host index, modulo the loop size).
    let raw = ctx.device.load_host_index(op.host_idx_addr);
    // Once every entry is posted, a `-1` is the device's handshake for the next execution
    // (possible with early completion before the transport finished): no new entries.
    let delta = if raw == HOST_INDEX_READY && op.pre_post_fifo_idx == n {
        0
    } else {
        // PLANT: SendRecvIgnoresIndexWrap reads the index as if it never wrapped (loop size
        // 0): once the device's index wraps, the delta is about 2^32.
        host_delta(
            raw,
            op.last_host_idx,
            plant!(SendRecvIgnoresIndexWrap, 0, op.loop_size),
        )
    };
    if delta != 0 {
        let wraps = host_wraps(op.last_host_idx, delta, op.loop_size);
        op.index_wraps += wraps;
        ctx.stats.index_wraps += wraps;
        if delta > n - op.pre_post_fifo_idx {
            log::error!(
                "{} op {} block {}: host index {raw} says {delta} new entries, only {} left",
                op.kind_name(),
                op.net_op_idx,
                op.basic_block_id,
                n - op.pre_post_fifo_idx
            );
            return Err(NrtStatus::HwError);
        }
        op.pre_post_fifo_idx += delta;
        op.last_host_idx = raw;
    }
    let mut avail = op.pre_post_fifo_idx;
    if !send && op.flags & FLAG_EARLY_RECV_POSTING != 0 {
        // PLANT: SendRecvPostsBeyondEndingCredits posts one receive more than
        // `ending_recv_credits` ahead of the host index: into a buffer the device has not
        // promised is free.
        let ahead = plant!(
            SendRecvPostsBeyondEndingCredits,
            op.early_credits.saturating_add(1),
            op.early_credits
        );
        avail = avail.saturating_add(ahead).min(n);
    }

    // Post (isend / irecv) every available entry, up to the credit limit.
    while op.posted < avail {
        let outstanding = op.tracker().map_or(0, |t| t.len()) as u32;
        if outstanding >= op.max_outstanding {
            break;
        }
        let i = (op.entry_base + op.posted) as usize;
        let (addr, size, rank) = if send {
            let e = &ctx.src[i];
            (e.addr, e.size, e.dest_rank)
        } else {
            let e = &ctx.dst[i];
            (e.addr, e.size, e.src_rank)
        };
        let peer = if rank == NO_PEER { op.peer } else { rank } as u32;
        let src_rank = if send { ctx.rank } else { peer };
        let tag = make_tag(ctx.comm_id, src_rank, ctx.stream, op.tag, op.posted);
        // SAFETY: `start` checked that `addr..addr+size` lies in memory registered with the
        // comm (or the caller vouched for it), which stays valid, and owned by this entry,
        // until the device sees the entry completed through the complete semaphore — which
        // happens only after the transport reports the request finished.
        let posted = unsafe {
            if send {
                ctx.transport
                    .isend(peer, addr as usize as *const u8, size, tag)
            } else {
                ctx.transport
                    .irecv(peer, addr as usize as *mut u8, size, tag)
            }
        };
        // A post may copy (the in-process transport's receive copies a waiting send): the
        // records after it read the clock afresh, whichever classes are recorded
        // (`trace::TickStamp`; one load and a branch while nothing is recorded).
        trace::TickStamp::here().clear();
        let posted = match posted {
            Ok(Some(p)) => p,
            Ok(None) => break, // back-pressure: retry this entry next tick
            Err(e) => {
                log::error!(
                    "{} op {} entry {}: post failed: {e}",
                    op.kind_name(),
                    op.net_op_idx,
                    op.posted
                );
                return Err(e.status);
            }
        };
        let r = TrackedRequest {
            id: posted.request,
            entry: op.posted,
            payload_copied: send && posted.payload_copied,
            cancel_requested: false,
        };
        match op.tracker_mut().map(|t| t.push(r)) {
            Some(Ok(())) => {}
            _ => {
                log::error!(
                    "{} op {}: request tracker missing or full",
                    op.kind_name(),
                    op.net_op_idx
                );
                return Err(NrtStatus::NetworkProxyFailure);
            }
        }
        // Protocol counters (plain adds and maxima, docs/design.md §5).
        let outstanding = outstanding + 1;
        if outstanding > op.peak_outstanding {
            op.peak_outstanding = outstanding;
            let peak = if send {
                &mut ctx.stats.peak_outstanding_send
            } else {
                &mut ctx.stats.peak_outstanding_recv
            };
            *peak = (*peak).max(u64::from(outstanding));
        }
        if !send && op.posted >= op.pre_post_fifo_idx {
            // A receive for an entry the device has not posted yet (early posting).
            let ahead = op.posted + 1 - op.pre_post_fifo_idx;
            op.recvs_ahead += 1;
            ctx.stats.recvs_posted_ahead += 1;
            op.max_recv_ahead = op.max_recv_ahead.max(ahead);
            ctx.stats.max_recv_ahead = ctx.stats.max_recv_ahead.max(u64::from(ahead));
        }
        trace::emit_fresh(trace::mask::TRANSPORT, || {
            io_record(trace::Kind::Post, op, ctx, send, op.posted, size, peer)
        });
        op.posted += 1;
        op.idle = 0;
    }

    // Test outstanding requests in order.
    while let Some(front) = op.tracker().and_then(|t| t.front().copied()) {
        match ctx.transport.test(front.id) {
            Ok(TestOutcome::Pending) => break,
            Ok(TestOutcome::Done { size }) => {
                let i = (op.entry_base + front.entry) as usize;
                let expected = if send {
                    ctx.src[i].size
                } else {
                    ctx.dst[i].size
                };
                if size != expected {
                    log::error!(
                        "{} op {} entry {}: transferred {size} bytes, entry size {expected}",
                        op.kind_name(),
                        op.net_op_idx,
                        front.entry
                    );
                    return Err(NrtStatus::NetworkProxyFailure);
                }
                if let Some(t) = op.tracker_mut() {
                    t.pop_front();
                }
                trace::emit_fresh(trace::mask::TRANSPORT, || {
                    let peer = if send {
                        ctx.src[i].dest_rank
                    } else {
                        ctx.dst[i].src_rank
                    };
                    let peer = if peer == NO_PEER { op.peer } else { peer } as u32;
                    io_record(
                        trace::Kind::Complete,
                        op,
                        ctx,
                        send,
                        front.entry,
                        size,
                        peer,
                    )
                });
                op.completed += 1;
                op.idle = 0;
            }
            Ok(TestOutcome::Cancelled) => {
                log::error!(
                    "{} op {} entry {}: request cancelled while in use",
                    op.kind_name(),
                    op.net_op_idx,
                    front.entry
                );
                return Err(NrtStatus::NetworkProxyFailure);
            }
            Err(e) => {
                log::error!(
                    "{} op {} entry {}: {e}",
                    op.kind_name(),
                    op.net_op_idx,
                    front.entry
                );
                return Err(e.status);
            }
        }
    }

    // Tell the device how many entries are complete. With early send completion an entry
    // whose payload the transport copied counts as soon as every entry before it counts.
    // A receive posted early (ahead of the device) counts only once the device has posted its
    // entry: the device never sees more completions than entries it handed out.
    let mut countable = op.completed.min(op.pre_post_fifo_idx);
    // PLANT: SendRecvEarlyCompletionWithoutFlag counts copied send entries complete early
    // without `early_send_completion`: the device reuses sources the flag did not allow.
    let early_send = send
        && plant!(
            SendRecvEarlyCompletionWithoutFlag,
            true,
            op.flags & FLAG_EARLY_SEND_COMPLETION != 0
        );
    if early_send {
        countable += op
            .tracker()
            .map_or(0, |t| t.iter().take_while(|r| r.payload_copied).count())
            as u32;
    }
    if countable > op.credited {
        // Entries `completed..` have not finished at the transport: counted early.
        let early = countable.saturating_sub(op.credited.max(op.completed));
        if early > 0 {
            op.early_send_completions += u64::from(early);
            ctx.stats.early_send_completions += u64::from(early);
        }
        // PLANT: SendRecvSkipsCompletion credits the entries without incrementing the
        // complete semaphore: the device never sees them complete.
        plant!(
            SendRecvSkipsCompletion,
            (),
            ctx.device
                .inc_semaphore(op.complete_sem_addr, countable - op.credited)
        );
        op.credited = countable;
        op.idle = 0;
    }
    // State 0 only when every request has completed at the transport.
    if op.completed == n && op.credited == n {
        op.set_state_in(OpState::DONE, ctx.rank, ctx.comm_id)?;
    }
    Ok(())
}

#[cfg(all(test, not(loom)))]
mod tests;

/// The event record of a transport post or completion of FIFO entry `entry` (`size` bytes,
/// with `peer`) of `op` (`crate::base::trace`).
fn io_record(
    kind: trace::Kind,
    op: &ProxyOp,
    ctx: &OpCtx<'_>,
    send: bool,
    entry: u32,
    size: u64,
    peer: u32,
) -> trace::Record {
    trace::Record {
        bytes: size,
        rank: ctx.rank,
        comm: ctx.comm_id,
        stream: u8::try_from(ctx.stream).unwrap_or(u8::MAX),
        op: op.net_op_idx,
        block: op.basic_block_id,
        entry,
        peer,
        side: if send { trace::SEND } else { trace::RECV },
        ..trace::Record::new(kind)
    }
}
