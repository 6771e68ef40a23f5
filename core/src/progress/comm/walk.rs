//! The op walk: one `progress` tick on a stream (block load, pending block, the active-list walk,
//! recycling under the op's own block).
//!
//! Seed: `ncclProxyProgress` (nccom:0x40f40), `ncclProxyProgressOps` (nccom:0x40a80),
//! `proxyReloadProxyArgs`, `recycleOp`, §4.

use super::*;

/// What one [`Comm::progress`] tick on a stream found (the seed's `idle` / `done` out
/// parameters, named): `idle` when no op made progress, `done` when the stream's current block
/// has no op left (and no other block is pending).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamTick {
    /// No op of the stream made progress in this tick.
    pub idle: bool,
    /// The stream has nothing left to run: its block finished and no other block is pending.
    pub done: bool,
}

impl StreamTick {
    /// Nothing to run: idle and done.
    pub const IDLE_DONE: Self = Self {
        idle: true,
        done: true,
    };

    /// ANDs this tick into the caller's "all idle" / "all done" (the seam's out parameters:
    /// the caller seeds both with `true` and progresses its streams in turn).
    pub fn and_into(self, idle: &mut bool, done: &mut bool) {
        *idle &= self.idle;
        *done &= self.done;
    }
}

impl Comm {
    /// One progress tick on `stream` (docs/design.md §3): loads a block when `active` is empty
    /// (the pending block first, else `bb`), remembers `bb` as pending otherwise, walks the
    /// active ops once, recycles the ops that reached state 0 under their own block, and
    /// answers what the tick found ([`StreamTick`]: every op idle, every op done). Done while another
    /// block is pending is neither idle nor done.
    ///
    /// A stream with nothing filed (or stopped) is idle and done ([`StreamTick::IDLE_DONE`]).
    ///
    /// **Rounds.** The caller progresses its streams in turn, in increasing stream order (the
    /// network task does). A call on a stream `<=` the stream of the previous call, or the
    /// first call after a `start` or `stop`, starts a new *round*; the transport's completion queue is polled once per round, before the op
    /// walk of the round's first call that has a current block. So S streams progressed in
    /// one round poll once, and a caller that progresses only one stream polls on every call.
    /// The seam's signature carries no round: this rule is how the progress half sees it
    /// (docs/design.md §8).
    ///
    /// # Errors
    /// * `Invalid` for stream ≥ 4, or while the stream's stepped teardown
    ///   ([`Comm::stop_step`]) is under way (the comm is not failed by either);
    /// * the abort's status once the comm was aborted ([`Comm::abort_handle`]): the first
    ///   such call applies the abort (every stream stopped);
    /// * `NetworkProxyFailure` when the comm has failed, now or earlier (sticky): a transport
    ///   error, or a broken op invariant (op count not below the comm's last op count, or an
    ///   active op of another block), each logged with comm, stream, block and op.
    ///
    /// Seed: `neuronNetworkProxyProgress` → `ncclProxyProgress` → `ncclProxyProgressOps`, §4.
    pub fn progress(&mut self, stream: u32, bb: u32) -> Result<StreamTick, NrtStatus> {
        let s = check_stream(stream)?;
        if let Some(status) = self.check_abort() {
            return Err(status);
        }
        self.refuse_if_closing(s, "progress")?;
        // Not a teardown any more: the next stop starts a new drain budget (unless a stepped
        // teardown is still under way on another stream).
        self.end_teardown();
        if self.fatal.is_some() {
            return Err(NrtStatus::NetworkProxyFailure);
        }
        let comm_id = self.config.comm_id;
        // Rounds (docs/design.md §8): a call on a stream at or below the last one progressed
        // (none after a start or stop) starts a new round; the transport is polled once per
        // round.
        if self.round_last_stream == BB_NONE || stream <= self.round_last_stream {
            self.round_polled = false;
        }
        self.round_last_stream = stream;
        let st = &mut self.streams[s];

        // 1. Reload (proxyReloadProxyArgs) or remember pending.
        if st.active.is_empty() {
            let load = if st.pending_bb != BB_NONE {
                core::mem::replace(&mut st.pending_bb, BB_NONE)
            } else {
                bb
            };
            st.current_bb = BB_NONE;
            if let Some(files) = st.blocks.get_mut(&load) {
                if !files.ops.is_empty() {
                    st.active.append(&mut files.ops);
                    st.current_bb = load;
                    // A block switch: another block than the one this stream ran last.
                    if st.last_bb != BB_NONE && st.last_bb != load {
                        self.stats.block_switches += 1;
                    }
                    st.last_bb = load;
                }
            }
        } else if bb != st.current_bb {
            st.pending_bb = bb;
        }
        // 2. Nothing to run.
        if st.current_bb == BB_NONE {
            return Ok(StreamTick::IDLE_DONE);
        }
        // The transport's own progress: once per round, before the first op walk of the round
        // (the first call of the round that has a current block).
        if !self.round_polled {
            self.round_polled = true;
            if let Err(e) = self.transport.poll() {
                log::error!("comm {comm_id} stream {stream}: transport poll failed: {e}");
                if self.fatal.is_none() {
                    self.fatal_peer = e.peer;
                }
                return Err(self.fail(e.status));
            }
        }
        // 3. Walk the active ops (ncclProxyProgressOps). Every active op belongs to the current
        // block (checked per op), so its files are looked up once: their entries for the ops'
        // context, their op list to file recycled ops under (split borrows of the stream).
        let last_op_count = self.last_op_count;
        let rank = self.config.rank;
        let st = &mut self.streams[s];
        let current_bb = st.current_bb;
        let StreamState { active, blocks, .. } = st;
        let Some(files) = blocks.get_mut(&current_bb) else {
            log::error!(
                "progressOps: comm {comm_id} stream {stream}: current block {current_bb} is not in the map"
            );
            return Err(self.fail(NrtStatus::NetworkProxyFailure));
        };
        let BlockFiles {
            ops: filed,
            src,
            dst,
        } = files;
        let mut ctx = OpCtx {
            transport: &mut *self.transport,
            device: &*self.device,
            src,
            dst,
            comm_id,
            rank,
            stream,
            stats: &mut self.stats,
            #[cfg(any(test, feature = "testing"))]
            scripts: &self.scripts,
        };
        let peaks = &mut self.op_peaks;
        let mut all_idle = true;
        let mut prev: *mut ProxyOp = ptr::null_mut();
        let mut cur = active.head();
        let mut failure = None;
        while !cur.is_null() {
            // SAFETY: `cur` is an op on `active` (live, in this stream's pool blocks); no other
            // reference to it exists while `op` is used.
            let op = unsafe { &mut *cur };
            if op.op_count >= last_op_count {
                log::error!(
                    "progressOps: comm {comm_id} stream {stream} block {current_bb}: op {} ({}) has op count {} not below the comm's last op count {last_op_count}",
                    op.net_op_idx, op.kind_name(), op.op_count
                );
                failure = Some(NrtStatus::NetworkProxyFailure);
                break;
            }
            if op.basic_block_id != current_bb {
                log::error!(
                    "progressOps: comm {comm_id} stream {stream}: op {} ({}) of block {} is active while block {current_bb} is current",
                    op.net_op_idx, op.kind_name(), op.basic_block_id
                );
                failure = Some(NrtStatus::NetworkProxyFailure);
                break;
            }
            let Some(progress) = op.progress.0 else {
                log::error!(
                    "progressOps: comm {comm_id} stream {stream}: op {} has no progress function",
                    op.net_op_idx
                );
                failure = Some(NrtStatus::NetworkProxyFailure);
                break;
            };
            if let Err(e) = progress(op, &mut ctx) {
                log::error!(
                    "comm {comm_id} rank {rank} stream {stream} block {} op {} ({}, peer {}): {e}",
                    op.basic_block_id,
                    op.net_op_idx,
                    op.kind_name(),
                    op.peer
                );
                failure = Some(e);
                break;
            }
            all_idle &= op.idle != 0;
            let next = op.next_op();
            if op.state() == OpState::DONE {
                // Recycle: re-arm, unlink, file again under its own block (the current one).
                // `op` is last used here; the list links are then written through raw
                // pointers only.
                op.executions += 1;
                super::peaks::fold_op(peaks, op);
                let armed = op.recycle_in(rank, comm_id);
                // SAFETY: `prev` is null or the op before `cur` on `active`.
                let unlinked = unsafe { active.unlink_after(prev) };
                debug_assert_eq!(unlinked, cur);
                // SAFETY: `cur` is live and on no list.
                unsafe { filed.push_back(cur) };
                if let Err(e) = armed {
                    failure = Some(e);
                    break;
                }
            } else {
                prev = cur;
            }
            cur = next;
        }
        if let Some(e) = failure {
            return Err(self.fail(e));
        }
        // 4. Done = active empty; done with a pending block is neither idle nor done.
        let st = &self.streams[s];
        let my_done = st.active.is_empty();
        if my_done && st.pending_bb != BB_NONE {
            Ok(StreamTick {
                idle: false,
                done: false,
            })
        } else {
            Ok(StreamTick {
                idle: all_idle,
                done: my_done,
            })
        }
    }
}
