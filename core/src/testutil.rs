//! Test support: a scripted progress half behind a real [`SeamTable`] of `extern "C"` functions.
//!
//! The comm handle is a pointer to a [`Script`], which counts the calls per entry point, logs
//! them in order and answers as it is told.

extern crate std;

use crate::driver::wake::ThreadPark;
use crate::time::MonotonicClock;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ffi::{c_int, c_void};
use std::sync::Mutex;

use crate::driver::task::{BlockFifos, CommHandle};
use crate::progress::desc::{NetDestAddr, NetOpInfo, NetSrcAddr};
use crate::seam::SeamTable;
use crate::status::NrtStatus;
use crate::sync::{AtomicBool, AtomicU32, Ordering};

/// One seam call as the script saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Start { stream: u32, bb: u32 },
    Progress { stream: u32, bb: u32 },
    Stop { stream: u32 },
}

/// A scripted comm.
pub struct Script {
    pub starts: AtomicU32,
    pub progresses: AtomicU32,
    pub stops: AtomicU32,
    pub log: Mutex<Vec<Call>>,
    /// Per stream: progress calls a block run takes (the last one reports done); 0 = never done.
    pub needed: [AtomicU32; 4],
    /// Per stream: progress calls since the last done.
    count: [AtomicU32; 4],
    /// Report idle on calls that are not done.
    pub idle: AtomicBool,
    /// Fail the n-th progress call overall (1-based; 0 = never).
    pub fail_progress_at: AtomicU32,
    /// Fail every start.
    pub fail_start: AtomicBool,
}

impl Script {
    pub fn new(needed: u32) -> Box<Self> {
        Box::new(Self {
            starts: AtomicU32::new(0),
            progresses: AtomicU32::new(0),
            stops: AtomicU32::new(0),
            log: Mutex::new(Vec::new()),
            needed: core::array::from_fn(|_| AtomicU32::new(needed)),
            count: core::array::from_fn(|_| AtomicU32::new(0)),
            idle: AtomicBool::new(false),
            fail_progress_at: AtomicU32::new(0),
            fail_start: AtomicBool::new(false),
        })
    }

    pub fn handle(&self) -> CommHandle {
        // SAFETY: the script outlives every task in the tests that use it, and the scripted
        // seam only reads it through atomics and a mutex.
        unsafe { CommHandle::new(self as *const Script as *mut c_void) }.unwrap()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.log.lock().unwrap().clone()
    }

    pub fn progress_bbs(&self, stream: u32) -> Vec<u32> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Progress { stream: s, bb } if s == stream => Some(bb),
                _ => None,
            })
            .collect()
    }

    pub fn counts(&self) -> (u32, u32, u32) {
        (
            self.starts.load(Ordering::SeqCst),
            self.progresses.load(Ordering::SeqCst),
            self.stops.load(Ordering::SeqCst),
        )
    }
}

fn script<'a>(comm: *mut c_void) -> &'a Script {
    // SAFETY: every comm handle given to the scripted seam points at a live Script.
    unsafe { &*(comm as *const Script) }
}

unsafe extern "C" fn start(
    comm: *mut c_void,
    stream: u32,
    bb: u32,
    _ops: *const NetOpInfo,
    _n_ops: usize,
    _src: *const NetSrcAddr,
    _n_src: usize,
    _dst: *const NetDestAddr,
    _n_dst: usize,
) -> u32 {
    let s = script(comm);
    s.starts.fetch_add(1, Ordering::SeqCst);
    s.log.lock().unwrap().push(Call::Start { stream, bb });
    if s.fail_start.load(Ordering::SeqCst) {
        return NrtStatus::Invalid.code();
    }
    0
}

unsafe extern "C" fn progress(
    comm: *mut c_void,
    stream: u32,
    bb: u32,
    idle: *mut c_int,
    done: *mut c_int,
) -> u32 {
    let s = script(comm);
    let n = s.progresses.fetch_add(1, Ordering::SeqCst) + 1;
    s.log.lock().unwrap().push(Call::Progress { stream, bb });
    if s.fail_progress_at.load(Ordering::SeqCst) == n {
        return NrtStatus::NetworkProxyFailure.code();
    }
    let needed = s.needed[stream as usize].load(Ordering::SeqCst);
    let c = s.count[stream as usize].fetch_add(1, Ordering::SeqCst) + 1;
    let is_done = needed != 0 && c >= needed;
    if is_done {
        s.count[stream as usize].store(0, Ordering::SeqCst);
    }
    let is_idle = !is_done && s.idle.load(Ordering::SeqCst);
    // SAFETY: the driver passes valid out-parameters; AND them as the seam requires.
    unsafe {
        *idle &= c_int::from(is_idle);
        *done &= c_int::from(is_done);
    }
    0
}

unsafe extern "C" fn stop(comm: *mut c_void, stream: u32) -> u32 {
    let s = script(comm);
    s.stops.fetch_add(1, Ordering::SeqCst);
    s.log.lock().unwrap().push(Call::Stop { stream });
    0
}

/// Words for tests: owns the atomics, hands out `HostWord`s that must not outlive it.
pub struct Words(Box<[AtomicU32]>);

impl Words {
    pub fn new(init: &[u32]) -> Self {
        Self(init.iter().map(|&v| AtomicU32::new(v)).collect())
    }

    pub fn get(&self, i: usize) -> crate::driver::trigger::HostWord {
        // SAFETY: every test keeps its `Words` alive (declared first) until its handles and the
        // tasks that carry them are gone.
        unsafe { crate::driver::trigger::HostWord::from_ref(&self.0[i]) }
    }
}

/// The scripted seam.
pub fn seam() -> SeamTable {
    SeamTable {
        start,
        progress,
        stop,
    }
}

/// One empty FIFO set for (stream, bb).
pub fn block(stream: u32, bb: u32) -> BlockFifos {
    BlockFifos {
        stream,
        bb,
        ..Default::default()
    }
}

/// A waiter with a 20 µs spin budget.
pub fn waiter(clock: &MonotonicClock) -> crate::driver::wake::Waiter<'_> {
    crate::driver::wake::Waiter {
        park: &ThreadPark,
        clock,
        spin_ns: 20_000,
    }
}
