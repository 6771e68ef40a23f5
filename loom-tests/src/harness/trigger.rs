//! Model 5: the device trigger word against the network task's gate
//! (INIT → WAITING_DEVICE_TRIGGER → PROGRESSING).
//!
//! The network task runs over a scripted progress half: a [`SeamTable`] of `extern "C"`
//! functions whose comm handle points at a [`ModelComm`]. `start` (the proxy filing its block,
//! before it consumes the trigger) writes [`ModelComm::filed`]; `progress` (the task has
//! started) reads [`ModelComm::payload`], which the device wrote before its trigger. Both are
//! loom-tracked cells, so a missing acquire/release pair on the trigger word is reported as a
//! causality violation.
//!
//! A panic must not unwind out of an `extern "C"` function (the process would abort, and with it
//! every model of the binary), so each scripted function runs its body under `catch_unwind`,
//! stashes a panic (a failed assertion, or loom's report of a race) in the comm and answers a
//! failure status; the model re-raises it right after the task's step returns
//! ([`ModelComm::rethrow`]).

use core::cell::Cell;
use core::ffi::{c_int, c_void};
use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use proxy_core::base::desc::{NetDestAddr, NetOpInfo, NetSrcAddr};
use proxy_core::base::host_word::HostWord;
use proxy_core::base::status::NrtStatus;
use proxy_core::base::sync::{Arc, AtomicU32, UnsafeCell};
use proxy_core::driver::record::RunState;
use proxy_core::driver::task::{
    BlockFifos, CommHandle, NetworkTask, NetworkTaskSpec, ProxyTask, Step, StepEnv,
};
use proxy_core::driver::trigger::TriggerWords;
use proxy_core::seam::SeamTable;

use super::driver::SPIN_BOUND;
use super::thread;

/// What the device writes before its trigger (read by the started task).
pub const PAYLOAD: u32 = 42;
/// What the proxy's `start` writes before it consumes the trigger (read by the device once it
/// sees the trigger consumed).
pub const FILED: u32 = 7;
/// The one block the model task files and runs.
pub const BB: u32 = 1;

/// The scripted progress half's comm: what the seam functions see through the comm handle.
pub struct ModelComm {
    /// Written by the device before it writes the trigger word; read by the first `progress`
    /// call.
    pub payload: UnsafeCell<u32>,
    /// Written by `start`; read by the device after it reads the trigger word consumed (0).
    pub filed: UnsafeCell<u32>,
    starts: Cell<u32>,
    progresses: Cell<u32>,
    stops: Cell<u32>,
    panic: std::sync::Mutex<Option<Box<dyn Any + Send>>>,
}

// SAFETY: the `Cell` counters are touched only by the seam functions, i.e. by the one thread
// that steps the task (the `CommHandle` contract); `payload` and `filed` are handed between the
// device thread and that thread by the trigger protocol under test (loom reports any overlap as
// a causality violation); `panic` is a mutex.
unsafe impl Sync for ModelComm {}
// SAFETY: as above; every field may move between threads.
unsafe impl Send for ModelComm {}

impl Default for ModelComm {
    fn default() -> Self {
        Self {
            payload: UnsafeCell::new(0),
            filed: UnsafeCell::new(0),
            starts: Cell::new(0),
            progresses: Cell::new(0),
            stops: Cell::new(0),
            panic: std::sync::Mutex::new(None),
        }
    }
}

impl ModelComm {
    /// The comm handle of this comm.
    pub fn handle(&self) -> CommHandle {
        // SAFETY: the model keeps the comm alive (an Arc) until the task is dropped, and only
        // the thread that steps the task calls the seam.
        unsafe { CommHandle::new(self as *const Self as *mut c_void) }.expect("non-null")
    }

    /// `(start, progress, stop)` calls so far.
    pub fn counts(&self) -> (u32, u32, u32) {
        (self.starts.get(), self.progresses.get(), self.stops.get())
    }

    /// Re-raises a panic a seam function caught (call after each step).
    pub fn rethrow(&self) {
        if let Some(p) = self.panic.lock().unwrap().take() {
            resume_unwind(p);
        }
    }
}

/// Runs a seam function's body on the comm behind `comm`; a panic is stashed (see the module
/// docs) and answered with `NRT_FAILURE`.
fn guarded(comm: *mut c_void, f: impl FnOnce(&ModelComm) -> u32) -> u32 {
    // SAFETY: every comm handle given to this seam points at a live ModelComm
    // (`ModelComm::handle`).
    let c = unsafe { &*(comm as *const ModelComm) };
    match catch_unwind(AssertUnwindSafe(|| f(c))) {
        Ok(code) => code,
        Err(p) => {
            *c.panic.lock().unwrap() = Some(p);
            NrtStatus::Failure.code()
        }
    }
}

unsafe extern "C" fn model_start(
    comm: *mut c_void,
    _stream: u32,
    _bb: u32,
    _ops: *const NetOpInfo,
    _n_ops: usize,
    _src: *const NetSrcAddr,
    _n_src: usize,
    _dst: *const NetDestAddr,
    _n_dst: usize,
) -> u32 {
    guarded(comm, |c| {
        c.starts.set(c.starts.get() + 1);
        // SAFETY: the device reads `filed` only after it sees the trigger consumed, which the
        // task does after this call (the release/acquire pair under test).
        c.filed.with_mut(|p| unsafe { *p = FILED });
        0
    })
}

unsafe extern "C" fn model_progress(
    comm: *mut c_void,
    _stream: u32,
    _bb: u32,
    idle: *mut c_int,
    done: *mut c_int,
) -> u32 {
    guarded(comm, |c| {
        c.progresses.set(c.progresses.get() + 1);
        // SAFETY: the task calls progress only after it saw the device's trigger (acquire),
        // which the device wrote after `payload` (release): the pair under test.
        let v = c.payload.with(|p| unsafe { *p });
        assert_eq!(
            v, PAYLOAD,
            "the task started before the device's write was visible"
        );
        // SAFETY: the driver passes valid out-parameters; AND in "busy" and "done".
        unsafe {
            *idle = 0;
            *done &= 1;
        }
        0
    })
}

unsafe extern "C" fn model_stop(comm: *mut c_void, _stream: u32) -> u32 {
    guarded(comm, |c| {
        c.stops.set(c.stops.get() + 1);
        0
    })
}

/// The scripted seam over [`ModelComm`].
pub fn model_seam() -> SeamTable {
    SeamTable {
        start: model_start,
        progress: model_progress,
        stop: model_stop,
        stop_step: None,
    }
}

/// The network task of model 5: one block ([`BB`] on stream 0) of a comm, waiting for the
/// device, whose trigger word it keeps alive.
struct GatedTask {
    // Declared first, so dropped before the word its trigger handle points at.
    task: NetworkTask,
    triggers: TriggerWords,
    _word: Arc<AtomicU32>,
}

impl GatedTask {
    /// A task of `comm` over `seam`, gated on `word`.
    fn new(comm: CommHandle, seam: SeamTable, word: Arc<AtomicU32>) -> Self {
        // SAFETY: `word` is kept alive in `_word` for as long as the task (and the copy of the
        // handle in `triggers`) lives.
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
}

/// Model 5 — the device thread writes its payload and then the trigger word (1) while the proxy
/// steps the network task; then it waits to read the word consumed (0) and reads what the
/// proxy filed before consuming it. The task starts (calls `progress`) exactly once, never
/// before the device's write (it reads the payload whole), files its block once and stops its
/// stream once, ends DONE with success; the device sees the consume and, through it, the
/// filing.
pub fn trigger_gate() {
    let word = Arc::new(AtomicU32::new(0));
    let comm = Arc::new(ModelComm::default());
    let mut task = GatedTask::new(comm.handle(), model_seam(), word.clone());
    task.triggers.arm();
    let device = {
        let (word, comm) = (word.clone(), comm.clone());
        thread::spawn(move || {
            // SAFETY: the device thread owns its payload until it publishes the trigger.
            comm.payload.with_mut(|p| unsafe { *p = PAYLOAD });
            // SAFETY: `word` (an Arc held by this closure) outlives the handle.
            let w = unsafe { HostWord::from_ref(&word) };
            w.store(1); // the device reached the net stage (release)
            let mut tries = 0;
            while w.load() != 0 {
                tries += 1;
                assert!(
                    tries < SPIN_BOUND,
                    "the device never saw the trigger consumed"
                );
                thread::yield_now();
            }
            // SAFETY: the proxy wrote `filed` before it consumed the trigger (release), and we
            // acquired the consume.
            let f = comm.filed.with(|p| unsafe { *p });
            assert_eq!(f, FILED, "the consume did not publish the proxy's filing");
        })
    };
    let env = StepEnv {
        now_ns: 0,
        may_begin: true,
        stamp: proxy_core::base::trace::TickStamp::NONE,
    };
    let mut steps = 0;
    loop {
        let s = task.task.step(&env);
        comm.rethrow();
        if s == Step::Done {
            break;
        }
        steps += 1;
        assert!(steps < SPIN_BOUND, "the task never finished");
        if task.task.record().state() == Some(RunState::WaitingDeviceTrigger) {
            thread::yield_now();
        }
    }
    device.join().unwrap();
    let rec = task.task.record();
    assert_eq!(
        (rec.state(), rec.status()),
        (Some(RunState::Done), NrtStatus::Success)
    );
    assert_eq!(
        comm.counts(),
        (1, 1, 1),
        "(start, progress, stop): filed once, started once, stopped once"
    );
    assert_eq!(
        // SAFETY: `word` is a live Arc.
        unsafe { HostWord::from_ref(&word) }.load(),
        0,
        "the trigger stays consumed"
    );
}

#[cfg(all(test, not(loom)))]
mod tests;
