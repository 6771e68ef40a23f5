//! Worker threads: one `proxy-<tid>` thread per proxy queue, running the driver loop; the
//! std implementations of core's [`Park`](proxy_core::driver::wake::Park) /
//! [`Unpark`](proxy_core::driver::wake::Unpark) / [`Clock`]; the [`Spawner`] the registry starts
//! workers with.
//!
//! The loop (docs/design.md §4): tick; then
//! * [`Tick::Park`] (nothing active, nothing submitted): park until a submission, join, leave
//!   or stop wakes the thread;
//! * [`Tick::NoProgress`]: spin for the spin budget, then block on the queue's idle wait when
//!   one is wired (`proxy_core::driver::idle`: the network's descriptor, kicked by every
//!   notification of the queue), else nap when bells are wired, else `sched_yield` between
//!   ticks (or keep spinning with `one_thread_per_core`);
//! * [`Tick::Continue`]: tick again at once.
//!
//! Seed: `enc_proxy_queue::start` (nrt:0x1ce4d0), `worker_thread` (nrt:0x1d0120, names the
//! thread `proxy-<tid>`), `enc_proxy_queue::process` (nrt:0x1cf7c0), §2.

use std::ffi::CString;
use std::io;
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use proxy_core::base::bell::Bell;
use proxy_core::base::status::NrtStatus;
use proxy_core::base::time::{Clock, MonotonicClock};
use proxy_core::driver::idle::Idled;
use proxy_core::driver::queue::{ProxyQueue, Tick, Worker};
use proxy_core::driver::registry::Spawner;
use proxy_core::driver::wake::{ThreadPark, Waiter};

use crate::affinity;

/// A worker's start, reported once: its thread id, or why it could not start.
type StartSignal = (Mutex<Option<Result<i32, NrtStatus>>>, Condvar);

/// A consumer-side [`Waiter`] for the calling thread: spin for `spin` on `CLOCK_MONOTONIC`,
/// then `std::thread::park`.
pub fn waiter(spin: Duration) -> Waiter<'static> {
    Waiter {
        park: &ThreadPark,
        clock: &MonotonicClock,
        spin_ns: u64::try_from(spin.as_nanos()).unwrap_or(u64::MAX),
    }
}

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds: the queues' clock, read once per tick for the
/// tasks' no-progress timeouts and wait warnings (seconds), where a tick-resolution clock (a few
/// ms) is enough and a read costs a few ns instead of a full `clock_gettime`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CoarseClock;

impl Clock for CoarseClock {
    fn now_ns(&self) -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid clock id and a valid out-parameter; CLOCK_MONOTONIC_COARSE cannot fail
        // on Linux ≥ 2.6.32 (if it did, `ts` stays 0 and the clock reads 0: no timeout fires).
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
        (ts.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec as u64)
    }
}

/// The kernel thread id of the calling thread.
pub fn current_tid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Default spin budget of an idle worker or a waiting consumer, in µs (the config's default,
/// which `NEURON_RT_PROXY_SPIN_US` overrides).
pub const DEFAULT_SPIN_US: u64 = 50;

/// How worker threads run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerConfig {
    /// How long an idle worker (no task made progress) spins before it yields.
    pub spin: Duration,
    /// Keep spinning when idle instead of yielding (the worker owns a core).
    pub one_thread_per_core: bool,
    /// CPUs to pin workers to, the next one per new worker (round robin); empty = no pinning.
    pub cpus: Vec<usize>,
    /// Past the spin budget, an idle worker with active tasks naps up to this long on its
    /// queue's bell ([`Worker::nap`]; rung by a device's host write, an in-memory message, a
    /// submission) instead of yielding. `None` (the default): it yields between ticks, for a
    /// world where something the worker waits for rings no bell (a network completion).
    pub nap: Option<Duration>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            spin: Duration::from_micros(DEFAULT_SPIN_US),
            one_thread_per_core: false,
            cpus: Vec::new(),
            nap: None,
        }
    }
}

/// A running worker thread.
#[derive(Debug)]
pub struct WorkerThread {
    join: JoinHandle<()>,
    tid: i32,
    cpu: Option<usize>,
    group: u32,
}

impl WorkerThread {
    /// The kernel thread id (the `<tid>` of `proxy-<tid>`).
    pub fn tid(&self) -> i32 {
        self.tid
    }

    /// The CPU the thread is pinned to, if any.
    pub fn cpu(&self) -> Option<usize> {
        self.cpu
    }

    /// The group the thread serves.
    pub fn group(&self) -> u32 {
        self.group
    }

    /// CPU time the thread has used so far (its `pthread_getcpuclockid` clock).
    ///
    /// # Errors
    /// The OS error when the clock cannot be read (e.g. the thread has exited).
    pub fn cpu_time(&self) -> io::Result<Duration> {
        thread_cpu_time(self.join.as_pthread_t())
    }
}

/// CPU time used by the thread `t` (its `pthread_getcpuclockid` clock).
///
/// # Errors
/// The OS error when the clock cannot be read.
pub fn thread_cpu_time(t: libc::pthread_t) -> io::Result<Duration> {
    let mut clk: libc::clockid_t = 0;
    // SAFETY: `t` is a pthread_t of a thread that has not been joined (the caller holds its
    // JoinHandle or is the thread); `clk` is a valid out-parameter.
    let rc = unsafe { libc::pthread_getcpuclockid(t, &mut clk) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clk` is a valid clock id; `ts` a valid out-parameter.
    if unsafe { libc::clock_gettime(clk, &mut ts) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

fn set_thread_name(name: &str) {
    let Ok(c) = CString::new(name) else { return };
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes (longer names are
    // truncated by the kernel); `c` outlives the call.
    let rc = unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr() as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        log::warn!(
            "could not name thread {name}: {}",
            io::Error::last_os_error()
        );
    }
}

/// The driver loop of one worker, until its queue's stop is requested.
///
/// Seed: `enc_proxy_queue::process` (nrt:0x1cf7c0), §2.
pub fn run_worker(mut worker: Worker, cfg: &WorkerConfig) {
    let mut idle_since: Option<Instant> = None;
    while !worker.stop_requested() {
        match worker.tick() {
            Tick::Continue => idle_since = None,
            Tick::NoProgress => {
                if cfg.one_thread_per_core {
                    worker.note_idle(true);
                    std::hint::spin_loop();
                    continue;
                }
                let now = Instant::now();
                let since = *idle_since.get_or_insert(now);
                if now.duration_since(since) < cfg.spin {
                    worker.note_idle(true);
                    std::hint::spin_loop();
                } else if worker.queue().idle_wait().is_wired() {
                    // Block on the network's descriptor until it or a notification of the
                    // queue (a submission, a device's write) wakes it (`proxy_core::driver::
                    // idle`); yield when it cannot be slept on now.
                    worker.note_idle(false);
                    if worker.queue().idle_wait().block(u64::MAX) == Idled::Unavailable {
                        // SAFETY: sched_yield has no preconditions.
                        unsafe { libc::sched_yield() };
                    }
                } else if let Some(nap) = cfg.nap {
                    worker.nap(
                        &ThreadPark,
                        u64::try_from(nap.as_nanos()).unwrap_or(u64::MAX),
                    );
                } else {
                    worker.note_idle(false);
                    // SAFETY: sched_yield has no preconditions.
                    unsafe { libc::sched_yield() };
                }
            }
            Tick::Park => {
                idle_since = None;
                worker.park(&ThreadPark);
            }
        }
    }
}

/// A proxy queue's bell ([`ProxyQueue::wake_driver`]) that does not keep the queue alive (a
/// fabric's or a device's bell outlives the queues it rings; a ring after the queue is gone
/// does nothing).
#[derive(Debug, Clone)]
pub struct QueueBell(pub Weak<ProxyQueue>);

impl Bell for QueueBell {
    fn ring(&self) {
        if let Some(q) = self.0.upgrade() {
            q.wake_driver();
        }
    }
}

impl QueueBell {
    /// The bell of `queue`, ready to wire.
    pub fn of(queue: &Arc<ProxyQueue>) -> Arc<dyn Bell> {
        Arc::new(QueueBell(Arc::downgrade(queue)))
    }
}

/// Starts worker threads for a [`Registry`](proxy_core::driver::registry::Registry): names each
/// `proxy-<tid>`, pins it to the next CPU of the list (checked against the process's allowed
/// set first: a CPU outside it is an error at join, and nothing is left running).
#[derive(Debug)]
pub struct ThreadSpawner {
    cfg: WorkerConfig,
    next_cpu: AtomicUsize,
}

impl ThreadSpawner {
    /// A spawner with `cfg`.
    pub fn new(cfg: WorkerConfig) -> Self {
        Self {
            cfg,
            next_cpu: AtomicUsize::new(0),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &WorkerConfig {
        &self.cfg
    }
}

/// How long `spawn` waits for a new thread to report that it runs.
const START_TIMEOUT: Duration = Duration::from_secs(10);

impl Spawner for ThreadSpawner {
    type Handle = WorkerThread;

    fn spawn(&self, group: u32, worker: Worker) -> Result<WorkerThread, NrtStatus> {
        let cpu = if self.cfg.cpus.is_empty() {
            None
        } else {
            let i = self.next_cpu.fetch_add(1, Ordering::Relaxed);
            Some(self.cfg.cpus[i % self.cfg.cpus.len()])
        };
        if let Some(cpu) = cpu {
            let allowed = affinity::allowed_cpus().unwrap_or_default();
            if !allowed.contains(&cpu) {
                log::error!(
                    "group {group}: CPU {cpu} is outside the allowed set {allowed:?} \
                     (NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY)"
                );
                return Err(NrtStatus::Invalid);
            }
        }
        let queue = worker.queue().clone();
        let cfg = self.cfg.clone();
        // The worker's start, handed back under a mutex and a condition variable (not a
        // channel: a std channel's receive creates the calling thread's `Thread` handle in a
        // thread-local, which a C program's main thread never frees, and memcheck reports as
        // 48 bytes "possibly lost").
        let started: Arc<StartSignal> = Arc::new((Mutex::new(None), Condvar::new()));
        let tell = started.clone();
        let report = move |r: Result<i32, NrtStatus>| {
            let (lock, cv) = &*tell;
            *lock.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            cv.notify_one();
        };
        let join = thread::Builder::new()
            .name(format!("proxy-g{group}"))
            .spawn(move || {
                let tid = current_tid();
                set_thread_name(&format!("proxy-{tid}"));
                if let Some(cpu) = cpu {
                    if !affinity::pin_current_thread(cpu) {
                        log::error!("group {group}: could not pin worker {tid} to CPU {cpu}");
                        report(Err(NrtStatus::Invalid));
                        return; // `worker` drops here: the queue is torn down
                    }
                }
                report(Ok(tid));
                log::debug!("group {group}: worker proxy-{tid} running (cpu {cpu:?})");
                run_worker(worker, &cfg);
                log::debug!("group {group}: worker proxy-{tid} stopped");
            })
            .map_err(|e| {
                log::error!("group {group}: cannot create a worker thread: {e}");
                NrtStatus::Resource
            })?;
        let outcome = {
            let (lock, cv) = &*started;
            let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
            let (mut guard, _) = cv
                .wait_timeout_while(guard, START_TIMEOUT, |r| r.is_none())
                .unwrap_or_else(|p| p.into_inner());
            guard.take()
        };
        match outcome {
            Some(Ok(tid)) => Ok(WorkerThread {
                join,
                tid,
                cpu,
                group,
            }),
            Some(Err(e)) => {
                let _ = join.join();
                Err(e)
            }
            None => {
                log::error!("group {group}: worker did not start within {START_TIMEOUT:?}");
                queue.request_stop();
                let _ = join.join();
                Err(NrtStatus::Resource)
            }
        }
    }

    fn join(&self, handle: WorkerThread) {
        if handle.join.join().is_err() {
            log::error!(
                "group {}: worker proxy-{} panicked",
                handle.group,
                handle.tid
            );
        }
    }

    fn thread_id(&self, handle: &WorkerThread) -> Option<u64> {
        Some(handle.tid as u64)
    }

    fn clock(&self) -> Box<dyn Clock> {
        Box::new(CoarseClock)
    }

    fn relax(&self) {
        thread::yield_now();
    }
}
