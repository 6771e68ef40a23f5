//! Soak (issue 13, item 9): create / run / abort / destroy cycles leave nothing behind.
//!
//! Each cycle builds a whole [`World`] (2 ranks: comms, proxy queues, device emulators, barrier),
//! runs a real all-reduce whose output bytes are checked (one warm-up and two timed executions,
//! then a checked one into poisoned outputs: 0 wrong elements), and in every other cycle then
//! starts a run of a million executions and aborts it mid-run from another thread through the
//! comms' [`AbortHandle`](proxy_core::base::abort::AbortHandle)s (after the run's warm-up, a
//! short varying delay: the abort lands inside an execution or between two); that run must end
//! with an error naming `NRT_CLOSED`. Then the world is dropped (tasks ended, threads joined,
//! comms and transports closed, buffers freed). Cycles alternate the driver and device modes
//! (worker threads with device threads; caller-driven queues with polled devices).
//!
//! Two transports: the in-memory one (both ranks in one world), and libfabric `tcp;ofi_rxm` on
//! the loopback interface (`FI_TCP_IFACE=lo`, bootstrap root on 127.0.0.1; feature
//! `libfabric`): there each rank is its own world on its own thread, joined through a bootstrap
//! as the processes of a run are, with the barrier between them in `/dev/shm`.
//!
//! After a warm-up round of each cycle kind (first-use state: the logger, libfabric's provider
//! list, the allocator's arenas), the process's state is sampled; after the cycles it is sampled
//! again and must be the same: threads (`/proc/self/task`), open file descriptors
//! (`/proc/self/fd`), this process's `/dev/shm` entries (names with our pid as a `-`-separated
//! part, as the host barrier names its regions: other processes of this machine create their
//! own), and live heap bytes (this binary's counting global allocator: allocated minus freed,
//! every thread) exactly; resident memory (`/proc/self/statm`, after `malloc_trim`, with one
//! malloc arena and large blocks in their own mappings) may grow by less than 8 MiB.
//!
//! Cycles: `PROXY_SOAK_CYCLES` for the in-memory transport, `PROXY_SOAK_TCP_CYCLES` for tcp
//! (each 200 by default, as the issue asks). A tcp cycle takes about 0.35 s in a debug build on
//! a 2-core machine, so ci.sh's test step runs 50 and 10 and its `soak` step the 200 (mem 200
//! in about 9 s, tcp 200 in about 70 s). Only one test in this binary: the counts are
//! process-wide.

use std::sync::mpsc;
use std::time::Duration;

use clap::Parser;
use proxy_alloc_count::CountingAlloc;
use proxy_perf::args::Args;
use proxy_perf::run::World;

/// Live heap bytes (allocated minus freed, every thread): [`CountingAlloc::live_bytes`].
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// The test's logger: `LEVEL target: message` lines written straight to the process's stderr.
/// Not `eprintln!`: libtest keeps a test's captured output in memory, so every line (each
/// aborted task logs one) would show up as live heap.
struct DirectStderr;

impl log::Log for DirectStderr {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        use std::io::Write;
        if self.enabled(r.metadata()) {
            let _ = writeln!(
                std::io::stderr().lock(),
                "{} {}: {}",
                r.level(),
                r.target(),
                r.args()
            );
        }
    }

    fn flush(&self) {}
}

/// Bytes of the checked all-reduce (float sum; 2 ranks) on the in-memory transport.
const SIZE: u64 = 64 * 1024;
/// The same on tcp: small enough for libfabric's eager protocol, so an abort finds no send
/// waiting on a rendezvous (tcp;ofi_rxm does not confirm the cancel of one: each teardown
/// stage then waits out its drain limit, about 3 s per aborted cycle).
const TCP_SIZE: u64 = 4 * 1024;
/// Resident memory may grow by less than this over the cycles.
const RSS_SLACK: u64 = 8 << 20;
/// Bound of the wait for a run's warm-up before its abort (the run itself is a million
/// executions long, so it cannot end first).
const ABORT_ARM_WAIT: Duration = Duration::from_secs(60);

/// What a process holds, sampled between cycles.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Held {
    threads: usize,
    fds: usize,
    shm: Vec<String>,
    heap: i64,
}

fn count_dir(path: &str) -> usize {
    std::fs::read_dir(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .count()
}

/// `/dev/shm` entries with this process's pid as a `-`-separated part of the name.
fn own_shm() -> Vec<String> {
    let pid = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return Vec::new();
    };
    let mut v: Vec<String> = dir
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.split('-').any(|p| p == pid))
        .collect();
    v.sort();
    v
}

/// What the process holds now; the thread count is given at most 500 ms to come down to
/// `threads_at_start` (a torn-down comm's thread or a libfabric progress thread still exiting
/// was counted once in a CI run; a thread that stays is leaked, and the count then shows it).
fn held(threads_at_start: usize) -> Held {
    let mut threads = count_dir("/proc/self/task");
    for _ in 0..100 {
        if threads <= threads_at_start {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
        threads = count_dir("/proc/self/task");
    }
    Held {
        threads,
        fds: count_dir("/proc/self/fd"),
        shm: own_shm(),
        heap: ALLOC.live_bytes(),
    }
}

/// Resident bytes (`/proc/self/statm`, second field, in pages), after the C allocator has
/// given its free pages back (`malloc_trim`): glibc keeps freed memory of its per-thread arenas
/// mapped, so without it the samples swing by tens of MiB between cycles (measured: 15 to 85
/// MiB over tcp cycles) with no byte leaked.
fn rss() -> u64 {
    // SAFETY: malloc_trim has no preconditions; it only releases free memory.
    unsafe { libc::malloc_trim(0) };
    let s = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm's resident field");
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page.max(4096) as u64
}

/// Cycles from the environment variable `var`, 200 when unset.
fn cycles(var: &str) -> u32 {
    match std::env::var(var) {
        Err(_) => 200,
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{var}={v:?} is not a cycle count")),
    }
}

/// The tool's arguments of cycle `i` (modes alternate every two cycles, so both modes see both
/// an aborted and a completed cycle).
fn args(i: u32, libfabric: bool) -> Args {
    let size = if libfabric { TCP_SIZE } else { SIZE }.to_string();
    let mut v = vec!["proxy-perf", "all-reduce", "--ranks", "2", "-b", &size];
    v.extend_from_slice(&["-e", &size]);
    if (i / 2).is_multiple_of(2) {
        v.extend_from_slice(&["--driver", "thread", "--device", "thread"]);
    } else {
        v.extend_from_slice(&["--driver", "caller", "--device", "polled"]);
    }
    if libfabric {
        v.extend_from_slice(&["--transport", "libfabric", "--provider", "tcp"]);
    }
    Args::try_parse_from(v).expect("the soak's arguments parse")
}

/// Runs `world`'s checked all-reduce of `size` bytes (0 wrong), then, when `abort`, a run of a million
/// executions aborted mid-run after `delay`; returns the aborted run's error (`None` when not
/// aborted). `ready`: called once the world is about to start its aborted run (the libfabric
/// ranks meet there, so each aborts only once both are in it).
fn run_cycle(
    world: &mut World,
    size: u64,
    what: &str,
    abort: bool,
    delay: Duration,
    ready: &(dyn Fn() + Sync),
) -> Option<String> {
    let wrong = world
        .count_steady_state(size, 1, 2, &|_| {})
        .unwrap_or_else(|e| panic!("{what}: the checked all-reduce failed: {e}"));
    assert_eq!(wrong, 0, "{what}: wrong elements of the checked all-reduce");
    if !abort {
        return None;
    }
    let handles = world.abort_handles();
    assert!(!handles.is_empty(), "{what}: no abort handle");
    let (tx, rx) = mpsc::sync_channel::<()>(1);
    std::thread::scope(|s| {
        let aborter = s.spawn(move || {
            // The run's warm-up is over (or the run failed before it): abort after `delay`.
            let _ = rx.recv_timeout(ABORT_ARM_WAIT);
            std::thread::sleep(delay);
            handles.iter().filter(|h| h.abort()).count()
        });
        ready();
        let r = world.count_steady_state(size, 1, 1_000_000, &|on| {
            if on {
                let _ = tx.try_send(());
            }
        });
        let aborted = aborter.join().expect("the aborter thread");
        assert!(aborted > 0, "{what}: no comm was aborted by this request");
        match r {
            Ok(w) => panic!("{what}: the aborted run of a million executions ended Ok ({w} wrong)"),
            Err(e) => Some(e),
        }
    })
}

/// The varying abort delay of cycle `i` (0 to 700 µs).
fn delay_of(i: u32) -> Duration {
    Duration::from_micros(u64::from(i * 37 % 8) * 100)
}

fn mem_cycle(i: u32) {
    let abort = i % 2 == 1;
    let what = format!("mem cycle {i}");
    let mut world =
        World::new(&args(i, false)).unwrap_or_else(|e| panic!("{what}: creating the world: {e}"));
    if let Some(e) = run_cycle(&mut world, SIZE, &what, abort, delay_of(i), &|| {}) {
        assert!(
            e.contains("NRT_CLOSED"),
            "{what}: the aborted run ended {e}"
        );
    }
    drop(world);
}

/// The most live heap bytes a soak accepts as a one-off after its cycles, if as many cycles
/// again add nothing more (a leak grows with the cycles; a buffer made once, late, does not).
const ONE_OFF_HEAP: i64 = 256;

/// Samples, runs `warm_up` then `cycles` cycles of `cycle`, samples, and compares.
fn soak(name: &str, cycles: u32, cycle: &dyn Fn(u32)) {
    let threads_at_start = count_dir("/proc/self/task");
    // Warm-up: every kind (two modes × aborted or not) once.
    for i in 0..4 {
        cycle(i);
    }
    let (before, rss0) = (held(threads_at_start), rss());
    let t0 = std::time::Instant::now();
    for i in 4..4 + cycles {
        let t = std::time::Instant::now();
        cycle(i);
        let dt = t.elapsed();
        if dt > Duration::from_secs(1) {
            eprintln!("soak {name}: cycle {i} took {dt:?}");
        }
    }
    let (after, rss1) = (held(threads_at_start), rss());
    eprintln!(
        "soak {name}: {cycles} cycles in {:.1} s; before {before:?} rss {rss0}; after {after:?} rss {rss1}",
        t0.elapsed().as_secs_f64()
    );
    let mut after = after;
    if after != before && after.heap > before.heap && after.heap - before.heap <= ONE_OFF_HEAP {
        // A leak grows with the cycles; a one-off allocation (a lazily made buffer that a rare
        // timing reached only after the warm-up) does not. Run a quarter as many cycles again:
        // the heap must not move at all this time, and everything else must be back.
        let first = after.clone();
        for i in 4 + cycles..4 + cycles + cycles / 4 + 1 {
            cycle(i);
        }
        after = held(threads_at_start);
        eprintln!(
            "soak {name}: {} bytes more after the first {cycles} cycles; after {} more cycles \
             {after:?}",
            first.heap - before.heap,
            cycles / 4 + 1
        );
        assert_eq!(
            after,
            first,
            "{name}: the heap kept growing after a first one-off of {} bytes",
            first.heap - before.heap
        );
        after.heap = before.heap;
    }
    assert_eq!(
        after, before,
        "{name}: threads, fds, /dev/shm entries and live heap bytes after {cycles} cycles"
    );
    assert!(
        rss1 < rss0 + RSS_SLACK,
        "{name}: resident memory grew from {rss0} to {rss1} bytes over {cycles} cycles"
    );
}

#[cfg(feature = "libfabric")]
fn tcp_cycle(i: u32) {
    use proxy_bootstrap::launch::free_loopback_root;
    use proxy_bootstrap::{Bootstrap, BootstrapConfig};

    let abort = i % 2 == 1;
    let root = free_loopback_root().expect("a free port on 127.0.0.1");
    // The ranks meet before their aborted runs (bounded: a rank that failed never comes).
    let arrived = std::sync::atomic::AtomicU32::new(0);
    let errors: Vec<Option<String>> = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..2u32)
            .map(|r| {
                let arrived = &arrived;
                s.spawn(move || {
                    let what = format!("tcp cycle {i} rank {r}");
                    let boot = Bootstrap::init(&BootstrapConfig::new(r, 2, root))
                        .unwrap_or_else(|e| panic!("{what}: bootstrap: {e}"));
                    let mut world =
                        World::join(&args(i, true), boot, Some("tcp;ofi_rxm".to_owned()))
                            .unwrap_or_else(|e| panic!("{what}: joining: {e}"));
                    let meet = || {
                        arrived.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let t0 = std::time::Instant::now();
                        while arrived.load(std::sync::atomic::Ordering::SeqCst) < 2 {
                            assert!(
                                t0.elapsed() < ABORT_ARM_WAIT,
                                "{what}: the other rank never reached its aborted run"
                            );
                            std::thread::sleep(Duration::from_micros(200));
                        }
                    };
                    let e = run_cycle(&mut world, TCP_SIZE, &what, abort, delay_of(i + r), &meet);
                    drop(world);
                    e
                })
            })
            .collect();
        ranks
            .into_iter()
            .map(|h| h.join().expect("a rank thread panicked"))
            .collect()
    });
    if abort {
        assert!(
            errors.iter().flatten().any(|e| e.contains("NRT_CLOSED")),
            "tcp cycle {i}: no rank's aborted run ended NRT_CLOSED: {errors:?}"
        );
    }
}

#[test]
fn create_run_abort_destroy_cycles_leave_nothing_behind() {
    // One malloc arena and large blocks in their own mappings (returned when freed): glibc
    // otherwise keeps freed memory of its per-thread arenas resident, and libfabric's pools
    // made the resident size swing by tens of MiB between samples with nothing leaked
    // (valgrind: no definite loss over 8 tcp cycles). Set before this test allocates.
    // SAFETY: mallopt has no preconditions.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 * 1024);
    }
    static LOGGER: DirectStderr = DirectStderr;
    if log::set_logger(&LOGGER).is_ok() {
        // Errors only: every aborted run logs its tasks' ends and the streams it tears down.
        // Quiet unless NEURON_RT_LOG_LEVEL asks: every aborted run logs its tasks' ends and
        // the streams it tears down.
        let level = proxy_runtime::Config::from_env()
            .ok()
            .and_then(|c| c.log_level)
            .unwrap_or(log::LevelFilter::Off);
        log::set_max_level(level);
    }
    soak("mem", cycles("PROXY_SOAK_CYCLES"), &mem_cycle);
    #[cfg(feature = "libfabric")]
    {
        // tcp on the loopback interface only (set before libfabric is first initialised, while
        // no other thread of this test reads the environment).
        if std::env::var("FI_TCP_IFACE").as_deref() != Ok("lo") {
            std::env::set_var("FI_TCP_IFACE", "lo");
        }
        soak("libfabric tcp", cycles("PROXY_SOAK_TCP_CYCLES"), &tcp_cycle);
    }
}
