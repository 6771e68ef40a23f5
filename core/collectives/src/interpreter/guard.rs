//! What keeps a proxy bug observable ([`Exec`]'s guards): receive-buffer canaries and their
//! checks, early-send-completion scribbles and their restore, the reduce flush of received
//! chunks, and the peer's receive index watched against send completions.

use super::*;

impl Exec {
    /// The receive entries of op `op` that carry a canary until the device promises them:
    /// with early receive posting, those past the handshake's promise (`ending_recv_credits`)
    /// whose buffers are free from the start of the block ([`RankPlan::recv_free`]).
    pub(super) fn canaried(plan: &RankPlan, op: u32) -> impl Iterator<Item = u32> + '_ {
        let o = plan.ops[op as usize];
        let c = o.ending_recv_credits;
        let flags = if c == 0 {
            &[][..]
        } else {
            plan.recv_free
                .get(o.dst_base as usize..(o.dst_base + o.rx_entry_cnt) as usize)
                .unwrap_or(&[])
        };
        flags
            .iter()
            .enumerate()
            .skip(c as usize)
            .filter(|(_, &f)| f)
            .map(|(i, _)| i as u32)
    }

    /// Checks the canaries of op `op`'s receive entries `from..to` of block `j` (about to be
    /// promised): a receive posted beyond the credits landed in one.
    ///
    /// # Safety
    /// As [`Exec::advance`].
    pub(super) unsafe fn check_canaries(
        &self,
        job: &Job,
        j: usize,
        op: u32,
        from: u32,
        to: u32,
    ) -> Result<(), DeviceError> {
        let b = &job.blocks[j];
        let o = b.plan.ops[op as usize];
        for i in Self::canaried(&b.plan, op).filter(|&i| from <= i && i < to) {
            let e = b.plan.dst[(o.dst_base + i) as usize];
            // SAFETY: the entry's buffer lies in the rank's buffers (launch's contract); a
            // racing write there is the proxy bug this check reports.
            let buf = unsafe {
                core::slice::from_raw_parts(
                    b.addrs.of(e.loc) as usize as *const u8,
                    e.bytes as usize,
                )
            };
            if let Some(at) = buf.iter().position(|&x| x != CANARY) {
                return Err(self.protocol(move || {
                    format!(
                        "stream {} block {} op {op} recv entry {i}: its buffer was written (byte \
                     {at}) before the device promised it (ending_recv_credits {}, host index \
                     {}): a receive posted beyond the credits",
                        b.stream,
                        b.block,
                        o.ending_recv_credits,
                        self.posted[self.op_base[j] + op as usize][Side::Recv as usize]
                    )
                }));
            }
        }
        Ok(())
    }

    /// Raises the host index of op `op`'s `side` in block `j` as far as the device may: to
    /// the entries the program handed out, held back by the early receive credits (the
    /// buffers of the next `ending_recv_credits` entries must be free: handed out) and by the
    /// wrap (never `net_idx_loop_size` or more entries posted and not complete). Writes the
    /// index modulo the loop size.
    ///
    /// # Safety
    /// As [`Exec::advance`].
    pub(super) unsafe fn flush(
        &mut self,
        job: &Job,
        j: usize,
        op: u32,
        side: Side,
    ) -> Result<(), DeviceError> {
        let b = &job.blocks[j];
        let o = &b.plan.ops[op as usize];
        let (slot, s) = (self.op_base[j] + op as usize, side as usize);
        let a = self.authorized[slot][s];
        if side == Side::Recv
            && self.recv_lag > 0
            && self.polls - self.begun[j] < u64::from(self.recv_lag)
        {
            return Ok(());
        }
        let mut target = a;
        let credits = o.ending_recv_credits;
        if side == Side::Recv && credits > 0 {
            // The promise covers the `credits` entries past the index: their buffers must be
            // handed out (past the op's last entry there is nothing to promise). Entries a
            // wait needs are posted anyway (the planner keeps them within the promise).
            target = a.saturating_sub(credits).max(self.need[slot][s]).min(a);
        }
        let wrap = b.plan.params.nec.idx_wrap;
        if wrap > 0 && target > self.posted[slot][s] {
            // SAFETY: the caller's contract.
            let (v, done) = unsafe { self.completions(job, j, op, side) }?;
            let room = done.saturating_add(wrap - 1);
            if room < target {
                // Held back by the wrap until this count rises: the progress of a poll that
                // ends pending depends on this word too (the quiet path watches it).
                let addr = b.addrs.word(OpWord::complete(side).index(op));
                // SAFETY: the caller's contract.
                unsafe { self.watch(addr, v) }?;
                target = room;
            }
        }
        if target > self.posted[slot][s] {
            if side == Side::Recv && credits > 0 {
                // Entries the raise promises for the first time: their canaries are intact.
                let n = o.rx_entry_cnt;
                let (from, to) = (
                    self.posted[slot][s].saturating_add(credits).min(n),
                    target.saturating_add(credits).min(n),
                );
                // SAFETY: the caller's contract.
                unsafe { self.check_canaries(job, j, op, from, to) }?;
            }
            self.posted[slot][s] = target;
            let value = if wrap > 0 { target % wrap } else { target };
            // Release (HostWord::store): the data of the posted send entries (written by
            // this thread) is visible to the proxy that reads the index with acquire.
            // SAFETY: the caller's contract.
            unsafe { self.write_host(b.addrs.word(OpWord::post(side).index(op)), value) }?;
        }
        Ok(())
    }

    /// [`Exec::flush`] for every op side of block `j` that holds entries back.
    ///
    /// # Safety
    /// As [`Exec::advance`].
    pub(super) unsafe fn flush_block(&mut self, job: &Job, j: usize) -> Result<(), DeviceError> {
        if !self.holds[j] {
            return Ok(());
        }
        for k in 0..job.blocks[j].plan.ops.len() {
            let slot = self.op_base[j] + k;
            for side in [Side::Send, Side::Recv] {
                let s = side as usize;
                if self.posted[slot][s] < self.authorized[slot][s] {
                    // SAFETY: the caller's contract.
                    unsafe { self.flush(job, j, k as u32, side) }?;
                }
            }
        }
        Ok(())
    }

    /// Puts back every overwritten send source whose range overlaps `addr..addr+len` (all
    /// with `len == u64::MAX`).
    ///
    /// # Safety
    /// The scribbled ranges lie in the launched job's buffers, and no transfer touches them
    /// (a scribble is made only where none is in flight, and a post over it restores first).
    pub(super) unsafe fn restore(&mut self, addr: u64, len: u64) {
        let mut i = 0;
        while i < self.scribbles.len() {
            let sc = self.scribbles[i];
            let overlaps =
                len == u64::MAX || (sc.addr < addr.saturating_add(len) && addr < sc.addr + sc.len);
            if overlaps {
                // SAFETY: the function's contract; `saved` holds `len` bytes at `saved`.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        self.saved.as_ptr().add(sc.saved),
                        sc.addr as usize as *mut u8,
                        sc.len as usize,
                    )
                };
                self.scribbles.swap_remove(i);
            } else {
                i += 1;
            }
        }
        if self.scribbles.is_empty() {
            self.saved.clear();
        }
    }

    /// [`Exec::restore`] of everything.
    ///
    /// # Safety
    /// As [`Exec::restore`].
    pub(super) unsafe fn restore_all(&mut self) {
        if !self.scribbles.is_empty() {
            // SAFETY: the caller's contract.
            unsafe { self.restore(0, u64::MAX) };
        }
    }

    /// After send entries `from..to` of op `op` in block `j` were seen complete with early
    /// completion on: overwrites each one's source (saving it) unless a transfer of the block
    /// that may still touch it overlaps it: an entry handed out and not seen complete, or a
    /// receive the proxy may have posted early (within `ending_recv_credits` of the host
    /// index, handed out or not), whose data would land under the overwrite and be lost to
    /// the restore. A send that was counted complete before the transport had its own copy
    /// then carries the overwritten bytes.
    ///
    /// # Safety
    /// As [`Exec::advance`].
    pub(super) unsafe fn scribble(&mut self, job: &Job, j: usize, op: u32, from: u32, to: u32) {
        let b = &job.blocks[j];
        let plan = &b.plan;
        for e in &plan.entries(op, Side::Send)[from as usize..to as usize] {
            if e.bytes == 0 {
                continue;
            }
            let (start, end) = (b.addrs.of(e.loc), b.addrs.of(e.loc) + e.bytes);
            let busy = (0..plan.ops.len()).any(|k| {
                let slot = self.op_base[j] + k;
                [Side::Send, Side::Recv].into_iter().any(|side| {
                    let s = side as usize;
                    let entries = plan.entries(k as u32, side);
                    let mut hi = self.authorized[slot][s];
                    if side == Side::Recv {
                        // Receives the proxy may have posted ahead of the host index.
                        let ahead = self.posted[slot][s]
                            .saturating_add(plan.ops[k].ending_recv_credits)
                            .min(entries.len() as u32);
                        hi = hi.max(ahead);
                    }
                    let lo = self.seen[slot][s].min(hi);
                    entries[lo as usize..hi as usize].iter().any(|x| {
                        let a = b.addrs.of(x.loc);
                        x.bytes > 0 && a < end && start < a + x.bytes
                    })
                })
            }) || self
                .scribbles
                .iter()
                .any(|sc| sc.addr < end && start < sc.addr + sc.len);
            if busy {
                continue;
            }
            let at = self.saved.len();
            // SAFETY: the entry's source lies in the rank's buffers (launch's contract); the
            // device saw it complete and nothing of the block is in flight over it.
            let src = unsafe {
                core::slice::from_raw_parts_mut(start as usize as *mut u8, e.bytes as usize)
            };
            self.saved.extend_from_slice(src);
            src.fill(SCRIBBLE);
            self.scribbles.push(Scribble {
                addr: start,
                len: e.bytes,
                saved: at,
            });
        }
    }

    /// [`Device::watch_peer_recv`]'s check: `done` send entries of op `op` in block `j` are
    /// complete without early completion, so the peer has posted at least `done − ahead`.
    ///
    /// # Safety
    /// As [`Exec::advance`], and the watched words are live ([`Device::watch_peer_recv`]).
    pub(super) unsafe fn check_peer_recv(
        &self,
        job: &Job,
        j: usize,
        op: u32,
        done: u32,
    ) -> Result<(), DeviceError> {
        for w in self.peer_recv.iter().filter(|w| w.block == j && w.op == op) {
            // Acquire (HostWord::load): the peer device raised the index before its proxy
            // posted the receive that let the transport finish this send, and the proxy's
            // completion count this device read with acquire follows that.
            // SAFETY: the caller's contract.
            let v = unsafe { self.word(w.addr) }?.load();
            let posted = if v == HOST_INDEX_READY { 0 } else { v };
            if posted.saturating_add(w.ahead) < done {
                let b = &job.blocks[j];
                return Err(self.protocol(move || {
                    format!(
                    "stream {} block {} op {op}: send entry {} counted complete while the peer \
                     had posted {posted} receives (+{} early): completed before the transport \
                     finished it, without early_send_completion",
                    b.stream,
                    b.block,
                    done - 1,
                    w.ahead
                )
                }));
            }
        }
        Ok(())
    }
}
