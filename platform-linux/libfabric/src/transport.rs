//! [`LibfabricTransport`] as the progress half's [`Transport`]: poll, post, test, cancel,
//! register, invalidate, dump and close; and close on drop.

use crate::*;

impl Transport for LibfabricTransport {
    fn name(&self) -> &str {
        &self.name
    }

    fn max_msg_size(&self) -> u64 {
        self.max_msg
    }

    fn poll(&mut self) -> Result<(), NetError> {
        self.check_open()?;
        // Nothing in flight: only every IDLE_READ_EVERY-th poll reads (why: its docs).
        if self.reqs.in_flight() > 0 {
            self.idle_polls = 0;
            self.progress()?;
        } else {
            self.idle_polls = self.idle_polls.wrapping_add(1);
            if self.idle_polls.is_multiple_of(IDLE_READ_EVERY) {
                self.progress()?;
            }
        }
        self.check_peers()
    }

    unsafe fn isend(
        &mut self,
        peer: u32,
        buf: *const u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        self.post(Kind::Send, peer, buf.cast_mut(), size, tag)
    }

    unsafe fn irecv(
        &mut self,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        self.post(Kind::Recv, peer, buf, size, tag)
    }

    fn test(&mut self, request: RequestId) -> Result<TestOutcome, NetError> {
        let Some(slot) = self.reqs.get(request) else {
            return Err(NetError::invalid(
                None,
                format!("{}: unknown or finished request id {request:#x}", self.name),
            ));
        };
        // No CQ read here: `poll` read it for this round (one read per round; a read per
        // test was a second `poll(2)` of the sockets per round, 6 % of a crowded 8 B
        // all-reduce over tcp, BENCHMARKS.md).
        if slot.state.in_flight() {
            return Ok(TestOutcome::Pending);
        }
        match self
            .reqs
            .release(request)
            .expect("finished requests release")
        {
            State::Done(size) => Ok(TestOutcome::Done { size }),
            State::Cancelled => Ok(TestOutcome::Cancelled),
            State::Failed(e) => Err(e),
            s => unreachable!("released request in state {s:?}"),
        }
    }

    fn cancel(&mut self, request: RequestId) -> Result<(), NetError> {
        let Some(ctx) = self.reqs.context_of(request) else {
            return Err(NetError::invalid(
                None,
                format!(
                    "{}: cancel of unknown or finished request id {request:#x}",
                    self.name
                ),
            ));
        };
        let index = (request & 0xFFFF_FFFF) as u32;
        if !self.reqs.slot(index).state.in_flight() || self.obj.ep.is_null() {
            return Ok(()); // Already finished: the next test reports how.
        }
        // SAFETY: the endpoint is open and `ctx` is the context of one of its posted operations.
        let ret = unsafe { fi::fi_cancel(&mut (*self.obj.ep).fid, ctx) };
        if ret != 0 && ret != neg(fi::FI_ENOENT) {
            return Err(NetError::failure(
                Some(self.reqs.slot(index).peer),
                format!(
                    "{}: fi_cancel failed: {} ({ret})",
                    self.name,
                    fi_error_text(ret)
                ),
            ));
        }
        self.reqs.mark_cancelling(index);
        Ok(())
    }

    fn register(&mut self, addr: u64, len: u64) -> Result<MrHandle, NetError> {
        self.check_open()?;
        if !self.register {
            return Ok(0);
        }
        let mut reg = fi_registrar!(self);
        self.mrs.register(&mut reg, addr, len)
    }

    fn deregister(&mut self, mr: MrHandle) -> Result<(), NetError> {
        if mr == 0 || self.closed {
            return Ok(());
        }
        let mut reg = fi_registrar!(self);
        self.mrs.deregister(&mut reg, mr)
    }

    fn invalidate(&mut self, addr: u64, len: u64) -> Result<(), NetError> {
        if self.closed {
            return Ok(()); // Every registration was closed with the transport.
        }
        let done = self.invalidate_range(addr, len)?;
        if done.closed + done.deferred > 0 {
            log::debug!(
                "{}: invalidate {addr:#x}..{:#x}: {} registrations closed, {} detached until \
                 their requests complete",
                self.name,
                addr + len,
                done.closed,
                done.deferred
            );
        }
        Ok(())
    }

    /// ` in_flight=N registrations=N closed=BOOL lease=N generation=0xN stale_completions=N`,
    /// the process's quarantine totals and its lease pool's (`pool_sets= pool_idle=
    /// pool_reuses=`).
    fn dump_state(&self, out: &mut dyn std::fmt::Write) -> std::fmt::Result {
        write!(
            out,
            " in_flight={} registrations={} closed={} lease={} generation={:#06x} \
             stale_completions={} {} {}",
            self.reqs.in_flight(),
            self.mrs.len(),
            self.closed,
            self.leases,
            self.generation,
            self.stale_completions,
            quarantine_stats(),
            pool_stats()
        )
    }

    fn close(&mut self) -> Result<(), NetError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        // No idle wait touches the objects from here on (they are cancelled, drained, pooled,
        // quarantined or closed below).
        if let Some(w) = self.idle.take() {
            w.detach();
        }
        let mut first_err: Option<NetError> = None;
        // Cancel what is in flight, then drain: tcp answers -FI_EBUSY to fi_close otherwise, and
        // no buffer may be released while the provider still owns it.
        if !self.obj.ep.is_null() {
            for (index, ctx) in self.reqs.uncancelled() {
                // SAFETY: the endpoint is open and `ctx` is one of its posted operations.
                let ret = unsafe { fi::fi_cancel(&mut (*self.obj.ep).fid, ctx) };
                if ret == 0 || ret == neg(fi::FI_ENOENT) {
                    self.reqs.mark_cancelling(index);
                }
            }
        }
        let deadline = Instant::now() + self.close_drain;
        let mut rounds = 0u64;
        while self.reqs.in_flight() > 0 && Instant::now() < deadline && rounds < 10_000_000 {
            if let Err(e) = self.progress() {
                first_err.get_or_insert(e);
                break;
            }
            rounds += 1;
            if rounds.is_multiple_of(64) {
                std::thread::yield_now();
            }
        }
        let left = self.reqs.in_flight();
        if left > 0 {
            // The provider may still touch every object, context, registration and buffer of
            // these requests: close nothing (quarantine.rs has the rule and why). A poolable
            // set is reused by a later comm instead of held idle (pool.rs).
            let why = format!(
                "{left} requests still in flight after cancelling and draining for {:?}",
                self.close_drain
            );
            // Only sends: once the set is progressed again by a later lease, the provider may
            // still read a stuck send's buffer, never write one. A stuck receive (rxm cannot
            // cancel one it has matched) could be written by a late message into memory its
            // comm has freed: its set is quarantined, never progressed again.
            let (_, recvs, _) = self.reqs.in_flight_summary();
            let e = if self.pool_key.is_some()
                && self.pool_endpoints
                && recvs == 0
                && !self.obj.ep.is_null()
            {
                self.quarantine_requests_and_pool(why)
            } else {
                if self.tainted {
                    // The set leaves the pool's lineage: the quarantine counts it from now.
                    pool::leave();
                }
                self.quarantine(why)
            };
            log::warn!("{e}");
            return Err(e);
        }
        if self.tainted && !self.obj.ep.is_null() {
            // Every request of this lease is answered, but an earlier lease's stuck requests
            // are still posted on the set: close this lease's registrations (no request uses
            // them) and nothing else; the set goes back to the pool.
            let mut reg = fi_registrar!(self);
            let closed = self.mrs.close_all(&mut reg);
            let pool = self.return_to_pool();
            log::debug!("{}: endpoint back in the lease pool ({pool})", self.name);
            return match first_err {
                Some(e) => {
                    log::warn!("{e}");
                    Err(e)
                }
                None => closed,
            };
        }
        // Registrations bound to the endpoint (FI_MR_ENDPOINT) are closed before it (as fabtests
        // do), the others after it.
        let mr_first = self.attrs.mr_mode & fi::FI_MR_ENDPOINT != 0;
        if mr_first {
            let mut reg = fi_registrar!(self);
            if let Err(e) = self.mrs.close_all(&mut reg) {
                first_err.get_or_insert(e);
            }
        }
        let ep_ret = self.obj.close_ep();
        if ep_ret != 0 {
            // The provider refused: it may still own contexts and buffers.
            let e = self.quarantine(format!(
                "fi_close(endpoint) failed: {} ({ep_ret})",
                fi_error_text(ep_ret as isize)
            ));
            log::warn!("{e}");
            return Err(e);
        }
        if !mr_first {
            let mut reg = fi_registrar!(self);
            if let Err(e) = self.mrs.close_all(&mut reg) {
                first_err.get_or_insert(e);
            }
        }
        if let Some((what, ret)) = self.obj.close_all() {
            // The refused object and its parents stay open: quarantined.
            let e = self.quarantine(format!(
                "fi_close({what}) failed: {} ({ret})",
                fi_error_text(ret as isize)
            ));
            first_err.get_or_insert(e);
        }
        match first_err {
            Some(e) => {
                log::warn!("{e}");
                Err(e)
            }
            None => Ok(()),
        }
    }
}

impl Drop for LibfabricTransport {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::error!("{}: close on drop: {e}", self.name);
        }
    }
}
