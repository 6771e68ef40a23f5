//! Failing and stopping: the sticky fatal error ([`Comm::fail`]), the synchronous and stepped
//! stops of a stream (cancel, then drain with a bound), and the comm's final drain.

use super::*;
use crate::base::backoff::{Backoff, BackoffPolicy, Pause};

impl Comm {
    pub(super) fn fail(&mut self, status: NrtStatus) -> NrtStatus {
        if self.fatal.is_none() {
            self.fatal = Some(status);
        }
        NrtStatus::NetworkProxyFailure
    }

    /// Stream teardown: cancels the requests of ops in flight, polls the transport until each
    /// reports completion or cancellation (at most the drain limit), then returns every op of
    /// the stream (active, filed, being built) to the pool and sets current and pending blocks
    /// to none. Works on a failed comm, and on a stream whose stepped teardown
    /// ([`Comm::stop_step`]) is under way (it finishes it). The stream is then empty and
    /// reusable: when `stop` returns, the transport touches none of the stream's buffers any
    /// more (or the requests that might were orphaned, `Timeout`).
    ///
    /// # Errors
    /// * `Invalid` for stream ≥ 4;
    /// * `Timeout` when the drain limit passed: the comm is marked failed and the undrained
    ///   requests stay with the transport until the comm is dropped (no buffer is reused while
    ///   the transport may still touch it). The stream is torn down all the same.
    ///
    /// **Bounded** (docs/design.md §9): the `stop` calls in a row with no `start` or
    /// `progress` between them (a task ending: one per stream; an abort) form one teardown
    /// and share one budget of `drain_limit_ns` and `drain_max_polls`. A drain polls and
    /// tests its requests, spinning between polls for [`DRAIN_SPIN_POLLS`] polls, then calling
    /// the relax hook ([`Comm::set_drain_relax`]) between them; once the budget is spent, a
    /// later drain of the same teardown makes one pass and leaves what is still pending with
    /// the transport (orphans, drained again at destroy). A synchronous teardown of up to four
    /// streams therefore blocks its caller for at most one drain limit; the driver does not
    /// call it on its tick when the seam has the stepped form (it steps [`Comm::stop_step`]
    /// instead, docs/design.md §3).
    ///
    /// Seed: `neuronStopNetworkProxy` (nccom:0x487d0), §4; docs/design.md §3.
    pub fn stop(&mut self, stream: u32) -> Result<(), NrtStatus> {
        let s = check_stream(stream)?;
        // The next progress call starts a new round (docs/design.md §8).
        self.round_last_stream = BB_NONE;
        self.begin_stop(s, stream);
        self.drain_stream(s, stream, None)
    }

    /// One bounded, non-blocking step of a stream teardown (the stepped form of
    /// [`Comm::stop`], for a driver that must not block its tick): the first call cancels
    /// the requests of the ops in flight and takes the stream's ops off it (ops without a
    /// request go back to the pool at once; ops with one are held out of the pool); every call
    /// then polls the transport at most [`STOP_STEP_POLLS`] times (spinning between polls,
    /// never calling the relax hook) and tests the cancelled requests. `done` is set to `true`
    /// once every cancelled request is confirmed (the held ops are then back in the pool and
    /// the stream is empty and reusable, as after `stop`), `false` while some are pending:
    /// call again (on a later tick). While a stepped teardown is under way, `start` and
    /// `progress` on the stream are refused (`Invalid`); `stop` finishes it synchronously
    /// (destroy does).
    ///
    /// # Errors
    /// * `Invalid` for stream ≥ 4 (`done` is set: there is nothing to tear down);
    /// * `Timeout` (`done` set) when the teardown's budget (`drain_limit_ns`,
    ///   `drain_max_polls`, shared with the other streams' teardown as for `stop`) is spent:
    ///   the unconfirmed requests become orphans (left with the transport until destroy), the
    ///   held ops go back to the pool and the comm is failed with `Timeout`.
    ///
    /// **Bounded**: one call makes at most [`STOP_STEP_POLLS`] polls; a teardown answers
    /// `done` within one drain budget of its first call (in time and in polls), however often
    /// it is called.
    ///
    /// Seed: none (the seed's stop is synchronous); docs/design.md §3 ("Stepped teardown").
    pub fn stop_step(&mut self, stream: u32, done: &mut bool) -> Result<(), NrtStatus> {
        *done = true;
        let s = check_stream(stream)?;
        self.round_last_stream = BB_NONE;
        if !self.streams[s].closing {
            self.begin_stop(s, stream);
        }
        let r = self.drain_stream(s, stream, Some(STOP_STEP_POLLS));
        *done = !self.streams[s].closing;
        r
    }

    /// The first half of a teardown of stream `s`: logs the comm's state when ops were still
    /// active, cancels every outstanding request of the active ops (into the stream's
    /// `closing_reqs`), holds the ops that had requests on `closing_ops`, returns every other
    /// op of the stream to the pool, clears the block map and marks the stream closing.
    pub(super) fn begin_stop(&mut self, s: usize, stream: u32) {
        let comm_id = self.config.comm_id;
        // A stream torn down with ops still active (task failure, timeout, a comm leaving):
        // log the comm's state, every block and op, for the post-mortem (docs/design.md §6).
        if !self.streams[s].active.is_empty() && log::log_enabled!(log::Level::Warn) {
            let mut dump = alloc::string::String::new();
            let _ = self.dump(&mut dump);
            log::warn!(
                "stop: comm {comm_id} stream {stream} torn down with active ops; state:\n{dump}"
            );
        }
        let st = &mut self.streams[s];
        st.closing = true;
        // Requests of an earlier step of this teardown were cancelled then.
        let first = st.closing_reqs.len();
        // Cancel every outstanding request of the active ops (into the kept vector); an op
        // that had one is held until its requests are confirmed.
        let mut all = OpList::new();
        all.append(&mut st.active);
        let mut rest = OpList::new();
        while let Some(opp) = all.pop_front() {
            // SAFETY: `opp` is a live op of this stream, just unlinked; no other reference.
            let op = unsafe { &mut *opp };
            peaks::fold_op(&mut self.op_peaks, op);
            let mut had = false;
            if let Some(t) = op.tracker_mut() {
                while let Some(r) = t.pop_front() {
                    st.closing_reqs.push(r.id);
                    had = true;
                }
            }
            // SAFETY: `opp` is live and on no list.
            unsafe {
                if had {
                    st.closing_ops.push_back(opp);
                } else {
                    rest.push_back(opp);
                }
            }
        }
        rest.append(&mut st.next_ops);
        for files in st.blocks.values_mut() {
            rest.append(&mut files.ops);
        }
        // Their records keep what the ops counted (the ops are cleared now).
        for opp in rest.iter() {
            // SAFETY: ops on the list are live ops of this stream; no other reference.
            peaks::fold_op(&mut self.op_peaks, unsafe { &*opp });
        }
        StreamState::release_list(&mut st.pool, &mut rest);
        st.last_bb = BB_NONE;
        st.blocks.clear();
        st.current_bb = BB_NONE;
        st.pending_bb = BB_NONE;
        for &id in &st.closing_reqs[first..] {
            if let Err(e) = self.transport.cancel(id) {
                log::warn!(
                    "stop: comm {comm_id} stream {stream}: cancel of request {id} failed: {e}"
                );
            }
        }
    }

    /// The second half of a teardown of stream `s`: drains its cancelled requests (`step`:
    /// at most that many polls, else until confirmed or the budget is spent). Once none is
    /// pending (confirmed, or orphaned at the limit) the held ops go back to the pool and the
    /// stream is no longer closing.
    pub(super) fn drain_stream(
        &mut self,
        s: usize,
        stream: u32,
        step: Option<u64>,
    ) -> Result<(), NrtStatus> {
        let mut pending = core::mem::take(&mut self.streams[s].closing_reqs);
        let result = self.drain(&mut pending, "stop: stream", Some(stream), step);
        let st = &mut self.streams[s];
        st.closing_reqs = pending;
        if st.closing_reqs.is_empty() {
            StreamState::release_list(&mut st.pool, &mut st.closing_ops);
            st.closing = false;
        }
        result
    }

    /// `Invalid` (logged) while a stepped teardown of stream `s` is under way: its cancelled
    /// requests may still touch buffers a new block could name.
    pub(super) fn refuse_if_closing(&self, s: usize, what: &str) -> Result<(), NrtStatus> {
        let st = &self.streams[s];
        if st.closing {
            reject!(
                "{what} on comm {} stream {s} refused: its teardown is under way ({} cancelled \
                 requests not confirmed)",
                self.config.comm_id,
                st.closing_reqs.len()
            );
        }
        Ok(())
    }

    /// Ends the teardown budget (a `start` or `progress` call), unless a stepped teardown is
    /// still under way on some stream: its budget runs on until it is done.
    pub(super) fn end_teardown(&mut self) {
        if self.streams.iter().all(|st| !st.closing) {
            self.teardown = None;
        }
    }

    /// Tests `pending` until each reports finished or failed, within the teardown's budget
    /// (see [`Comm::stop`]): spin between polls for [`DRAIN_SPIN_POLLS`] polls, then call the
    /// relax hook between them for [`DRAIN_RELAX_POLLS`], then park with a growing timeout
    /// when the platform gave a park hook ([`Comm::set_drain_park`]), else relax on. With `step`, returns `Ok` after that many polls with requests
    /// still pending (and never calls the relax hook). `what` and `stream` name the caller in
    /// the log line (no string is built on the way).
    pub(super) fn drain(
        &mut self,
        pending: &mut Vec<RequestId>,
        what: &str,
        stream: Option<u32>,
        step: Option<u64>,
    ) -> Result<(), NrtStatus> {
        if pending.is_empty() {
            return Ok(());
        }
        let (deadline, mut polls_left) = *self.teardown.get_or_insert_with(|| {
            (
                self.clock
                    .now_ns()
                    .saturating_add(self.config.drain_limit_ns),
                self.config.drain_max_polls,
            )
        });
        let mut polls = 0u64;
        // The project's one backoff (base::backoff): DRAIN_SPIN_POLLS spins, DRAIN_RELAX_POLLS
        // calls of the relax hook (the "yields"), then parks from DRAIN_PARK_FIRST_NS doubling
        // to DRAIN_PARK_MAX_NS, none past the deadline (without a park hook: relax on).
        let mut backoff = Backoff::new(DRAIN_BACKOFF);
        let pause = DrainPause {
            relax: self.relax,
            park: self.park,
        };
        let result = loop {
            let _ = self.transport.poll();
            let transport = &mut self.transport;
            pending.retain(|&id| match transport.test(id) {
                Ok(TestOutcome::Pending) => true,
                Ok(_) => false,
                Err(e) => {
                    log::debug!("stop: request {id} ended with {e}");
                    false
                }
            });
            if pending.is_empty() {
                break Ok(());
            }
            polls += 1;
            polls_left = polls_left.saturating_sub(1);
            if polls_left == 0 || self.clock.now_ns() > deadline {
                log::error!(
                    "{what}{}: comm {}: {} requests not confirmed within the drain limit \
                     ({} polls in this drain); comm failed",
                    stream.map_or(alloc::string::String::new(), |s| alloc::format!(" {s}")),
                    self.config.comm_id,
                    pending.len(),
                    polls
                );
                self.orphans.append(pending);
                self.fail(NrtStatus::Timeout);
                break Err(NrtStatus::Timeout);
            }
            match step {
                // A step of a stepped teardown: a few polls, spinning between them, never
                // giving the CPU away (the caller's tick goes on to the other comms).
                Some(n) if polls >= n => break Ok(()),
                Some(_) => spin_loop(),
                // Back off: spin a little (a cancel is usually confirmed at once), then let
                // the platform give the CPU away between polls.
                None => {
                    // A nap never goes past the deadline (checked above: now <= deadline).
                    let left = if backoff.napping() {
                        deadline.saturating_sub(self.clock.now_ns())
                    } else {
                        u64::MAX
                    };
                    backoff.pause_at_most(&pause, left);
                }
            }
        };
        self.teardown = Some((deadline, polls_left));
        result
    }
}

/// The drain's backoff (see `Comm::drain`): the relax hook stands for a yield. The first
/// [`DRAIN_SPIN_POLLS`] polls have one gap fewer between them: that many spins.
const DRAIN_BACKOFF: BackoffPolicy = BackoffPolicy {
    spins: DRAIN_SPIN_POLLS as u32 - 1,
    yields: DRAIN_RELAX_POLLS as u32,
    nap_ns: DRAIN_PARK_FIRST_NS,
    max_nap_ns: DRAIN_PARK_MAX_NS,
};

/// The platform's drain hooks as a [`Pause`]: a yield calls the relax hook, a nap the park hook
/// (or the relax hook when the platform gave none).
struct DrainPause {
    relax: fn(),
    park: Option<fn(u64)>,
}

impl Pause for DrainPause {
    fn yield_now(&self) {
        (self.relax)();
    }

    fn nap(&self, ns: u64) {
        match self.park {
            Some(park) => park(ns),
            None => (self.relax)(),
        }
    }
}
