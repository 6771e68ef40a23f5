//! The process's tracer: installed once per copy of the core ([`tracer`]), stamping records
//! with [`crate::clock::clock`] and the OS thread id, and the names of the threads that
//! recorded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use proxy_core::base::trace::{self, Tracer};

/// The names of the threads that recorded, by thread id.
static THREAD_NAMES: Mutex<Vec<(u32, String)>> = Mutex::new(Vec::new());

thread_local! {
    static THREAD_ID: u32 = {
        // SAFETY: `gettid` has no preconditions.
        let id = u32::try_from(unsafe { libc::gettid() }).unwrap_or(0);
        let name = std::thread::current()
            .name()
            .map(str::to_owned)
            .or_else(|| os_thread_name(id))
            .unwrap_or_else(|| "thread".to_owned());
        THREAD_NAMES
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((id, name));
        id
    };
}

/// The lanes of the process's tracer's ring ([`Tracer::with_lanes`]): one per live recording
/// thread up to this many (then threads share lanes: correct, a little slower, and their records
/// read the clock each: no tick stamp, `proxy_core::base::trace::TickStamp`).
pub const LANES: usize = 16;

/// Exclusive lanes handed out so far ([`thread_lane`]); lanes of ended threads wait in
/// [`FREE_LANES`].
static NEXT_LANE: AtomicUsize = AtomicUsize::new(0);

/// Exclusive lanes whose threads ended, for the next threads.
static FREE_LANES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Threads that found no exclusive lane ([`thread_lane`] answers `LANES + n`).
static SHARED_LANES: AtomicUsize = AtomicUsize::new(0);

/// A thread's lane; an exclusive one goes back to [`FREE_LANES`] when the thread ends (its tick
/// stamp closed, so the next owner does not inherit a tick left open).
struct Lane(usize);

impl Lane {
    fn take() -> Self {
        let free = FREE_LANES
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let lane = free.unwrap_or_else(|| {
            // Below LANES only while lanes are left (the counter stops there).
            let n = NEXT_LANE
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n < LANES).then_some(n + 1)
                })
                .unwrap_or(LANES);
            if n < LANES {
                n
            } else {
                LANES + SHARED_LANES.fetch_add(1, Ordering::Relaxed) % LANES
            }
        });
        Self(lane)
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        if self.0 < LANES {
            if let Some(t) = trace::installed() {
                t.close_lane(self.0);
            }
            FREE_LANES
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(self.0);
        }
    }
}

thread_local! {
    static LANE: Lane = Lane::take();
}

/// The recording thread's lane: below [`LANES`] the thread's own while it lives (lanes of ended
/// threads are handed out again), else a shared one (`LANES + n`, taken modulo by the ring;
/// also while a thread is being torn down).
pub fn thread_lane() -> usize {
    LANE.try_with(|l| l.0).unwrap_or(usize::MAX)
}

/// The recording thread's id: its OS thread id (`gettid`), the same in every copy of the core
/// in the process (0 while a thread is being torn down). The first call on a thread keeps its
/// name ([`thread_names`]).
pub fn thread_id() -> u32 {
    THREAD_ID.try_with(|t| *t).unwrap_or(0)
}

/// The name the kernel has for thread `tid` of this process (`/proc/self/task/TID/comm`: a C
/// thread's `pthread_setname_np`, else the program's name), `None` once it has exited.
pub fn os_thread_name(tid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok()?;
    Some(s.trim_end().to_owned())
}

/// The names of the threads that recorded through this copy's [`thread_id`], by thread id.
pub fn thread_names() -> HashMap<u32, String> {
    THREAD_NAMES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .cloned()
        .collect()
}

/// The process's tracer (this copy of the core's), installed at the first call with a ring of
/// `capacity` records in [`LANES`] lanes, one per recording thread ([`thread_lane`]; later
/// calls' `capacity` is ignored) and off until [`Tracer::set_on`]: 80 bytes a record,
/// allocated now.
///
/// # Errors
/// A message when another tracer was installed in this copy of the core first.
pub fn tracer(capacity: usize) -> Result<&'static Tracer, String> {
    static OURS: OnceLock<&'static Tracer> = OnceLock::new();
    let t = *OURS.get_or_init(|| {
        let t: &'static Tracer = Box::leak(Box::new(Tracer::with_lanes(
            capacity,
            LANES,
            crate::clock::clock(),
            thread_id,
            thread_lane,
        )));
        if !trace::install(t) {
            log::warn!("an event tracer was installed already; using it");
        }
        t
    });
    match trace::installed() {
        Some(installed) if std::ptr::eq(installed, t) => Ok(t),
        Some(other) => Ok(other),
        None => Err("the event tracer could not be installed".into()),
    }
}

/// The ring of the C libraries when the caller does not size it: 256 Ki records (20 MiB).
pub const DEFAULT_CAPACITY: usize = 1 << 18;

/// The variable that turns tracing on in the C libraries: the file (pattern) to write the
/// timeline to (`%r`: one file per rank).
pub const TRACE_ENV: &str = "NEURON_RT_PROXY_TRACE";
/// The variable that picks the classes to record (`ops,transport`, `all`, a number; default
/// `ops`).
pub const TRACE_MASK_ENV: &str = "NEURON_RT_PROXY_TRACE_MASK";

/// Installs this copy's tracer (a ring of `capacity` records, 0: [`DEFAULT_CAPACITY`]; the
/// first start sizes it), sets the classes of `mask` (0: `mask::DEFAULT`), records a mark and
/// switches recording on.
///
/// # Errors
/// A message when no tracer could be installed.
pub fn start(mask: u32, capacity: usize) -> Result<&'static Tracer, String> {
    let cap = if capacity == 0 {
        DEFAULT_CAPACITY
    } else {
        capacity
    };
    let t = tracer(cap)?;
    let m = if mask == 0 {
        trace::mask::DEFAULT
    } else {
        mask
    };
    t.set_mask(m);
    if !t.is_on() {
        t.mark(0);
    }
    t.set_on(true);
    Ok(t)
}

/// Switches this copy's tracer off (its records stay); nothing when none was installed.
pub fn stop() {
    if let Some(t) = trace::installed() {
        t.set_on(false);
    }
}

/// [`TRACE_ENV`] and [`TRACE_MASK_ENV`] as the C libraries read them: `None` when tracing is
/// not asked for (unset or empty), else the file pattern and the mask.
///
/// # Errors
/// A message naming a bad [`TRACE_MASK_ENV`].
pub fn from_env() -> Result<Option<(std::path::PathBuf, u32)>, String> {
    let Some(pattern) = std::env::var_os(TRACE_ENV).filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let mask = match std::env::var(TRACE_MASK_ENV) {
        Ok(s) if !s.trim().is_empty() => trace::mask::parse(&s)
            .map_err(|w| format!("{TRACE_MASK_ENV}={s}: unknown event class `{w}`"))?,
        _ => trace::mask::DEFAULT,
    };
    Ok(Some((pattern.into(), mask)))
}
