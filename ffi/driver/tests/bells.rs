//! Bells through C (ABI 1.5): a worker-mode instance whose devices ring
//! (`nrt_proxy_config_t.worker_nap_us`) completes 2-rank all-reduces with its workers napping,
//! each nap ended by a ring: the host devices attached to their comms
//! (`nrt_proxy_host_device_attach`) on library threads, and a runtime's own device loop that
//! calls `nrt_proxy_notify`. The naps are 10 s long and every wait is given 5 s, so a collective
//! that completes shows that rings, not the nap bound, woke the sleepers.

use std::ffi::CString;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nrt_proxy::bells::{driver_activity, COUNTS};
use nrt_proxy::*;
use proxy_abi::*;
use proxy_core::driver::dump::DriverActivity;

mod common;
use common::plan::{layout, Fifos, PlanBlocks, PlanMemory};

macro_rules! expect {
    ($want:expr, $call:expr) => {{
        // SAFETY: each call passes valid arguments (or ones the function checks).
        let got = unsafe { $call };
        assert_eq!(got, $want, "{}", stringify!($call));
    }};
}

/// The tests share the process's ring counts: one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static S: Mutex<()> = Mutex::new(());
    S.lock().unwrap_or_else(|e| e.into_inner())
}

/// The nap bound of these tests: far longer than any wait they allow (5 s).
const NAP_US: u32 = NRT_PROXY_MAX_NAP_US;
const WAIT_MS: u64 = 5_000;
const RANKS: u32 = 2;
/// Two int32: 8 B per rank.
const COUNT: u64 = 2;

unsafe extern "C" fn inc(w: *mut NccomHostWord, v: u32) {
    // SAFETY: the proxy passes a host word of the plan (aligned, live for the task).
    unsafe { AtomicU32::from_ptr(w) }.fetch_add(v, Ordering::Release);
}

static CALLBACKS: NccomDeviceCallbacks = NccomDeviceCallbacks {
    nec_inc_semaphore: Some(inc),
    nec_load_host_index: None,
    nec_store_host_index: None,
};

/// One rank: its comm, plan, host device, buffers, words, FIFOs and trigger word.
struct Rank {
    comm: *mut NrtProxyComm,
    plan: *mut NrtProxyPlan,
    dev: *mut NrtProxyHostDevice,
    addrs: NrtProxyPlanAddresses,
    mem: [Vec<u64>; 4],
    _fifos: Vec<Fifos>,
    blocks: Vec<NrtProxyBlock>,
    trigger: Box<AtomicU32>,
    /// The barrier task's trigger word and this rank's barrier-done semaphore.
    barrier_trigger: Box<AtomicU32>,
    done: Box<AtomicU32>,
}

impl Rank {
    fn input(&mut self) -> &mut [i32] {
        // SAFETY: the input buffer holds at least COUNT i32 (the plan's layout).
        unsafe { std::slice::from_raw_parts_mut(self.mem[0].as_mut_ptr().cast(), COUNT as usize) }
    }

    fn output(&self) -> Vec<i32> {
        // SAFETY: as `input`, for the output buffer.
        unsafe { std::slice::from_raw_parts(self.mem[1].as_ptr().cast(), COUNT as usize) }.to_vec()
    }

    /// Arms the trigger and submits one execution as task `id`; launches the device.
    fn submit_and_launch(&mut self, id: u32) {
        self.submit_and_launch_with(id, None);
    }

    /// As `submit_and_launch`, and with `done_all` (every rank's barrier-done semaphore; the
    /// leader, rank 0, raises them) a barrier task `id + 5` after the network task, which the
    /// device's launch waits for.
    fn submit_and_launch_with(&mut self, id: u32, done_all: Option<&[*mut u32]>) {
        self.trigger.store(0xFFFF_FFFF, Ordering::Release);
        let trig = [self.trigger.as_ptr()];
        let task = NrtProxyNetworkTask {
            struct_size: size_of::<NrtProxyNetworkTask>() as u32,
            task_id: id,
            blocks: self.blocks.as_ptr(),
            n_blocks: self.blocks.len(),
            schedule: ptr::null(),
            n_schedule: 0,
            trigger_words: trig.as_ptr(),
            n_trigger_words: 1,
            flags: NRT_PROXY_TASK_WAIT_FOR_DEVICE,
            reserved: 0,
            timeout_ms: WAIT_MS,
        };
        expect!(NRT_SUCCESS, nrt_proxy_submit_network(self.comm, &task));
        let Some(done_all) = done_all else {
            expect!(
                NRT_SUCCESS,
                nrt_proxy_host_device_launch(
                    self.dev,
                    1,
                    trig.as_ptr(),
                    1,
                    ptr::null(),
                    0,
                    ptr::null_mut()
                )
            );
            return;
        };
        self.barrier_trigger.store(0xFFFF_FFFF, Ordering::Release);
        let btrig = [self.barrier_trigger.as_ptr()];
        let b = NrtProxyBarrierTask {
            struct_size: size_of::<NrtProxyBarrierTask>() as u32,
            task_id: id + 5,
            trigger_words: btrig.as_ptr(),
            n_trigger_words: 1,
            done_semaphores: done_all.as_ptr(),
            n_done_semaphores: done_all.len(),
            flags: 0,
            reserved: 0,
            timeout_ms: WAIT_MS,
        };
        expect!(NRT_SUCCESS, nrt_proxy_submit_barrier(self.comm, &b));
        expect!(
            NRT_SUCCESS,
            nrt_proxy_host_device_launch(
                self.dev,
                1,
                trig.as_ptr(),
                1,
                btrig.as_ptr(),
                1,
                self.done.as_ptr()
            )
        );
    }
}

/// A worker-mode instance (spin 0, naps of `NAP_US`), a group of 2, each rank's comm joined
/// with its plan and host device for an 8 B i32 sum all-reduce.
fn world() -> (*mut NrtProxy, *mut NrtProxyGroup, Vec<Rank>) {
    let lib = CString::new(common::progress_library().to_str().expect("utf-8 path")).unwrap();
    let mut cfg = std::mem::MaybeUninit::<NrtProxyConfig>::uninit();
    expect!(NRT_SUCCESS, nrt_proxy_config_init(cfg.as_mut_ptr()));
    // SAFETY: initialized above.
    let mut cfg = unsafe { cfg.assume_init() };
    cfg.drive_mode = NRT_PROXY_DRIVE_THREAD;
    cfg.spin_us = 0;
    cfg.worker_nap_us = NAP_US;
    // The string outlives init (the library copies what it keeps).
    cfg.progress_lib = lib.as_ptr();
    let mut inst = ptr::null_mut();
    expect!(NRT_SUCCESS, nrt_proxy_init(&cfg, &mut inst));
    let mut g = ptr::null_mut();
    expect!(NRT_SUCCESS, nrt_proxy_group_create(inst, RANKS, &mut g));
    let ranks = (0..RANKS).map(|r| rank(inst, g, r)).collect();
    (inst, g, ranks)
}

fn rank(inst: *mut NrtProxy, g: *mut NrtProxyGroup, r: u32) -> Rank {
    let mut cc = std::mem::MaybeUninit::<NrtProxyCommConfig>::uninit();
    expect!(NRT_SUCCESS, nrt_proxy_comm_config_init(cc.as_mut_ptr()));
    // SAFETY: initialized above.
    let mut cc = unsafe { cc.assume_init() };
    cc.rank = r;
    cc.nranks = RANKS;
    cc.comm_id = 41;
    cc.group = g;
    cc.callbacks = &CALLBACKS;
    let mut comm = ptr::null_mut();
    expect!(NRT_SUCCESS, nrt_proxy_comm_create(inst, &cc, &mut comm));
    expect!(NRT_SUCCESS, nrt_proxy_comm_join(comm));

    let mut pp = std::mem::MaybeUninit::<NrtProxyPlanParams>::uninit();
    expect!(NRT_SUCCESS, nrt_proxy_plan_params_init(pp.as_mut_ptr()));
    // SAFETY: initialized above.
    let mut pp = unsafe { pp.assume_init() };
    pp.collective = NRT_PROXY_COLL_ALL_REDUCE;
    pp.dtype = NRT_PROXY_DTYPE_I32;
    pp.op = NRT_PROXY_REDOP_SUM;
    pp.rank = r;
    pp.nranks = RANKS;
    pp.count = COUNT;
    let mut plan = ptr::null_mut();
    expect!(NRT_SUCCESS, nrt_proxy_plan_create(&pp, &mut plan));
    let l = layout(plan);
    let PlanMemory { mem, addrs } = PlanMemory::new(&l);
    let PlanBlocks { fifos, blocks } = PlanBlocks::new(plan, &l, &addrs);
    let mut dev = ptr::null_mut();
    expect!(
        NRT_SUCCESS,
        nrt_proxy_host_device_create(plan, &addrs, &mut dev)
    );
    Rank {
        comm,
        plan,
        dev,
        addrs,
        mem,
        _fifos: fifos,
        blocks,
        trigger: Box::new(AtomicU32::new(0)),
        barrier_trigger: Box::new(AtomicU32::new(0)),
        done: Box::new(AtomicU32::new(0)),
    }
}

fn teardown(inst: *mut NrtProxy, g: *mut NrtProxyGroup, ranks: Vec<Rank>) {
    for k in ranks {
        expect!(NRT_SUCCESS, nrt_proxy_comm_leave(k.comm, WAIT_MS));
        expect!(NRT_SUCCESS, nrt_proxy_comm_destroy(k.comm));
        expect!(NRT_SUCCESS, nrt_proxy_host_device_destroy(k.dev));
        expect!(NRT_SUCCESS, nrt_proxy_plan_destroy(k.plan));
    }
    expect!(NRT_SUCCESS, nrt_proxy_group_destroy(g));
    expect!(NRT_SUCCESS, nrt_proxy_fini(inst));
}

/// Sets execution `e`'s inputs (rank r, word i: r·1000 + e·7 + i).
fn fill(ranks: &mut [Rank], e: u32) {
    for (r, k) in ranks.iter_mut().enumerate() {
        for (i, v) in k.input().iter_mut().enumerate() {
            *v = (r as i32) * 1000 + (e as i32) * 7 + i as i32;
        }
    }
}

fn check(ranks: &[Rank], e: u32) {
    let want: Vec<i32> = (0..COUNT as i32)
        .map(|i| {
            (0..RANKS as i32)
                .map(|r| r * 1000 + (e as i32) * 7 + i)
                .sum()
        })
        .collect();
    for (r, k) in ranks.iter().enumerate() {
        assert_eq!(k.output(), want, "execution {e}, rank {r}");
    }
}

/// Waits (at most 5 s) until the worker of `comm`'s queue naps.
fn until_napping(comm: *mut NrtProxyComm) {
    let t0 = Instant::now();
    while driver_activity(comm) != Some(DriverActivity::Napping) {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the worker never napped: {:?}",
            driver_activity(comm)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Host devices attached to their comms, on library threads: 20 executions (a network task
/// and a barrier task each) complete, each within 5 s although every nap (worker and device
/// thread) may last 10 s. Before each execution's devices are started, both workers are seen
/// napping on their submitted tasks: the device's first host write must ring them awake; the
/// devices wait for the barrier leader's raise of their done semaphores, which rings them.
#[test]
fn attached_host_devices_ring_napping_workers() {
    let _s = serial();
    let (inst, g, mut ranks) = world();
    // A bad attachment: rank 0's device to rank 1's comm.
    expect!(
        NRT_INVALID,
        nrt_proxy_host_device_attach(ranks[0].dev, ranks[1].comm)
    );
    expect!(
        NRT_INVALID_HANDLE,
        nrt_proxy_host_device_attach(ranks[0].dev, ptr::null_mut())
    );
    for k in &ranks {
        expect!(NRT_SUCCESS, nrt_proxy_host_device_attach(k.dev, k.comm));
        // Again: nothing changes.
        expect!(NRT_SUCCESS, nrt_proxy_host_device_attach(k.dev, k.comm));
    }
    // A second device of rank 0 is refused its comm (one device thread naps on a comm's
    // wake word), and may take it once the first is gone.
    let mut second = ptr::null_mut();
    expect!(
        NRT_SUCCESS,
        nrt_proxy_host_device_create(ranks[0].plan, &ranks[0].addrs, &mut second)
    );
    expect!(
        NRT_INVALID,
        nrt_proxy_host_device_attach(second, ranks[0].comm)
    );
    expect!(NRT_SUCCESS, nrt_proxy_host_device_destroy(ranks[0].dev));
    expect!(
        NRT_SUCCESS,
        nrt_proxy_host_device_attach(second, ranks[0].comm)
    );
    ranks[0].dev = second;
    let rings0 = COUNTS.driver_rings.load(Ordering::Relaxed);
    let done_all: Vec<*mut u32> = ranks.iter().map(|k| k.done.as_ptr()).collect();
    const EXECUTIONS: u32 = 20;
    for e in 0..EXECUTIONS {
        fill(&mut ranks, e);
        for (r, k) in ranks.iter_mut().enumerate() {
            k.submit_and_launch_with(e * 10 + r as u32, Some(&done_all));
        }
        for k in &ranks {
            until_napping(k.comm);
        }
        let t0 = Instant::now();
        for k in &ranks {
            expect!(NRT_SUCCESS, nrt_proxy_host_device_start(k.dev));
        }
        for (r, k) in ranks.iter().enumerate() {
            // Completion order: with the barrier triggered at the launch (the default), the
            // barrier task may end before the network task.
            let mut ended = Vec::new();
            for _ in 0..2 {
                let mut rec = NrtProxyTaskRecord::default();
                expect!(NRT_SUCCESS, nrt_proxy_wait(k.comm, WAIT_MS, &mut rec));
                ended.push((rec.task_id, rec.progress_status));
            }
            ended.sort_unstable();
            let id = e * 10 + r as u32;
            assert_eq!(ended, [(id, NRT_SUCCESS), (id + 5, NRT_SUCCESS)]);
            expect!(NRT_SUCCESS, nrt_proxy_host_device_wait(k.dev, WAIT_MS));
            assert_eq!(
                k.done.load(Ordering::Acquire),
                e + 1,
                "rank {r}'s barrier-done"
            );
        }
        // Less than half a nap: something rang every sleeper that this execution waited on.
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        check(&ranks, e);
    }
    // Every execution's devices wrote host words at least twice per rank (the trigger, the
    // posts) and rang each time.
    let rings = COUNTS.driver_rings.load(Ordering::Relaxed) - rings0;
    assert!(
        rings >= u64::from(EXECUTIONS * RANKS * 2),
        "{rings} rings in {EXECUTIONS} executions"
    );
    teardown(inst, g, ranks);
}

/// A runtime's own device loop (here: the host devices polled by this thread, not attached, so
/// they ring nothing themselves) calls `nrt_proxy_notify` after every poll: 20 executions
/// complete with the workers napping 10 s at a time. `nrt_proxy_notify` on a NULL or destroyed
/// comm answers `NRT_INVALID_HANDLE`.
#[test]
fn a_runtime_device_rings_with_notify() {
    let _s = serial();
    let (inst, g, mut ranks) = world();
    expect!(NRT_INVALID_HANDLE, nrt_proxy_notify(ptr::null_mut()));
    const EXECUTIONS: u32 = 20;
    for e in 0..EXECUTIONS {
        fill(&mut ranks, e);
        for (r, k) in ranks.iter_mut().enumerate() {
            k.submit_and_launch(e * 10 + r as u32);
        }
        for k in &ranks {
            until_napping(k.comm);
        }
        let t0 = Instant::now();
        let mut done = [false; RANKS as usize];
        let mut got = 0;
        while got < RANKS as usize || done.iter().any(|d| !d) {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "execution {e} stalled"
            );
            for (r, k) in ranks.iter().enumerate() {
                let mut state = 0;
                expect!(NRT_SUCCESS, nrt_proxy_host_device_poll(k.dev, &mut state));
                done[r] = state == NRT_PROXY_DEVICE_DONE;
                expect!(NRT_SUCCESS, nrt_proxy_notify(k.comm));
                let mut rec = NrtProxyTaskRecord::default();
                // SAFETY: a live comm and a writable record.
                match unsafe { nrt_proxy_try_pop(k.comm, &mut rec) } {
                    NRT_SUCCESS => {
                        assert_eq!(rec.progress_status, NRT_SUCCESS);
                        got += 1;
                    }
                    s => assert_eq!(s, NRT_QUEUE_EMPTY),
                }
            }
            std::thread::yield_now();
        }
        check(&ranks, e);
    }
    let c0 = ranks[0].comm;
    teardown(inst, g, ranks);
    expect!(NRT_INVALID_HANDLE, nrt_proxy_notify(c0));
}
