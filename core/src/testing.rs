//! Small doubles for tests of the engine and of code built on it: a transport that carries
//! nothing, a device whose semaphores are counters in a table, and a scripted progress half
//! behind a real [`SeamTable`] of `extern "C"` functions ([`Script`], [`seam`]): the comm
//! handle points at a `Script`, which counts the calls per entry point, logs them in order
//! and answers as it is told.
//!
//! Test scaffolding, compiled only under `cfg(test)` or the `testing` feature.

use alloc::string::String;
use alloc::vec::Vec;

use crate::progress::device::DeviceCallbacks;
use crate::progress::net::{NetError, Posted, RequestId, TestOutcome, Transport};
use core::ffi::{c_int, c_void};

use crate::base::desc::{NetDestAddr, NetOpInfo, NetSrcAddr};
use crate::base::status::NrtStatus;
use crate::base::sync::{AtomicBool, AtomicU32, Ordering, PlainArc};
use crate::driver::task::{BlockFifos, CommHandle};
use crate::seam::SeamTable;

/// A transport with no peers: posts fail with `Invalid`, `poll` counts calls.
///
/// Enough for scripted ops, which never post (their scripts are the comm's).
#[derive(Debug, Default)]
pub struct NullTransport {
    /// Number of `poll` calls.
    pub polls: u64,
    /// Requests cancelled so far.
    pub cancelled: Vec<RequestId>,
}

impl Transport for NullTransport {
    fn name(&self) -> &str {
        "null"
    }

    fn max_msg_size(&self) -> u64 {
        u64::from(u32::MAX)
    }

    fn poll(&mut self) -> Result<(), NetError> {
        self.polls += 1;
        Ok(())
    }

    unsafe fn isend(
        &mut self,
        peer: u32,
        _buf: *const u8,
        _size: u64,
        _tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        Err(NetError::invalid(
            Some(peer),
            String::from("null transport carries nothing"),
        ))
    }

    unsafe fn irecv(
        &mut self,
        peer: u32,
        _buf: *mut u8,
        _size: u64,
        _tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        Err(NetError::invalid(
            Some(peer),
            String::from("null transport carries nothing"),
        ))
    }

    fn test(&mut self, _request: RequestId) -> Result<TestOutcome, NetError> {
        Ok(TestOutcome::Cancelled)
    }

    fn cancel(&mut self, request: RequestId) -> Result<(), NetError> {
        self.cancelled.push(request);
        Ok(())
    }
}

/// A [`NullTransport`] whose cancelled requests are confirmed only once the transport has
/// been polled `confirm_after_polls` times in all (`u64::MAX`: never): a slow or stuck
/// teardown. `poll` calls are counted in a shared word the test reads while the comm owns
/// the transport.
#[derive(Debug, Default)]
pub struct SlowCancelTransport {
    /// The null transport underneath (scripts, cancels).
    pub inner: NullTransport,
    /// Polls after which every request tests as cancelled.
    pub confirm_after_polls: u64,
    /// Number of `poll` calls (shared).
    pub polls: PlainArc<AtomicU32>,
}

impl crate::progress::forward::TransportWrapper for SlowCancelTransport {
    fn inner(&self) -> &dyn Transport {
        &self.inner
    }

    fn inner_mut(&mut self) -> &mut dyn Transport {
        &mut self.inner
    }

    fn name(&self) -> &str {
        "slow-cancel"
    }

    fn poll(&mut self) -> Result<(), NetError> {
        self.polls.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn test(&mut self, _request: RequestId) -> Result<TestOutcome, NetError> {
        Ok(
            if u64::from(self.polls.load(Ordering::Relaxed)) >= self.confirm_after_polls {
                TestOutcome::Cancelled
            } else {
                TestOutcome::Pending
            },
        )
    }
}

/// A [`NullTransport`] whose `poll` calls are also counted in a shared word, so a test can
/// read the count while the comm owns the transport (the rounds of docs/design.md §8).
#[derive(Debug, Default)]
pub struct CountingTransport {
    /// The null transport underneath (scripts, cancels).
    pub inner: NullTransport,
    /// `poll` calls so far (shared with the test).
    pub polls: PlainArc<AtomicU32>,
}

impl CountingTransport {
    /// A transport and the handle on its poll count.
    pub fn new() -> (Self, PlainArc<AtomicU32>) {
        let polls = PlainArc::new(AtomicU32::new(0));
        (
            Self {
                inner: NullTransport::default(),
                polls: polls.clone(),
            },
            polls,
        )
    }
}

impl crate::progress::forward::TransportWrapper for CountingTransport {
    fn inner(&self) -> &dyn Transport {
        &self.inner
    }

    fn inner_mut(&mut self) -> &mut dyn Transport {
        &mut self.inner
    }

    fn name(&self) -> &str {
        "counting"
    }

    fn poll(&mut self) -> Result<(), NetError> {
        self.polls.fetch_add(1, Ordering::Relaxed);
        self.inner.poll()
    }
}

/// Device callbacks that only record: semaphore increments are summed per address in a
/// spin-locked table, host indices read as 0. For tests of code that never touches host words.
#[derive(Debug, Default)]
pub struct RecordingDevice {
    /// `(address, total increments)`.
    pub semaphores: spin::Mutex<Vec<(u64, u64)>>,
}

impl RecordingDevice {
    /// Sum of increments made to `addr`.
    pub fn total(&self, addr: u64) -> u64 {
        self.semaphores
            .lock()
            .iter()
            .find(|(a, _)| *a == addr)
            .map_or(0, |(_, v)| *v)
    }
}

impl DeviceCallbacks for RecordingDevice {
    fn inc_semaphore(&self, addr: u64, val: u32) {
        let mut t = self.semaphores.lock();
        match t.iter_mut().find(|(a, _)| *a == addr) {
            Some((_, v)) => *v += u64::from(val),
            None => t.push((addr, u64::from(val))),
        }
    }

    fn load_host_index(&self, _addr: u64) -> u32 {
        0
    }

    fn store_host_index(&self, _addr: u64, _val: u32) {}
}

// ---- a scripted progress half behind the seam ------------------------------------------------

/// One seam call as the script saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// `start(stream, bb)`.
    Start {
        /// The stream.
        stream: u32,
        /// The basic block.
        bb: u32,
    },
    /// `progress(stream, bb)`.
    Progress {
        /// The stream.
        stream: u32,
        /// The basic block.
        bb: u32,
    },
    /// `stop(stream)`.
    Stop {
        /// The stream.
        stream: u32,
    },
    /// `invalidate(addr, len)` ([`invalidate`], the script's `nccom_comm_invalidate_range`).
    Invalidate {
        /// First byte of the range.
        addr: usize,
        /// Length in bytes.
        len: usize,
    },
}

/// A scripted comm: what the comm handle of [`seam`] points at.
pub struct Script {
    /// `start` calls so far.
    pub starts: AtomicU32,
    /// `progress` calls so far.
    pub progresses: AtomicU32,
    /// `stop` calls so far.
    pub stops: AtomicU32,
    /// Every call, in order.
    pub log: spin::Mutex<Vec<Call>>,
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
    /// Stepped stops ([`stepped_seam`]) answer "not done" this many times in all before they
    /// answer done (each "not done" counts it down).
    pub stop_steps_pending: AtomicU32,
    /// Set while a call is inside the script (a comm is used by one thread at a time).
    inside: AtomicBool,
    /// Calls that entered while another call was inside: each is a breach of the one-thread
    /// rule (what the invalidation tests check stays 0).
    pub overlaps: AtomicU32,
}

impl Script {
    /// A script whose block runs take `needed` progress calls on every stream (0 = never done).
    pub fn new(needed: u32) -> PlainArc<Self> {
        PlainArc::new(Self {
            starts: AtomicU32::new(0),
            progresses: AtomicU32::new(0),
            stops: AtomicU32::new(0),
            log: spin::Mutex::new(Vec::new()),
            needed: core::array::from_fn(|_| AtomicU32::new(needed)),
            count: core::array::from_fn(|_| AtomicU32::new(0)),
            idle: AtomicBool::new(false),
            fail_progress_at: AtomicU32::new(0),
            fail_start: AtomicBool::new(false),
            stop_steps_pending: AtomicU32::new(0),
            inside: AtomicBool::new(false),
            overlaps: AtomicU32::new(0),
        })
    }

    /// Marks a call inside the script until the guard drops; counts an overlap when another
    /// call is inside already.
    fn enter(&self) -> Inside<'_> {
        if self.inside.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        Inside(self)
    }

    /// The ranges invalidated so far, in order.
    pub fn invalidations(&self) -> Vec<(usize, usize)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Invalidate { addr, len } => Some((addr, len)),
                _ => None,
            })
            .collect()
    }

    /// The comm handle of this script, for tasks that call [`seam`].
    ///
    /// # Safety
    /// The script must outlive every task that carries the handle (as `CommHandle::new`
    /// requires of a comm); the scripted seam reads it only through atomics and a lock, so
    /// any thread may step those tasks.
    pub unsafe fn handle(&self) -> CommHandle {
        // SAFETY: the caller's contract; the pointer is non-null.
        unsafe { CommHandle::new(self as *const Script as *mut c_void) }.unwrap()
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.log.lock().clone()
    }

    /// The blocks of the `progress` calls on `stream`, in order.
    pub fn progress_bbs(&self, stream: u32) -> Vec<u32> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Progress { stream: s, bb } if s == stream => Some(bb),
                _ => None,
            })
            .collect()
    }

    /// `(start, progress, stop)` calls so far.
    pub fn counts(&self) -> (u32, u32, u32) {
        (
            self.starts.load(Ordering::SeqCst),
            self.progresses.load(Ordering::SeqCst),
            self.stops.load(Ordering::SeqCst),
        )
    }
}

/// A call inside a [`Script`] ([`Script::enter`]).
struct Inside<'a>(&'a Script);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.inside.store(false, Ordering::SeqCst);
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
    let _inside = s.enter();
    s.starts.fetch_add(1, Ordering::SeqCst);
    s.log.lock().push(Call::Start { stream, bb });
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
    let _inside = s.enter();
    let n = s.progresses.fetch_add(1, Ordering::SeqCst) + 1;
    s.log.lock().push(Call::Progress { stream, bb });
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
    let _inside = s.enter();
    s.stops.fetch_add(1, Ordering::SeqCst);
    s.log.lock().push(Call::Stop { stream });
    0
}

/// The script's `nccom_comm_invalidate_range` (a [`crate::driver::inval::InvalidateFn`] over
/// comm handles from [`Script::handle`]): logs [`Call::Invalidate`]; `NRT_INVALID` for a NULL
/// `addr` or a zero `len`.
///
/// # Safety
/// `comm` is a handle from [`Script::handle`] of a live script.
pub unsafe extern "C" fn invalidate(comm: *mut c_void, addr: *const c_void, len: usize) -> u32 {
    let s = script(comm);
    let _inside = s.enter();
    if addr.is_null() || len == 0 {
        return NrtStatus::Invalid.code();
    }
    s.log.lock().push(Call::Invalidate {
        addr: addr.addr(),
        len,
    });
    0
}

/// The stepped stop of [`stepped_seam`]: "not done" while [`Script::stop_steps_pending`] is
/// above zero (counting it down), else done, counted and logged as a `stop`.
unsafe extern "C" fn stop_step(comm: *mut c_void, stream: u32, done: *mut c_int) -> u32 {
    let s = script(comm);
    let _inside = s.enter();
    let pending = s
        .stop_steps_pending
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if !pending {
        s.stops.fetch_add(1, Ordering::SeqCst);
        s.log.lock().push(Call::Stop { stream });
    }
    // SAFETY: the driver passes a valid out-parameter.
    unsafe { *done = c_int::from(!pending) };
    0
}

/// [`seam`] with the stepped stop (`stop_step`), scripted by [`Script::stop_steps_pending`].
pub fn stepped_seam() -> SeamTable {
    SeamTable {
        stop_step: Some(stop_step),
        ..seam()
    }
}

/// The scripted seam: `extern "C"` functions over comm handles from [`Script::handle`].
pub fn seam() -> SeamTable {
    SeamTable {
        start,
        progress,
        stop,
        stop_step: None,
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
