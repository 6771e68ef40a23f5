//! The objects behind the handles: a library [`Instance`], a [`Group`] of this process's ranks,
//! a comm's [`CommEntry`] (its proxy-queue membership, kept tasks, leftover records, errors),
//! the abort side table, and the deadlines the waiting calls use.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use proxy_bootstrap::SharedBootstrap;
use proxy_core::base::abort::AbortHandle;
use proxy_core::base::status::NrtStatus;
use proxy_core::base::time::{Clock, MonotonicClock};
use proxy_core::driver::queue::{DriveMode, ProxyQueue, TaskBox};
use proxy_core::driver::record::TaskRecord;
use proxy_core::driver::registry::Membership;
use proxy_core::driver::task::{BarrierChannel, BarrierTicket, SharedMemBarrier};
use proxy_core::driver::wake::Waiter;
use proxy_runtime::dump::DumpSignal;
use proxy_runtime::loader::{LoadedComm, LoadedMemGroup, ProgressLib};
use proxy_runtime::{Config, LinuxRegistry};

use crate::types::*;

/// A library instance: the loaded progress half, the resolved configuration, the registry.
pub(crate) struct Instance {
    pub(crate) lib: &'static ProgressLib,
    pub(crate) cfg: Config,
    /// The handler of `cfg.dump_signal` (dumps this registry); dropped (removed, its watcher
    /// joined) before the registry.
    pub(crate) _dump_signal: Option<DumpSignal>,
    /// Shared with the dump handler's watcher thread (which holds it only while it dumps).
    pub(crate) registry: Arc<LinuxRegistry>,
    /// `NEURON_RT_PROXY_IDLE=block`: an idle driver blocks on its comm's completion-queue
    /// descriptor (`idle.rs`).
    pub(crate) idle_block: bool,
}

/// A group of this process's ranks: the in-memory transport group of the progress half and the
/// in-process barrier.
pub(crate) struct Group {
    pub(crate) inst: Arc<Instance>,
    pub(crate) nranks: u32,
    pub(crate) mem: SendMemGroup,
    pub(crate) barrier: SharedMemBarrier,
    /// The bells of the group's comms (`bells.rs`).
    pub(crate) bells: Arc<crate::bells::GroupBells>,
}

/// A [`LoadedMemGroup`], movable between threads (its handle is only passed to the library,
/// which checks it; the library is loaded for the life of the process).
pub(crate) struct SendMemGroup(pub(crate) LoadedMemGroup<'static>);
// SAFETY: the group handle is an opaque integer the progress library looks up in its own
// thread-safe table; nothing dereferences it here.
unsafe impl Send for SendMemGroup {}

/// A barrier endpoint shared by a comm's successive barrier tasks (the endpoint counts
/// generations; each task takes its channel by value). One barrier task of a comm runs at a
/// time (tasks of a slot run in order), so the lock is never contended.
pub(crate) struct SharedChannel(pub(crate) Arc<Mutex<Box<dyn BarrierChannel>>>);

impl BarrierChannel for SharedChannel {
    fn arrive(&mut self) -> Result<BarrierTicket, NrtStatus> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .arrive()
    }

    fn poll(&mut self, ticket: BarrierTicket) -> Result<bool, NrtStatus> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .poll(ticket)
    }

    fn passed(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .passed();
    }
}

/// A comm of this library.
pub(crate) struct CommEntry {
    pub(crate) inst: Arc<Instance>,
    /// Declared before `comm`: a membership's tasks carry the comm's handle, so the slot is
    /// given back (tasks closed) before the comm is destroyed, also on an unplanned drop.
    pub(crate) member: Option<Membership>,
    pub(crate) comm: LoadedComm<'static>,
    pub(crate) rank: u32,
    /// Ranks of the comm.
    pub(crate) nranks: u32,
    pub(crate) global_rank: u32,
    pub(crate) comm_id: u32,
    /// This rank's barrier endpoint (`None`: no barrier channel).
    pub(crate) barrier: Option<Arc<Mutex<Box<dyn BarrierChannel>>>>,
    /// The driver's bootstrap between processes (kept for the barrier's life).
    pub(crate) _boot: Option<SharedBootstrap>,
    /// `true` on the rank that increments the barrier-done semaphores.
    pub(crate) leader: bool,
    /// The driver's abort word, carried by every task of the comm.
    pub(crate) abort: AbortHandle,
    /// Tasks submitted with `NRT_PROXY_TASK_KEEP` that came back, awaiting a resubmit.
    pub(crate) kept: Vec<TaskBox>,
    /// Records collected by a leave, handed out by the next pops.
    pub(crate) leftover: VecDeque<TaskRecord>,
    /// The first failure seen in a record (`Success`: none).
    pub(crate) async_error: NrtStatus,
    /// The most recent failure of a call on the comm or of a task record, with its cause.
    pub(crate) last_error: String,
    /// Set once `nrt_proxy_comm_join` succeeded (a second join is refused).
    pub(crate) joined_once: bool,
    /// A panic was caught inside a call on this comm: its state is unknown.
    pub(crate) poisoned: bool,
    /// The comm's bells (`bells.rs`): its queue while joined, its host device's thread.
    pub(crate) bells: Arc<crate::bells::CommBells>,
    /// The bells of the comm's group (`None`: a comm between processes).
    pub(crate) group_bells: Option<Arc<crate::bells::GroupBells>>,
    /// The comm's idle wait (`idle.rs`; `None`: no descriptor, or not asked for).
    pub(crate) idle: Option<Arc<crate::idle::GatedIdle>>,
}

/// The abort side table: what `nrt_proxy_comm_abort` reads, so an abort never waits for (or is
/// refused by) a call that holds the comm's slot BUSY. Entry: (comm handle, the driver's abort
/// word, the progress half's comm handle, its `nccom_comm_abort`).
pub(crate) type AbortEntry = (
    usize,
    AbortHandle,
    usize,
    Option<proxy_abi::NccomCommAbortFn>,
);
static ABORTS: Mutex<Vec<AbortEntry>> = Mutex::new(Vec::new());

pub(crate) fn aborts() -> MutexGuard<'static, Vec<AbortEntry>> {
    ABORTS.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
}

/// The deadline `timeout_ms` from now, on the waiters' clock.
pub(crate) fn deadline_after(timeout_ms: u64) -> u64 {
    MonotonicClock.now_ns().saturating_add(ms_to_ns(timeout_ms))
}

impl CommEntry {
    pub(crate) fn member(&mut self, what: &str) -> Result<&mut Membership, NrtStatus> {
        self.member.as_mut().ok_or_else(|| {
            log::error!(
                "{what}: comm {} rank {} is not joined to a proxy queue (never joined, or left)",
                self.comm_id,
                self.rank
            );
            NrtStatus::Closed
        })
    }

    pub(crate) fn waiter(&self) -> Waiter<'static> {
        proxy_runtime::worker::waiter(self.inst.cfg.spin)
    }

    /// Notes a record handed to the caller: a failure becomes the comm's last error (the most
    /// recent one) and, if it is the first, its async error (sticky, as NCCL's).
    pub(crate) fn note(&mut self, r: TaskRecord) -> NrtProxyTaskRecord {
        let s = r.status();
        if s != NrtStatus::Success {
            if self.async_error == NrtStatus::Success {
                self.async_error = s;
            }
            self.last_error = format!(
                "task {} of comm {} (rank {}) ended {s}",
                r.task_id, self.comm_id, self.rank
            );
        }
        r.into()
    }

    /// The next record a waiting call hands out: one a leave collected (`leftover` picks it),
    /// else the one `wait` waits for on the comm's slot (with the comm's waiter); noted.
    ///
    /// A wait on a worker-driven queue watches the worker's heartbeat
    /// ([`proxy_core::driver::queue::ProxyQueue::ticks`]): while a task is outstanding a healthy
    /// worker begins a tick at least once per nap, and one that began none for the whole of a
    /// wait that timed out (at least [`STUCK_AFTER`] and twice the instance's worker nap) is
    /// stuck inside a call (a device callback, a transport call), which no task's own time
    /// limit can end (they are checked in a tick). That timeout then writes the queue's state
    /// dump and is refused with that cause (the comm's last error, logged), instead of timing
    /// out like a wait for a slow peer.
    ///
    /// # Errors
    /// `NRT_QUEUE_EMPTY` when no task is outstanding; `NRT_CLOSED` when the comm is not joined;
    /// `wait`'s error (`NRT_TIMEOUT`: nothing lost).
    pub(crate) fn wait_record(
        &mut self,
        what: &str,
        leftover: impl FnOnce(&mut VecDeque<TaskRecord>) -> Option<TaskRecord>,
        wait: impl FnOnce(&mut Membership, &Waiter<'static>) -> Result<TaskRecord, NrtStatus>,
    ) -> Result<NrtProxyTaskRecord, NrtStatus> {
        if let Some(r) = leftover(&mut self.leftover) {
            return Ok(self.note(r));
        }
        let waiter = self.waiter();
        let nap = self.inst.cfg.worker_nap.unwrap_or_default();
        let m = self.member(what)?;
        if m.slot.outstanding() == 0 {
            return Err(NrtStatus::QueueEmpty);
        }
        // Caller mode drives in the wait itself: only a worker's heartbeat is watched (no
        // queue handle kept otherwise).
        let beat = (m.slot.queue().mode() == DriveMode::Thread).then(|| {
            let queue = m.slot.queue().clone();
            (queue.ticks(), Instant::now(), queue)
        });
        match wait(m, &waiter) {
            Ok(r) => Ok(self.note(r)),
            Err(NrtStatus::Timeout) => {
                if let Some((ticks, since, queue)) = beat {
                    let waited = since.elapsed();
                    if queue.ticks() == ticks && waited >= STUCK_AFTER.max(nap * 2) {
                        stuck(what, &queue, waited);
                    }
                }
                Err(NrtStatus::Timeout)
            }
            Err(e) => Err(e),
        }
    }

    /// Moves tasks that came back (`NRT_PROXY_TASK_KEEP`) from the slot to `kept`.
    pub(crate) fn collect_returned(&mut self) {
        if let Some(m) = self.member.as_mut() {
            while let Some(t) = m.slot.take_returned() {
                self.kept.push(t);
            }
        }
    }

    pub(crate) fn submit(
        &mut self,
        what: &str,
        task: TaskBox,
        keep: bool,
    ) -> Result<(), NrtStatus> {
        // Kept tasks that came back leave the slot's return ring (which bounds the tasks kept
        // out) for the comm's list.
        self.collect_returned();
        let m = self.member(what)?;
        let r = if keep {
            m.slot.submit_returning(task)
        } else {
            m.slot.submit(task)
        };
        r.map_err(|rej| {
            if rej.status == NrtStatus::QueueFull {
                log::debug!("{what}: queue full; the task stays with the caller");
            } else {
                log::error!("{what}: refused: {}", rej.status);
            }
            rej.status
        })
    }
}

/// The shortest wait without a tick of its worker that [`CommEntry::wait_record`] calls stuck
/// (longer than any nap of a healthy worker's idle wait: the network descriptor's is 1 ms).
pub(crate) const STUCK_AFTER: Duration = Duration::from_secs(1);

/// A wait on `queue` timed out after `waited` in which its worker began no tick: the queue's
/// dump and verdict ([`proxy_runtime::dump::stuck_driver`]), refused with that cause, which
/// becomes the comm's last error.
fn stuck(what: &str, queue: &ProxyQueue, waited: Duration) {
    proxy_abi::refusal::refuse(
        what,
        "stuck worker",
        format_args!(
            "timed out after {} ms: {} (a device callback, a transport call), not waiting \
             for a peer; the queue's state dump is in the log",
            waited.as_millis(),
            proxy_runtime::dump::stuck_driver(queue, waited)
        ),
    );
}
