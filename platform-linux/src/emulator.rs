//! The device emulator: plays the Neuron device's side of a planned collective through the
//! host-memory words only (DESIGN.md §5), so the proxy has a real peer to interlock with.
//!
//! One [`DeviceThread`] per rank (thread `device-<rank>`) runs launched [`Job`]s. A job is one
//! *execution*:
//! 1. **net stage**: write 1 to every trigger word of the network task, wait until the proxy
//!    consumed each (reads 0) — a proxy that skips the trigger gate stalls here;
//! 2. `reps` times the block's device program ([`Instr`]): arm each op side's host index with
//!    `0xFFFF_FFFF`, wait for the handshake semaphore, raise the host indices as send data is
//!    ready and receive buffers are free, wait on the complete semaphores, reduce received
//!    chunks into the output (the `proxy-core` kernels: tight loops the compiler vectorises),
//!    copy; a proxy that skips a handshake or a semaphore makes the device wait (and time out);
//! 3. **barrier**: write 1 to the barrier task's trigger words, wait until its barrier-done
//!    semaphore rose (the barrier leader increments it), then report the execution complete.
//!
//! Semaphores are cumulative; the device snapshots each one before it arms (between executions
//! nobody touches them), so counts in the program are per execution. A semaphore that runs
//! ahead of what the device posted is a proxy bug and fails the job ([`DeviceError`]).
//!
//! Every wait spins a bounded budget, then yields, then parks briefly ([`WaitPolicy`]): on a
//! machine with fewer cores than threads (workers, devices, producers) the thread that has work
//! must get the core. Every wait has a timeout.
//!
//! Fault injection ([`Fault`]): flips one byte of one received chunk in every execution, after
//! the device has seen the chunk complete and before it uses it; a correct checker must then
//! report wrong elements.
//!
//! Seed: the on-device collective program that the proxy interlocks with: trigger words
//! (`start_proxy_task_host_mem_addrs`, §5), the `-1` host-index handshake and `nec_inc_semaphore`
//! completions (§5), the barrier-done semaphore (`inc_leader_sps_barrier_done_semas`, §3).

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use proxy_core::planner::kernels::reduce_raw;
use proxy_core::planner::{Addresses, HostWord, Instr, RankPlan, Side};

/// Value of a host index that tells the proxy "device ready for the handshake".
pub const HOST_INDEX_READY: u32 = 0xFFFF_FFFF;

/// How a thread waits for a host word: spin, then yield, then park in short naps; give up after
/// `timeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Condition checks with a CPU pause between them before the first yield.
    pub spins: u32,
    /// `sched_yield` rounds (each re-checks) before parking.
    pub yields: u32,
    /// Length of one park nap once spinning and yielding did not help.
    pub nap: Duration,
    /// The wait fails after this long.
    pub timeout: Duration,
}

impl Default for WaitPolicy {
    /// 64 spins, 2000 yields, 50 µs naps, 60 s timeout.
    fn default() -> Self {
        Self {
            spins: 64,
            yields: 2000,
            nap: Duration::from_micros(50),
            timeout: Duration::from_secs(60),
        }
    }
}

impl WaitPolicy {
    /// Waits until `cond` holds.
    ///
    /// # Errors
    /// `Err(elapsed)` when `timeout` passed first.
    pub fn wait(&self, mut cond: impl FnMut() -> bool) -> Result<(), Duration> {
        for _ in 0..self.spins {
            if cond() {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        let start = Instant::now();
        let mut rounds = 0u32;
        loop {
            if cond() {
                return Ok(());
            }
            if rounds < self.yields {
                rounds += 1;
                thread::yield_now();
            } else {
                thread::park_timeout(self.nap);
            }
            // A clock read every few rounds keeps the yield loop cheap.
            if rounds.is_multiple_of(16) || rounds >= self.yields {
                let e = start.elapsed();
                if e > self.timeout {
                    return if cond() { Ok(()) } else { Err(e) };
                }
            }
        }
    }
}

/// A device failure: the proxy did not answer in time, or broke the protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceError {
    /// A wait timed out; `what` names the word and the value waited for.
    Timeout {
        /// Rank of the device.
        rank: u32,
        /// What it waited for.
        what: String,
    },
    /// A semaphore rose beyond what the protocol allows (e.g. more completions than posted
    /// entries, or two handshakes in one execution).
    Protocol {
        /// Rank of the device.
        rank: u32,
        /// What was seen.
        what: String,
    },
    /// The launcher gave up on the execution ([`DeviceThread::abort`]) while the device waited.
    Aborted {
        /// Rank of the device.
        rank: u32,
    },
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Timeout { rank, what } => {
                write!(f, "device {rank}: timed out waiting for {what}")
            }
            DeviceError::Protocol { rank, what } => {
                write!(f, "device {rank}: protocol violation: {what}")
            }
            DeviceError::Aborted { rank } => write!(f, "device {rank}: execution aborted"),
        }
    }
}

impl std::error::Error for DeviceError {}

/// One launch: an execution of a block `reps` times between the net-stage trigger and the
/// barrier (`reps > 1` is a device program looping over the block).
#[derive(Clone, Debug)]
pub struct Job {
    /// The rank's plan (program, entries).
    pub plan: Arc<RankPlan>,
    /// Where its buffers and host words are.
    pub addrs: Addresses,
    /// Executions of the program in this launch (at least 1 to do anything).
    pub reps: u32,
    /// The network task's trigger words (one per stream); empty = no net-stage gate.
    pub net_triggers: Vec<u64>,
    /// The barrier task's trigger words; empty = no barrier stage.
    pub barrier_triggers: Vec<u64>,
    /// The barrier-done semaphore the device waits on after the barrier trigger (if any).
    pub barrier_done: Option<u64>,
}

/// Fault injection: flip one byte of one received chunk in every execution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fault {
    /// Index in the plan's destination FIFO of the chunk to corrupt; `None` = the first
    /// non-empty one.
    pub entry: Option<usize>,
}

/// Counters of one device (read by tests and tools).
#[derive(Debug, Default)]
pub struct DeviceStats {
    /// Program executions completed.
    pub executions: AtomicU64,
    /// Receive entries seen complete.
    pub recv_entries: AtomicU64,
    /// Bytes of the receive entries seen complete.
    pub recv_bytes: AtomicU64,
    /// Bytes flipped by fault injection.
    pub faults_injected: AtomicU64,
}

/// A host word by address.
///
/// # Safety
/// `addr` must be a live, 4-byte-aligned `u32` only ever accessed atomically, for as long as
/// the returned reference is used (the [`Device::execute`] contract).
unsafe fn word<'a>(addr: u64) -> &'a AtomicU32 {
    // SAFETY: the caller's contract.
    unsafe { &*(addr as usize as *const AtomicU32) }
}

/// The device of one rank: executes jobs on the calling thread.
#[derive(Debug)]
pub struct Device {
    rank: u32,
    fault: Option<Fault>,
    wait: WaitPolicy,
    stats: Arc<DeviceStats>,
    /// Raised to make every wait end at once with [`DeviceError::Aborted`] (sticky).
    abort: Arc<AtomicBool>,
}

impl Device {
    /// A device for `rank`.
    pub fn new(rank: u32, fault: Option<Fault>, wait: WaitPolicy) -> Self {
        Self {
            rank,
            fault,
            wait,
            stats: Arc::new(DeviceStats::default()),
            abort: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The flag that aborts this device's waits: once raised (it stays raised), every wait of
    /// [`Device::execute`] ends at once with [`DeviceError::Aborted`].
    pub fn abort_flag(&self) -> &Arc<AtomicBool> {
        &self.abort
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<DeviceStats> {
        &self.stats
    }

    fn wait_word(
        &self,
        addr: u64,
        what: impl FnOnce() -> String,
        cond: impl Fn(u32) -> bool,
    ) -> Result<u32, DeviceError> {
        // SAFETY: `addr` comes from the job, whose words are live (execute's contract).
        let w = unsafe { word(addr) };
        let mut seen = 0;
        let mut aborted = false;
        match self.wait.wait(|| {
            seen = w.load(Ordering::Acquire);
            aborted = self.abort.load(Ordering::Acquire);
            aborted || cond(seen)
        }) {
            Ok(()) if aborted => Err(DeviceError::Aborted { rank: self.rank }),
            Ok(()) => Ok(seen),
            Err(_) => Err(DeviceError::Timeout {
                rank: self.rank,
                what: format!("{} (last value {seen:#x})", what()),
            }),
        }
    }

    /// Runs one job: net-stage trigger, `reps` executions of the program, barrier.
    ///
    /// # Errors
    /// [`DeviceError`] when a wait times out or the proxy breaks the protocol.
    ///
    /// # Safety
    /// Every address of `job` (buffers per the plan's layout, host words, trigger and barrier
    /// words) must be live and valid for the accesses the program makes until this returns;
    /// host words are only ever accessed atomically; no other thread touches the buffers except
    /// the transport as the protocol allows (between a post and its completion).
    pub unsafe fn execute(&mut self, job: &Job) -> Result<(), DeviceError> {
        for &t in &job.net_triggers {
            // SAFETY: per this function's contract.
            unsafe { word(t) }.store(1, Ordering::Release);
        }
        for &t in &job.net_triggers {
            self.wait_word(
                t,
                || format!("net trigger word {t:#x} to be consumed"),
                |v| v == 0,
            )?;
        }
        for _ in 0..job.reps {
            self.run_program(job)?;
            self.stats.executions.fetch_add(1, Ordering::Relaxed);
        }
        if job.barrier_triggers.is_empty() {
            return Ok(());
        }
        // Snapshot the barrier-done semaphore before the trigger: the barrier cannot pass
        // (and the leader cannot increment it) before every device triggered.
        let done_base = job.barrier_done.map(|a| {
            // SAFETY: per this function's contract.
            unsafe { word(a) }.load(Ordering::Acquire)
        });
        for &t in &job.barrier_triggers {
            // SAFETY: per this function's contract.
            unsafe { word(t) }.store(1, Ordering::Release);
        }
        if let (Some(a), Some(base)) = (job.barrier_done, done_base) {
            let v = self.wait_word(
                a,
                || format!("barrier-done semaphore {a:#x}"),
                |v| v.wrapping_sub(base) >= 1,
            )?;
            if v.wrapping_sub(base) > 1 {
                return Err(self.protocol(format!(
                    "barrier-done semaphore rose by {} in one execution",
                    v.wrapping_sub(base)
                )));
            }
        }
        Ok(())
    }

    fn protocol(&self, what: String) -> DeviceError {
        DeviceError::Protocol {
            rank: self.rank,
            what,
        }
    }

    /// The fault target as (op, index within the op's recv side, byte offset), if any.
    fn fault_target(&self, plan: &RankPlan) -> Option<(u32, u32, u64)> {
        let f = self.fault?;
        let e = match f.entry {
            Some(i) => i,
            None => plan.dst.iter().position(|e| e.bytes > 0)?,
        };
        let entry = plan.dst.get(e)?;
        let op = plan.ops[entry.op as usize];
        // The most significant byte of the first element: a change no op can hide for sums.
        let byte = (plan.params.dtype.size() as u64 - 1).min(entry.bytes.saturating_sub(1));
        Some((entry.op, e as u32 - op.dst_base, byte))
    }

    fn run_program(&mut self, job: &Job) -> Result<(), DeviceError> {
        let plan = &*job.plan;
        let a = &job.addrs;
        let n = plan.ops.len();
        let w = |op: u32, hw: HostWord| a.word(hw.index(op));
        let load = |addr: u64| {
            // SAFETY: the job's host words are live (execute's contract).
            unsafe { word(addr) }.load(Ordering::Acquire)
        };
        let mut hs_base = vec![[0u32; 2]; n];
        let mut cpl_base = vec![[0u32; 2]; n];
        let mut posted = vec![[0u32; 2]; n];
        let mut seen = vec![[0u32; 2]; n];
        for (k, o) in plan.ops.iter().enumerate() {
            for side in [Side::Send, Side::Recv] {
                if o.entries(side) > 0 {
                    hs_base[k][side as usize] = load(w(k as u32, HostWord::handshake(side)));
                    cpl_base[k][side as usize] = load(w(k as u32, HostWord::complete(side)));
                }
            }
        }
        let fault = self.fault_target(plan);
        let mut flipped = false;
        let p = plan.params;
        let elt = p.dtype.size() as u64;
        for ins in &plan.program {
            match *ins {
                Instr::Arm { op, side } => {
                    // SAFETY: as above.
                    unsafe { word(w(op, HostWord::post(side))) }
                        .store(HOST_INDEX_READY, Ordering::Release);
                }
                Instr::WaitHandshake { op, side } => {
                    let base = hs_base[op as usize][side as usize];
                    let v = self.wait_word(
                        w(op, HostWord::handshake(side)),
                        || format!("op {op} {side:?} handshake semaphore to reach {}", base + 1),
                        |v| v.wrapping_sub(base) >= 1,
                    )?;
                    if v.wrapping_sub(base) != 1 {
                        return Err(self.protocol(format!(
                            "op {op} {side:?}: handshake semaphore rose by {} in one execution",
                            v.wrapping_sub(base)
                        )));
                    }
                    // The proxy writes 0 to the host index before it increments the handshake.
                    let idx = load(w(op, HostWord::post(side)));
                    if idx != 0 {
                        return Err(self.protocol(format!(
                            "op {op} {side:?}: host index {idx:#x} after the handshake (want 0)"
                        )));
                    }
                }
                Instr::Post { op, side, upto } => {
                    posted[op as usize][side as usize] = upto;
                    // Release: the data of the posted send entries (written by this thread) is
                    // visible to the proxy that reads the index with acquire.
                    // SAFETY: as above.
                    unsafe { word(w(op, HostWord::post(side))) }.store(upto, Ordering::Release);
                }
                Instr::Wait { op, side, upto } => {
                    let base = cpl_base[op as usize][side as usize];
                    let v = self.wait_word(
                        w(op, HostWord::complete(side)),
                        || {
                            format!(
                                "op {op} {side:?} complete semaphore to reach {} (+{upto})",
                                base.wrapping_add(upto)
                            )
                        },
                        |v| v.wrapping_sub(base) >= upto,
                    )?;
                    let done = v.wrapping_sub(base);
                    let max = posted[op as usize][side as usize];
                    if done > max {
                        return Err(self.protocol(format!(
                            "op {op} {side:?}: {done} entries complete, only {max} posted"
                        )));
                    }
                    let prev = seen[op as usize][side as usize];
                    if side == Side::Recv && done > prev {
                        for e in &plan.entries(op, side)[prev as usize..done as usize] {
                            self.stats.recv_entries.fetch_add(1, Ordering::Relaxed);
                            self.stats.recv_bytes.fetch_add(e.bytes, Ordering::Relaxed);
                        }
                        if let Some((fop, fidx, byte)) = fault {
                            if !flipped && fop == op && fidx < done {
                                flipped = true;
                                let e = plan.entries(op, side)[fidx as usize];
                                let addr = a.of(e.loc) + byte;
                                // SAFETY: the entry is complete (the transport is done with
                                // it) and lies in this rank's buffers; only this thread uses
                                // it now.
                                unsafe { *(addr as usize as *mut u8) ^= 0xFF };
                                self.stats.faults_injected.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    seen[op as usize][side as usize] = done.max(prev);
                }
                Instr::Reduce {
                    dst,
                    a: x,
                    b: y,
                    elems,
                } => {
                    // SAFETY: the planner's hazard tracking guarantees no transfer touches
                    // these ranges now; they lie in the rank's buffers (execute's contract).
                    unsafe {
                        reduce_raw(
                            p.dtype,
                            p.op,
                            a.of(dst) as usize as *mut u8,
                            a.of(x) as usize as *const u8,
                            a.of(y) as usize as *const u8,
                            elems as usize,
                        )
                    };
                }
                Instr::Copy { dst, src, bytes } => {
                    debug_assert!(bytes % elt == 0);
                    // SAFETY: as for Reduce; the planner never copies between overlapping
                    // ranges.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            a.of(src) as usize as *const u8,
                            a.of(dst) as usize as *mut u8,
                            bytes as usize,
                        )
                    };
                }
            }
        }
        Ok(())
    }
}

/// The launch slot shared by a [`DeviceThread`] and its launcher.
struct Shared {
    job: Mutex<Option<Job>>,
    /// Launches rung (written by the launcher after it filled `job`).
    doorbell: AtomicU64,
    /// Launches finished (written by the device after it stored the result).
    finished: AtomicU64,
    result: Mutex<Option<Result<(), DeviceError>>>,
    /// The last finished launch failed (written before `finished`).
    failed: AtomicBool,
    /// The thread waiting in [`DeviceThread::wait`], unparked when a launch finishes.
    waiter: Mutex<Option<Thread>>,
    stop: AtomicBool,
}

/// A device on its own thread (`device-<rank>`): [`DeviceThread::launch`] rings its doorbell,
/// [`DeviceThread::wait`] waits for the execution to finish.
pub struct DeviceThread {
    shared: Arc<Shared>,
    stats: Arc<DeviceStats>,
    /// The device's abort flag ([`Device::abort_flag`]).
    abort: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    wait: WaitPolicy,
    launched: u64,
}

impl fmt::Debug for DeviceThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceThread")
            .field("launched", &self.launched)
            .finish_non_exhaustive()
    }
}

impl DeviceThread {
    /// Starts the device thread of `rank`, pinned to `cpu` if given (a pin the OS refuses is
    /// ignored).
    ///
    /// # Errors
    /// The OS refused the thread.
    pub fn spawn(
        rank: u32,
        fault: Option<Fault>,
        wait: WaitPolicy,
        cpu: Option<usize>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            job: Mutex::new(None),
            doorbell: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            result: Mutex::new(None),
            failed: AtomicBool::new(false),
            waiter: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        let mut device = Device::new(rank, fault, wait);
        let stats = device.stats().clone();
        let abort = device.abort_flag().clone();
        let s = shared.clone();
        let handle = thread::Builder::new()
            .name(format!("device-{rank}"))
            .spawn(move || {
                if let Some(id) = cpu {
                    core_affinity::set_for_current(core_affinity::CoreId { id });
                }
                let mut handled = 0u64;
                // Idle: spin briefly, yield, then nap until the doorbell (unpark) or stop.
                let idle = WaitPolicy {
                    timeout: Duration::MAX,
                    ..wait
                };
                loop {
                    let _ = idle.wait(|| {
                        s.stop.load(Ordering::Acquire)
                            || s.doorbell.load(Ordering::Acquire) > handled
                    });
                    if s.stop.load(Ordering::Acquire) {
                        return;
                    }
                    handled += 1;
                    let job = s.job.lock().unwrap_or_else(|e| e.into_inner()).take();
                    let r = match job {
                        // SAFETY: `launch`'s contract: the job's memory stays valid until the
                        // launcher saw it finish.
                        Some(j) => unsafe { device.execute(&j) },
                        None => Ok(()),
                    };
                    s.failed.store(r.is_err(), Ordering::Relaxed);
                    *s.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                    // Release: the result and `failed` are visible to whoever sees the count.
                    s.finished.store(handled, Ordering::Release);
                    if let Some(t) = s.waiter.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                        t.unpark();
                    }
                }
            })?;
        Ok(Self {
            shared,
            stats,
            abort,
            handle: Some(handle),
            wait,
            launched: 0,
        })
    }

    /// The device's counters.
    pub fn stats(&self) -> &Arc<DeviceStats> {
        &self.stats
    }

    /// Starts `job` on the device (the previous launch must have been waited for).
    ///
    /// # Safety
    /// As [`Device::execute`], until [`DeviceThread::wait`] has returned for this launch (or
    /// the `DeviceThread` is dropped, which waits for the thread).
    pub unsafe fn launch(&mut self, job: Job) {
        *self.shared.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(job);
        self.launched += 1;
        // Release: the job in the slot is visible to the device that sees the new count.
        self.shared.doorbell.store(self.launched, Ordering::Release);
        if let Some(h) = &self.handle {
            h.thread().unpark();
        }
    }

    /// Makes the running execution, and every later one, end at once with
    /// [`DeviceError::Aborted`] (sticky): for a launcher that gave up on the execution (its
    /// proxy side failed), so that [`DeviceThread::wait`] returns without the device's
    /// timeout.
    pub fn abort(&self) {
        self.abort.store(true, Ordering::Release);
    }

    /// `true` when the last launch has finished with an error (whether or not
    /// [`DeviceThread::wait`] took the result; it does not wait).
    pub fn failed(&self) -> bool {
        self.launched > 0
            && self.shared.finished.load(Ordering::Acquire) >= self.launched
            && self.shared.failed.load(Ordering::Relaxed)
    }

    /// Waits for the last launch to finish and returns its result.
    ///
    /// # Errors
    /// The device's error, or a timeout of this wait (named as the device's).
    pub fn wait(&mut self) -> Result<(), DeviceError> {
        *self.shared.waiter.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread::current());
        let target = self.launched;
        let shared = &self.shared;
        let r = self
            .wait
            .wait(|| shared.finished.load(Ordering::Acquire) >= target);
        if r.is_err() {
            return Err(DeviceError::Timeout {
                rank: u32::MAX,
                what: "a device execution to finish".into(),
            });
        }
        self.shared
            .result
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or(Ok(()))
    }
}

impl Drop for DeviceThread {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // An execution still running ends at its next wait instead of its timeout.
        self.abort.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    //! The emulator is a real peer: without a proxy it must stall (and time out), never pass.

    use super::*;
    use proxy_core::planner::{plan, Collective, DataType, PlanParams};

    struct Setup {
        _buf: Vec<u64>,
        words: Box<[AtomicU32]>,
        job: Job,
    }

    fn setup() -> Setup {
        let p = plan(&PlanParams::new(
            Collective::AllReduce,
            16,
            DataType::F32,
            0,
            2,
        ))
        .unwrap();
        let mut buf = vec![0u64; 64];
        let base = buf.as_mut_ptr() as u64;
        // 3 fixed words, then the plan's.
        let words: Box<[AtomicU32]> = (0..3 + p.host_words()).map(|_| AtomicU32::new(0)).collect();
        let w = |i: usize| &words[i] as *const AtomicU32 as u64;
        let addrs = Addresses {
            input: base,
            output: base + 128,
            scratch: base + 256,
            words: w(3),
            word_stride: 4,
        };
        let job = Job {
            plan: Arc::new(p),
            addrs,
            reps: 1,
            net_triggers: vec![w(0)],
            barrier_triggers: vec![w(1)],
            barrier_done: Some(w(2)),
        };
        Setup {
            _buf: buf,
            words,
            job,
        }
    }

    fn quick() -> WaitPolicy {
        WaitPolicy {
            spins: 0,
            yields: 10,
            nap: Duration::from_micros(100),
            timeout: Duration::from_millis(50),
        }
    }

    #[test]
    fn without_a_proxy_the_trigger_is_never_consumed() {
        let s = setup();
        let mut d = Device::new(0, None, quick());
        // SAFETY: every address of the job points into `s`, alive for the call.
        let e = unsafe { d.execute(&s.job) }.unwrap_err();
        assert!(
            matches!(&e, DeviceError::Timeout { what, .. } if what.contains("net trigger")),
            "{e}"
        );
        assert_eq!(
            s.words[0].load(Ordering::Relaxed),
            1,
            "the device wrote its trigger"
        );
    }

    #[test]
    fn a_proxy_that_skips_the_handshake_stalls_the_device() {
        let s = setup();
        // The trigger is "consumed" up front, but nobody answers the -1 handshake.
        let mut job = s.job.clone();
        job.net_triggers.clear();
        let mut d = Device::new(0, None, quick());
        // SAFETY: as above.
        let e = unsafe { d.execute(&job) }.unwrap_err();
        assert!(
            matches!(&e, DeviceError::Timeout { what, .. } if what.contains("handshake")),
            "{e}"
        );
        // The device armed the host index with -1.
        let post = s.job.addrs.word(HostWord::PostSend.index(0));
        // SAFETY: a live word of `s`.
        let v = unsafe { word(post) }.load(Ordering::Relaxed);
        assert_eq!(v, HOST_INDEX_READY);
    }

    #[test]
    fn a_semaphore_ahead_of_the_posts_is_a_protocol_error() {
        let s = setup();
        let mut job = s.job.clone();
        job.net_triggers.clear();
        let a = job.addrs;
        let w = move |hw: HostWord| a.word(hw.index(0)) as usize;
        // A broken proxy: answers both handshakes, then claims 5 receive completions although
        // the device posts one entry.
        let fake = std::thread::spawn(move || {
            // SAFETY: the words live in `s`, which outlives this thread (joined below).
            let word_at = |addr: usize| unsafe { word(addr as u64) };
            let t0 = Instant::now();
            for side in [Side::Send, Side::Recv] {
                while word_at(w(HostWord::post(side))).load(Ordering::Acquire) != HOST_INDEX_READY {
                    assert!(t0.elapsed() < Duration::from_secs(5), "device never armed");
                    thread::yield_now();
                }
                word_at(w(HostWord::post(side))).store(0, Ordering::Release);
                word_at(w(HostWord::handshake(side))).fetch_add(1, Ordering::Release);
            }
            word_at(w(HostWord::RecvComplete)).fetch_add(5, Ordering::Release);
        });
        let mut d = Device::new(0, None, quick());
        // SAFETY: as above.
        let e = unsafe { d.execute(&job) }.unwrap_err();
        fake.join().unwrap();
        assert!(
            matches!(&e, DeviceError::Protocol { what, .. } if what.contains("only 1 posted")),
            "{e}"
        );
    }

    #[test]
    fn device_thread_reports_errors_and_stops() {
        let s = setup();
        let mut t = DeviceThread::spawn(0, None, quick(), None).unwrap();
        // SAFETY: `s` outlives the wait below.
        unsafe { t.launch(s.job.clone()) };
        assert!(t.wait().is_err());
        drop(t);
    }

    /// A launcher that gives up (its proxy side failed) gets the device back at once, not after
    /// the device's timeout; the abort is sticky.
    #[test]
    fn abort_ends_a_waiting_execution_at_once() {
        let s = setup();
        let slow = WaitPolicy {
            timeout: Duration::from_secs(60),
            ..quick()
        };
        let mut t = DeviceThread::spawn(0, None, slow, None).unwrap();
        // SAFETY: `s` outlives the waits below (and the thread, dropped first).
        unsafe { t.launch(s.job.clone()) };
        // The device stalls at the net-stage trigger (no proxy consumes it).
        let start = Instant::now();
        while s.words[0].load(Ordering::Acquire) != 1 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "trigger never written"
            );
            thread::yield_now();
        }
        assert!(!t.failed());
        t.abort();
        assert_eq!(t.wait(), Err(DeviceError::Aborted { rank: 0 }));
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(t.failed());
        // SAFETY: as above.
        unsafe { t.launch(s.job.clone()) };
        assert_eq!(t.wait(), Err(DeviceError::Aborted { rank: 0 }));
        drop(t);
    }

    #[test]
    fn wait_policy_times_out_and_succeeds() {
        let p = quick();
        assert!(p.wait(|| false).is_err());
        let mut n = 0;
        assert!(p
            .wait(|| {
                n += 1;
                n > 3
            })
            .is_ok());
    }
}
