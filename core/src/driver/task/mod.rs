//! Proxy tasks: what a proxy queue's worker steps.
//!
//! Two kinds (seed §2, §3): the [`NetworkTask`] drives the progress half through the seam, the
//! [`BarrierTask`] runs a host-side barrier and never touches the progress half. Both share one
//! run-state machine ([`RunState`]) whose every edge goes through [`TaskCore::transition`], which
//! logs `state=A=>B` at trace level and publishes the task's [`StatusRecord`].
//!
//! Seed: `enc_proxy_task` and its virtual `step()` (vtable slot 0), §2 and §3.

pub mod barrier;
pub mod network;
#[cfg(all(test, not(loom)))]
mod tests;

use core::fmt;

pub use barrier::{
    BarrierChannel, BarrierTask, BarrierTaskSpec, BarrierTicket, SharedMemBarrier,
    SharedMemBarrierEndpoint,
};
pub use network::{BlockFifos, CollectiveLabel, CommHandle, NetworkTask, NetworkTaskSpec};

use crate::base::state;
use crate::base::status::NrtStatus;
use crate::base::sync::Arc;
use crate::base::trace;
use crate::driver::record::{RunState, StatusRecord, TaskRecord};

/// Interval of the "still waiting" warning: a task that waits (no progress) logs one warning
/// each time its cumulative wait passes another multiple of this, on the queue's clock
/// ([`StepEnv::now_ns`]): 10 s. Any progress restarts the count.
pub const WAIT_WARN_INTERVAL_NS: u64 = 10_000_000_000;

/// What the queue tells a task for one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepEnv {
    /// Now, in nanoseconds of the queue's clock (read once per tick; the task never reads a
    /// clock itself).
    pub now_ns: u64,
    /// `false` while an earlier network task of the same comm is not DONE: a network task in
    /// INIT then stays in INIT (docs/design.md §4, "one comm, one network task at a time").
    pub may_begin: bool,
    /// The tick's shared time stamp (event recording, `crate::base::trace::TickStamp`): a task
    /// clears it before it calls out of the tick's bookkeeping (the progress half, a barrier
    /// channel), so that its records after the call do not reuse a time from before it.
    pub stamp: crate::base::trace::TickStamp,
}

/// What one step did, as the queue's loop needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The task moved: a state change, a filed block, a block switch, or a progress call that
    /// was not idle.
    Progressed,
    /// Nothing moved: IDLE, waiting for a trigger, waiting behind an earlier task, a barrier
    /// still waiting. The task stays active (IDLE is never a reason to drop a task).
    Idle,
    /// The task is DONE: the queue removes it and reports its final record.
    Done,
}

/// The kind of a task, for logs and dumps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    /// [`NetworkTask`] (seed: `enc_network_proxy_task`).
    Network,
    /// [`BarrierTask`] (seed: `enc_barrier_proxy_task`).
    Barrier,
}

/// A task a proxy queue's worker steps.
///
/// Implementations are moved to the worker thread at submission and stepped only there.
///
/// Seed: `enc_proxy_task` (abstract; `step()` is vtable slot 0), §2.
pub trait ProxyTask: Send {
    /// Advances the task by one tick. Never blocks. Stepping a DONE task logs once and changes
    /// nothing (answers [`Step::Done`]).
    ///
    /// Seed: `enc_proxy_task::step`, §2/§3.
    fn step(&mut self, env: &StepEnv) -> Step;

    /// Ends the task now with `status` (DONE when it returns), synchronously: a network task
    /// that has filed its blocks tears its streams down with the blocking `stop` (the worker
    /// exiting, which steps nothing afterwards). A CLOSING task finishes its teardown the same
    /// way and keeps the status it carries. No effect on a DONE task.
    fn close(&mut self, status: NrtStatus);

    /// Ends the task with `status` without blocking the tick (a comm leaving its queue): a
    /// network task that has filed its blocks makes one bounded step of each stream's
    /// teardown and, while cancelled requests are pending, goes to CLOSING (edge 11 of
    /// [`RunState`]); its later steps finish the teardown (edge 12). Answers [`Step::Done`]
    /// once the task is DONE. On a CLOSING task it changes nothing (answers [`Step::Idle`]).
    /// The default is [`ProxyTask::close`] (right for a kind whose close never blocks).
    fn begin_close(&mut self, status: NrtStatus) -> Step {
        self.close(status);
        Step::Done
    }

    /// The bookkeeping the task kind keeps in a [`TaskCore`] (its record, its kind).
    fn core(&self) -> &TaskCore;

    /// The same, mutably.
    fn core_mut(&mut self) -> &mut TaskCore;

    /// The current record (a copy).
    fn record(&self) -> TaskRecord {
        self.core().record()
    }

    /// The live status record, which any thread may read without a lock.
    fn status_record(&self) -> Arc<StatusRecord> {
        self.core().status_record()
    }

    /// The slot the task was submitted through (`u32::MAX` before submission).
    fn slot(&self) -> u32 {
        self.record().slot
    }

    /// Records the queue slot the task is submitted through (called by the slot before the
    /// task is handed to the worker).
    fn bind_slot(&mut self, slot: u32) {
        self.core_mut().bind_slot(slot);
    }

    /// Re-arms a DONE task in place for a new execution (edge 10 of [`RunState`], "resubmit"):
    /// new `task_id`, everything else (comm, seam, FIFOs, schedule, trigger words, channel)
    /// kept; the record and the shared [`StatusRecord`] go back to INIT with status success and
    /// slot `u32::MAX`, and nothing is allocated. The producer arms the trigger words
    /// ([`crate::driver::trigger::TriggerWords::arm`]) and submits the task again, as for a new
    /// one. Called by the task's owner, never by the worker (a task handed back by its queue).
    ///
    /// The default re-arms the [`TaskCore`] only ([`TaskCore::rearm`], same stream mask): right
    /// for a kind whose whole per-execution state is its core. [`NetworkTask`] and
    /// [`BarrierTask`] override it to reset their own cursors and tickets too.
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] when the task is not DONE (nothing changes).
    fn rearm(&mut self, task_id: u32) -> Result<(), NrtStatus> {
        let streams = self.record().streams;
        self.core_mut().rearm(task_id, streams)
    }

    /// The key of the comm whose network tasks run one at a time (`None`: not serialised,
    /// e.g. a barrier task).
    fn comm_key(&self) -> Option<usize>;

    /// The task's kind.
    fn kind(&self) -> TaskKind {
        self.core().kind()
    }

    /// Writes the task's state for a state dump (docs/design.md §6, `driver::dump`), called by
    /// the driving thread only: a first line of `key=value` fields
    /// ([`TaskCore::dump_fields`]), then one line per object the task has (a network task: its
    /// streams' places in the schedule, then its comm's lines). The queue prefixes every line
    /// with `proxy-dump queue=Q slot=S task=T`. The default writes the first line only.
    ///
    /// # Errors
    /// Whatever `out` returns.
    fn dump(&self, now_ns: u64, out: &mut dyn fmt::Write) -> fmt::Result {
        self.core().dump_fields(now_ns, out)?;
        out.write_char('\n')
    }
}

impl fmt::Debug for dyn ProxyTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyTask")
            .field("kind", &self.kind())
            .field("record", &self.record())
            .finish()
    }
}

/// The bookkeeping every task kind shares: its record, the one transition function, the
/// no-progress timeout.
///
/// Timeout rule (docs/design.md §4): measured only once the task has left INIT; any progress (a
/// state change, a switch, a progress call that was not idle) restarts it.
#[derive(Debug)]
pub struct TaskCore {
    rec: TaskRecord,
    shared: Arc<StatusRecord>,
    kind: TaskKind,
    /// No-progress limit in ns (`None`: no limit).
    timeout_ns: Option<u64>,
    /// Clock value of the last progress, valid once the task has left INIT.
    last_progress_ns: u64,
    /// `true` once "polled after DONE" has been logged.
    done_poll_logged: bool,
    /// "Still waiting" warnings logged since the last progress.
    warned: u32,
    /// "Still waiting" warnings logged in this execution (for tests and dumps).
    warnings: u32,
}

impl TaskCore {
    /// A task in INIT with status success.
    pub fn new(
        kind: TaskKind,
        task_id: u32,
        comm_id: u32,
        streams: u32,
        timeout_ns: Option<u64>,
    ) -> Self {
        let rec = TaskRecord {
            task_id,
            slot: u32::MAX,
            comm_id,
            streams,
            progress_status: NrtStatus::Success.code(),
            run_state: RunState::Init as u32,
        };
        Self {
            rec,
            shared: Arc::new(StatusRecord::new(rec)),
            kind,
            timeout_ns,
            last_progress_ns: 0,
            done_poll_logged: false,
            warned: 0,
            warnings: 0,
        }
    }

    /// The current state.
    pub fn state(&self) -> RunState {
        RunState::from_u32(self.rec.run_state).unwrap_or(RunState::Done)
    }

    /// The current record.
    pub fn record(&self) -> TaskRecord {
        self.rec
    }

    /// The task's kind.
    pub fn kind(&self) -> TaskKind {
        self.kind
    }

    /// The live status record.
    pub fn status_record(&self) -> Arc<StatusRecord> {
        self.shared.clone()
    }

    /// Sets the slot (before submission).
    pub fn bind_slot(&mut self, slot: u32) {
        self.rec.slot = slot;
        self.shared.publish(&self.rec);
    }

    /// The one transition function of the run-state machine ([`RunState`], through
    /// [`state::check`]): traces `state=A=>B` and publishes the record (status first,
    /// `run_state` last with release). A transition to the current state (not DONE) only
    /// updates the status. An edge the diagram does not have is a bug in the task: refused
    /// (a panic in a debug build); in a release build a task that is not DONE then ends DONE
    /// with `NRT_FAILURE` (edge 7), so the failure reaches its owner instead of a wrong state.
    pub fn transition(&mut self, to: RunState, status: NrtStatus) {
        let from = self.state();
        if from == to && from != RunState::Done {
            self.take_edge(to, status);
            return;
        }
        let who = TaskName(self);
        let ids = |r: &mut trace::Record| {
            r.comm = self.rec.comm_id;
            r.op = self.rec.task_id;
            r.block = self.rec.slot;
            r.entry = self.kind as u32;
        };
        if state::check_traced(from, to, &who, ids).is_ok() && to != RunState::Init {
            self.take_edge(to, status);
        } else if from != RunState::Done {
            self.take_edge(RunState::Done, NrtStatus::Failure);
        }
    }

    /// The body of every edge, [`TaskCore::transition`]'s and [`TaskCore::rearm`]'s (edge 10),
    /// once checked: sets state and status, publishes when they changed.
    fn take_edge(&mut self, to: RunState, status: NrtStatus) {
        let from = self.state();
        let changed = from != to || self.rec.progress_status != status.code();
        self.rec.run_state = to as u32;
        self.rec.progress_status = status.code();
        if changed {
            self.shared.publish(&self.rec);
        }
    }

    /// Takes a DONE task back to INIT for a new execution: edge 10 of [`RunState`]
    /// ("resubmit"), through the same edge body as [`TaskCore::transition`] (logs `state=A=>B`
    /// at trace level, publishes the record). The record gets `task_id` and `streams`, slot
    /// `u32::MAX` and status success; the shared [`StatusRecord`] is reset in place (same
    /// `Arc`, so a consumer that kept it sees the new execution); the timeout clock and the
    /// "polled after DONE" note are reset. Allocates nothing.
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] when the state is not DONE (nothing changes).
    pub fn rearm(&mut self, task_id: u32, streams: u32) -> Result<(), NrtStatus> {
        let from = self.state();
        if from != RunState::Done {
            log::error!(
                "{:?} task={} slot={}: rearm refused in state {:?} (only a DONE task is re-armed)",
                self.kind,
                self.rec.task_id,
                self.rec.slot,
                from
            );
            return Err(NrtStatus::Invalid);
        }
        log::trace!(
            "{:?} task={} slot={}: resubmit as task {task_id}",
            self.kind,
            self.rec.task_id,
            self.rec.slot
        );
        self.rec.task_id = task_id;
        self.rec.slot = u32::MAX;
        self.rec.streams = streams;
        self.last_progress_ns = 0;
        self.done_poll_logged = false;
        self.warned = 0;
        self.warnings = 0;
        // DONE => INIT always changes the state, so the new record is published (run_state
        // last, with release).
        let _ = state::check_traced(from, RunState::Init, &TaskName(self), |r| {
            r.comm = self.rec.comm_id;
            r.op = task_id;
            r.entry = self.kind as u32;
        });
        self.take_edge(RunState::Init, NrtStatus::Success);
        Ok(())
    }

    /// Sets the record's stream mask (a task whose blocks were replaced while DONE or before
    /// submission) and publishes it.
    pub fn set_streams(&mut self, streams: u32) {
        self.rec.streams = streams;
        self.shared.publish(&self.rec);
    }

    /// Marks progress at `now_ns` (restarts the timeout and the "still waiting" warnings).
    pub fn note_progress(&mut self, now_ns: u64) {
        self.last_progress_ns = now_ns;
        self.warned = 0;
    }

    /// `true` when the no-progress limit has passed at `now_ns`.
    pub fn timed_out(&self, now_ns: u64) -> bool {
        match self.timeout_ns {
            Some(t) => self.waited_ns(now_ns) > t,
            None => false,
        }
    }

    /// The no-progress limit in ns (`None`: none).
    pub fn timeout_ns(&self) -> Option<u64> {
        self.timeout_ns
    }

    /// Nanoseconds without progress at `now_ns` (the cumulative wait; meaningful once the task
    /// has left INIT).
    pub fn waited_ns(&self, now_ns: u64) -> u64 {
        now_ns.saturating_sub(self.last_progress_ns)
    }

    /// `Some(waited_ns)` when the wait has just passed another multiple of
    /// [`WAIT_WARN_INTERVAL_NS`] since the last progress: the caller logs the warning, with the
    /// task's position. At most one warning per interval, however often the task is stepped.
    pub fn wait_warning_due(&mut self, now_ns: u64) -> Option<u64> {
        let waited = self.waited_ns(now_ns);
        let due = u64::from(self.warned).saturating_add(1) * WAIT_WARN_INTERVAL_NS;
        if waited < due {
            return None;
        }
        // Several intervals may have passed between two steps: one warning, counted up to now.
        self.warned = u32::try_from(waited / WAIT_WARN_INTERVAL_NS).unwrap_or(u32::MAX);
        self.warnings = self.warnings.saturating_add(1);
        Some(waited)
    }

    /// "Still waiting" warnings logged in this execution.
    pub fn wait_warnings(&self) -> u32 {
        self.warnings
    }

    /// `true` when the next step will end the task `NRT_TIMEOUT` for want of progress at
    /// `now_ns` (it has left INIT, is not DONE, and its limit has passed), so the queue can dump
    /// its state while the task is still live.
    pub fn timeout_due(&self, now_ns: u64) -> bool {
        !matches!(self.state(), RunState::Init | RunState::Done) && self.timed_out(now_ns)
    }

    /// Writes the task's dump fields, without a newline:
    /// `kind=network state=Progressing status=NRT_SUCCESS comm=7 streams=0x3 waited_ms=12
    /// limit_ms=2000 warnings=0` (`waited_ms=none` in INIT and DONE, `limit_ms=none` without a
    /// limit).
    ///
    /// # Errors
    /// Whatever `out` returns.
    pub fn dump_fields(&self, now_ns: u64, out: &mut dyn fmt::Write) -> fmt::Result {
        use crate::base::dump_lines::Opt;
        let state = self.state();
        let waited = (!matches!(state, RunState::Init | RunState::Done))
            .then(|| self.waited_ns(now_ns) / 1_000_000);
        write!(
            out,
            "kind={} state={state:?} status={} comm={} streams={:#x} waited_ms={} limit_ms={} warnings={}",
            match self.kind {
                TaskKind::Network => "network",
                TaskKind::Barrier => "barrier",
            },
            self.record().status().as_str(),
            self.rec.comm_id,
            self.rec.streams,
            Opt(waited),
            Opt(self.timeout_ns.map(|t| t / 1_000_000)),
            self.warnings
        )
    }

    /// Logs (once) that a DONE task was stepped again.
    ///
    /// Seed: "Task shouldn't be polled after it reached a done state" (nrt:0x7f81b8), §3.
    pub fn polled_after_done(&mut self) {
        if !self.done_poll_logged {
            self.done_poll_logged = true;
            log::warn!(
                "{:?} task={} slot={}: task polled after it reached a done state",
                self.kind,
                self.rec.task_id,
                self.rec.slot
            );
        }
    }
}

/// A task as its transitions name it: `<kind> task=<id> slot=<slot> comm=<comm> status=<status>`.
struct TaskName<'a>(&'a TaskCore);

impl fmt::Display for TaskName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.0;
        write!(
            f,
            "{:?} task={} slot={} comm={}",
            t.kind, t.rec.task_id, t.rec.slot, t.rec.comm_id
        )
    }
}
