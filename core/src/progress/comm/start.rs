//! Starting a stream's blocks ([`Comm::start`]): the descriptors validated, the ops of each
//! block built from the pool and filed (or deferred behind the block before), and the scripted
//! test kind's start.

use super::*;

impl Comm {
    /// Files one block's ops on `stream`: validates the whole call, builds a send proxy op for
    /// every op info with `tx_entry_cnt > 0` and a recv proxy op for every one with
    /// `rx_entry_cnt > 0` on `next_ops`, then moves them in order to the tail of the deferred
    /// map entry for `bb`. May be called for many blocks before the first `progress`.
    ///
    /// # Errors
    /// * the abort's status when the comm was aborted ([`Comm::abort_handle`]; the abort is
    ///   applied first, see there);
    /// * the sticky fatal error when the comm has failed;
    /// * `Invalid` for stream ≥ 4, `bb == u32::MAX`, an empty op FIFO, FIFO lengths that differ
    ///   from the ops' entry counts, `net_op_idx` out of range, a wrong or unknown mark, a peer
    ///   ≥ nranks, a size that is not a multiple of `data_type_sz` or is above the transport's
    ///   maximum, a missing or unregistered address (the log line names the range), or a
    ///   stream whose stepped teardown ([`Comm::stop_step`]) is under way;
    /// * `Resource` when a pool block cannot be allocated.
    ///
    /// A rejected call files nothing.
    ///
    /// Seed: `neuronStartNetworkProxy` → `ncclProxySaveNeuron` + `ncclProxyStart`, §1/§4.
    pub fn start(
        &mut self,
        stream: u32,
        bb: u32,
        ops: &[NetOpInfo],
        src: &[NetSrcAddr],
        dst: &[NetDestAddr],
    ) -> Result<(), NrtStatus> {
        if let Some(e) = self.check_abort() {
            log::error!(
                "start on aborted comm {} rejected: {e}",
                self.config.comm_id
            );
            return Err(e);
        }
        self.end_teardown();
        if let Some(e) = self.fatal {
            log::error!("start on failed comm {} rejected: {e}", self.config.comm_id);
            return Err(e);
        }
        let s = check_stream(stream)?;
        self.refuse_if_closing(s, "start")?;
        // The scratch leaves `self` for the call (a move, no allocation) and always comes back.
        let mut place = core::mem::take(&mut self.start_scratch);
        let r = self.start_with(s, stream, bb, ops, src, dst, &mut place);
        self.start_scratch = place;
        r
    }

    /// `start` after the stream check, with its scratch. Groups each side's entries by op with
    /// a counting sort (linear in the input): validation counts the entries per op, a prefix
    /// sum turns the counts into each op's first index in the block's entry vectors, and one
    /// pass places every entry at its op's next index (stable: FIFO order within an op). Every
    /// vector is reused, so a steady state that files the same shapes allocates nothing.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_with(
        &mut self,
        s: usize,
        stream: u32,
        bb: u32,
        ops: &[NetOpInfo],
        src: &[NetSrcAddr],
        dst: &[NetDestAddr],
        place: &mut Vec<[u32; 2]>,
    ) -> Result<(), NrtStatus> {
        self.validate(bb, ops, src, dst, place)?;
        let n_ops: u32 = ops
            .iter()
            .map(|o| u32::from(o.tx_entry_cnt > 0) + u32::from(o.rx_entry_cnt > 0))
            .sum();

        // Prefix sum: `place[k]` becomes op k's first index in the block's src / dst entries
        // (after whatever earlier `start` calls filed under the same block).
        let (mut next_src, mut next_dst) = self.streams[s]
            .blocks
            .get(&bb)
            .map_or((0, 0), |b| (b.src.len() as u32, b.dst.len() as u32));
        for p in place.iter_mut() {
            let [n_src, n_dst] = *p;
            *p = [next_src, next_dst];
            next_src += n_src;
            next_dst += n_dst;
        }

        // Build on next_ops (ncclProxySaveNeuron): a send op, then a recv op, per op info.
        let mut sides = ops
            .iter()
            .enumerate()
            .flat_map(|(k, o)| [(k, true, o.tx_entry_cnt), (k, false, o.rx_entry_cnt)])
            .filter(|&(_, _, count)| count > 0);
        let starts: &[[u32; 2]] = place;
        self.build_ops(s, stream, bb, n_ops, |op, _| {
            // Always `Some`: `n_ops` counts exactly the sides this yields.
            if let Some((k, send, _)) = sides.next() {
                if send {
                    sendrecv::init_send(op, &ops[k], k as u32, starts[k][0]);
                } else {
                    sendrecv::init_recv(op, &ops[k], k as u32, starts[k][1]);
                }
            }
        })?;
        let st = &mut self.streams[s];
        // File (ncclProxyStart): next_ops → tail of blocks[bb], entries placed by op.
        let files = st.blocks.entry_or_default(bb);
        // Right length first (every slot is overwritten below: placement is a bijection).
        files.src.extend_from_slice(src);
        files.dst.extend_from_slice(dst);
        for e in src {
            let at = &mut place[e.net_op_idx as usize][0];
            files.src[*at as usize] = *e;
            *at += 1;
        }
        for e in dst {
            let at = &mut place[e.net_op_idx as usize][1];
            files.dst[*at as usize] = *e;
            *at += 1;
        }
        // Protocol counters: one accepted start, and the records of its ops.
        self.stats.starts += 1;
        peaks::file_records(&mut self.op_peaks, stream, bb, ops, &mut st.next_ops);
        files.ops.append(&mut st.next_ops);
        log::debug!(
            "start: comm {} rank {} stream {stream} block {bb}: filed {n_ops} proxy ops",
            self.config.comm_id,
            self.config.rank
        );
        Ok(())
    }

    /// Files ops of the scripted test kind (see [`crate::progress::scripted`]) under `bb` on
    /// `stream`, one per script, exactly as `start` files send/recv ops; the scripts go to the
    /// transport's script table. Test scaffolding (`cfg(test)` or feature `testing`).
    ///
    /// # Errors
    /// As [`Comm::start`] for the comm state, stream, block id and allocation; `Invalid` when
    /// the transport keeps no script table.
    #[cfg(any(test, feature = "testing"))]
    pub fn start_scripted(
        &mut self,
        stream: u32,
        bb: u32,
        scripts: &[crate::progress::scripted::Script],
    ) -> Result<(), NrtStatus> {
        use crate::progress::scripted;
        if let Some(e) = self.check_abort().or(self.fatal) {
            return Err(e);
        }
        let s = check_stream(stream)?;
        self.refuse_if_closing(s, "start_scripted")?;
        if bb == BB_NONE || scripts.is_empty() {
            reject!("start_scripted: block {bb:#x} / {} scripts", scripts.len());
        }
        let mut keys = Vec::with_capacity(scripts.len());
        self.build_ops(s, stream, bb, scripts.len() as u32, |op, i| {
            scripted::init(op, i);
            keys.push(scripted::key(op));
        })?;
        self.scripts
            .extend(keys.into_iter().zip(scripts.iter().copied()));
        let st = &mut self.streams[s];
        st.blocks.entry_or_default(bb).ops.append(&mut st.next_ops);
        Ok(())
    }

    /// Builds `n` ops on stream `s`'s `next_ops` (the seed's `ncclProxySaveNeuron`): each taken
    /// from the pool (grown by whole blocks first), set up by `init(op, i)`, given the comm's
    /// next op count and armed. On failure every op built returns to the pool and nothing is
    /// filed.
    pub(super) fn build_ops(
        &mut self,
        s: usize,
        stream: u32,
        bb: u32,
        n: u32,
        mut init: impl FnMut(&mut ProxyOp, u32),
    ) -> Result<(), NrtStatus> {
        // A new execution's first progress call starts a new round (docs/design.md §8).
        self.round_last_stream = BB_NONE;
        let st = &mut self.streams[s];
        st.reserve(n)?;
        for i in 0..n {
            let armed = match st.pool.pop_front() {
                None => Err(NrtStatus::Resource),
                Some(opp) => {
                    // SAFETY: `opp` is a live op of this stream's pool blocks, just unlinked.
                    let op = unsafe { &mut *opp };
                    init(op, i);
                    op.stream = stream;
                    op.basic_block_id = bb;
                    op.op_count = self.last_op_count;
                    self.last_op_count += 1;
                    let armed = op.rearm_in(self.config.rank, self.config.comm_id);
                    // `op` is not used past this point: the links are written through `opp`.
                    // SAFETY: `opp` is live and on no list.
                    unsafe { st.next_ops.push_back(opp) };
                    armed
                }
            };
            if let Err(e) = armed {
                let mut built = core::mem::take(&mut st.next_ops);
                StreamState::release_list(&mut st.pool, &mut built);
                log::error!(
                    "start: comm {} stream {stream} block {bb}: {e}; nothing filed",
                    self.config.comm_id
                );
                return Err(e);
            }
        }
        Ok(())
    }
}
