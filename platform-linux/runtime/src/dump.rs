//! The state dump of every proxy queue of a registry (docs/design.md §6, "State dump"), on an
//! API call ([`dump_all`]) or on a signal chosen by `NEURON_RT_PROXY_DUMP_SIGNAL`
//! ([`DumpSignal`]; no handler unless the variable is set).
//!
//! The signal handler does nothing but what is async-signal-safe: `signal-hook`'s handler
//! writes one byte to a self-pipe, and a watcher thread `proxy-dump` blocked on the pipe runs
//! the dump (requests to every queue, a bounded wait, log lines: none of which may run in a
//! handler, which can interrupt any code holding any lock, the allocator's included). We use
//! the crate rather than our own self-pipe: it handles `SA_RESTART`, chains a previous handler,
//! and its pipe and wakeup are well trodden.

use std::io;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use proxy_core::base::dump_lines::{DUMP_PREFIX, DUMP_TARGET};
use proxy_core::base::time::{Clock, MonotonicClock};
use proxy_core::driver::dump::DumpOutcome;
use proxy_core::driver::queue::ProxyQueue;
use proxy_core::driver::registry::Registry;
use proxy_core::driver::registry::Spawner;
use signal_hook::iterator::{Handle, Signals};

use crate::worker::waiter;

/// How long a signal's dump waits for each driving thread (then it dumps what is readable
/// without it).
pub const SIGNAL_DUMP_WAIT: Duration = Duration::from_secs(2);

/// Dumps every proxy queue of `registry` ([`Registry::dump_all`]): waits up to `wait` for the
/// driving threads to write their dumps, then logs one summary line
/// (`proxy-dump registry groups=2 written=2 not_answered=0 driver_gone=0`, target
/// [`DUMP_TARGET`], error level). Returns every group with its outcome.
pub fn dump_all<S: Spawner>(registry: &Registry<S>, wait: Duration) -> Vec<(u32, DumpOutcome)> {
    let clock = MonotonicClock;
    let deadline = clock
        .now_ns()
        .saturating_add(u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX));
    let out = registry.dump_all(&waiter(Duration::ZERO), deadline);
    let count = |o: DumpOutcome| out.iter().filter(|(_, x)| *x == o).count();
    log::error!(
        target: DUMP_TARGET,
        "{DUMP_PREFIX} registry groups={} written={} not_answered={} driver_gone={}",
        out.len(),
        count(DumpOutcome::Written),
        count(DumpOutcome::NotAnswered),
        count(DumpOutcome::DriverGone)
    );
    log::error!(target: DUMP_TARGET, "{DUMP_PREFIX} {}", rule_inputs_line());
    out
}

/// How long [`stuck_driver`] waits for a driving thread to answer its dump request (a stuck
/// one never does).
pub const STUCK_DUMP_WAIT: Duration = Duration::from_millis(100);

/// The verdict on a proxy queue whose driving thread began no tick (`ProxyQueue::ticks`
/// unchanged) for `quiet` while its tasks were outstanding: first writes the queue's state
/// dump (a stuck driver does not answer within [`STUCK_DUMP_WAIT`], so the dump is written from
/// what any thread can read, `reason=not-answered`), then returns `the driving thread of proxy
/// queue Q began no tick for S s (driver A, N ticks so far): it is stuck inside a call`, for
/// the waiter's error (proxy-perf's wait for a rank's records, the C library's
/// `nrt_proxy_wait`). A task's own no-progress limit is checked in a tick, so this is the one
/// report such a stall gets.
pub fn stuck_driver(queue: &ProxyQueue, quiet: Duration) -> String {
    let deadline = MonotonicClock
        .now_ns()
        .saturating_add(u64::try_from(STUCK_DUMP_WAIT.as_nanos()).unwrap_or(u64::MAX));
    let _ = queue.dump_until(&waiter(Duration::ZERO), deadline);
    format!(
        "the driving thread of proxy queue {} began no tick for {:.1} s (driver {}, {} ticks \
         so far): it is stuck inside a call",
        queue.id(),
        quiet.as_secs_f64(),
        queue.driver_activity().name(),
        queue.ticks()
    )
}

/// The mode rule's host inputs (`crate::modes`), as the state dump prints them after its
/// summary: `mode-rule cpus=2 (affinity 2, no cgroup quota) processes=4
/// (OMPI_COMM_WORLD_LOCAL_SIZE)`; a malformed launcher variable is printed as such. Each
/// queue's own header says which mode it runs.
pub fn rule_inputs_line() -> String {
    let procs = match crate::modes::local_processes_from_env() {
        Ok(Some(p)) => format!("processes={} ({})", p.count, p.source),
        Ok(None) => "processes=1 (no launcher variable)".to_string(),
        Err(e) => format!("processes=? ({e})"),
    };
    format!("mode-rule cpus={} {procs}", crate::modes::host_cpus())
}

/// A signal handler that runs `action` (e.g. [`dump_all`] of a registry) on a watcher thread
/// `proxy-dump` each time the signal arrives. Dropping it removes the handler and joins the
/// thread.
pub struct DumpSignal {
    signal: libc::c_int,
    handle: Handle,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for DumpSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DumpSignal")
            .field("signal", &self.signal)
            .finish()
    }
}

impl DumpSignal {
    /// Installs the handler of `signal` (e.g. `libc::SIGUSR1`; from
    /// [`Config::dump_signal`](crate::Config::dump_signal)) and starts the watcher thread.
    ///
    /// # Errors
    /// The OS error when the handler cannot be installed (e.g. a forbidden signal) or the
    /// thread cannot start.
    pub fn install(signal: libc::c_int, action: impl Fn() + Send + 'static) -> io::Result<Self> {
        let mut signals = Signals::new([signal])?;
        let handle = signals.handle();
        let thread = thread::Builder::new()
            .name("proxy-dump".into())
            .spawn(move || {
                for s in signals.forever() {
                    log::warn!("signal {s}: dumping every proxy queue");
                    action();
                }
            });
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                handle.close();
                return Err(e);
            }
        };
        log::info!("signal {signal} dumps every proxy queue (NEURON_RT_PROXY_DUMP_SIGNAL)");
        Ok(Self {
            signal,
            handle,
            thread: Some(thread),
        })
    }

    /// The signal handled.
    pub fn signal(&self) -> libc::c_int {
        self.signal
    }
}

impl Drop for DumpSignal {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("the dump signal's watcher thread panicked");
            }
        }
    }
}
