//! `proxy-emulator`: the device emulators. The device side of a planned collective is
//! `proxy-collectives`' interpreter ([`Device`], a `poll()` state machine that never blocks, see
//! [`proxy_collectives::interpreter`]); this crate drives it in one of three modes:
//!
//! * **threaded**: one [`DeviceThread`] per rank (thread `device-<rank>`) runs each launched
//!   [`Job`] as a loop over [`Device::poll`], waiting between `Pending` answers with a
//!   [`WaitPolicy`] (spin, yield, nap), with a timeout and an abort flag;
//! * **polled**: a [`PolledDevice`] is owned by the thread that drives the proxy queue, which
//!   calls [`PolledDevice::poll_once`] between its ticks (one thread plays producer, proxy and
//!   device); it checks its timeout itself against a monotonic clock;
//! * **played by the worker**: a [`PlayedDevice`] is a polled device wired into its rank's proxy
//!   queue slot as a poller, so the queue's worker thread polls it between ticks and the device
//!   needs no thread of its own; the launcher waits for its end.
//!
//! Either way the device reads and writes host words only, so a proxy that skips the trigger
//! gate, a handshake or a completion stalls it until its timeout, which names the word it waited
//! for ([`DeviceError::Timeout`] with a [`WaitingFor`]). [`DeviceStats`] count what the
//! interpreter reports.
//!
//! Every wait spins a bounded budget, then yields, then parks briefly ([`WaitPolicy`]): on a
//! machine with fewer cores than threads (workers, devices, producers) the thread that has work
//! must get the core. The timeout is a no-progress limit: it restarts whenever the device moves
//! on in any of its streams ([`Device::progress`] changed: a stream ran an instruction, saw a
//! completion, wrote a host word, ended a block, or the launch changed stage), so a stream
//! stalled on a word while another one keeps moving does not time out; it fires once no stream
//! moved for the timeout, naming the wait that has lasted longest.
//!
//! Dependencies: `proxy-core`, `proxy-collectives`, `core_affinity`.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

pub use proxy_collectives::interpreter::{
    Device, DeviceError, DevicePoll, Fault, Job, Stage, WaitingFor,
};
use proxy_collectives::interpreter::{DeviceEnv, Event};
use proxy_core::base::backoff::{Backoff, BackoffPolicy, Pace};
use proxy_core::base::bell::{Bell, BellSlot};
use proxy_core::driver::wake::{ParkPause, ThreadPark, ThreadUnpark};

mod played;
pub use played::PlayedDevice;

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
    /// The wait fails after this long (for a device: this long without progress).
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
        let mut b = TimedBackoff::new(*self);
        loop {
            if cond() {
                return Ok(());
            }
            if let Err(e) = b.pause() {
                return if cond() { Ok(()) } else { Err(e) };
            }
        }
    }
}

/// One wait under a [`WaitPolicy`]: the project's backoff (`proxy_core::base::backoff`:
/// `spins` CPU pauses, `yields` yields, then naps of `nap`) plus the policy's timeout; the clock
/// is read only once spinning is over (then every 16 yields, and at every nap).
#[derive(Clone, Copy, Debug)]
pub struct TimedBackoff {
    backoff: Backoff,
    timeout: Duration,
    pauses: u32,
    start: Option<Instant>,
}

impl TimedBackoff {
    /// A fresh wait under `policy`.
    pub fn new(policy: WaitPolicy) -> Self {
        let nap_ns = u64::try_from(policy.nap.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        Self {
            backoff: Backoff::new(BackoffPolicy {
                spins: policy.spins,
                yields: policy.yields,
                nap_ns,
                // Naps stay at `nap`: a device wait is answered by the proxy within microseconds
                // once it moves, so a longer nap would only add latency.
                max_nap_ns: nap_ns,
            }),
            timeout: policy.timeout,
            pauses: 0,
            start: None,
        }
    }

    /// Starts over (the waiter made progress): spin again, and the timeout counts from now.
    pub fn reset(&mut self) {
        self.backoff.reset();
        self.pauses = 0;
        self.start = None;
    }

    /// One pause (spin, yield or nap, as the wait has gone on).
    ///
    /// # Errors
    /// `Err(elapsed)` once `timeout` has passed since the spinning ended (the first pause after
    /// it, or [`TimedBackoff::reset`]).
    pub fn pause(&mut self) -> Result<(), Duration> {
        // Before a nap the clock is read: a wait whose time is up ends instead of napping (a
        // zero timeout, "yield a few times, then stop", must never sleep a whole nap), and a
        // nap lasts at most what is left.
        if self.backoff.napping() {
            let start = *self.start.get_or_insert_with(Instant::now);
            let e = start.elapsed();
            if e >= self.timeout {
                return Err(e);
            }
            let left = u64::try_from((self.timeout - e).as_nanos()).unwrap_or(u64::MAX);
            self.pauses = self.pauses.wrapping_add(1);
            // Naps end early on an unpark (`DeviceThread::wait` registers its thread to be woken).
            self.backoff
                .pause_at_most(&ParkPause(&ThreadPark), left.max(1));
            let e = start.elapsed();
            return if e > self.timeout { Err(e) } else { Ok(()) };
        }
        let pace = self.backoff.pause(&ParkPause(&ThreadPark));
        if pace == Pace::Spun {
            return Ok(());
        }
        let start = *self.start.get_or_insert_with(Instant::now);
        self.pauses = self.pauses.wrapping_add(1);
        // A clock read every few rounds keeps the yield loop cheap.
        if self.pauses.is_multiple_of(16) {
            let e = start.elapsed();
            if e > self.timeout {
                return Err(e);
            }
        }
        Ok(())
    }
}

/// Counters of one device (read by tests and tools). The interpreter's [`DeviceEnv`] on Linux.
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
    /// Rung after a poll in which the device wrote host words the proxy reads
    /// ([`Event::HostWrite`]): wire the bell of the proxy queue that serves the rank, so its
    /// worker may nap while it waits for the device.
    pub host_bell: BellSlot,
}

impl DeviceEnv for DeviceStats {
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
            Event::HostWrite => self.host_bell.ring(),
        }
    }
}

/// Runs the launch of `device` to its end on this thread: polls, and between `Pending` answers
/// pauses with `policy`. The timeout counts from the last progress in any stream (a change of
/// [`Device::progress`]; each one also restarts the spinning); a raised `abort` ends the launch
/// at the next pause (also before the first poll).
fn drive(
    device: &mut Device,
    stats: &DeviceStats,
    policy: WaitPolicy,
    abort: &AtomicBool,
) -> Result<(), DeviceError> {
    let rank = device.rank();
    let mut backoff = TimedBackoff::new(policy);
    let mut last = None;
    loop {
        if abort.load(Ordering::Acquire) {
            device.abandon();
            return Err(DeviceError::Aborted { rank });
        }
        match device.poll(stats)? {
            DevicePoll::Done | DevicePoll::Idle => return Ok(()),
            DevicePoll::Pending { .. } => {}
        }
        let progress = device.progress();
        if last != Some(progress) {
            last = Some(progress);
            backoff.reset();
        }
        if backoff.pause().is_err() {
            // One last look before giving up.
            match device.poll(stats)? {
                DevicePoll::Pending { waiting_for } if device.progress() == progress => {
                    device.abandon();
                    return Err(DeviceError::Timeout { rank, waiting_for });
                }
                // It moved at the last moment: the clock restarts.
                DevicePoll::Pending { .. } => {
                    last = Some(device.progress());
                    backoff.reset();
                }
                DevicePoll::Done | DevicePoll::Idle => return Ok(()),
            }
        }
    }
}

/// Longest nap of an idle device thread (no launch to run): a launch and the drop unpark it,
/// so this bounds only a missed unpark's cost, and makes an idle device cost about 50
/// wake-ups a second.
pub const IDLE_NAP: Duration = Duration::from_millis(20);

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
    /// The job of the last finished launch, handed back for the next launch of the same shape
    /// ([`DeviceThread::take_job`]: no allocation per execution).
    returned: Mutex<Option<Job>>,
}

/// A device on its own thread (`device-<rank>`): [`DeviceThread::launch`] rings its doorbell,
/// the thread runs the job as a loop over [`Device::poll`] with its [`WaitPolicy`] between
/// `Pending` answers, [`DeviceThread::wait`] waits for the execution to finish.
pub struct DeviceThread {
    rank: u32,
    shared: Arc<Shared>,
    stats: Arc<DeviceStats>,
    /// Raised to make the running launch, and every later one, end with
    /// [`DeviceError::Aborted`] (sticky).
    abort: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    wait: WaitPolicy,
    launched: u64,
}

impl fmt::Debug for DeviceThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceThread")
            .field("rank", &self.rank)
            .field("launched", &self.launched)
            .finish_non_exhaustive()
    }
}

impl DeviceThread {
    /// Starts the device thread of `rank`, pinned to `cpu` if given (a pin the OS refuses is
    /// ignored). `wait` is its policy between `Pending` answers; its timeout is the device's
    /// no-progress limit.
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
            returned: Mutex::new(None),
        });
        let mut device = Device::new(rank, fault);
        let stats = Arc::new(DeviceStats::default());
        let abort = Arc::new(AtomicBool::new(false));
        let (s, st, ab) = (shared.clone(), stats.clone(), abort.clone());
        let handle = thread::Builder::new()
            .name(format!("device-{rank}"))
            .spawn(move || {
                if let Some(id) = cpu {
                    core_affinity::set_for_current(core_affinity::CoreId { id });
                }
                let mut handled = 0u64;
                // Idle: spin briefly, yield, then nap until the doorbell (unpark) or stop. Both
                // unpark the thread, so the naps may be long: an idle device costs a wake-up
                // per IDLE_NAP, not per `wait.nap`.
                let idle = WaitPolicy {
                    timeout: Duration::MAX,
                    nap: wait.nap.max(IDLE_NAP),
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
                        Some(j) => {
                            // SAFETY: `launch`'s contract: the job's memory stays valid until
                            // the launcher saw it finish (this loop ends the launch before it
                            // reports it).
                            unsafe { device.launch(j) };
                            drive(&mut device, &st, wait, &ab)
                        }
                        None => Ok(()),
                    };
                    s.failed.store(r.is_err(), Ordering::Relaxed);
                    *s.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                    *s.returned.lock().unwrap_or_else(|e| e.into_inner()) = device.abandon();
                    // Release: the result and `failed` are visible to whoever sees the count.
                    s.finished.store(handled, Ordering::Release);
                    if let Some(t) = s.waiter.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                        t.unpark();
                    }
                }
            })?;
        Ok(Self {
            rank,
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

    /// The device thread's bell: ends its nap while it waits for the proxy (or makes its next
    /// nap return at once), so the proxy's driving thread can wake it after it wrote what the
    /// device waits for (wire it into the rank's slot: `ProxyQueue::slot_bell`).
    pub fn bell(&self) -> Option<Arc<dyn Bell>> {
        let t = self.handle.as_ref()?.thread().clone();
        Some(Arc::new(ThreadUnpark(t)))
    }

    /// Starts `job` on the device (the previous launch must have been waited for).
    ///
    /// # Safety
    /// As [`Device::launch`], until [`DeviceThread::wait`] has returned for this launch (or
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

    /// The job of the last launch, once [`DeviceThread::wait`] returned for it (`None` before,
    /// or when taken): launch it again for the next execution of the same shape instead of
    /// building a new one.
    pub fn take_job(&mut self) -> Option<Job> {
        if self.shared.finished.load(Ordering::Acquire) < self.launched {
            return None;
        }
        self.shared
            .returned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Makes the running execution, and every later one, end at once with
    /// [`DeviceError::Aborted`] (sticky): for a launcher that gave up on the execution (its
    /// proxy side failed), so that [`DeviceThread::wait`] returns without the device's
    /// timeout.
    pub fn abort(&self) {
        self.abort.store(true, Ordering::Release);
    }

    /// `true` when the last launch has finished, well or not (it does not wait): then
    /// [`DeviceThread::wait`] returns at once.
    pub fn finished(&self) -> bool {
        self.shared.finished.load(Ordering::Acquire) >= self.launched
    }

    /// `true` when the last launch has finished with an error (whether or not
    /// [`DeviceThread::wait`] took the result; it does not wait).
    pub fn failed(&self) -> bool {
        self.launched > 0
            && self.shared.finished.load(Ordering::Acquire) >= self.launched
            && self.shared.failed.load(Ordering::Relaxed)
    }

    /// Waits for the last launch to finish and returns its result. The wait itself has no
    /// timeout: the device bounds every stall by its own (no-progress) timeout, and
    /// [`DeviceThread::abort`] ends it at once.
    ///
    /// # Errors
    /// The device's error; [`DeviceError::Lost`] when the device thread ended without
    /// finishing the launch (it panicked).
    pub fn wait(&mut self) -> Result<(), DeviceError> {
        *self.shared.waiter.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread::current());
        let target = self.launched;
        let shared = &self.shared;
        let mut b = TimedBackoff::new(WaitPolicy {
            timeout: Duration::MAX,
            ..self.wait
        });
        while shared.finished.load(Ordering::Acquire) < target {
            if self.handle.as_ref().is_none_or(JoinHandle::is_finished)
                && shared.finished.load(Ordering::Acquire) < target
            {
                return Err(DeviceError::Lost { rank: self.rank });
            }
            let _ = b.pause();
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
        // An execution still running ends at its next pause instead of its timeout.
        self.abort.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

/// A device driven by the caller's thread (the polled mode): the thread that drives the proxy
/// queue calls [`PolledDevice::poll_once`] between its ticks, so one thread plays producer,
/// proxy and device. Never blocks; the timeout is checked against the monotonic clock
/// ([`Instant`]) every 64 calls, as a no-progress limit: it counts from the 64th call after the
/// last one at which the device moved on in any stream ([`Device::progress`] changed), so a
/// wait that ends within 64 calls reads no clock.
#[derive(Debug)]
pub struct PolledDevice {
    device: Device,
    stats: Arc<DeviceStats>,
    timeout: Duration,
    /// The device's progress count ([`Device::progress`]) at the last `Pending`, and since
    /// when it has not changed (`None` until it has stayed for 64 polls: a wait that ends
    /// sooner never reads the clock).
    waiting: Option<(u64, Option<Instant>)>,
    /// The result of the last launch once it ended.
    result: Option<Result<(), DeviceError>>,
    launched: bool,
    /// The last `poll_once` moved the launch on (progress in any stream, or its end).
    moved: bool,
    /// Polls since the progress count last changed (the clock is read every 64 of them).
    unchanged: u32,
}

impl PolledDevice {
    /// A polled device for `rank`, injecting `fault` if given, failing a launch that makes no
    /// progress for `timeout`.
    pub fn new(rank: u32, fault: Option<Fault>, timeout: Duration) -> Self {
        Self {
            device: Device::new(rank, fault),
            stats: Arc::new(DeviceStats::default()),
            timeout,
            waiting: None,
            result: None,
            launched: false,
            moved: false,
            unchanged: 0,
        }
    }

    /// The rank of the device.
    pub fn rank(&self) -> u32 {
        self.device.rank()
    }

    /// Makes the device raise no recv host index for `polls` polls after each block begins
    /// ([`Device::set_recv_lag`]; a test knob, 0 = none).
    pub fn set_recv_lag(&mut self, polls: u32) {
        self.device.set_recv_lag(polls);
    }

    /// Adds a send-completion oracle ([`Device::watch_peer_recv`]; a test knob).
    ///
    /// # Safety
    /// As [`Device::watch_peer_recv`].
    pub unsafe fn watch_peer_recv(&mut self, block: usize, op: u32, addr: u64, ahead: u32) {
        // SAFETY: forwarded under this function's contract.
        unsafe { self.device.watch_peer_recv(block, op, addr, ahead) };
    }

    /// Starts `job`: no word is touched until the next [`PolledDevice::poll_once`]. A launch
    /// still running is dropped as it is.
    ///
    /// # Safety
    /// As [`Device::launch`]: until `poll_once` answered `Some` for this launch, or the device
    /// is launched again or dropped.
    pub unsafe fn launch(&mut self, job: Job) {
        // SAFETY: this function's contract.
        unsafe { self.device.launch(job) };
        self.waiting = None;
        self.result = None;
        self.launched = true;
    }

    /// Advances the launch as far as the host words allow, without blocking.
    ///
    /// Returns `None` while the launch runs; `Some(result)` once it ended, and the same again
    /// at every later call until the next launch (`Some(Ok(()))` when nothing was launched).
    /// The error is the device's: [`DeviceError::Timeout`] naming the word it waited for when
    /// it made no progress for the timeout, or [`DeviceError::Protocol`].
    pub fn poll_once(&mut self) -> Option<Result<(), DeviceError>> {
        self.moved = false;
        if self.result.is_some() || !self.launched {
            return self.ended();
        }
        // The hot path (a pending device whose words did not change) stays small: the
        // interpreter answers it from its quiet path, and only its progress count is compared
        // here (a field read: any stream that moved changed it); ends and new waits are out of
        // line.
        let waiting_for = match self.device.poll(&*self.stats) {
            Ok(DevicePoll::Pending { waiting_for }) => waiting_for,
            Ok(DevicePoll::Done | DevicePoll::Idle) => return self.end(Ok(())),
            Err(e) => return self.end(Err(e)),
        };
        let progress = self.device.progress();
        match &mut self.waiting {
            Some((p, since)) if *p == progress => {
                // The clock every 64 unchanged polls: the timeout is coarse, and counts from
                // the 64th (most waits end sooner and read no clock at all).
                self.unchanged = self.unchanged.wrapping_add(1);
                if !self.unchanged.is_multiple_of(64) {
                    return None;
                }
                match since {
                    None => {
                        *since = Some(Instant::now());
                        None
                    }
                    Some(t) if t.elapsed() <= self.timeout => None,
                    Some(_) => self.time_out(waiting_for),
                }
            }
            _ => {
                self.new_wait(progress);
                None
            }
        }
    }

    /// `poll_once` with no launch running: the last launch's result again (`Ok` when nothing
    /// was launched).
    #[inline(never)]
    fn ended(&self) -> Option<Result<(), DeviceError>> {
        Some(self.result.clone().unwrap_or(Ok(())))
    }

    /// The launch ended with `r` (it moved on: to its end).
    #[inline(never)]
    fn end(&mut self, r: Result<(), DeviceError>) -> Option<Result<(), DeviceError>> {
        self.moved = true;
        self.result = Some(r.clone());
        Some(r)
    }

    /// The device moved on in some stream (its progress count is `progress` now): the
    /// no-progress clock restarts (it starts at the 64th poll without progress).
    #[inline(never)]
    fn new_wait(&mut self, progress: u64) {
        self.moved = true;
        self.waiting = Some((progress, None));
        self.unchanged = 0;
    }

    /// No progress in any stream for the timeout: the launch is abandoned and fails naming
    /// the wait the device answered last (the one that has lasted longest).
    #[cold]
    #[inline(never)]
    fn time_out(&mut self, waiting_for: WaitingFor) -> Option<Result<(), DeviceError>> {
        self.device.abandon();
        let rank = self.device.rank();
        self.end(Err(DeviceError::Timeout { rank, waiting_for }))
    }

    /// The device's counters.
    pub fn stats(&self) -> &Arc<DeviceStats> {
        &self.stats
    }

    /// `true` when the last [`PolledDevice::poll_once`] moved the launch on (some stream moved:
    /// [`Device::progress`] changed, or it ended): what a drive hook answers, so the driving
    /// thread yields only when neither the proxy nor the device moved.
    pub fn moved(&self) -> bool {
        self.moved
    }

    /// The job of the last launch once it ended (`None` while it runs, or when taken): launch
    /// it again for the next execution of the same shape instead of building a new one.
    pub fn take_job(&mut self) -> Option<Job> {
        self.result.as_ref()?;
        self.launched = false;
        self.device.abandon()
    }

    /// Gives up on the running launch (the proxy side failed): it ends with
    /// [`DeviceError::Aborted`] and no word is touched again. No effect once it ended.
    pub fn abort(&mut self) {
        if self.launched && self.result.is_none() {
            self.device.abandon();
            self.result = Some(Err(DeviceError::Aborted {
                rank: self.device.rank(),
            }));
        }
    }

    /// `true` when the last launch ended with an error.
    pub fn failed(&self) -> bool {
        matches!(self.result, Some(Err(_)))
    }

    /// Where the launch is (see [`Stage`]).
    pub fn stage(&self) -> Stage {
        self.device.stage()
    }
}

#[cfg(test)]
mod tests;
