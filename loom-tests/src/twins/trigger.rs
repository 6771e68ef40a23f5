//! Twin of `proxy_core::driver::trigger` (`HostWord`, `TriggerWords`) and of the network task that
//! gates on it (`proxy_core::driver::task::NetworkTask`), with the const parameter `BUG` planting one
//! bug (see [`bug`]; [`bug::NONE`] plants none and must pass the same model).
//!
//! The network task is a verbatim copy of the shipping one (generated from
//! `core/src/task/network.rs`: doc comments and the `Debug` impl dropped, the trigger words
//! swapped for the twin's); `TaskCore`, `SeamTable`, `BlockFifos`, `CommHandle` and the task
//! trait are the shipping ones. Keep it in step with the shipping code by hand.
#![allow(missing_docs, dead_code, clippy::all)]

use core::ptr::NonNull;

use proxy_core::driver::record::{RunState, StatusRecord, TaskRecord};
use proxy_core::driver::task::{
    BlockFifos, CommHandle, ProxyTask, Step, StepEnv, TaskCore, TaskKind,
};
use proxy_core::seam::SeamTable;
use proxy_core::status::NrtStatus;
use proxy_core::sync::{Arc, AtomicU32, Ordering};

use crate::harness::trigger::{GatedTask, BB};

/// The bugs a twin trigger can plant, one per instantiation.
pub mod bug {
    /// No bug: the copy as it ships.
    pub const NONE: u8 = 0;
    /// `TriggerWords::can_start` reads the words with `Relaxed` instead of `Acquire`: what the
    /// device wrote before its trigger is not visible to the task that starts on it.
    pub const CAN_START_RELAXED: u8 = 1;
    /// `TriggerWords::consume` writes 0 with `Relaxed` instead of `Release`: what the proxy did
    /// before consuming (filing its blocks) is not visible to the device that sees the 0.
    pub const CONSUME_RELAXED: u8 = 2;
}

pub const TRIGGER_ARMED: u32 = 0xFFFF_FFFF;
pub const MAX_TRIGGER_WORDS: usize = 4;
const MAX_STREAMS: u32 = 4;

/// Copy of `HostWord`, with the ordering of each access passed in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HostWord {
    ptr: NonNull<AtomicU32>,
}

// SAFETY: as the shipping HostWord: an address of a word only ever accessed atomically.
unsafe impl Send for HostWord {}
// SAFETY: as above.
unsafe impl Sync for HostWord {}

impl HostWord {
    /// # Safety
    /// `word` must outlive every use of the handle and of its copies.
    pub unsafe fn from_ref(word: &AtomicU32) -> Self {
        Self {
            ptr: NonNull::from(word),
        }
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: the constructor's contract.
        unsafe { self.ptr.as_ref() }
    }

    pub fn load(&self, order: Ordering) -> u32 {
        self.word().load(order)
    }

    pub fn store(&self, val: u32, order: Ordering) {
        self.word().store(val, order);
    }
}

/// Copy of `TriggerWords`.
#[derive(Clone, Copy)]
pub struct TriggerWords<const BUG: u8> {
    words: [Option<HostWord>; MAX_TRIGGER_WORDS],
    len: usize,
}

impl<const BUG: u8> TriggerWords<BUG> {
    pub fn new(words: &[HostWord]) -> Result<Self, NrtStatus> {
        if words.len() > MAX_TRIGGER_WORDS {
            return Err(NrtStatus::Invalid);
        }
        let mut t = Self {
            words: [None; MAX_TRIGGER_WORDS],
            len: 0,
        };
        for (dst, w) in t.words.iter_mut().zip(words) {
            *dst = Some(*w);
        }
        t.len = words.len();
        Ok(t)
    }

    pub fn iter(&self) -> impl Iterator<Item = HostWord> + '_ {
        self.words[..self.len].iter().flatten().copied()
    }

    pub fn arm(&self) {
        for w in self.iter() {
            w.store(TRIGGER_ARMED, Ordering::Release);
        }
    }

    pub fn can_start(&self) -> bool {
        // PLANTED BUG (CAN_START_RELAXED): Relaxed instead of Acquire.
        let order = if BUG == bug::CAN_START_RELAXED {
            Ordering::Relaxed
        } else {
            Ordering::Acquire
        };
        self.iter().all(|w| w.load(order) != TRIGGER_ARMED)
    }

    pub fn consume(&self) {
        // PLANTED BUG (CONSUME_RELAXED): Relaxed instead of Release.
        let order = if BUG == bug::CONSUME_RELAXED {
            Ordering::Relaxed
        } else {
            Ordering::Release
        };
        for w in self.iter() {
            w.store(0, order);
        }
    }
}

/// Copy of `NetworkTaskSpec` with the twin's trigger words.
pub struct NetworkTaskSpec<const BUG: u8> {
    pub task_id: u32,
    pub comm: CommHandle,
    pub comm_id: u32,
    pub seam: SeamTable,
    pub blocks: Vec<BlockFifos>,
    pub schedule: Option<Vec<u32>>,
    pub triggers: TriggerWords<BUG>,
    pub wait_for_device: bool,
    pub skip: bool,
    pub timeout_ns: Option<u64>,
}

// ---- copy of proxy_core::driver::task::network (generated; see the module docs) ----------------------

#[derive(Clone, Copy, Debug)]
struct StreamCursor {
    stream: u32,
    cursor: usize,
}

pub struct NetworkTask<const BUG: u8> {
    core: TaskCore,
    comm: CommHandle,
    seam: SeamTable,
    blocks: Vec<BlockFifos>,
    schedule: Vec<u32>,
    cursors: Vec<StreamCursor>,
    triggers: TriggerWords<BUG>,
    wait_for_device: bool,
    skip: bool,
    filed: bool,
    stopped: bool,
}

impl<const BUG: u8> NetworkTask<BUG> {
    pub fn new(spec: NetworkTaskSpec<BUG>) -> Result<Self, NrtStatus> {
        let mut streams_mask = 0u32;
        let mut order: Vec<u32> = Vec::new();
        for b in &spec.blocks {
            if b.stream >= MAX_STREAMS || b.bb == u32::MAX {
                log::error!(
                    "network task {}: invalid block (stream {}, bb {:#x})",
                    spec.task_id,
                    b.stream,
                    b.bb
                );
                return Err(NrtStatus::Invalid);
            }
            streams_mask |= 1 << b.stream;
            if !order.contains(&b.bb) {
                order.push(b.bb);
            }
        }
        let schedule = match spec.schedule {
            Some(s) => {
                if s.contains(&u32::MAX) {
                    return Err(NrtStatus::Invalid);
                }
                s
            }
            None => order,
        };
        let cursors = (0..MAX_STREAMS)
            .filter(|s| streams_mask & (1 << s) != 0)
            .map(|stream| StreamCursor { stream, cursor: 0 })
            .collect();
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
            cursors,
            triggers: spec.triggers,
            wait_for_device: spec.wait_for_device,
            skip: spec.skip,
            filed: false,
            stopped: false,
        })
    }

    pub fn state(&self) -> RunState {
        self.core.state()
    }

    pub fn schedule(&self) -> &[u32] {
        &self.schedule
    }

    fn finish(&mut self, status: NrtStatus) {
        let mut status = status;
        if self.filed && !self.stopped {
            self.stopped = true;
            for c in &self.cursors {
                // SAFETY: `comm` per CommHandle::new's contract; we are the worker thread.
                if let Err(e) = unsafe { self.seam.stop(self.comm.as_ptr(), c.stream) } {
                    log::error!(
                        "network task {} comm {}: stop(stream {}) failed: {}",
                        self.core.record().task_id,
                        self.core.record().comm_id,
                        c.stream,
                        e
                    );
                    if status == NrtStatus::Success {
                        status = e;
                    }
                }
            }
        }
        self.core.transition(RunState::Done, status);
    }

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
            // SAFETY: `comm` per CommHandle::new's contract; we are the worker thread.
            let r = unsafe {
                self.seam
                    .start(self.comm.as_ptr(), b.stream, b.bb, &b.ops, &b.src, &b.dst)
            };
            if let Err(e) = r {
                log::error!(
                    "network task {} comm {}: start(stream {}, bb {}) failed: {}",
                    self.core.record().task_id,
                    self.core.record().comm_id,
                    b.stream,
                    b.bb,
                    e
                );
                self.finish(e);
                return Step::Done;
            }
        }
        self.core.note_progress(env.now_ns);
        let next = if self.wait_for_device {
            RunState::WaitingDeviceTrigger
        } else {
            RunState::Progressing
        };
        self.core.transition(next, NrtStatus::Success);
        Step::Progressed
    }

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
                "network task {} comm {}: timed out waiting for the device trigger",
                self.core.record().task_id,
                self.core.record().comm_id
            );
            self.finish(NrtStatus::Timeout);
            return Step::Done;
        }
        Step::Idle
    }

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
            // SAFETY: `comm` per CommHandle::new's contract; we are the worker thread.
            let r = unsafe {
                self.seam
                    .progress(self.comm.as_ptr(), c.stream, bb, &mut idle, &mut done)
            };
            if let Err(e) = r {
                log::error!(
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
            self.finish(e);
            return Step::Done;
        }
        if self.cursors.iter().all(|c| c.cursor >= self.schedule.len()) {
            self.finish(NrtStatus::Success);
            return Step::Done;
        }
        let progressed = switched || !all_idle;
        if progressed {
            self.core.note_progress(env.now_ns);
        } else if self.core.timed_out(env.now_ns) {
            log::error!(
                "network task {} comm {}: no progress within the timeout",
                self.core.record().task_id,
                self.core.record().comm_id
            );
            self.finish(NrtStatus::Timeout);
            return Step::Done;
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

impl<const BUG: u8> ProxyTask for NetworkTask<BUG> {
    fn step(&mut self, env: &StepEnv) -> Step {
        match self.core.state() {
            RunState::Init => self.step_init(env),
            RunState::WaitingDeviceTrigger => self.step_waiting(env),
            RunState::Progressing | RunState::Idle => self.step_progress(env),
            RunState::Done => {
                self.core.polled_after_done();
                Step::Done
            }
        }
    }

    fn close(&mut self, status: NrtStatus) {
        if self.core.state() != RunState::Done {
            self.finish(status);
        }
    }

    fn record(&self) -> TaskRecord {
        self.core.record()
    }

    fn status_record(&self) -> Arc<StatusRecord> {
        self.core.status_record()
    }

    fn bind_slot(&mut self, slot: u32) {
        self.core.bind_slot(slot);
    }

    fn comm_key(&self) -> Option<usize> {
        Some(self.comm.as_ptr() as usize)
    }

    fn kind(&self) -> TaskKind {
        TaskKind::Network
    }
}

// ---- the twin as the model sees it ------------------------------------------------------------

/// The twin network task over the twin trigger words, with bug `BUG` planted.
pub struct TwinGated<const BUG: u8> {
    // Declared first, so dropped before the word its trigger handle points at.
    task: NetworkTask<BUG>,
    triggers: TriggerWords<BUG>,
    _word: Arc<AtomicU32>,
}

impl<const BUG: u8> GatedTask for TwinGated<BUG> {
    fn new(comm: CommHandle, seam: SeamTable, word: Arc<AtomicU32>) -> Self {
        // SAFETY: `word` is kept alive in `_word` for as long as the task lives.
        let hw = unsafe { HostWord::from_ref(&word) };
        let triggers = TriggerWords::new(&[hw]).expect("one word");
        let task = NetworkTask::new(NetworkTaskSpec {
            task_id: 1,
            comm,
            comm_id: 3,
            seam,
            blocks: vec![BlockFifos {
                stream: 0,
                bb: BB,
                ..Default::default()
            }],
            schedule: None,
            triggers,
            wait_for_device: true,
            skip: false,
            timeout_ns: None,
        })
        .expect("valid spec");
        Self {
            task,
            triggers,
            _word: word,
        }
    }
    fn arm(&self) {
        self.triggers.arm();
    }
    fn step(&mut self, env: &StepEnv) -> Step {
        self.task.step(env)
    }
    fn record(&self) -> TaskRecord {
        self.task.record()
    }
}
