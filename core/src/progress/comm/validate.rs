//! Validation of a `start` call as a whole (docs/design.md §6): streams, block ids, FIFO shapes,
//! marks, peers, sizes and registered address ranges. Nothing is touched before it passes.

use super::*;

pub(super) fn check_stream(stream: u32) -> Result<usize, NrtStatus> {
    if (stream as usize) < NUM_STREAMS {
        Ok(stream as usize)
    } else {
        log::error!("invalid stream {stream} (a comm has {NUM_STREAMS})");
        Err(NrtStatus::Invalid)
    }
}

impl Comm {
    fn check_range(&self, what: &str, addr: u64, len: u64) -> Result<(), NrtStatus> {
        let Some(regions) = &self.regions else {
            return Ok(());
        };
        let end = addr.checked_add(len);
        let ok = end.is_some_and(|end| regions.iter().any(|&(b, l)| addr >= b && end <= b + l));
        if !ok {
            reject!("{what}: range {addr:#x}+{len:#x} is not in registered memory");
        }
        Ok(())
    }

    fn check_word(&self, what: &str, addr: u64) -> Result<(), NrtStatus> {
        if addr == 0 || !addr.is_multiple_of(4) {
            reject!("{what}: host word address {addr:#x} is null or not 4-byte aligned");
        }
        self.check_range(what, addr, 4)
    }

    fn check_peer(&self, what: &str, peer: i32) -> Result<(), NrtStatus> {
        if peer < 0 || peer as u32 >= self.config.nranks {
            reject!(
                "{what}: peer {peer} out of range (nranks {})",
                self.config.nranks
            );
        }
        Ok(())
    }

    /// Validates one `start` call as a whole (docs/design.md §6); nothing of the comm is
    /// touched. `seen` is caller-owned scratch (reused, so validation allocates nothing once it
    /// has the capacity): on success it holds, per op info, `[source entries, destination
    /// entries]`, which then equal the op's `tx_entry_cnt` / `rx_entry_cnt` (the counting pass
    /// of `start`'s counting sort).
    pub(super) fn validate(
        &self,
        bb: u32,
        ops: &[NetOpInfo],
        src: &[NetSrcAddr],
        dst: &[NetDestAddr],
        seen: &mut Vec<[u32; 2]>,
    ) -> Result<(), NrtStatus> {
        if bb == BB_NONE {
            reject!("start: block id {bb:#x} is reserved for 'none'");
        }
        if ops.is_empty() {
            reject!("start: empty op FIFO");
        }
        let (mut tx_total, mut rx_total) = (0u64, 0u64);
        let max = self.transport.max_msg_size();
        for (k, op) in ops.iter().enumerate() {
            if op.tx_entry_cnt == 0 && op.rx_entry_cnt == 0 {
                reject!("start: op {k} has no entries");
            }
            if op.tx_entry_cnt > MAX_ENTRIES_PER_OP || op.rx_entry_cnt > MAX_ENTRIES_PER_OP {
                reject!("start: op {k} has more than {MAX_ENTRIES_PER_OP} entries on a side");
            }
            if op.tag >= MAX_OP_TAG {
                reject!("start: op {k} tag {} does not fit 14 bits", op.tag);
            }
            if !matches!(op.data_type_sz, 1 | 2 | 4 | 8) {
                reject!(
                    "start: op {k} data_type_sz {} is not 1, 2, 4 or 8",
                    op.data_type_sz
                );
            }
            if op.initial_send_credits > crate::progress::op::REQUEST_TRACKER_SIZE as u32 {
                reject!(
                    "start: op {k} initial_send_credits {} above 128",
                    op.initial_send_credits
                );
            }
            if op.reserved != [0; 2] || op.early_send_completion > 1 || op.early_recv_posting > 1 {
                reject!("start: op {k} has non-zero reserved bytes or a flag other than 0/1");
            }
            if op.tx_entry_cnt > 0 {
                self.check_peer("start: send peer", op.send_peer)?;
                self.check_word("start: post_send host index", op.post_send_idx_addr)?;
                self.check_word(
                    "start: send handshake semaphore",
                    op.send_handshake_sem_addr,
                )?;
                self.check_word("start: send complete semaphore", op.send_complete_sem_addr)?;
            }
            if op.rx_entry_cnt > 0 {
                self.check_peer("start: recv peer", op.recv_peer)?;
                self.check_word("start: post_recv host index", op.post_recv_idx_addr)?;
                self.check_word(
                    "start: recv handshake semaphore",
                    op.recv_handshake_sem_addr,
                )?;
                self.check_word("start: recv complete semaphore", op.recv_complete_sem_addr)?;
            }
            tx_total += u64::from(op.tx_entry_cnt);
            rx_total += u64::from(op.rx_entry_cnt);
        }
        if tx_total != src.len() as u64 || rx_total != dst.len() as u64 {
            reject!(
                "start: FIFO lengths differ from the ops' entry counts: src {} (ops say {tx_total}), dst {} (ops say {rx_total})",
                src.len(),
                dst.len()
            );
        }
        // Per op: how many entries seen so far, to check counts and marks.
        seen.clear();
        seen.resize(ops.len(), [0, 0]);
        let entries = src
            .iter()
            .map(|e| {
                (
                    true,
                    e.net_op_idx,
                    e.mark,
                    e.addr,
                    e.size,
                    e.dest_rank,
                    e.reserved,
                )
            })
            .chain(dst.iter().map(|e| {
                (
                    false,
                    e.net_op_idx,
                    e.mark,
                    e.addr,
                    e.size,
                    e.src_rank,
                    e.reserved,
                )
            }));
        for (i, (is_src, k, mark, addr, size, peer, reserved)) in entries.enumerate() {
            let side = if is_src { "src" } else { "dst" };
            let Some(op) = ops.get(k as usize) else {
                reject!(
                    "start: {side} entry {i}: net_op_idx {k} out of range ({} ops)",
                    ops.len()
                );
            };
            let (seen, count) = if is_src {
                (&mut seen[k as usize][0], op.tx_entry_cnt)
            } else {
                (&mut seen[k as usize][1], op.rx_entry_cnt)
            };
            *seen += 1;
            if *seen > count {
                reject!("start: op {k} has more {side} entries than its count {count}");
            }
            let last = *seen == count;
            match (mark, last) {
                (NET_TRANSFER, false) | (NET_OP_COMPLETE | EXEC_COMPLETE, true) => {}
                (NET_TRANSFER | NET_OP_COMPLETE | EXEC_COMPLETE, _) => {
                    reject!(
                        "start: op {k} {side} entry {} of {count}: mark {mark} (only the last entry is marked complete)",
                        *seen
                    )
                }
                _ => reject!("start: {side} entry {i}: unknown mark {mark}"),
            }
            if reserved != 0 {
                reject!("start: {side} entry {i}: reserved field is not zero");
            }
            if peer != NO_PEER {
                self.check_peer("start: entry peer", peer)?;
            }
            if !size.is_multiple_of(u64::from(op.data_type_sz)) {
                reject!(
                    "start: {side} entry {i}: size {size} is not a multiple of data_type_sz {}",
                    op.data_type_sz
                );
            }
            if size > max {
                reject!("start: {side} entry {i}: size {size} above the transport's maximum {max}");
            }
            if size > 0 {
                self.check_range("start: buffer", addr, size)?;
            }
        }
        Ok(())
    }
}
