//! The network task: the driver-side state machine that calls the progress half through the
//! seam (docs/design.md §4, the exact contract; seed §3).
//!
//! Its states and numbered edges are the one run-state diagram at
//! [`RunState`]: edges 1–3 (and 7 when a `start` fails) are taken by `step_init`, 4 by
//! `step_waiting`, 5–8 by `step_progress` (8 also by `step_waiting`), 9 by `close` /
//! `begin_close`, 11 (to CLOSING) and 12 (CLOSING → DONE) by `teardown_step`, each through
//! [`TaskCore::transition`]; edge 10 (DONE → INIT, resubmit) by [`NetworkTask::rearm_with`]
//! through [`TaskCore::rearm`], called by the task's owner, never by the worker. A re-armed task
//! keeps its blocks' FIFOs (or takes new ones by copy, [`NetworkTask::replace_fifos`]), so a
//! steady state of resubmissions allocates nothing (docs/design.md §4).
//!
//! Deviations from the seed (docs/design.md §3/§4): idle/done are seeded with `true` before each
//! stream's progress call; `stop` is called once per stream when the task ends, never on a
//! block switch; a stream whose schedule is exhausted is not called again.
//!
//! **Teardown off the tick** (docs/design.md §3): when the task ends on the tick (edges 6–9)
//! it tears its streams down with the seam's stepped stop (`stop_step`, one bounded step per
//! stream and tick, falling back to the blocking `stop` when the seam has none); while some
//! stream's cancelled requests are unconfirmed it is CLOSING (edge 11) and each later step
//! makes one more step of each such stream, DONE (edge 12) once all are over (confirmed, or
//! the progress half's drain limit passed: NRT_TIMEOUT, orphans). The worker's exit closes
//! with the blocking `stop` (`ProxyTask::close`): nothing would step the task again.
//!
//! Choices this module makes where docs/design.md is silent: a skipped task (edge 1) also waits its
//! turn behind an earlier network task of its comm, so the network tasks of a slot complete in
//! submission order even with the skip flag; "progress" for the timeout is a state change, a
//! block switch or a progress round in which some stream was not idle (the driver cannot see
//! single requests, and the progress half reports idle exactly when no op moved); a `start`
//! failure part-way through INIT stops every stream of the task (some blocks were filed).
//!
//! Bounded waits (docs/design.md §9): the trigger wait (WAITING_DEVICE_TRIGGER) and the
//! progress rounds end `NRT_TIMEOUT` once the task has made no progress for its limit; a slow
//! peer that keeps moving (any round that is not idle, any block switch) restarts the clock and
//! never times out. While it waits the task logs a warning every
//! [`WAIT_WARN_INTERVAL_NS`](super::WAIT_WARN_INTERVAL_NS) of the queue's clock with the
//! cumulative wait, its state, each stream's block and place in the schedule, and its trigger
//! words. An abort request ([`NetworkTask::with_abort`]) ends it at its next step (edge 9).
//!
//! Seed: `enc_network_proxy_task::step` (nrt:0x1d0620), `init_network_proxy` (nrt:0x1ce5b0),
//! `proxy_progress` (nrt:0x1d03f0), `check_basic_block_switch` (nrt:0x1d01c0), §3.

use alloc::vec::Vec;

use super::barrier::LimitMs;
use super::{ProxyTask, Step, StepEnv, TaskCore, TaskKind};
use crate::base::abort::AbortHandle;
use crate::base::desc::NUM_STREAMS;
use crate::base::status::NrtStatus;
use crate::base::trace;
use crate::driver::record::RunState;
use crate::driver::trigger::TriggerWords;
use crate::seam::{CommDumpFn, SeamTable};

mod spec;
pub use spec::{BlockFifos, CollectiveLabel, CommHandle, NetworkTaskSpec};

/// Checks `blocks` (stream < 4, id not `u32::MAX`) and returns the mask of their streams.
fn streams_of(task_id: u32, blocks: &[BlockFifos]) -> Result<u32, NrtStatus> {
    let mut mask = 0u32;
    for b in blocks {
        if b.stream as usize >= NUM_STREAMS || b.bb == u32::MAX {
            log::error!(
                "network task {task_id}: invalid block (stream {}, bb {:#x})",
                b.stream,
                b.bb
            );
            return Err(NrtStatus::Invalid);
        }
        mask |= 1 << b.stream;
    }
    Ok(mask)
}

/// The default schedule into `out` (cleared first): the distinct block ids of `blocks` in
/// order of first appearance.
fn first_appearance(blocks: &[BlockFifos], out: &mut Vec<u32>) {
    out.clear();
    for b in blocks {
        if !out.contains(&b.bb) {
            out.push(b.bb);
        }
    }
}

/// One cursor at the first block per stream of `mask`, in stream order.
fn cursors_for(mask: u32) -> heapless::Vec<StreamCursor, NUM_STREAMS> {
    let mut cursors = heapless::Vec::new();
    for stream in (0..NUM_STREAMS as u32).filter(|s| mask & (1 << s) != 0) {
        // Cannot fail: at most NUM_STREAMS streams pass the filter.
        let _ = cursors.push(StreamCursor { stream, cursor: 0 });
    }
    cursors
}

#[derive(Clone, Copy, Debug)]
struct StreamCursor {
    stream: u32,
    /// Index into the schedule of the block being run; `== schedule.len()` once finished.
    cursor: usize,
}

/// A network task (see the module docs for its state machine).
///
/// Seed: `enc_network_proxy_task`, §3.
pub struct NetworkTask {
    core: TaskCore,
    comm: CommHandle,
    seam: SeamTable,
    blocks: Vec<BlockFifos>,
    schedule: Vec<u32>,
    /// `true` when the schedule is the default one (follows the blocks on `replace_fifos`).
    default_schedule: bool,
    /// One cursor per stream the task runs, in stream order: at most [`NUM_STREAMS`], and the
    /// capacity is in the type (no allocation per task for them).
    cursors: heapless::Vec<StreamCursor, NUM_STREAMS>,
    triggers: TriggerWords,
    wait_for_device: bool,
    skip: bool,
    /// `true` once INIT has called `start` (the task then stops its streams when it ends).
    filed: bool,
    /// `true` once the teardown of its streams has begun (`stop` or the first stepped stop per
    /// stream).
    stopped: bool,
    /// Streams (bit `s`) whose stepped teardown has not answered done yet (CLOSING).
    draining: u32,
    /// The status the task ends with (set when it ends, kept through CLOSING).
    close_status: NrtStatus,
    /// The comm's abort request, read at every step (`None`: the task is not abortable).
    abort: Option<AbortHandle>,
    /// Writes the comm's state into a queue's dump (`None`: the dump has the task's lines only).
    comm_dump: Option<CommDumpFn>,
    /// The collective the task runs and its algorithm, for the dump (`None`: FIFOs not from a
    /// planner, or not said).
    label: Option<CollectiveLabel>,
}

impl core::fmt::Debug for NetworkTask {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NetworkTask")
            .field("record", &self.core.record())
            .field("comm", &self.comm)
            .field("schedule", &self.schedule)
            .field("cursors", &self.cursors)
            .field("filed", &self.filed)
            .finish()
    }
}

/// The log level of a failed seam call: `NRT_CLOSED` is the answer to an abort someone asked
/// for (warn); anything else is a failure of the comm (error).
fn failure_level(status: NrtStatus) -> log::Level {
    if status == NrtStatus::Closed {
        log::Level::Warn
    } else {
        log::Level::Error
    }
}

impl NetworkTask {
    /// Builds a task in INIT from `spec`.
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] when a block's stream is ≥ 4 or its id is `u32::MAX`, or an
    /// explicit schedule names `u32::MAX`. Nothing is called on the seam.
    pub fn new(spec: NetworkTaskSpec) -> Result<Self, NrtStatus> {
        let streams_mask = streams_of(spec.task_id, &spec.blocks)?;
        let default_schedule = spec.schedule.is_none();
        let schedule = match spec.schedule {
            Some(s) => {
                if s.contains(&u32::MAX) {
                    return Err(NrtStatus::Invalid);
                }
                s
            }
            None => {
                let mut order = Vec::new();
                first_appearance(&spec.blocks, &mut order);
                order
            }
        };
        let cursors = cursors_for(streams_mask);
        Ok(Self {
            core: TaskCore::new(
                TaskKind::Network,
                spec.task_id,
                spec.comm_id,
                streams_mask,
                spec.timeout_ns,
            ),
            comm: spec.comm,
            seam: spec.seam,
            blocks: spec.blocks,
            schedule,
            default_schedule,
            cursors,
            triggers: spec.triggers,
            wait_for_device: spec.wait_for_device,
            skip: spec.skip,
            filed: false,
            stopped: false,
            draining: 0,
            close_status: NrtStatus::Success,
            abort: None,
            comm_dump: None,
            label: None,
        })
    }

    /// The same task, ending DONE with the abort's status (edge 9: `stop` per stream first if
    /// it filed its blocks; `NRT_CLOSED` for a plain abort) at its first step after `abort` is
    /// requested: the comm's [`AbortHandle`] (`Comm::abort_handle`, which the comm's own
    /// `start` / `progress` also apply), or any handle the producer shares with the comm's
    /// other tasks. Kept across [`NetworkTask::rearm_with`].
    pub fn with_abort(mut self, abort: AbortHandle) -> Self {
        self.abort = Some(abort);
        self
    }

    /// The same task, naming `label` (its collective, algorithm and why) in its dump line.
    /// Kept across [`NetworkTask::rearm_with`].
    pub fn with_label(mut self, label: CollectiveLabel) -> Self {
        self.label = Some(label);
        self
    }

    /// The collective the task names in its dump ([`NetworkTask::with_label`]).
    pub fn label(&self) -> Option<CollectiveLabel> {
        self.label
    }

    /// The same task, whose dump lines (a queue's state dump, docs/design.md §6) include its
    /// comm's state, written by `dump` from the driving thread (e.g.
    /// [`crate::seam::in_process_dump`] for [`SeamTable::in_process`]). Kept across
    /// [`NetworkTask::rearm_with`].
    ///
    /// # Safety
    /// `dump` must accept this task's comm handle (the progress half's own dump for the comm
    /// the seam is called with).
    pub unsafe fn with_comm_dump(mut self, dump: CommDumpFn) -> Self {
        self.comm_dump = Some(dump);
        self
    }

    /// Where the task is, for a log line: each stream's block and its place in the schedule.
    fn position(&self) -> Position<'_> {
        Position(self)
    }

    /// Logs the "still waiting" warning when one is due (every
    /// [`WAIT_WARN_INTERVAL_NS`](super::WAIT_WARN_INTERVAL_NS) without progress).
    fn warn_if_due(&mut self, now_ns: u64) {
        if let Some(waited) = self.core.wait_warning_due(now_ns) {
            let rec = self.core.record();
            log::warn!(
                "network task {} comm {}: no progress for {} ms (state {:?}, limit {}); {}; \
                 trigger words {}",
                rec.task_id,
                rec.comm_id,
                waited / 1_000_000,
                self.core.state(),
                LimitMs(self.core.timeout_ns()),
                self.position(),
                self.triggers.describe()
            );
        }
    }

    /// Re-arms this DONE task in place for a new execution (edge 10, "resubmit"; see
    /// [`ProxyTask::rearm`]): new `task_id`, the given trigger words (`None`: keep), the given
    /// explicit schedule (`None`: keep the schedule in use), the blocks and their FIFOs kept.
    /// Stream cursors go back to the first block, and the record and shared status record go
    /// back to INIT ([`TaskCore::rearm`]). A new schedule is copied into the existing vector
    /// (`clear` + `extend_from_slice`: no allocation when its capacity suffices). The producer
    /// arms the trigger words before it submits the task again.
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] when the task is not DONE, or the schedule names `u32::MAX`;
    /// nothing changes then.
    pub fn rearm_with(
        &mut self,
        task_id: u32,
        triggers: Option<TriggerWords>,
        schedule: Option<&[u32]>,
    ) -> Result<(), NrtStatus> {
        if self.core.state() != RunState::Done {
            // Refused (and logged) by the core; nothing changes.
            return self.core.rearm(task_id, self.core.record().streams);
        }
        if schedule.is_some_and(|s| s.contains(&u32::MAX)) {
            log::error!("network task {task_id}: rearm with a schedule that names u32::MAX");
            return Err(NrtStatus::Invalid);
        }
        self.core.rearm(task_id, self.core.record().streams)?;
        if let Some(t) = triggers {
            self.triggers = t;
        }
        if let Some(s) = schedule {
            self.schedule.clear();
            self.schedule.extend_from_slice(s);
            self.default_schedule = false;
        }
        for c in self.cursors.iter_mut() {
            c.cursor = 0;
        }
        self.filed = false;
        self.stopped = false;
        self.draining = 0;
        self.close_status = NrtStatus::Success;
        Ok(())
    }

    /// Replaces the task's blocks by copies of `blocks`, reusing the storage it has: each
    /// block's FIFOs are copied into the existing vectors (`clear` + `extend_from_slice`, no
    /// allocation when their capacity suffices); a block beyond the current count is added,
    /// and surplus blocks are dropped. The streams the task drives, and a default schedule
    /// (distinct blocks in order of first appearance), follow the new blocks; an explicit
    /// schedule is kept. For a task that is DONE (before [`NetworkTask::rearm_with`]) or still
    /// unsubmitted in INIT.
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] when the task has filed its blocks and is not DONE, or a block's
    /// stream is ≥ 4 or its id is `u32::MAX`; nothing changes then.
    pub fn replace_fifos(&mut self, blocks: &[BlockFifos]) -> Result<(), NrtStatus> {
        let state = self.core.state();
        if !(state == RunState::Done || (state == RunState::Init && !self.filed)) {
            log::error!(
                "network task {}: replace_fifos refused in state {state:?}",
                self.core.record().task_id
            );
            return Err(NrtStatus::Invalid);
        }
        let mask = streams_of(self.core.record().task_id, blocks)?;
        self.blocks.truncate(blocks.len());
        for (i, b) in blocks.iter().enumerate() {
            match self.blocks.get_mut(i) {
                Some(mine) => {
                    mine.stream = b.stream;
                    mine.bb = b.bb;
                    mine.ops.clear();
                    mine.ops.extend_from_slice(&b.ops);
                    mine.src.clear();
                    mine.src.extend_from_slice(&b.src);
                    mine.dst.clear();
                    mine.dst.extend_from_slice(&b.dst);
                }
                None => self.blocks.push(b.clone()),
            }
        }
        if self.default_schedule {
            first_appearance(&self.blocks, &mut self.schedule);
        }
        self.cursors = cursors_for(mask);
        self.core.set_streams(mask);
        Ok(())
    }

    /// The task's blocks (stream, block id and FIFOs), in filing order.
    pub fn blocks(&self) -> &[BlockFifos] {
        &self.blocks
    }

    /// The current run state.
    pub fn state(&self) -> RunState {
        self.core.state()
    }

    /// The block schedule in use.
    pub fn schedule(&self) -> &[u32] {
        &self.schedule
    }

    /// Ends the task with `status` without blocking (edges 6–9): [`NetworkTask::end`] with
    /// stepped teardowns.
    fn finish(&mut self, status: NrtStatus) -> Step {
        self.end(status, false)
    }

    /// Ends the task with `status`: when it has filed its blocks, tears each of its streams
    /// down once (`sync`: the blocking `stop`; else one step of the seam's stepped stop, which
    /// is `stop` when the seam has none), a teardown error replacing a success status; DONE
    /// once every teardown is over, else CLOSING (edge 11), which later steps finish (edge
    /// 12, [`NetworkTask::teardown_step`]). A CLOSING task keeps the status it carries; a
    /// DONE one changes nothing.
    fn end(&mut self, status: NrtStatus, sync: bool) -> Step {
        match self.core.state() {
            RunState::Done => return Step::Done,
            RunState::Closing => {}
            _ => {
                self.close_status = status;
                self.draining = 0;
                if self.filed && !self.stopped {
                    self.stopped = true;
                    self.draining = self.core.record().streams;
                }
            }
        }
        self.teardown_step(sync)
    }

    /// One step of the teardown of every stream still draining (bounded: one seam call per
    /// stream, each a few polls unless `sync`), then DONE with the final status when none is
    /// left (edges 6–9, or 12 from CLOSING), else CLOSING (edge 11; a repeat only updates the
    /// status). Answers `Done`, or `Progressed` when a stream's teardown ended (or the task
    /// just entered CLOSING), else `Idle`.
    fn teardown_step(&mut self, sync: bool) -> Step {
        let mut moved = self.core.state() != RunState::Closing;
        for i in 0..self.cursors.len() {
            let stream = self.cursors[i].stream;
            let bit = 1u32 << stream;
            if self.draining & bit == 0 {
                continue;
            }
            // A call into the progress half. After a clean end (every op done, no request
            // outstanding) the stop only books the stream down, and the task's end keeps the
            // tick's stamp (its last op's end, `trace::TickStamp`); otherwise the stop cancels
            // and drains requests, and the records after it read the clock (a rare path, so
            // the stamp is looked up here).
            if self.close_status != NrtStatus::Success {
                trace::TickStamp::here().clear();
            }
            // SAFETY: `comm` per CommHandle::new's contract; we are the worker thread.
            let r = unsafe {
                if sync {
                    self.seam.stop(self.comm.as_ptr(), stream).map(|()| true)
                } else {
                    self.seam.stop_step(self.comm.as_ptr(), stream)
                }
            };
            match r {
                Ok(false) => continue,
                Ok(true) => {}
                Err(e) => {
                    log::error!(
                        "network task {} comm {}: stop(stream {}) failed: {}",
                        self.core.record().task_id,
                        self.core.record().comm_id,
                        stream,
                        e
                    );
                    if self.close_status == NrtStatus::Success {
                        self.close_status = e;
                    }
                }
            }
            self.draining &= !bit;
            moved = true;
        }
        if self.draining == 0 {
            self.core.transition(RunState::Done, self.close_status);
            return Step::Done;
        }
        self.core.transition(RunState::Closing, self.close_status);
        if moved {
            Step::Progressed
        } else {
            Step::Idle
        }
    }

    /// INIT: edges 1–3.
    fn step_init(&mut self, env: &StepEnv) -> Step {
        if !env.may_begin {
            return Step::Idle;
        }
        if self.skip {
            self.core.transition(RunState::Done, NrtStatus::Success);
            return Step::Done;
        }
        self.filed = true;
        for b in &self.blocks {
            // A call into the progress half (maybe another copy of the core, whose records
            // carry their own times): this tick's records after it do not reuse a time from
            // before it (`trace::TickStamp`).
            env.stamp.clear();
            // SAFETY: `comm` per CommHandle::new's contract; we are the worker thread.
            let r = unsafe {
                self.seam
                    .start(self.comm.as_ptr(), b.stream, b.bb, &b.ops, &b.src, &b.dst)
            };
            if let Err(e) = r {
                log::log!(
                    failure_level(e),
                    "network task {} comm {}: start(stream {}, bb {}) failed: {}",
                    self.core.record().task_id,
                    self.core.record().comm_id,
                    b.stream,
                    b.bb,
                    e
                );
                return self.finish(e);
            }
        }
        self.core.note_progress(env.now_ns);
        // PLANT: NetworkSkipsTriggerGate never waits for the device: INIT goes straight to
        // PROGRESSING, before the device's trigger, which is never consumed.
        let next = if plant!(NetworkSkipsTriggerGate, false, self.wait_for_device) {
            RunState::WaitingDeviceTrigger
        } else {
            RunState::Progressing
        };
        self.core.transition(next, NrtStatus::Success);
        Step::Progressed
    }

    /// WAITING_DEVICE_TRIGGER: edge 4 (or 8).
    fn step_waiting(&mut self, env: &StepEnv) -> Step {
        if self.triggers.can_start() {
            self.triggers.consume();
            self.core.note_progress(env.now_ns);
            self.core
                .transition(RunState::Progressing, NrtStatus::Success);
            return Step::Progressed;
        }
        if self.core.timed_out(env.now_ns) {
            log::error!(
                "network task {} comm {}: timed out waiting for the device trigger \
                 (waited {} ms); trigger words {}",
                self.core.record().task_id,
                self.core.record().comm_id,
                self.core.waited_ns(env.now_ns) / 1_000_000,
                self.triggers.describe()
            );
            return self.finish(NrtStatus::Timeout);
        }
        self.warn_if_due(env.now_ns);
        Step::Idle
    }

    /// PROGRESSING / IDLE: one round of progress calls, edges 5–8.
    fn step_progress(&mut self, env: &StepEnv) -> Step {
        let mut all_idle = true;
        let mut switched = false;
        let mut failure = None;
        for c in self.cursors.iter_mut() {
            if c.cursor >= self.schedule.len() {
                continue; // finished: never called again in this task
            }
            let bb = self.schedule[c.cursor];
            let (mut idle, mut done) = (true, true);
            // As in `step_init`: a call into the progress half.
            env.stamp.clear();
            // SAFETY: `comm` per CommHandle::new's contract; we are the worker thread.
            let r = unsafe {
                self.seam
                    .progress(self.comm.as_ptr(), c.stream, bb, &mut idle, &mut done)
            };
            if let Err(e) = r {
                log::log!(
                    failure_level(e),
                    "network task {} comm {}: progress(stream {}, bb {}) failed: {}",
                    self.core.record().task_id,
                    self.core.record().comm_id,
                    c.stream,
                    bb,
                    e
                );
                failure = Some(e);
                break;
            }
            all_idle &= idle;
            if done {
                c.cursor += 1;
                switched = true;
                log::trace!(
                    "network task {} stream {}: block {} done ({} of {})",
                    self.core.record().task_id,
                    c.stream,
                    bb,
                    c.cursor,
                    self.schedule.len()
                );
            }
        }
        if let Some(e) = failure {
            return self.finish(e);
        }
        if self.cursors.iter().all(|c| c.cursor >= self.schedule.len()) {
            return self.finish(NrtStatus::Success);
        }
        let progressed = switched || !all_idle;
        if progressed {
            self.core.note_progress(env.now_ns);
        } else if self.core.timed_out(env.now_ns) {
            log::error!(
                "network task {} comm {}: no progress within the timeout (waited {} ms); {}",
                self.core.record().task_id,
                self.core.record().comm_id,
                self.core.waited_ns(env.now_ns) / 1_000_000,
                self.position()
            );
            return self.finish(NrtStatus::Timeout);
        } else {
            self.warn_if_due(env.now_ns);
        }
        let next = if all_idle {
            RunState::Idle
        } else {
            RunState::Progressing
        };
        self.core.transition(next, NrtStatus::Success);
        if progressed {
            Step::Progressed
        } else {
            Step::Idle
        }
    }
}

/// [`NetworkTask::position`]: `stream 0 at block 2 (1 of 3), stream 1 finished`. The task
/// cannot count the ops or requests outstanding: the seam shows it only idle / done per call
/// (the comm's own dump, `Comm::dump`, has them per op).
struct Position<'a>(&'a NetworkTask);

impl core::fmt::Display for Position<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let t = self.0;
        for (i, c) in t.cursors.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match t.schedule.get(c.cursor) {
                Some(bb) => write!(
                    f,
                    "stream {} at block {} ({} of {})",
                    c.stream,
                    bb,
                    c.cursor + 1,
                    t.schedule.len()
                )?,
                None => write!(f, "stream {} finished", c.stream)?,
            }
        }
        Ok(())
    }
}

impl ProxyTask for NetworkTask {
    /// Seed: `enc_network_proxy_task::step` (nrt:0x1d0620), §3.
    fn step(&mut self, env: &StepEnv) -> Step {
        let state = self.core.state();
        if state != RunState::Done && state != RunState::Closing {
            if let Some(status) = self.abort.as_ref().and_then(AbortHandle::aborted) {
                // Edge 9: the comm was aborted (from any thread); applied at this step.
                log::warn!(
                    "network task {} comm {}: comm aborted; ends {status} (was {state:?}, \
                     filed {})",
                    self.core.record().task_id,
                    self.core.record().comm_id,
                    self.filed
                );
                return self.finish(status);
            }
        }
        match state {
            RunState::Init => self.step_init(env),
            RunState::WaitingDeviceTrigger => self.step_waiting(env),
            RunState::Progressing | RunState::Idle => self.step_progress(env),
            // Edge 12 once every stream's teardown is over (bounded by the progress half's
            // drain limit, which answers done with NRT_TIMEOUT at the latest).
            RunState::Closing => self.teardown_step(false),
            RunState::Done => {
                self.core.polled_after_done();
                Step::Done
            }
        }
    }

    fn close(&mut self, status: NrtStatus) {
        self.end(status, true);
    }

    fn begin_close(&mut self, status: NrtStatus) -> Step {
        match self.core.state() {
            RunState::Closing => Step::Idle,
            _ => self.end(status, false),
        }
    }

    fn core(&self) -> &TaskCore {
        &self.core
    }

    fn core_mut(&mut self) -> &mut TaskCore {
        &mut self.core
    }

    fn rearm(&mut self, task_id: u32) -> Result<(), NrtStatus> {
        self.rearm_with(task_id, None, None)
    }

    fn comm_key(&self) -> Option<usize> {
        Some(self.comm.as_ptr() as usize)
    }

    /// The task's line plus `filed=0|1 stopped=0|1 triggers=ADDR:VALUE,...` and, with a label
    /// ([`NetworkTask::with_label`]), `collective=NAME algo=NAME why=WORD`; one line per stream
    /// (`stream=0 block=2 pos=1/3`, or `block=none pos=finished/3`); then its comm's lines when
    /// it has a comm dump ([`NetworkTask::with_comm_dump`]) and has filed and not stopped its
    /// blocks.
    fn dump(&self, now_ns: u64, out: &mut dyn core::fmt::Write) -> core::fmt::Result {
        self.core.dump_fields(now_ns, out)?;
        write!(
            out,
            " filed={} stopped={} triggers=",
            u8::from(self.filed),
            u8::from(self.stopped)
        )?;
        let mut any = false;
        for w in self.triggers.iter() {
            if any {
                out.write_char(',')?;
            }
            any = true;
            write!(out, "{:#x}:{:#x}", w.addr(), w.load())?;
        }
        if !any {
            out.write_str("none")?;
        }
        if let Some(l) = self.label {
            write!(
                out,
                " collective={} algo={} why={}",
                l.collective, l.algorithm, l.why
            )?;
        }
        out.write_char('\n')?;
        let n = self.schedule.len();
        for c in &self.cursors {
            match self.schedule.get(c.cursor) {
                Some(bb) => writeln!(
                    out,
                    "stream={} block={bb} pos={}/{n}",
                    c.stream,
                    c.cursor + 1
                )?,
                None => writeln!(out, "stream={} block=none pos=finished/{n}", c.stream)?,
            }
        }
        if let Some(f) = self.comm_dump {
            // The comm's lines once, under the task that filed its blocks (a later task of the
            // comm waits in INIT behind it).
            if self.filed && !self.stopped && self.core.state() != RunState::Done {
                // SAFETY: `with_comm_dump`'s contract: `f` takes this comm's handle; the comm is
                // live while the task is not DONE (`CommHandle::new`), and the driving thread,
                // which calls this, is the only one that calls into it.
                unsafe { f(self.comm.as_ptr(), out)? };
            }
        }
        Ok(())
    }
}
