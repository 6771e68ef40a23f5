//! A host device through C (`nrt_proxy_host_device_*`, ABI 1.2): the device side of a planned
//! collective, played on host memory by `proxy-collectives`' interpreter (the program of
//! `nrt_proxy_plan_program`: trigger words, `-1` handshakes, host-index posts, semaphore waits,
//! reductions and copies, the barrier), so a runtime without a device (CPU ranks, tests, a
//! firmware bring-up) runs a collective with no device code of its own.
//!
//! ```text
//!   create(plan, addrs) ──► launch(executions, net triggers, barrier triggers, barrier-done)
//!        │                        │
//!        │       ┌────────────────┴─────────────────┐
//!        │       ▼ polled (the caller's thread)     ▼ a thread of the library
//!        │   poll(&state) until DONE            start() … wait(timeout)
//!        └────────────────────────────────────── destroy (stops a running thread)
//! ```
//!
//! The buffers and host words are the ones the plan's FIFOs were written with
//! (`nrt_proxy_plan_fifos` with the same `nrt_proxy_plan_addresses_t`); the trigger words are
//! the network task's (one per stream of the plan) and the barrier task's, and the barrier-done
//! word is the one the barrier leader increments. A device error (the proxy broke the
//! protocol, a word moved backwards) answers `NRT_FAILURE` and is the refusal text of the call.
//!
//! Seed: the on-device collective program that the proxy interlocks with (§5); the interpreter
//! is `proxy-collectives`' `interpreter/`.

use std::sync::atomic::{AtomicBool, Ordering};

use proxy_core::base::backoff::{Backoff, BackoffPolicy, Pause, StdPause};
use proxy_core::base::time::MonotonicClock;
use proxy_core::driver::oneshot::OneShot;
use proxy_core::driver::wake::ThreadPark;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use proxy_abi::boundary::{bad, c_handle_out, c_out, c_slice, insert_live, with_live};
use proxy_abi::entry;
use proxy_abi::handles::HandleTable;
use proxy_abi::{NccomHostWord, NRT_STATUS};
use proxy_collectives::interpreter::{
    BarrierAt, Device, DeviceEnv, DevicePoll, Event, Job, JobBlock,
};
use std::time::Duration;

use crate::bells::{CommBells, BELLED_NAP};
use crate::handles::with_comm;
use proxy_collectives::planner::Addresses;
use proxy_core::base::status::NrtStatus;

use crate::plan::{check_addresses, plan_of, Planned};
use crate::types::*;
use crate::{instance_id, remove_live_retrying};

/// Handle kind of host devices (bits 48..52 of a handle).
const KIND_HOST_DEVICE: u8 = 5;

/// What a library thread's run ended with (`None` while it runs).
/// The outcome of a launch run on the library thread.
type Outcome = Result<(), String>;

/// One host device.
struct HostDevice {
    plan: Arc<Planned>,
    addrs: Addresses,
    /// The interpreter; shared with the library thread while one runs.
    dev: Arc<Mutex<Device>>,
    /// Asks the library thread to stop (destroy, a new launch).
    stop: Arc<AtomicBool>,
    /// The library thread's outcome, handed over once (`driver::oneshot`, loom model 15); a
    /// new cell for each launch.
    done: Arc<OneShot<Outcome>>,
    thread: Option<JoinHandle<()>>,
    /// The comm it plays the device of (`nrt_proxy_host_device_attach`), and the longest nap
    /// of its thread while it waits for the proxy: its host writes ring the comm's queue, the
    /// queue's moves on the comm's slot ring its thread (`bells.rs`).
    attached: Option<(Arc<CommBells>, Duration)>,
}

/// The interpreter's platform of a host device: a poll that wrote host words rings the
/// attached comm's queue (`Event::HostWrite`).
struct Ringing<'a>(Option<&'a CommBells>);

impl DeviceEnv for Ringing<'_> {
    fn record(&self, event: Event) {
        if let (Event::HostWrite, Some(b)) = (event, self.0) {
            b.ring_driver();
        }
    }
}

impl HostDevice {
    /// Stops and joins a running library thread (bounded: its loop checks `stop` every poll).
    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            // An attached device's thread may nap long (`worker_nap_us`): the ring ends it.
            if let Some((b, _)) = &self.attached {
                b.ring_device();
            }
            let _ = t.join();
        }
        self.stop.store(false, Ordering::Release);
    }
}

static DEVICES: HandleTable<HostDevice> = HandleTable::with_instance(KIND_HOST_DEVICE, instance_id);

/// Number of live host devices (tests and diagnostics).
pub fn live_host_devices() -> usize {
    DEVICES.live()
}

fn with_device<R>(
    what: &str,
    dev: *mut NrtProxyHostDevice,
    f: impl FnOnce(&mut HostDevice) -> Result<R, NrtStatus>,
) -> Result<R, NrtStatus> {
    with_live(what, "host device", &DEVICES, dev.addr(), f)
}

fn lock(dev: &Mutex<Device>) -> std::sync::MutexGuard<'_, Device> {
    dev.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Creates a host device that plays the device side of `plan`'s rank with the buffers and host
/// words at `*addrs` (the addresses its FIFOs were written with, `nrt_proxy_plan_fifos`).
///
/// Returns `NRT_SUCCESS` with `*out` the device; `NRT_INVALID_HANDLE` for a bad plan;
/// `NRT_INVALID` for a NULL `addrs` or `out`, or addresses the plan cannot use (as
/// `nrt_proxy_plan_fifos`); `NRT_RESOURCE` when too many host devices are live (4096). `*out`
/// is NULL on failure. The device keeps the plan alive.
///
/// # Safety
/// `addrs` NULL or readable; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_host_device_create(
    plan: *mut NrtProxyPlan,
    addrs: *const NrtProxyPlanAddresses,
    out: *mut *mut NrtProxyHostDevice,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_host_device_create", {
        // SAFETY: `out`: the C caller's pointer, valid or NULL by this function's contract.
        let out = unsafe { c_handle_out(WHAT, out) }?;
        let p = plan_of(WHAT, plan)?;
        // SAFETY: `addrs`: the C caller's pointer, valid or NULL by this function's contract.
        let a = unsafe { proxy_abi::boundary::c_in(WHAT, "addrs", addrs) }?;
        check_addresses(WHAT, &p, a)?;
        let rank = p.params.rank;
        let d = HostDevice {
            plan: p,
            addrs: Addresses {
                input: a.input,
                output: a.output,
                scratch: a.scratch,
                words: a.words,
                word_stride: a.word_stride,
            },
            dev: Arc::new(Mutex::new(Device::new(rank, None))),
            stop: Arc::new(AtomicBool::new(false)),
            done: Arc::new(OneShot::new()),
            thread: None,
            attached: None,
        };
        *out = insert_live(WHAT, "host device", &DEVICES, d)?;
        Ok(())
    })
}

/// The word addresses of a C array of host-word pointers (NULL with count 0: none).
///
/// # Safety
/// `words` NULL or readable for `n` pointers.
unsafe fn word_list(
    what: &str,
    name: &str,
    words: *const *mut NccomHostWord,
    n: u32,
) -> Result<Vec<u64>, NrtStatus> {
    // SAFETY: the caller's contract.
    let ws = unsafe { c_slice(what, name, words, n as usize) }?;
    ws.iter()
        .map(|&w| {
            if w.is_null() || !w.is_aligned() {
                bad(what, format_args!("{name}: a NULL or misaligned host word"))
            } else {
                Ok(w as usize as u64)
            }
        })
        .collect()
}

/// Launches `executions` executions of the plan's block schedule: the net stage (writes 1 to
/// every `net_triggers` word, and to every `barrier_triggers` word with them, as the seed gates
/// the barrier task at the net stage; then waits until the network task consumed each net
/// trigger: the trigger words of the network task, one per stream of the plan; none: no
/// net-stage gate), each execution's blocks on every stream, then the barrier wait (until
/// `*barrier_done` rose by one since the launch; NULL: no wait). The barrier task thus runs
/// beside the collective (docs/design/05-device-model.md, "Where the barrier is triggered"). A launch in flight, or a library thread
/// running one, is stopped first. Nothing is touched before the next poll.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad device; `NRT_INVALID` for a NULL
/// array with a non-zero count, a NULL or misaligned word, or more than 4 trigger words of
/// either kind.
///
/// # Safety
/// The arrays NULL or readable for their counts. The plan's buffers and host words (at the
/// device's addresses), the trigger words and `barrier_done` stay valid, and are accessed by
/// nobody but this device and the proxy as the protocol allows, until the launch is done,
/// another launch replaces it, or the device is destroyed.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_host_device_launch(
    dev: *mut NrtProxyHostDevice,
    executions: u32,
    net_triggers: *const *mut NccomHostWord,
    n_net_triggers: u32,
    barrier_triggers: *const *mut NccomHostWord,
    n_barrier_triggers: u32,
    barrier_done: *mut NccomHostWord,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_host_device_launch", {
        with_device(WHAT, dev, |d| {
            if n_net_triggers > 4 || n_barrier_triggers > 4 {
                return bad(
                    WHAT,
                    format_args!(
                        "{n_net_triggers} net and {n_barrier_triggers} barrier trigger words: \
                         at most 4 each"
                    ),
                );
            }
            // SAFETY: the caller's contract (arrays readable for their counts).
            let net = unsafe { word_list(WHAT, "net_triggers", net_triggers, n_net_triggers) }?;
            // SAFETY: as above.
            let barrier = unsafe {
                word_list(
                    WHAT,
                    "barrier_triggers",
                    barrier_triggers,
                    n_barrier_triggers,
                )
            }?;
            if !barrier_done.is_null() && !barrier_done.is_aligned() {
                return bad(WHAT, format_args!("barrier_done is misaligned"));
            }
            d.stop_thread();
            d.done = Arc::new(OneShot::new());
            let job = Job {
                blocks: JobBlock::of_plans(&d.plan, &d.addrs),
                schedule: d.plan.schedule(executions),
                net_triggers: net,
                barrier_triggers: barrier,
                barrier_done: (!barrier_done.is_null()).then_some(barrier_done as usize as u64),
                barrier_at: BarrierAt::default(),
            };
            // SAFETY: the caller's contract: every address of the job stays valid for the
            // accesses of its program until the launch is done, replaced or the device is
            // destroyed (which abandons it first).
            unsafe { lock(&d.dev).launch(job) };
            Ok(())
        })
    })
}

/// One poll of the launch, never blocking: `*state` becomes `NRT_PROXY_DEVICE_PENDING` (it
/// waits for a host word; poll again), `NRT_PROXY_DEVICE_DONE` (every execution and the barrier
/// completed) or `NRT_PROXY_DEVICE_IDLE` (nothing launched).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE`; `NRT_INVALID` for a NULL `state` or a device
/// whose launch runs on a library thread (`nrt_proxy_host_device_start`); `NRT_FAILURE` when
/// the proxy broke the protocol (the log and the refusal text name the word; every later poll
/// answers the same until the next launch).
///
/// # Safety
/// `state` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_host_device_poll(
    dev: *mut NrtProxyHostDevice,
    state: *mut u32,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_host_device_poll", {
        // SAFETY: `state`: the C caller's pointer, valid or NULL by this function's contract.
        let state = unsafe { c_out(WHAT, "state", state) }?;
        with_device(WHAT, dev, |d| {
            if d.thread.is_some() {
                return bad(
                    WHAT,
                    format_args!("the launch runs on a library thread: wait for it instead"),
                );
            }
            let env = Ringing(d.attached.as_ref().map(|(b, _)| &**b));
            match lock(&d.dev).poll(&env) {
                Ok(DevicePoll::Pending { .. }) => *state = NRT_PROXY_DEVICE_PENDING,
                Ok(DevicePoll::Done) => *state = NRT_PROXY_DEVICE_DONE,
                Ok(DevicePoll::Idle) => *state = NRT_PROXY_DEVICE_IDLE,
                Err(e) => {
                    proxy_abi::refusal::refuse(WHAT, "device error", format_args!("{e}"));
                    return Err(NrtStatus::Failure);
                }
            }
            Ok(())
        })
    })
}

/// Runs the launch on a thread of the library (`host-device-<rank>`): it polls, spinning
/// briefly, then yielding, then napping 50 µs between polls that found nothing to do, until the
/// launch is done or fails, or the device is relaunched or destroyed. `nrt_proxy_host_device_wait`
/// waits for it.
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE`; `NRT_INVALID` when a thread runs already;
/// `NRT_RESOURCE` when the thread cannot be created.
///
/// # Safety
/// None beyond the C contract (the launch's).
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_host_device_start(dev: *mut NrtProxyHostDevice) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_host_device_start", {
        with_device(WHAT, dev, |d| {
            if d.thread.is_some() {
                return bad(
                    WHAT,
                    format_args!("a library thread runs the launch already"),
                );
            }
            d.done = Arc::new(OneShot::new());
            let (device, stop, done) = (d.dev.clone(), d.stop.clone(), d.done.clone());
            let attached = d.attached.clone();
            let rank = d.plan.params.rank;
            let t = std::thread::Builder::new()
                .name(format!("host-device-{rank}"))
                .spawn(move || {
                    done.set(match attached {
                        None => run(&device, &stop),
                        Some((bells, nap)) => run_belled(&device, &stop, &bells, nap),
                    });
                })
                .map_err(|e| {
                    log::error!("{WHAT}: cannot create the device thread: {e}");
                    NrtStatus::Resource
                })?;
            d.thread = Some(t);
            Ok(())
        })
    })
}

/// The library thread's loop: polls until done, failed, idle or stopped.
fn run(device: &Mutex<Device>, stop: &AtomicBool) -> Result<(), String> {
    // The project's one backoff (`base::backoff`), as the emulator's device thread uses it: a
    // few hot polls, then yields, then short naps (a device waits on the network, which takes
    // microseconds at least).
    let mut backoff = Backoff::new(BackoffPolicy {
        spins: 63,
        yields: 192,
        nap_ns: 50_000,
        max_nap_ns: 50_000,
    });
    loop {
        if stop.load(Ordering::Acquire) {
            return Err("stopped before the launch completed".into());
        }
        match lock(device).poll(&()) {
            Ok(DevicePoll::Done) => return Ok(()),
            Ok(DevicePoll::Idle) => return Err("nothing launched".into()),
            Ok(DevicePoll::Pending { .. }) => {}
            Err(e) => return Err(e.to_string()),
        }
        backoff.pause(&StdPause);
    }
}

/// The library thread's loop of an attached device: polls until done, failed, idle or
/// stopped; a poll that wrote host words rings the comm's queue; while it waits for the proxy
/// it spins briefly, yields a few times, then sleeps until the comm's slot moves (a ring) or
/// `nap` passed (a missed ring costs at most that). No lost wake-up: it naps on the comm's
/// `WaitCell`, which keeps a ring that lands between the poll and the nap.
fn run_belled(
    device: &Mutex<Device>,
    stop: &AtomicBool,
    bells: &CommBells,
    nap: Duration,
) -> Result<(), String> {
    let nap_ns = u64::try_from(nap.as_nanos()).unwrap_or(u64::MAX);
    let mut backoff = Backoff::new(BackoffPolicy {
        spins: 63,
        yields: BELLED_YIELDS,
        nap_ns,
        max_nap_ns: nap_ns,
    });
    let env = Ringing(Some(bells));
    let pause = CommNap { bells, stop };
    let mut last = None;
    loop {
        if stop.load(Ordering::Acquire) {
            return Err("stopped before the launch completed".into());
        }
        let mut d = lock(device);
        match d.poll(&env) {
            Ok(DevicePoll::Done) => return Ok(()),
            Ok(DevicePoll::Idle) => return Err("nothing launched".into()),
            // Progress in any stream (not only a change of the answered wait) spins again.
            Ok(DevicePoll::Pending { .. }) => {
                let progress = d.progress();
                if last != Some(progress) {
                    last = Some(progress);
                    backoff.reset();
                }
            }
            Err(e) => return Err(e.to_string()),
        }
        drop(d);
        backoff.pause(&pause);
    }
}

/// How an attached device's thread waits: yields, and naps on its comm's wake word.
struct CommNap<'a> {
    bells: &'a CommBells,
    stop: &'a AtomicBool,
}

impl Pause for CommNap<'_> {
    fn yield_now(&self) {
        std::thread::yield_now();
    }

    fn nap(&self, ns: u64) {
        self.bells.device_nap(ns, self.stop);
    }
}

/// Yields of an attached device's thread before it naps (`proxy-perf`'s `BELLED_YIELDS`).
const BELLED_YIELDS: u32 = 8;

/// Attaches a host device to the comm it plays the device of: from then on, every poll that
/// wrote host words (a trigger, a host index) rings the comm's proxy queue, so its worker may
/// nap instead of yielding (`nrt_proxy_config_t.worker_nap_us`), and a library thread
/// (`nrt_proxy_host_device_start`) sleeps while it waits for the proxy until the comm's slot
/// moves (for a group comm: any slot of the group), up to the instance's `worker_nap_us`
/// (1000 µs when 0). One host device per comm; attach again to move it to another comm (its
/// destroy detaches it).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a bad device or comm; `NRT_INVALID` when
/// the comm is not the plan's rank (its rank or size differ from the plan's), has another host
/// device attached, or a library thread runs (attach before `nrt_proxy_host_device_start`). Like any call on the comm, not
/// concurrently with another call on it.
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_host_device_attach(
    dev: *mut NrtProxyHostDevice,
    comm: *mut NrtProxyComm,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_host_device_attach", {
        let (bells, rank, nranks, nap) = with_comm(WHAT, comm, |e| {
            Ok((
                e.bells.clone(),
                e.rank,
                e.nranks,
                e.inst.cfg.worker_nap.unwrap_or(BELLED_NAP),
            ))
        })?;
        with_device(WHAT, dev, |d| {
            let p = &d.plan.params;
            if p.rank != rank || p.nranks != nranks {
                return bad(
                    WHAT,
                    format_args!(
                        "the device plays rank {} of {}, the comm is rank {rank} of {nranks}",
                        p.rank, p.nranks
                    ),
                );
            }
            if d.thread.is_some() {
                return bad(
                    WHAT,
                    format_args!("a library thread runs a launch: attach before starting it"),
                );
            }
            if d.attached
                .as_ref()
                .is_some_and(|(b, _)| Arc::ptr_eq(b, &bells))
            {
                return Ok(());
            }
            if !bells.claim_device() {
                return bad(
                    WHAT,
                    format_args!("the comm has another host device attached"),
                );
            }
            if let Some((old, _)) = d.attached.replace((bells, nap)) {
                old.release_device();
            }
            Ok(())
        })
    })
}

/// Waits at most `timeout_ms` milliseconds for the library thread's launch
/// (`nrt_proxy_host_device_start`) to end, and joins the thread once it has.
///
/// Returns `NRT_SUCCESS` when the launch completed; `NRT_TIMEOUT` when it still runs (it goes
/// on; wait again); `NRT_FAILURE` when it failed (the refusal text names the word);
/// `NRT_INVALID_HANDLE`; `NRT_INVALID` when no library thread was started.
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_host_device_wait(
    dev: *mut NrtProxyHostDevice,
    timeout_ms: u64,
) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_host_device_wait", {
        // The handle is released while waiting: a destroy from another thread is then refused
        // as "in use" only for the instant of each look.
        let done = with_device(WHAT, dev, |d| {
            if d.thread.is_none() {
                return bad(WHAT, format_args!("no library thread was started"));
            }
            Ok(d.done.clone())
        })?;
        let timeout_ns = timeout_ms.saturating_mul(1_000_000);
        let outcome = done.wait(&ThreadPark, &MonotonicClock, Some(timeout_ns));
        match outcome {
            None => Err(NrtStatus::Timeout),
            Some(r) => with_device(WHAT, dev, |d| {
                if let Some(t) = d.thread.take() {
                    let _ = t.join();
                }
                r.map_err(|e| {
                    proxy_abi::refusal::refuse(WHAT, "device error", format_args!("{e}"));
                    NrtStatus::Failure
                })
            }),
        }
    })
}

/// Destroys a host device: a library thread is stopped and joined, a launch in flight is
/// abandoned (its words stay as the device left them).
///
/// Returns `NRT_SUCCESS`; `NRT_INVALID_HANDLE` for a NULL, destroyed or unknown device.
///
/// # Safety
/// None beyond the C contract.
#[no_mangle]
pub unsafe extern "C" fn nrt_proxy_host_device_destroy(dev: *mut NrtProxyHostDevice) -> NRT_STATUS {
    entry!(WHAT = "nrt_proxy_host_device_destroy", {
        let h = dev.addr();
        let mut d = remove_live_retrying(WHAT, "host device", &DEVICES, h)?;
        d.stop_thread();
        lock(&d.dev).abandon();
        if let Some((b, _)) = d.attached.take() {
            b.release_device();
        }
        Ok(())
    })
}
