//! The barrier task: a host-side barrier among the ranks of a comm, gated on the device
//! trigger, after which the leader increments every local rank's barrier-done semaphore.
//! It never touches the progress half.
//!
//! Its states and numbered edges are the one run-state diagram at
//! [`RunState`]:
//! edges 1 (skip), 2 (trigger already seen at the first step: write 0, arrive), 3 (trigger
//! not written yet: wait for it, the timeout clock starts) and 7 (a channel error) are taken by
//! `step_init`; 4 (trigger seen: write 0, arrive), 7 and 8 (no trigger within the limit) by
//! `step_trigger`; 5 (not everyone arrived: IDLE), 6 (everyone arrived: the leader increments
//! every barrier-done semaphore), 7 and 8 (no progress past the timeout) by `step_wait`; 9 by
//! `close` and by an abort request seen at a step ([`BarrierTask::with_abort`]); 10 (DONE →
//! INIT, resubmit) by [`BarrierTask::rearm_with`], called by the task's owner.
//!
//! Every wait is bounded (docs/design.md §9, "Bounded waits"): the trigger wait in
//! WAITING_DEVICE_TRIGGER ends `NRT_TIMEOUT` after the task's limit with a log line naming the
//! task and its trigger words (their addresses and values), as the network task's trigger wait
//! does; the wait for the other ranks likewise. While it waits the task logs a warning every
//! [`WAIT_WARN_INTERVAL_NS`](super::WAIT_WARN_INTERVAL_NS) of the queue's clock with the
//! cumulative wait and where it waits (the trigger words, or the barrier generation).
//! (Deviation from the seed, whose barrier waits for its trigger in INIT, untimed.)
//!
//! Seed: `enc_barrier_proxy_task::step` (nrt:0x1ce830), `inc_leader_sps_barrier_done_semas`
//! (nrt:0x1ce7b0), §3 ("Considerations") and §5; docs/design.md §4.

pub mod central;

use alloc::boxed::Box;
use alloc::vec::Vec;

use super::{ProxyTask, Step, StepEnv, TaskCore, TaskKind};
use crate::base::abort::AbortHandle;
use crate::base::bell::BellSlot;
use crate::base::host_word::HostWord;
use crate::base::status::NrtStatus;
use crate::base::sync::{Arc, AtomicU32, CachePadded, Ordering};
use crate::driver::record::RunState;
use crate::driver::trigger::TriggerWords;

/// A barrier's generation ticket: what [`BarrierChannel::arrive`] hands out and
/// [`BarrierChannel::poll`] checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarrierTicket(pub u32);

/// The channel a barrier runs over, among the ranks of one comm. Non-blocking: `arrive` once,
/// then `poll` on every step until it answers `true`.
///
/// One endpoint per (comm, rank); successive barriers of the endpoint are successive
/// generations. Implementations: [`SharedMemBarrier`] (ranks in one process); the libfabric
/// platform adds one over the bootstrap connections between processes.
///
/// Seed: `enc_barrier` send/recv, §3 ("Considerations").
pub trait BarrierChannel: Send {
    /// Announces this rank's arrival at its next barrier generation.
    ///
    /// # Errors
    /// A channel failure (the task ends with it).
    fn arrive(&mut self) -> Result<BarrierTicket, NrtStatus>;

    /// `Ok(true)` once every rank has arrived at `ticket`'s generation (or later).
    ///
    /// # Errors
    /// A channel failure (the task ends with it).
    fn poll(&mut self, ticket: BarrierTicket) -> Result<bool, NrtStatus>;

    /// Called by the leader after the barrier passed and it raised the done semaphores: a
    /// channel whose ranks' devices may sleep rings them. No default: a wrapper must forward
    /// it (a silent no-op there would leave devices asleep until their nap ends).
    fn passed(&mut self);
}

/// An in-process barrier among `nranks` ranks over shared memory.
///
/// Each rank has its own arrival word (on its own cache line) holding the generation it last
/// arrived at; a rank's barrier `g` has passed when every word is at `g` or later (wrapping
/// compare). This is a generation-counting barrier rather than a sense-reversing counter: it
/// needs no reset step and tolerates a rank that arrives at generation `g + 1` before a slower
/// rank has polled `g` (its `g` stays passed).
///
/// `Clone` shares the barrier. Make one endpoint per rank with
/// [`SharedMemBarrier::endpoint`].
#[derive(Clone, Debug)]
pub struct SharedMemBarrier {
    inner: Arc<SharedInner>,
}

#[derive(Debug)]
struct SharedInner {
    /// Per rank: the last generation it arrived at (0 = none yet). Written by that rank's
    /// worker with release, read by every rank's worker with acquire.
    arrived: Box<[CachePadded<AtomicU32>]>,
    /// Per rank: rung when another rank arrives (wire the rank's queue driver).
    arrival_bells: Box<[BellSlot]>,
    /// Per rank: rung when the leader passed (wire the rank's device, which waits for its
    /// done semaphore).
    pass_bells: Box<[BellSlot]>,
}

impl SharedMemBarrier {
    /// A barrier among `nranks` ranks.
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] when `nranks` is 0.
    pub fn new(nranks: u32) -> Result<Self, NrtStatus> {
        if nranks == 0 {
            return Err(NrtStatus::Invalid);
        }
        let arrived: Vec<CachePadded<AtomicU32>> = (0..nranks)
            .map(|_| CachePadded::new(AtomicU32::new(0)))
            .collect();
        let bells = || (0..nranks).map(|_| BellSlot::new()).collect();
        Ok(Self {
            inner: Arc::new(SharedInner {
                arrived: arrived.into_boxed_slice(),
                arrival_bells: bells(),
                pass_bells: bells(),
            }),
        })
    }

    /// Rank `rank`'s arrival bell (`None` out of range): rung whenever another rank arrives.
    /// Wire the bell of the thread that drives the rank's barrier tasks, so it may sleep while
    /// it waits for the others.
    pub fn arrival_bell(&self, rank: u32) -> Option<&BellSlot> {
        self.inner.arrival_bells.get(rank as usize)
    }

    /// Rank `rank`'s pass bell (`None` out of range): rung when the leader has raised the done
    /// semaphores. Wire the bell of the rank's device, which waits for its done semaphore.
    pub fn pass_bell(&self, rank: u32) -> Option<&BellSlot> {
        self.inner.pass_bells.get(rank as usize)
    }

    /// Number of ranks.
    pub fn nranks(&self) -> u32 {
        self.inner.arrived.len() as u32
    }

    /// The endpoint of `rank` (make exactly one per rank and reuse it for every barrier task of
    /// that rank: it counts the generations).
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] when `rank >= nranks`.
    pub fn endpoint(&self, rank: u32) -> Result<SharedMemBarrierEndpoint, NrtStatus> {
        if rank >= self.nranks() {
            return Err(NrtStatus::Invalid);
        }
        Ok(SharedMemBarrierEndpoint {
            inner: self.inner.clone(),
            rank,
            generation: 0,
        })
    }
}

/// One rank's end of a [`SharedMemBarrier`].
#[derive(Debug)]
pub struct SharedMemBarrierEndpoint {
    inner: Arc<SharedInner>,
    rank: u32,
    /// The generation this rank last arrived at.
    generation: u32,
}

impl BarrierChannel for SharedMemBarrierEndpoint {
    fn arrive(&mut self) -> Result<BarrierTicket, NrtStatus> {
        self.generation = self.generation.wrapping_add(1);
        // Release: everything this rank did before the barrier happens-before the acquire load
        // of a rank that sees it arrived.
        self.inner.arrived[self.rank as usize].store(self.generation, Ordering::Release);
        for (r, b) in self.inner.arrival_bells.iter().enumerate() {
            if r != self.rank as usize {
                b.ring();
            }
        }
        Ok(BarrierTicket(self.generation))
    }

    fn poll(&mut self, ticket: BarrierTicket) -> Result<bool, NrtStatus> {
        Ok(self.inner.arrived.iter().all(|a| {
            // Acquire: pairs with the arriving rank's release store.
            a.load(Ordering::Acquire).wrapping_sub(ticket.0) as i32 >= 0
        }))
    }

    fn passed(&mut self) {
        for b in self.inner.pass_bells.iter() {
            b.ring();
        }
    }
}

/// Everything a barrier task is built from.
pub struct BarrierTaskSpec {
    /// The producer's id for the task.
    pub task_id: u32,
    /// The comm id (goes into the record).
    pub comm_id: u32,
    /// This rank's endpoint of the comm's barrier channel.
    pub channel: Box<dyn BarrierChannel>,
    /// Trigger words that gate INIT (armed by the producer).
    pub triggers: TriggerWords,
    /// `true` on the leader: the lowest rank of the comm in this process.
    pub leader: bool,
    /// The leader's job: the barrier-done semaphore of every rank of the comm in this process,
    /// each incremented by 1 when the barrier passes (ignored on a non-leader).
    pub done_semaphores: Vec<HostWord>,
    /// Skip: INIT goes straight to DONE with success.
    pub skip: bool,
    /// No-progress limit in nanoseconds (`None`: none), from the task's first step: the wait
    /// for the device trigger (WAITING_DEVICE_TRIGGER) and the wait for the other ranks each
    /// end `NRT_TIMEOUT` past it.
    pub timeout_ns: Option<u64>,
}

/// A barrier task (see the module docs for its state machine).
///
/// Seed: `enc_barrier_proxy_task`, §3.
pub struct BarrierTask {
    core: TaskCore,
    channel: Box<dyn BarrierChannel>,
    triggers: TriggerWords,
    leader: bool,
    done_semaphores: Vec<HostWord>,
    skip: bool,
    ticket: Option<BarrierTicket>,
    /// The comm's abort request, read at every step (`None`: the task is not abortable).
    abort: Option<AbortHandle>,
}

impl core::fmt::Debug for BarrierTask {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BarrierTask")
            .field("record", &self.core.record())
            .field("leader", &self.leader)
            .field("ticket", &self.ticket)
            .finish()
    }
}

impl BarrierTask {
    /// Builds a task in INIT from `spec`.
    pub fn new(spec: BarrierTaskSpec) -> Self {
        Self {
            core: TaskCore::new(
                TaskKind::Barrier,
                spec.task_id,
                spec.comm_id,
                0,
                spec.timeout_ns,
            ),
            channel: spec.channel,
            triggers: spec.triggers,
            leader: spec.leader,
            done_semaphores: spec.done_semaphores,
            skip: spec.skip,
            ticket: None,
            abort: None,
        }
    }

    /// The same task, ending DONE with the abort's status (edge 9, `NRT_CLOSED` for a plain
    /// abort) at its first step after `abort` is requested: the comm's
    /// [`AbortHandle`] (`Comm::abort_handle`), or any handle the producer shares with the comm's
    /// other tasks. Kept across [`BarrierTask::rearm_with`].
    pub fn with_abort(mut self, abort: AbortHandle) -> Self {
        self.abort = Some(abort);
        self
    }

    /// The current run state.
    pub fn state(&self) -> RunState {
        self.core.state()
    }

    /// Re-arms this DONE task in place for a new execution (edge 10, "resubmit"; see
    /// [`ProxyTask::rearm`]): new `task_id`, the given trigger words (`None`: keep), the same
    /// channel endpoint (its generation count goes on, so the next barrier is the next
    /// generation), leader flag and barrier-done semaphores. Allocates nothing.
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] when the task is not DONE (nothing changes).
    pub fn rearm_with(
        &mut self,
        task_id: u32,
        triggers: Option<TriggerWords>,
    ) -> Result<(), NrtStatus> {
        self.core.rearm(task_id, 0)?;
        if let Some(t) = triggers {
            self.triggers = t;
        }
        self.ticket = None;
        Ok(())
    }

    /// Replaces the leader's barrier-done semaphores by a copy of `words`, in the existing
    /// vector (`clear` + `extend_from_slice`: no allocation when its capacity suffices). For a
    /// task that is DONE or not yet started (INIT).
    ///
    /// # Errors
    /// [`NrtStatus::Invalid`] in any other state (nothing changes).
    pub fn replace_done_semaphores(&mut self, words: &[HostWord]) -> Result<(), NrtStatus> {
        let state = self.core.state();
        if !(state == RunState::Done || (state == RunState::Init && self.ticket.is_none())) {
            log::error!(
                "barrier task {}: replace_done_semaphores refused in state {state:?}",
                self.core.record().task_id
            );
            return Err(NrtStatus::Invalid);
        }
        self.done_semaphores.clear();
        self.done_semaphores.extend_from_slice(words);
        Ok(())
    }

    /// INIT: edges 1, 2, 3 (and 7 when the arrival fails).
    fn step_init(&mut self, env: &StepEnv) -> Step {
        if self.skip {
            self.core.transition(RunState::Done, NrtStatus::Success);
            return Step::Done;
        }
        if self.triggers.can_start() {
            return self.arrive(env, RunState::Init);
        }
        // Edge 3: wait for the device, timed from now (docs/design.md §9, "Bounded waits").
        self.core.note_progress(env.now_ns);
        self.core
            .transition(RunState::WaitingDeviceTrigger, NrtStatus::Success);
        Step::Progressed
    }

    /// WAITING_DEVICE_TRIGGER: edge 4 (the trigger came), 8 (not within the limit).
    fn step_trigger(&mut self, env: &StepEnv) -> Step {
        if self.triggers.can_start() {
            return self.arrive(env, RunState::WaitingDeviceTrigger);
        }
        let rec = self.core.record();
        if self.core.timed_out(env.now_ns) {
            log::error!(
                "barrier task {} comm {}: no device trigger within the limit of {} ms \
                 (waited {} ms); trigger words {}",
                rec.task_id,
                rec.comm_id,
                self.core.timeout_ns().unwrap_or(0) / 1_000_000,
                self.core.waited_ns(env.now_ns) / 1_000_000,
                self.triggers.describe()
            );
            self.core.transition(RunState::Done, NrtStatus::Timeout);
            return Step::Done;
        }
        if let Some(waited) = self.core.wait_warning_due(env.now_ns) {
            log::warn!(
                "barrier task {} comm {}: still waiting for the device trigger after {} ms \
                 (state WAITING_DEVICE_TRIGGER, limit {}); trigger words {}",
                rec.task_id,
                rec.comm_id,
                waited / 1_000_000,
                LimitMs(self.core.timeout_ns()),
                self.triggers.describe()
            );
        }
        Step::Idle
    }

    /// The trigger is seen (from `from`, INIT or WAITING_DEVICE_TRIGGER): consume it, arrive
    /// at the channel, PROGRESSING (edge 2 or 4); DONE with the channel's error (edge 7).
    fn arrive(&mut self, env: &StepEnv, from: RunState) -> Step {
        self.triggers.consume();
        // The barrier channel may wait on a socket: records after it read the clock.
        env.stamp.clear();
        match self.channel.arrive() {
            Ok(t) => self.ticket = Some(t),
            Err(e) => {
                log::error!(
                    "barrier task {} comm {}: arrive failed (in {from:?}): {}",
                    self.core.record().task_id,
                    self.core.record().comm_id,
                    e
                );
                self.core.transition(RunState::Done, e);
                return Step::Done;
            }
        }
        self.core.note_progress(env.now_ns);
        self.core
            .transition(RunState::Progressing, NrtStatus::Success);
        Step::Progressed
    }

    fn step_wait(&mut self, env: &StepEnv) -> Step {
        let Some(ticket) = self.ticket else {
            // Unreachable by construction (PROGRESSING is entered only after arrive).
            self.core.transition(RunState::Done, NrtStatus::Failure);
            return Step::Done;
        };
        // As in `arrive`: a call out of the tick's bookkeeping.
        env.stamp.clear();
        match self.channel.poll(ticket) {
            Ok(true) => {
                if self.leader {
                    for s in &self.done_semaphores {
                        s.fetch_add(1);
                    }
                    self.channel.passed();
                }
                self.core.transition(RunState::Done, NrtStatus::Success);
                Step::Done
            }
            Ok(false) => {
                let rec = self.core.record();
                if self.core.timed_out(env.now_ns) {
                    log::error!(
                        "barrier task {} comm {}: timed out waiting for the other ranks \
                         (generation {}, waited {} ms)",
                        rec.task_id,
                        rec.comm_id,
                        ticket.0,
                        self.core.waited_ns(env.now_ns) / 1_000_000
                    );
                    self.core.transition(RunState::Done, NrtStatus::Timeout);
                    return Step::Done;
                }
                if let Some(waited) = self.core.wait_warning_due(env.now_ns) {
                    log::warn!(
                        "barrier task {} comm {}: still waiting for the other ranks after {} ms \
                         (state {:?}, generation {}, limit {})",
                        rec.task_id,
                        rec.comm_id,
                        waited / 1_000_000,
                        self.core.state(),
                        ticket.0,
                        LimitMs(self.core.timeout_ns())
                    );
                }
                self.core.transition(RunState::Idle, NrtStatus::Success);
                Step::Idle
            }
            Err(e) => {
                log::error!(
                    "barrier task {} comm {}: poll failed: {}",
                    self.core.record().task_id,
                    self.core.record().comm_id,
                    e
                );
                self.core.transition(RunState::Done, e);
                Step::Done
            }
        }
    }
}

/// A no-progress limit for a log line: `N ms`, or `none`.
pub(super) struct LimitMs(pub(super) Option<u64>);

impl core::fmt::Display for LimitMs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(ns) => write!(f, "{} ms", ns / 1_000_000),
            None => f.write_str("none"),
        }
    }
}

impl ProxyTask for BarrierTask {
    /// Seed: `enc_barrier_proxy_task::step` (nrt:0x1ce830), §3.
    fn step(&mut self, env: &StepEnv) -> Step {
        let state = self.core.state();
        if state != RunState::Done {
            if let Some(status) = self.abort.as_ref().and_then(AbortHandle::aborted) {
                // Edge 9: the comm was aborted (from any thread); applied at this step.
                log::warn!(
                    "barrier task {} comm {}: comm aborted; ends {status} (was {state:?})",
                    self.core.record().task_id,
                    self.core.record().comm_id
                );
                self.close(status);
                return Step::Done;
            }
        }
        match state {
            RunState::Init => self.step_init(env),
            RunState::WaitingDeviceTrigger => self.step_trigger(env),
            RunState::Progressing | RunState::Idle => self.step_wait(env),
            RunState::Closing => {
                // A barrier task never takes edge 11 (it has no streams to tear down); should
                // a record say CLOSING, the task ends with the status it carries.
                let status = self.core.record().status();
                self.core.transition(RunState::Done, status);
                Step::Done
            }
            RunState::Done => {
                self.core.polled_after_done();
                Step::Done
            }
        }
    }

    fn close(&mut self, status: NrtStatus) {
        if self.core.state() != RunState::Done {
            self.core.transition(RunState::Done, status);
        }
    }

    fn core(&self) -> &TaskCore {
        &self.core
    }

    fn core_mut(&mut self) -> &mut TaskCore {
        &mut self.core
    }

    fn rearm(&mut self, task_id: u32) -> Result<(), NrtStatus> {
        self.rearm_with(task_id, None)
    }

    fn comm_key(&self) -> Option<usize> {
        None
    }
}
