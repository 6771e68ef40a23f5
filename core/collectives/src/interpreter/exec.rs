//! The launch's progress ([`Exec`]): the stage transitions, the plan checks, the set-up of a
//! launch, beginning a block, advancing every stream (`advance`, `run_stream`), the program's
//! one instruction step (`step`), and the end of the programs.

use super::*;

impl Exec {
    /// The one transition function of [`Stage`] (module docs: the diagram), through
    /// [`state::step`]: traces `state=A=>B`, refuses an edge the diagram does not have.
    pub(super) fn set_stage(&mut self, to: Stage) {
        let rank = self.rank;
        self.moved();
        // The quiet answer belongs to the stage it was found in (and a launch's words are
        // valid only while it runs: edges 1, 7 to 10 end that).
        self.quiet = None;
        let _ = state::step(&mut self.stage, to, &rank);
    }

    /// Notes that the launch moved on ([`Device::progress`]).
    #[inline]
    pub(super) fn moved(&mut self) {
        self.progress = self.progress.wrapping_add(1);
    }

    /// The quiet path: the last walk's `Pending` answer again when every word it found the
    /// launch's progress to depend on ([`Exec::watch`]) still reads the value it read then.
    /// A walk from there would then take the same steps as the last one's tail: re-read the
    /// same waits, hand out nothing new, record nothing, and answer the same; so the answer is
    /// exact without the walk. `None` = walk.
    #[inline]
    pub(super) fn quiet(&self) -> Option<WaitingFor> {
        let w = self.quiet?;
        // Acquire loads (HostWord::load), as the walk's own reads. The handles come from the
        // running launch, whose words stay valid while `quiet` is set (cleared at its end).
        self.watch
            .iter()
            .all(|&(word, seen)| word.load() == seen)
            .then_some(w)
    }

    /// Notes that the progress of a poll that ends `Pending` depends on the word at `addr`,
    /// last read as `seen` (the quiet path re-reads it).
    ///
    /// # Safety
    /// As [`Exec::word`].
    pub(super) unsafe fn watch(&mut self, addr: u64, seen: u32) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        let word = unsafe { self.word(addr) }?;
        self.watch.push((word, seen));
        Ok(())
    }

    /// Edge 9 for the error `e` of a walk (unless the launch had failed already).
    #[cold]
    #[inline(never)]
    pub(super) fn fail(&mut self, e: &DeviceError) {
        if self.stage != Stage::Failed {
            self.error = Some(e.clone());
            self.set_stage(Stage::Failed);
        }
    }

    /// [`DeviceError::Protocol`] with the message `what` makes. Cold and out of line, the
    /// message formatted here: the walk's frame (and the hot path through it) carries no
    /// formatting state for its many error sites.
    #[cold]
    #[inline(never)]
    pub(super) fn protocol(&self, what: impl FnOnce() -> String) -> DeviceError {
        DeviceError::Protocol {
            rank: self.rank,
            what: what(),
        }
    }

    /// The error a failed launch answers again (edge 9 stored it).
    #[cold]
    #[inline(never)]
    fn failed(&self) -> DeviceError {
        self.error
            .clone()
            .unwrap_or_else(|| self.protocol(|| "failed launch".into()))
    }

    /// The checked handle on the host word at `addr`.
    ///
    /// # Safety
    /// As [`Device::launch`]: `addr` is a live host word of the launched job, accessed only
    /// atomically.
    pub(super) unsafe fn word(&self, addr: u64) -> Result<HostWord, DeviceError> {
        // SAFETY: the caller's contract.
        unsafe { HostWord::from_addr(addr) }.ok_or_else(|| {
            self.protocol(move || format!("host word address {addr:#x} is not valid"))
        })
    }

    /// Stores `value` into the host word at `addr`, a word the proxy reads (a trigger, a host
    /// index), and notes the write: the poll then records [`Event::HostWrite`] so a sleeping
    /// proxy can be rung. Every device write the proxy waits for goes through here.
    ///
    /// # Safety
    /// As [`Exec::word`].
    pub(super) unsafe fn write_host(&mut self, addr: u64, value: u32) -> Result<(), DeviceError> {
        // SAFETY: the caller's contract.
        unsafe { self.word(addr) }?.store(value);
        self.wrote_host = true;
        self.moved();
        Ok(())
    }

    /// Checks that the program and the entries fit the plan (no op index or entry range out of
    /// bounds), so that the rest of the interpreter indexes without panicking.
    pub(super) fn check_plan(&self, plan: &RankPlan) -> Result<(), DeviceError> {
        let n = plan.ops.len();
        for (k, o) in plan.ops.iter().enumerate() {
            let fits = |base: u32, cnt: u32, len: usize| {
                (base as usize)
                    .checked_add(cnt as usize)
                    .is_some_and(|end| end <= len)
            };
            if !fits(o.src_base, o.tx_entry_cnt, plan.src.len())
                || !fits(o.dst_base, o.rx_entry_cnt, plan.dst.len())
            {
                return Err(
                    self.protocol(move || format!("op {k}: entries outside the plan's FIFOs"))
                );
            }
        }
        for e in plan.src.iter().chain(&plan.dst) {
            if e.op as usize >= n {
                return Err(self.protocol(move || format!("an entry names op {} of {n}", e.op)));
            }
        }
        for ins in &plan.program {
            let op = match *ins {
                Instr::Arm { op, .. }
                | Instr::WaitHandshake { op, .. }
                | Instr::Post { op, .. }
                | Instr::Wait { op, .. } => op,
                Instr::Reduce { .. } | Instr::Copy { .. } => continue,
            };
            if op as usize >= n {
                return Err(self.protocol(move || format!("the program names op {op} of {n}")));
            }
        }
        Ok(())
    }

    /// The fault target as (op, index within the op's recv side, byte offset), if any.
    pub(super) fn fault_target(fault: Option<Fault>, plan: &RankPlan) -> Option<(u32, u32, u64)> {
        let f = fault?;
        let e = match f.entry {
            Some(i) => i,
            None => plan.dst.iter().position(|e| e.bytes > 0)?,
        };
        let entry = plan.dst.get(e)?;
        let op = plan.ops.get(entry.op as usize)?;
        // The most significant byte of the first element: a change no op can hide for sums.
        let byte = (plan.params.dtype.size() as u64 - 1).min(entry.bytes.saturating_sub(1));
        Some((entry.op, (e as u32).checked_sub(op.dst_base)?, byte))
    }

    /// Lays out the per-op state of `job` and the streams (edge 1's reset, at the first poll).
    pub(super) fn setup(&mut self, job: &Job, fault: Option<Fault>) -> Result<(), DeviceError> {
        self.op_base.clear();
        self.holds.clear();
        let mut total = 0;
        for b in &job.blocks {
            self.check_plan(&b.plan)?;
            self.op_base.push(total);
            // A lagging device (a test knob) holds its receives back too.
            self.holds.push(
                self.recv_lag > 0
                    || b.plan.params.nec.idx_wrap > 0
                    || b.plan.ops.iter().any(|o| o.ending_recv_credits > 0),
            );
            total += b.plan.ops.len();
        }
        for v in [
            &mut self.hs_base,
            &mut self.cpl_base,
            &mut self.authorized,
            &mut self.posted,
            &mut self.need,
            &mut self.seen,
        ] {
            v.clear();
            v.resize(total, [0; 2]);
        }
        self.streams.clear();
        for b in &job.blocks {
            if b.stream >= 4 {
                return Err(
                    self.protocol(move || format!("block {} on stream {}", b.block, b.stream))
                );
            }
            if !self.streams.iter().any(|s| s.stream == b.stream) {
                self.streams.push(StreamRun {
                    stream: b.stream,
                    step: 0,
                    block: None,
                    cursor: 0,
                    moved_at: self.progress,
                });
            }
        }
        self.scribbles.clear();
        self.saved.clear();
        self.polls = 0;
        self.begun.clear();
        self.begun.resize(job.blocks.len(), 0);
        self.fault_target = job
            .blocks
            .first()
            .and_then(|b| Self::fault_target(fault, &b.plan));
        Ok(())
    }

    /// Begins job block `j` on its stream: snapshots every semaphore its program waits on,
    /// clears the per-execution counts, and writes a canary into every receive buffer the
    /// device will promise later (before the proxy can post early receives).
    ///
    /// # Safety
    /// As [`Exec::word`], for the job's words.
    pub(super) unsafe fn begin_block(&mut self, job: &Job, j: usize) -> Result<(), DeviceError> {
        let b = &job.blocks[j];
        let a = &b.addrs;
        for (k, o) in b.plan.ops.iter().enumerate() {
            let slot = self.op_base[j] + k;
            for side in [Side::Send, Side::Recv] {
                let s = side as usize;
                let (hs, cpl) = if o.entries(side) > 0 {
                    // SAFETY: the caller's contract.
                    let hs = unsafe { self.word(a.word(OpWord::handshake(side).index(k as u32))) }?;
                    // SAFETY: as above.
                    let cpl = unsafe { self.word(a.word(OpWord::complete(side).index(k as u32))) }?;
                    (hs.load(), cpl.load())
                } else {
                    (0, 0)
                };
                self.hs_base[slot][s] = hs;
                self.cpl_base[slot][s] = cpl;
                self.authorized[slot][s] = 0;
                self.posted[slot][s] = 0;
                self.need[slot][s] = 0;
                self.seen[slot][s] = 0;
            }
            for i in Self::canaried(&b.plan, k as u32) {
                let e = b.plan.dst[o.dst_base as usize + i as usize];
                // SAFETY: the entry's buffer lies in the rank's buffers (launch's contract);
                // no instruction of the block touched it yet and the proxy may not receive
                // into it before the device promises it.
                unsafe {
                    core::ptr::write_bytes(
                        a.of(e.loc) as usize as *mut u8,
                        CANARY,
                        e.bytes as usize,
                    )
                };
            }
        }
        self.begun[j] = self.polls;
        if j == 0 {
            self.flipped = false;
        }
        Ok(())
    }

    /// Advances the launch of `job` as far as the words allow.
    ///
    /// # Safety
    /// As [`Device::launch`], for `job` (the launched job).
    pub(super) unsafe fn advance(
        &mut self,
        job: &Job,
        fault: Option<Fault>,
        env: &impl DeviceEnv,
    ) -> Result<DevicePoll, DeviceError> {
        loop {
            match self.stage {
                Stage::Idle => return Ok(DevicePoll::Idle),
                Stage::Done => return Ok(DevicePoll::Done),
                Stage::Failed => return Err(self.failed()),
                Stage::Launched => {
                    self.setup(job, fault)?;
                    if job.barrier_at == BarrierAt::Launch {
                        // SAFETY: the caller's contract.
                        unsafe { self.trigger_barrier(job) }?;
                    }
                    if job.net_triggers.is_empty() {
                        // Edge 4.
                        self.set_stage(Stage::Program { rep: 0 });
                    } else {
                        for &t in &job.net_triggers {
                            // SAFETY: the caller's contract.
                            unsafe { self.write_host(t, 1) }?;
                        }
                        self.cursor = 0;
                        // Edge 2.
                        self.set_stage(Stage::NetWait);
                    }
                }
                Stage::NetWait => {
                    while let Some(&t) = job.net_triggers.get(self.cursor) {
                        // SAFETY: the caller's contract.
                        let seen = unsafe { self.word(t) }?.load();
                        if seen != 0 {
                            // SAFETY: the caller's contract.
                            unsafe { self.watch(t, seen) }?;
                            return Ok(DevicePoll::Pending {
                                waiting_for: WaitingFor::NetTrigger { addr: t, seen },
                            });
                        }
                        self.cursor += 1;
                        self.moved();
                    }
                    // Edge 3.
                    self.set_stage(Stage::Program { rep: 0 });
                }
                Stage::Program { rep } => {
                    let steps = job.schedule.len();
                    // The answer: the wait of the stream that moved least recently.
                    let mut pending: Option<(WaitingFor, u64)> = None;
                    for i in 0..self.streams.len() {
                        let before = self.progress;
                        // SAFETY: the caller's contract.
                        let wait = unsafe { self.run_stream(job, i, env) }?;
                        if self.progress != before {
                            self.streams[i].moved_at = self.progress;
                        }
                        if let Some(w) = wait {
                            // Every stream's wait, not only the one answered: another
                            // stream's word may be the one that moves first.
                            // SAFETY: the caller's contract.
                            unsafe { self.watch(w.addr(), w.seen()) }?;
                            // (A u64 count: it does not wrap within a launch.)
                            let at = self.streams[i].moved_at;
                            if pending.is_none_or(|(_, a)| at < a) {
                                pending = Some((w, at));
                            }
                        }
                    }
                    // Executions every stream completed (no stream: the whole schedule).
                    let all = self
                        .streams
                        .iter()
                        .map(|s| s.step)
                        .min()
                        .unwrap_or(steps)
                        .min(steps) as u32;
                    let mut r = rep;
                    while r < all {
                        env.record(Event::Execution);
                        r += 1;
                        if (r as usize) < steps {
                            // Edge 5.
                            self.set_stage(Stage::Program { rep: r });
                        }
                    }
                    if let Some((w, _)) = pending {
                        return Ok(DevicePoll::Pending { waiting_for: w });
                    }
                    // SAFETY: the caller's contract.
                    unsafe { self.restore_all() };
                    // SAFETY: the caller's contract.
                    unsafe { self.end_programs(job) }?;
                }
                Stage::BarrierWait => {
                    let Some(a) = job.barrier_done else {
                        // Unreachable: edge 6 is taken only with a barrier-done word.
                        self.set_stage(Stage::Done);
                        continue;
                    };
                    // SAFETY: the caller's contract.
                    let v = unsafe { self.word(a) }?.load();
                    let rose = v.wrapping_sub(self.done_base);
                    if rose == 0 {
                        // SAFETY: the caller's contract.
                        unsafe { self.watch(a, v) }?;
                        return Ok(DevicePoll::Pending {
                            waiting_for: WaitingFor::BarrierDone {
                                addr: a,
                                target: self.done_base.wrapping_add(1),
                                seen: v,
                            },
                        });
                    }
                    if rose > 1 {
                        return Err(self.protocol(move || {
                            format!("barrier-done semaphore rose by {rose} in one execution")
                        }));
                    }
                    // Edge 8.
                    self.set_stage(Stage::Done);
                }
            }
        }
    }

    /// Runs stream `i` as far as the words allow: its blocks in schedule order. `Some` = it
    /// waits for that word.
    ///
    /// # Safety
    /// As [`Exec::advance`].
    pub(super) unsafe fn run_stream(
        &mut self,
        job: &Job,
        i: usize,
        env: &impl DeviceEnv,
    ) -> Result<Option<WaitingFor>, DeviceError> {
        loop {
            let run = self.streams[i];
            let j = match run.block {
                Some(j) => j,
                None => {
                    let Some(&id) = job.schedule.get(run.step) else {
                        return Ok(None);
                    };
                    let found = job
                        .blocks
                        .iter()
                        .position(|b| b.stream == run.stream && b.block == id);
                    let Some(j) = found else {
                        // No block `id` on this stream: done at once.
                        self.streams[i].step += 1;
                        continue;
                    };
                    // SAFETY: the caller's contract.
                    unsafe { self.begin_block(job, j) }?;
                    self.streams[i].block = Some(j);
                    self.streams[i].cursor = 0;
                    j
                }
            };
            let program = &job.blocks[j].plan.program;
            while let Some(ins) = program.get(self.streams[i].cursor) {
                // SAFETY: the caller's contract.
                if let Some(w) = unsafe { self.step(job, j, *ins, env) }? {
                    // Hand out what the wrap or the early credits held back meanwhile:
                    // completions elsewhere may depend on it.
                    // SAFETY: the caller's contract.
                    unsafe { self.flush_block(job, j) }?;
                    return Ok(Some(w));
                }
                self.streams[i].cursor += 1;
                self.moved();
            }
            // The block ran: everything it posted is complete.
            // SAFETY: the caller's contract.
            unsafe { self.restore_all() };
            self.streams[i].block = None;
            self.streams[i].step += 1;
            self.moved();
        }
    }

    /// After the last execution: edge 6 (barrier to wait for) or 7.
    ///
    /// # Safety
    /// As [`Exec::advance`].
    pub(super) unsafe fn end_programs(&mut self, job: &Job) -> Result<(), DeviceError> {
        let wait = match job.barrier_at {
            // SAFETY: the caller's contract.
            BarrierAt::End => unsafe { self.trigger_barrier(job) }?,
            // Triggered at the launch (edge 2 or 4).
            BarrierAt::Launch => job.barrier_done.is_some() && !job.barrier_triggers.is_empty(),
        };
        self.set_stage(if wait {
            Stage::BarrierWait
        } else {
            Stage::Done
        });
        Ok(())
    }

    /// Snapshots the barrier-done semaphore, then writes the barrier triggers (the snapshot
    /// first: the barrier cannot pass, and its leader cannot increment the semaphore, before
    /// every device triggered). `true` when there is a barrier-done word to wait for.
    ///
    /// # Safety
    /// As [`Exec::advance`].
    unsafe fn trigger_barrier(&mut self, job: &Job) -> Result<bool, DeviceError> {
        let wait = match job.barrier_done {
            Some(a) if !job.barrier_triggers.is_empty() => {
                // SAFETY: the caller's contract.
                self.done_base = unsafe { self.word(a) }?.load();
                true
            }
            _ => false,
        };
        for &t in &job.barrier_triggers {
            // SAFETY: the caller's contract.
            unsafe { self.write_host(t, 1) }?;
        }
        Ok(wait)
    }

    /// Completions of op `op`'s `side` in block `j` as the complete semaphore says now.
    ///
    /// # Safety
    /// As [`Exec::advance`].
    pub(super) unsafe fn completions(
        &self,
        job: &Job,
        j: usize,
        op: u32,
        side: Side,
    ) -> Result<(u32, u32), DeviceError> {
        let addr = job.blocks[j].addrs.word(OpWord::complete(side).index(op));
        // SAFETY: the caller's contract.
        let v = unsafe { self.word(addr) }?.load();
        let base = self.cpl_base[self.op_base[j] + op as usize][side as usize];
        Ok((v, v.wrapping_sub(base)))
    }

    /// Runs one instruction of job block `j`; `Some` = it waits for that word (run it again
    /// on the next poll).
    ///
    /// # Safety
    /// As [`Exec::advance`].
    pub(super) unsafe fn step(
        &mut self,
        job: &Job,
        j: usize,
        ins: Instr,
        env: &impl DeviceEnv,
    ) -> Result<Option<WaitingFor>, DeviceError> {
        let blk = &job.blocks[j];
        let plan = &*blk.plan;
        let a = &blk.addrs;
        let p = plan.params;
        let w = |op: u32, hw: OpWord| a.word(hw.index(op));
        let slot = |op: u32| self.op_base[j] + op as usize;
        match ins {
            Instr::Arm { op, side } => {
                // SAFETY: the caller's contract.
                unsafe { self.write_host(w(op, OpWord::post(side)), HOST_INDEX_READY) }?;
            }
            Instr::WaitHandshake { op, side } => {
                let base = self.hs_base[slot(op)][side as usize];
                let addr = w(op, OpWord::handshake(side));
                // SAFETY: the caller's contract.
                let v = unsafe { self.word(addr) }?.load();
                let rose = v.wrapping_sub(base);
                if rose == 0 {
                    return Ok(Some(WaitingFor::Handshake {
                        op,
                        side,
                        addr,
                        target: base.wrapping_add(1),
                        seen: v,
                    }));
                }
                if rose != 1 {
                    return Err(self.protocol(move || {
                        format!(
                            "op {op} {side:?}: handshake semaphore rose by {rose} in one execution"
                        )
                    }));
                }
                // The proxy writes 0 to the host index before it increments the handshake.
                // SAFETY: the caller's contract.
                let idx = unsafe { self.word(w(op, OpWord::post(side))) }?.load();
                if idx != 0 {
                    return Err(self.protocol(move || {
                        format!(
                            "op {op} {side:?}: host index {idx:#x} after the handshake (want 0)"
                        )
                    }));
                }
            }
            Instr::Post { op, side, upto } => {
                let k = slot(op);
                let from = self.authorized[k][side as usize];
                if !self.scribbles.is_empty() {
                    for e in plan
                        .entries(op, side)
                        .get(from as usize..upto as usize)
                        .unwrap_or(&[])
                    {
                        // SAFETY: the caller's contract.
                        unsafe { self.restore(a.of(e.loc), e.bytes) };
                    }
                }
                self.authorized[k][side as usize] = upto;
                // SAFETY: the caller's contract.
                unsafe { self.flush(job, j, op, side) }?;
            }
            Instr::Wait { op, side, upto } => {
                let (k, s) = (slot(op), side as usize);
                let base = self.cpl_base[k][s];
                // SAFETY: the caller's contract.
                let (v, done) = unsafe { self.completions(job, j, op, side) }?;
                let max = self.posted[k][s];
                if done > max {
                    return Err(self.protocol(move || {
                        format!("op {op} {side:?}: {done} entries complete, only {max} posted")
                    }));
                }
                let entries = plan.entries(op, side);
                if done as usize > entries.len() {
                    return Err(self.protocol(move || {
                        format!(
                            "op {op} {side:?}: the program posts {max} entries, the op has {}",
                            entries.len()
                        )
                    }));
                }
                if done < upto && self.posted[k][s] < upto {
                    // Entries held back by the early receive credits are posted as the
                    // program waits for them, one past those seen complete: the proxy keeps
                    // its receives `credits` ahead of the index meanwhile.
                    let need = &mut self.need[k][s];
                    *need = (*need).max(upto.min(done + 1));
                    // SAFETY: the caller's contract.
                    unsafe { self.flush(job, j, op, side) }?;
                }
                let prev = self.seen[k][s];
                if done > prev {
                    self.seen[k][s] = done;
                    self.moved();
                    if side == Side::Recv {
                        for e in &entries[prev as usize..done as usize] {
                            env.record(Event::RecvEntry { bytes: e.bytes });
                        }
                        if let Some((fop, fidx, byte)) = self.fault_target {
                            if j == 0 && !self.flipped && fop == op && fidx < done {
                                self.flipped = true;
                                let e = entries[fidx as usize];
                                let addr = a.of(e.loc) + byte;
                                // SAFETY: the entry is complete (the transport is done with
                                // it) and lies in this rank's buffers; only this thread uses
                                // it now.
                                unsafe { *(addr as usize as *mut u8) ^= 0xFF };
                                env.record(Event::FaultInjected);
                            }
                        }
                    } else if p.nec.early_send {
                        // SAFETY: the caller's contract.
                        unsafe { self.scribble(job, j, op, prev, done) };
                    } else {
                        // SAFETY: the caller's contract and `watch_peer_recv`'s.
                        unsafe { self.check_peer_recv(job, j, op, done) }?;
                    }
                }
                if done < upto {
                    return Ok(Some(WaitingFor::Complete {
                        op,
                        side,
                        addr: w(op, OpWord::complete(side)),
                        upto,
                        target: base.wrapping_add(upto),
                        seen: v,
                    }));
                }
            }
            Instr::Reduce {
                dst,
                a: x,
                b: y,
                elems,
            } => {
                if !self.scribbles.is_empty() {
                    let bytes = elems * p.dtype.size() as u64;
                    for l in [dst, x, y] {
                        // SAFETY: the caller's contract.
                        unsafe { self.restore(a.of(l), bytes) };
                    }
                }
                // SAFETY: the planner's hazard tracking guarantees no transfer touches
                // these ranges now; they lie in the rank's buffers (launch's contract).
                unsafe {
                    reduce_raw(
                        p.dtype,
                        p.op,
                        a.of(dst) as usize as *mut u8,
                        a.of(x) as usize as *const u8,
                        a.of(y) as usize as *const u8,
                        elems as usize,
                    )
                };
            }
            Instr::Copy { dst, src, bytes } => {
                debug_assert!(bytes % p.dtype.size() as u64 == 0);
                if !self.scribbles.is_empty() {
                    for l in [dst, src] {
                        // SAFETY: the caller's contract.
                        unsafe { self.restore(a.of(l), bytes) };
                    }
                }
                // SAFETY: as for Reduce; the planner never copies between overlapping
                // ranges.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        a.of(src) as usize as *const u8,
                        a.of(dst) as usize as *mut u8,
                        bytes as usize,
                    )
                };
            }
        }
        Ok(None)
    }
}
