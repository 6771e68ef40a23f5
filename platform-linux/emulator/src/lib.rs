//! `proxy-emulator`: the device emulator threads. One [`DeviceThread`] per rank (thread
//! `device-<rank>`) runs launched [`Job`]s with `proxy-collectives`' interpreter
//! ([`Device`], see [`proxy_collectives::interpreter`] for what one execution does), waiting
//! through a [`WaitPolicy`]; [`DeviceStats`] count what the interpreter reports.
//!
//! Every wait spins a bounded budget, then yields, then parks briefly ([`WaitPolicy`]): on a
//! machine with fewer cores than threads (workers, devices, producers) the thread that has work
//! must get the core. Every wait has a timeout, and ends at once when the launcher aborts
//! ([`DeviceThread::abort`]).
//!
//! Dependencies: `proxy-core`, `proxy-collectives`, `core_affinity`.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

pub use proxy_collectives::interpreter::{Device, DeviceError, Fault, Job};
use proxy_collectives::interpreter::{DeviceEnv, Event, WaitEnd};

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

impl DeviceStats {
    fn record(&self, event: Event) {
        match event {
            Event::Execution => {
                self.executions.fetch_add(1, Ordering::Relaxed);
            }
            Event::RecvEntry { bytes } => {
                self.recv_entries.fetch_add(1, Ordering::Relaxed);
                self.recv_bytes.fetch_add(bytes, Ordering::Relaxed);
            }
            Event::FaultInjected => {
                self.faults_injected.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The interpreter's platform on Linux: waits with a [`WaitPolicy`] (timeout included), ends
/// every wait at once when the abort flag is raised, and counts into [`DeviceStats`].
#[derive(Debug)]
pub struct PolicyEnv {
    wait: WaitPolicy,
    stats: Arc<DeviceStats>,
    /// Raised to make every wait end at once with [`DeviceError::Aborted`] (sticky).
    abort: Arc<AtomicBool>,
}

impl PolicyEnv {
    /// Waits with `wait`, fresh counters, abort flag down.
    pub fn new(wait: WaitPolicy) -> Self {
        Self {
            wait,
            stats: Arc::new(DeviceStats::default()),
            abort: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The flag that aborts the waits: once raised (it stays raised), every wait of
    /// [`Device::execute`] with this platform ends at once with [`DeviceError::Aborted`].
    pub fn abort_flag(&self) -> &Arc<AtomicBool> {
        &self.abort
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<DeviceStats> {
        &self.stats
    }
}

impl DeviceEnv for PolicyEnv {
    fn wait(&self, cond: &mut dyn FnMut() -> bool) -> Result<(), WaitEnd> {
        let mut aborted = false;
        match self.wait.wait(|| {
            let met = cond();
            aborted = self.abort.load(Ordering::Acquire);
            aborted || met
        }) {
            Ok(()) if aborted => Err(WaitEnd::Aborted),
            Ok(()) => Ok(()),
            Err(_) => Err(WaitEnd::TimedOut),
        }
    }

    fn record(&self, event: Event) {
        self.stats.record(event);
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
    /// The device's abort flag ([`PolicyEnv::abort_flag`]).
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
        let mut device = Device::new(rank, fault);
        let env = PolicyEnv::new(wait);
        let stats = env.stats().clone();
        let abort = env.abort_flag().clone();
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
                        Some(j) => unsafe { device.execute(&j, &env) },
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
    use proxy_collectives::planner::{
        plan, Addresses, Collective, DataType, OpWord, PlanParams, Side,
    };
    use proxy_core::driver::trigger::HostWord as Word;
    use proxy_core::progress::sendrecv::HOST_INDEX_READY;
    use std::sync::atomic::AtomicU32;

    /// The checked handle on a word of a test's [`Setup`].
    fn word(addr: u64) -> Word {
        // SAFETY: the tests only pass addresses of `Setup::words`, alive while they are used.
        unsafe { Word::from_addr(addr) }.expect("a word of the setup")
    }

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
        let mut d = Device::new(0, None);
        // SAFETY: every address of the job points into `s`, alive for the call.
        let e = unsafe { d.execute(&s.job, &PolicyEnv::new(quick())) }.unwrap_err();
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
        let mut d = Device::new(0, None);
        // SAFETY: as above.
        let e = unsafe { d.execute(&job, &PolicyEnv::new(quick())) }.unwrap_err();
        assert!(
            matches!(&e, DeviceError::Timeout { what, .. } if what.contains("handshake")),
            "{e}"
        );
        // The device armed the host index with -1.
        let post = s.job.addrs.word(OpWord::PostSend.index(0));
        let v = word(post).load();
        assert_eq!(v, HOST_INDEX_READY);
    }

    #[test]
    fn a_semaphore_ahead_of_the_posts_is_a_protocol_error() {
        let s = setup();
        let mut job = s.job.clone();
        job.net_triggers.clear();
        let a = job.addrs;
        let w = move |hw: OpWord| a.word(hw.index(0));
        // A broken proxy: answers both handshakes, then claims 5 receive completions although
        // the device posts one entry.
        let fake = std::thread::spawn(move || {
            // The words live in `s`, which outlives this thread (joined below).
            let t0 = Instant::now();
            for side in [Side::Send, Side::Recv] {
                while word(w(OpWord::post(side))).load() != HOST_INDEX_READY {
                    assert!(t0.elapsed() < Duration::from_secs(5), "device never armed");
                    thread::yield_now();
                }
                word(w(OpWord::post(side))).store(0);
                word(w(OpWord::handshake(side))).fetch_add(1);
            }
            word(w(OpWord::RecvComplete)).fetch_add(5);
        });
        let mut d = Device::new(0, None);
        // SAFETY: as above.
        let e = unsafe { d.execute(&job, &PolicyEnv::new(quick())) }.unwrap_err();
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
