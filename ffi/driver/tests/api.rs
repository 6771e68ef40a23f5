//! The C entry points of `libnrt_proxy`, called from Rust through the rlib: every kind of bad
//! input answers its status and changes nothing; full rings keep the task with the caller;
//! abort, timeout, health and last error; handles of another loaded copy of the library; a
//! progress half of the wrong ABI major; the library's dynamic symbols.

mod common;

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::process::Command;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

use nrt_proxy::*;
use proxy_abi::*;

/// The tests share the process (and the library's tables): one at a time, so the live-object
/// counts they check are theirs.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A test that failed before its teardown leaves objects behind: say so, rather than let
    // the next test's counts fail for it.
    assert_eq!(
        live(),
        (0, 0, 0),
        "objects left live by an earlier (failed) test"
    );
    g
}

fn lib_cstring() -> CString {
    CString::new(common::progress_library().to_str().expect("utf-8 path")).expect("no NUL")
}

fn config(mode: u32) -> NrtProxyConfig {
    let mut c = std::mem::MaybeUninit::<NrtProxyConfig>::uninit();
    // SAFETY: a writable config.
    let s = unsafe { nrt_proxy_config_init(c.as_mut_ptr()) };
    assert_eq!(s, NRT_SUCCESS);
    // SAFETY: initialized by the call above.
    let mut c = unsafe { c.assume_init() };
    c.drive_mode = mode;
    c.spin_us = 0;
    c
}

fn init(c: &NrtProxyConfig, lib: &CString) -> *mut NrtProxy {
    let mut c = *c;
    c.progress_lib = lib.as_ptr();
    let mut inst = ptr::null_mut();
    // SAFETY: valid config and out-parameter.
    assert_eq!(unsafe { nrt_proxy_init(&c, &mut inst) }, NRT_SUCCESS);
    assert!(!inst.is_null());
    inst
}

fn status(s: NRT_STATUS) -> String {
    // SAFETY: a static NUL-terminated string.
    unsafe { CStr::from_ptr(nrt_get_status_as_str(s)) }
        .to_string_lossy()
        .into_owned()
}

macro_rules! expect {
    ($want:expr, $call:expr) => {{
        // SAFETY: the call's arguments are valid or deliberately bad in ways the library
        // checks (NULL, handles, lengths); no bad pointer is ever dereferenced by it.
        let got = unsafe { $call };
        assert_eq!(
            status(got),
            status($want),
            "{} answered {} ({got}), expected {}",
            stringify!($call),
            status(got),
            status($want)
        );
    }};
}

/// A comm of rank 0 of a fresh 2-rank group (rank 1 is never created: enough for tasks that
/// skip, wait for a trigger, or are refused).
fn comm0(inst: *mut NrtProxy) -> (*mut NrtProxyGroup, *mut NrtProxyComm) {
    comm0_with(inst, &CALLBACKS)
}

/// [`comm0`] with the device callbacks `cb`.
fn comm0_with(
    inst: *mut NrtProxy,
    cb: &'static NccomDeviceCallbacks,
) -> (*mut NrtProxyGroup, *mut NrtProxyComm) {
    let mut g = ptr::null_mut();
    expect!(NRT_SUCCESS, nrt_proxy_group_create(inst, 2, &mut g));
    let mut cc = std::mem::MaybeUninit::<NrtProxyCommConfig>::uninit();
    expect!(NRT_SUCCESS, nrt_proxy_comm_config_init(cc.as_mut_ptr()));
    // SAFETY: initialized above.
    let mut cc = unsafe { cc.assume_init() };
    cc.nranks = 2;
    cc.comm_id = 9;
    cc.group = g;
    cc.callbacks = cb;
    let mut c = ptr::null_mut();
    expect!(NRT_SUCCESS, nrt_proxy_comm_create(inst, &cc, &mut c));
    (g, c)
}

unsafe extern "C" fn inc(addr: *mut NccomHostWord, val: u32) {
    // SAFETY: the library calls it with a word it validated (non-null, aligned).
    unsafe { AtomicU32::from_ptr(addr) }.fetch_add(val, Ordering::Release);
}

static CALLBACKS: NccomDeviceCallbacks = NccomDeviceCallbacks {
    nec_inc_semaphore: Some(inc),
    nec_load_host_index: None,
    nec_store_host_index: None,
};

/// Host words of the valid test block (send idx, handshake, complete).
static WORDS: [AtomicU32; 8] = [const { AtomicU32::new(0) }; 8];
static BUF: [u8; 64] = [0; 64];

fn word_ptr(i: usize) -> *mut NccomHostWord {
    WORDS[i].as_ptr()
}

/// One valid send op (1 entry of 64 B to rank 1) and its source entry.
fn valid_fifos() -> (Vec<NetOpInfo>, Vec<NetSrcAddr>) {
    let op = NetOpInfo {
        send_peer: 1,
        recv_peer: NCCOM_NO_PEER,
        tag: 1,
        tx_entry_cnt: 1,
        data_type_sz: 1,
        post_send_idx_addr: word_ptr(0) as u64,
        send_handshake_sem_addr: word_ptr(1) as u64,
        send_complete_sem_addr: word_ptr(2) as u64,
        ..NetOpInfo::default()
    };
    let src = NetSrcAddr {
        net_op_idx: 0,
        mark: EXEC_COMPLETE,
        addr: BUF.as_ptr() as u64,
        size: 64,
        dest_rank: NCCOM_NO_PEER,
        reserved: 0,
    };
    (vec![op], vec![src])
}

fn block(ops: &[NetOpInfo], src: &[NetSrcAddr]) -> NrtProxyBlock {
    NrtProxyBlock {
        stream: 0,
        bb: 3,
        ops: ops.as_ptr(),
        n_ops: ops.len(),
        src: src.as_ptr(),
        n_src: src.len(),
        dst: ptr::null(),
        n_dst: 0,
    }
}

fn net_task(id: u32, blocks: &[NrtProxyBlock], flags: u32) -> NrtProxyNetworkTask {
    NrtProxyNetworkTask {
        struct_size: size_of::<NrtProxyNetworkTask>() as u32,
        task_id: id,
        blocks: blocks.as_ptr(),
        n_blocks: blocks.len(),
        schedule: ptr::null(),
        n_schedule: 0,
        trigger_words: ptr::null(),
        n_trigger_words: 0,
        flags,
        reserved: 0,
        timeout_ms: NRT_PROXY_TIMEOUT_DEFAULT,
    }
}

/// Live (comms, groups, instances) of the library.
fn live() -> (usize, usize, usize) {
    (live_comms(), live_groups(), live_instances())
}

/// Destroys the three (each twice: the second answers `NRT_INVALID_HANDLE`), and checks that
/// it leaves nothing live.
fn teardown(g: *mut NrtProxyGroup, c: *mut NrtProxyComm, inst: *mut NrtProxy) {
    expect!(NRT_SUCCESS, nrt_proxy_comm_destroy(c));
    expect!(NRT_INVALID_HANDLE, nrt_proxy_comm_destroy(c));
    expect!(NRT_SUCCESS, nrt_proxy_group_destroy(g));
    expect!(NRT_INVALID_HANDLE, nrt_proxy_group_destroy(g));
    expect!(NRT_SUCCESS, nrt_proxy_fini(inst));
    expect!(NRT_INVALID_HANDLE, nrt_proxy_fini(inst));
    assert_eq!(live(), (0, 0, 0));
}

#[test]
fn bad_configs_and_libraries_are_refused() {
    let _s = serial();
    let lib = lib_cstring();
    let mut inst = ptr::null_mut();
    expect!(NRT_INVALID, nrt_proxy_config_init(ptr::null_mut()));
    expect!(NRT_INVALID, nrt_proxy_init(&config(0), ptr::null_mut()));
    let bad = |f: &dyn Fn(&mut NrtProxyConfig)| {
        let mut c = config(NRT_PROXY_DRIVE_THREAD);
        c.progress_lib = lib.as_ptr();
        f(&mut c);
        c
    };
    for c in [
        bad(&|c| c.struct_size -= 8),
        bad(&|c| c.version = 2),
        bad(&|c| c.drive_mode = 7),
        bad(&|c| c.ranks_per_network_proxy = 0),
        bad(&|c| c.status_capacity = 3),
        bad(&|c| c.one_thread_per_core = 2),
        bad(&|c| c.worker_nap_us = NRT_PROXY_MAX_NAP_US + 1),
    ] {
        expect!(NRT_INVALID, nrt_proxy_init(&c, &mut inst));
        assert!(inst.is_null());
    }
    // A library that does not exist.
    let missing = c"/nonexistent/libnccom_proxy.so";
    expect!(
        NRT_INVALID,
        nrt_proxy_init(&bad(&|c| c.progress_lib = missing.as_ptr()), &mut inst)
    );
    // A progress half of ABI major 2.
    let fake = common::fake_progress("libfake_progress_v2.so", &[]);
    let fake = CString::new(fake.to_str().expect("utf-8")).expect("no NUL");
    expect!(
        NRT_INVALID,
        nrt_proxy_init(&bad(&|c| c.progress_lib = fake.as_ptr()), &mut inst)
    );
    assert!(inst.is_null());
    assert_eq!(live_instances(), 0);
    // The defaults and a good library work.
    let inst = init(&config(NRT_PROXY_DRIVE_THREAD), &lib);
    expect!(NRT_SUCCESS, nrt_proxy_fini(inst));
}

#[test]
fn stale_never_created_and_null_handles() {
    let _s = serial();
    let lib = lib_cstring();
    let inst = init(&config(NRT_PROXY_DRIVE_THREAD), &lib);
    let (g, c) = comm0(inst);
    let local = 7u64;
    let fakes: [*mut NrtProxyComm; 4] = [
        ptr::null_mut(),
        ptr::without_provenance_mut(0x1234),
        (&raw const local).cast_mut().cast(),
        // The group's handle is not a comm handle.
        g.cast(),
    ];
    let mut rec = NrtProxyTaskRecord::default();
    for f in fakes {
        expect!(NRT_INVALID_HANDLE, nrt_proxy_comm_join(f));
        expect!(NRT_INVALID_HANDLE, nrt_proxy_comm_leave(f, 10));
        expect!(NRT_INVALID_HANDLE, nrt_proxy_try_pop(f, &mut rec));
        expect!(NRT_INVALID_HANDLE, nrt_proxy_comm_abort(f));
        expect!(NRT_INVALID_HANDLE, nrt_proxy_comm_destroy(f));
    }
    expect!(NRT_INVALID_HANDLE, nrt_proxy_fini(c.cast()));
    expect!(
        NRT_INVALID_HANDLE,
        nrt_proxy_group_destroy(ptr::without_provenance_mut(0x1234))
    );
    let mut out = ptr::null_mut();
    expect!(
        NRT_INVALID_HANDLE,
        nrt_proxy_group_create(ptr::null_mut(), 2, &mut out)
    );
    expect!(NRT_INVALID, nrt_proxy_group_create(inst, 0, &mut out));
    teardown(g, c, inst);
    // Every call on the destroyed comm.
    expect!(NRT_INVALID_HANDLE, nrt_proxy_comm_join(c));
    expect!(NRT_INVALID_HANDLE, nrt_proxy_submit_network(c, ptr::null()));
    expect!(NRT_INVALID_HANDLE, nrt_proxy_wait(c, 1, &mut rec));
    expect!(NRT_INVALID_HANDLE, nrt_proxy_comm_abort(c));
}

#[test]
fn bad_submissions_are_refused_and_lose_nothing() {
    let _s = serial();
    let lib = lib_cstring();
    let inst = init(&config(NRT_PROXY_DRIVE_CALLER), &lib);
    let (g, c) = comm0(inst);
    let (ops, src) = valid_fifos();
    let good = [block(&ops, &src)];
    // Not joined yet.
    expect!(
        NRT_CLOSED,
        nrt_proxy_submit_network(c, &net_task(1, &good, NRT_PROXY_TASK_SKIP))
    );
    expect!(NRT_CLOSED, nrt_proxy_comm_leave(c, 10));
    expect!(NRT_SUCCESS, nrt_proxy_comm_join(c));
    expect!(NRT_INVALID, nrt_proxy_comm_join(c));
    expect!(NRT_INVALID, nrt_proxy_submit_network(c, ptr::null()));
    let with_block = |f: &dyn Fn(&mut NrtProxyBlock)| {
        let mut b = block(&ops, &src);
        f(&mut b);
        b
    };
    let bad_blocks = [
        with_block(&|b| b.stream = 4),
        with_block(&|b| b.bb = NCCOM_BB_NONE),
        with_block(&|b| b.n_ops = 0),
        with_block(&|b| b.ops = ptr::null()),
        with_block(&|b| b.n_src = 0),
        with_block(&|b| b.src = ptr::null()),
        with_block(&|b| b.n_dst = 1),
    ];
    for b in bad_blocks {
        let blocks = [b];
        expect!(
            NRT_INVALID,
            nrt_proxy_submit_network(c, &net_task(2, &blocks, 0))
        );
    }
    // Zero-length FIFOs: an op with no entries at all.
    let empty_op = [NetOpInfo {
        tx_entry_cnt: 0,
        ..ops[0]
    }];
    let blocks = [block(&empty_op, &[])];
    expect!(
        NRT_INVALID,
        nrt_proxy_submit_network(c, &net_task(2, &blocks, 0))
    );
    expect!(
        NRT_INVALID,
        nrt_proxy_submit_network(c, &net_task(2, &[], 0))
    );
    let mut t = net_task(2, &good, 0);
    t.struct_size -= 8;
    expect!(NRT_INVALID, nrt_proxy_submit_network(c, &t));
    let mut t = net_task(2, &good, 0x80);
    expect!(NRT_INVALID, nrt_proxy_submit_network(c, &t));
    t.flags = 0;
    let sched = [3u32, 4];
    t.schedule = sched.as_ptr();
    t.n_schedule = 2;
    expect!(NRT_INVALID, nrt_proxy_submit_network(c, &t));
    let mut t = net_task(2, &good, 0);
    let five = [word_ptr(3); 5];
    t.trigger_words = five.as_ptr();
    t.n_trigger_words = 5;
    expect!(NRT_INVALID, nrt_proxy_submit_network(c, &t));
    let misaligned = [word_ptr(3)
        .cast::<u8>()
        .wrapping_add(1)
        .cast::<NccomHostWord>()];
    t.trigger_words = misaligned.as_ptr();
    t.n_trigger_words = 1;
    expect!(NRT_INVALID, nrt_proxy_submit_network(c, &t));
    let null = [ptr::null_mut::<NccomHostWord>()];
    t.trigger_words = null.as_ptr();
    expect!(NRT_INVALID, nrt_proxy_submit_network(c, &t));
    // A barrier: NULL, bad words, bad flags.
    expect!(NRT_INVALID, nrt_proxy_submit_barrier(c, ptr::null()));
    let b = NrtProxyBarrierTask {
        struct_size: size_of::<NrtProxyBarrierTask>() as u32,
        task_id: 3,
        trigger_words: null.as_ptr(),
        n_trigger_words: 1,
        done_semaphores: ptr::null(),
        n_done_semaphores: 0,
        flags: 0,
        reserved: 0,
        timeout_ms: 0,
    };
    expect!(NRT_INVALID, nrt_proxy_submit_barrier(c, &b));
    expect!(
        NRT_INVALID,
        nrt_proxy_submit_barrier(
            c,
            &NrtProxyBarrierTask {
                n_trigger_words: 0,
                flags: NRT_PROXY_TASK_WAIT_FOR_DEVICE,
                ..b
            }
        )
    );
    expect!(
        NRT_INVALID,
        nrt_proxy_submit_barrier(
            c,
            &NrtProxyBarrierTask {
                n_trigger_words: 0,
                n_done_semaphores: 1,
                ..b
            }
        )
    );
    // Nothing was submitted.
    let mut rec = NrtProxyTaskRecord::default();
    expect!(NRT_QUEUE_EMPTY, nrt_proxy_try_pop(c, &mut rec));
    expect!(NRT_QUEUE_EMPTY, nrt_proxy_wait(c, 10, &mut rec));
    expect!(NRT_INVALID, nrt_proxy_try_pop(c, ptr::null_mut()));
    expect!(NRT_INVALID, nrt_proxy_resubmit(c, 1, 2));
    // Leave; then submit, leave, join are refused.
    expect!(NRT_SUCCESS, nrt_proxy_comm_leave(c, 10_000));
    expect!(NRT_CLOSED, nrt_proxy_comm_leave(c, 10));
    expect!(
        NRT_CLOSED,
        nrt_proxy_submit_network(c, &net_task(4, &good, NRT_PROXY_TASK_SKIP))
    );
    expect!(NRT_INVALID, nrt_proxy_comm_join(c));
    teardown(g, c, inst);
}

#[test]
fn a_full_ring_keeps_the_task_with_the_caller() {
    let _s = serial();
    let lib = lib_cstring();
    let mut cfg = config(NRT_PROXY_DRIVE_CALLER);
    cfg.submit_capacity = 2;
    cfg.status_capacity = 2;
    let inst = init(&cfg, &lib);
    let (g, c) = comm0(inst);
    expect!(NRT_SUCCESS, nrt_proxy_comm_join(c));
    let (ops, src) = valid_fifos();
    let blocks = [block(&ops, &src)];
    let skip = NRT_PROXY_TASK_SKIP | NRT_PROXY_TASK_KEEP;
    expect!(
        NRT_SUCCESS,
        nrt_proxy_submit_network(c, &net_task(1, &blocks, skip))
    );
    expect!(
        NRT_SUCCESS,
        nrt_proxy_submit_network(c, &net_task(2, &blocks, skip))
    );
    // Nobody drives (caller mode): the third does not fit, and stays with the caller.
    expect!(
        NRT_QUEUE_FULL,
        nrt_proxy_submit_network(c, &net_task(3, &blocks, skip))
    );
    let mut rec = NrtProxyTaskRecord::default();
    expect!(NRT_QUEUE_EMPTY, nrt_proxy_try_pop(c, &mut rec));
    let mut tick = 9;
    expect!(NRT_SUCCESS, nrt_proxy_tick(c, &mut tick));
    assert_eq!(tick, NRT_PROXY_TICK_PROGRESS);
    expect!(NRT_SUCCESS, nrt_proxy_drive_until(c, 2, 10_000, &mut rec));
    assert_eq!((rec.task_id, rec.comm_id, rec.streams), (2, 9, 1));
    assert_eq!(
        (rec.progress_status, rec.run_state),
        (NRT_SUCCESS, NRT_PROXY_RUN_STATE_DONE)
    );
    expect!(NRT_SUCCESS, nrt_proxy_try_pop(c, &mut rec));
    assert_eq!(
        rec.task_id, 1,
        "the record of task 1 was kept for the next pop"
    );
    // Room again: the caller submits task 3 now, and resubmits the kept task 1 as 4.
    expect!(
        NRT_SUCCESS,
        nrt_proxy_submit_network(c, &net_task(3, &blocks, skip))
    );
    expect!(NRT_SUCCESS, nrt_proxy_resubmit(c, 1, 4));
    expect!(NRT_QUEUE_FULL, nrt_proxy_resubmit(c, 2, 5));
    expect!(NRT_INVALID, nrt_proxy_resubmit(c, 77, 78));
    expect!(NRT_SUCCESS, nrt_proxy_wait(c, 10_000, &mut rec));
    assert_eq!(rec.task_id, 3);
    // After the full ring the same ids again: task 2 was kept.
    expect!(NRT_SUCCESS, nrt_proxy_resubmit(c, 2, 5));
    for want in [4, 5] {
        expect!(NRT_SUCCESS, nrt_proxy_wait(c, 10_000, &mut rec));
        assert_eq!((rec.task_id, rec.progress_status), (want, NRT_SUCCESS));
    }
    let mut s = 99;
    expect!(NRT_SUCCESS, nrt_proxy_comm_get_async_error(c, &mut s));
    assert_eq!(s, NRT_SUCCESS);
    expect!(NRT_SUCCESS, nrt_proxy_comm_dump(c, 1_000));
    teardown(g, c, inst);
}

/// Submits network task `id` of the valid block waiting for a trigger word nobody writes,
/// with the limit `timeout_ms` (the library copies the task).
fn submit_untriggered(c: *mut NrtProxyComm, id: u32, timeout_ms: u64) {
    let (ops, src) = valid_fifos();
    let blocks = [block(&ops, &src)];
    let trig = [word_ptr(6)];
    WORDS[6].store(0xFFFF_FFFF, Ordering::Release);
    let mut t = net_task(id, &blocks, NRT_PROXY_TASK_WAIT_FOR_DEVICE);
    t.trigger_words = trig.as_ptr();
    t.n_trigger_words = 1;
    t.timeout_ms = timeout_ms;
    expect!(NRT_SUCCESS, nrt_proxy_submit_network(c, &t));
}

fn last_error(c: *mut NrtProxyComm) -> String {
    let mut buf = [0 as c_char; 512];
    expect!(
        NRT_SUCCESS,
        nrt_proxy_comm_last_error(c, buf.as_mut_ptr(), buf.len())
    );
    // SAFETY: NUL-terminated by the library.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn abort_timeout_health_and_last_error() {
    let _s = serial();
    let lib = lib_cstring();
    let inst = init(&config(NRT_PROXY_DRIVE_THREAD), &lib);
    let (g, c) = comm0(inst);
    expect!(NRT_SUCCESS, nrt_proxy_comm_join(c));
    let mut tick = 0;
    expect!(NRT_INVALID, nrt_proxy_tick(c, &mut tick));
    // The refusal is the comm's last error, with its cause.
    let e = last_error(c);
    assert!(
        e.starts_with("nrt_proxy_tick: ") && e.ends_with("(NRT_INVALID)"),
        "{e}"
    );
    expect!(
        NRT_INVALID,
        nrt_proxy_comm_last_error(c, ptr::null_mut(), 8)
    );
    // A task that waits for a trigger word nobody writes, with a 20 ms limit: NRT_TIMEOUT.
    submit_untriggered(c, 1, 20);
    let mut rec = NrtProxyTaskRecord::default();
    expect!(NRT_SUCCESS, nrt_proxy_wait(c, 30_000, &mut rec));
    assert_eq!(
        (rec.task_id, status(rec.progress_status)),
        (1, status(NRT_TIMEOUT))
    );
    let mut s = 0;
    expect!(NRT_SUCCESS, nrt_proxy_comm_get_async_error(c, &mut s));
    assert_eq!(status(s), status(NRT_TIMEOUT));
    let e = last_error(c);
    assert!(e.contains("task 1") && e.contains("NRT_TIMEOUT"), "{e}");
    // Truncation to the buffer.
    let mut small = [0x55 as c_char; 5];
    expect!(
        NRT_SUCCESS,
        nrt_proxy_comm_last_error(c, small.as_mut_ptr(), small.len())
    );
    assert_eq!(small[4], 0);
    // A task without limit, aborted from another thread: NRT_CLOSED.
    submit_untriggered(c, 2, NRT_PROXY_TIMEOUT_NONE);
    let ch = c as usize;
    std::thread::spawn(move || {
        let c: *mut NrtProxyComm = ptr::without_provenance_mut(ch);
        expect!(NRT_SUCCESS, nrt_proxy_comm_abort(c));
        expect!(NRT_SUCCESS, nrt_proxy_comm_abort(c));
    })
    .join()
    .expect("abort thread");
    expect!(NRT_SUCCESS, nrt_proxy_wait(c, 30_000, &mut rec));
    assert_eq!(
        (rec.task_id, status(rec.progress_status)),
        (2, status(NRT_CLOSED))
    );
    // The first failure stays the comm's async error.
    expect!(NRT_SUCCESS, nrt_proxy_comm_get_async_error(c, &mut s));
    assert_eq!(status(s), status(NRT_TIMEOUT));
    // Invalidate: NULL refused by the progress half; a real range accepted (in-memory: no-op).
    expect!(
        NRT_INVALID,
        nrt_proxy_comm_invalidate_range(c, ptr::null(), 64)
    );
    expect!(
        NRT_SUCCESS,
        nrt_proxy_comm_invalidate_range(c, BUF.as_ptr().cast::<c_void>(), 64)
    );
    teardown(g, c, inst);
}

/// While set, [`blocking_load`] holds the calling thread (the worker, inside a tick).
static HOLD: AtomicBool = AtomicBool::new(false);
/// Set by [`blocking_load`] once it holds its caller.
static HELD: AtomicBool = AtomicBool::new(false);

/// A host-index read that blocks while [`HOLD`] is set: a device callback stuck in a call.
unsafe extern "C" fn blocking_load(addr: *mut NccomHostWord) -> u32 {
    let t0 = std::time::Instant::now();
    while HOLD.load(Ordering::Acquire) && t0.elapsed() < std::time::Duration::from_secs(30) {
        HELD.store(true, Ordering::Release);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // SAFETY: the library calls it with a word it validated (non-null, aligned).
    unsafe { AtomicU32::from_ptr(addr) }.load(Ordering::Acquire)
}

static BLOCKING_CALLBACKS: NccomDeviceCallbacks = NccomDeviceCallbacks {
    nec_inc_semaphore: Some(inc),
    nec_load_host_index: Some(blocking_load),
    nec_store_host_index: None,
};

/// `nrt_proxy_wait` times out either way when its task does not end, but says why from the
/// worker's heartbeat: a worker that ticks (the task waits for a device trigger) is a plain
/// timeout; one that began no tick in the whole wait (held inside a device callback) is
/// stuck, which the comm's last error says, with the queue's dump in the log.
#[test]
fn a_wait_on_a_stuck_worker_says_it_is_stuck() {
    let _s = serial();
    let lib = lib_cstring();
    let inst = init(&config(NRT_PROXY_DRIVE_THREAD), &lib);
    let (g, c) = comm0_with(inst, &BLOCKING_CALLBACKS);
    expect!(NRT_SUCCESS, nrt_proxy_comm_join(c));
    // A healthy worker: the task waits for a trigger nobody writes (limit 1.5 s).
    submit_untriggered(c, 1, 1500);
    let mut rec = NrtProxyTaskRecord::default();
    expect!(NRT_TIMEOUT, nrt_proxy_wait(c, 1100, &mut rec));
    let e = last_error(c);
    assert!(!e.contains("stuck"), "a ticking worker called stuck: {e}");
    expect!(NRT_SUCCESS, nrt_proxy_wait(c, 30_000, &mut rec));
    assert_eq!(
        (rec.task_id, status(rec.progress_status)),
        (1, status(NRT_TIMEOUT))
    );
    // A stuck worker: the send's host-index read holds it inside its tick.
    HELD.store(false, Ordering::Release);
    HOLD.store(true, Ordering::Release);
    let (ops, src) = valid_fifos();
    let blocks = [block(&ops, &src)];
    let mut t = net_task(2, &blocks, 0);
    t.timeout_ms = 100;
    expect!(NRT_SUCCESS, nrt_proxy_submit_network(c, &t));
    let t0 = std::time::Instant::now();
    while !HELD.load(Ordering::Acquire) {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "the worker never called the device's host-index read"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    expect!(NRT_TIMEOUT, nrt_proxy_wait(c, 1100, &mut rec));
    let e = last_error(c);
    assert!(
        e.starts_with("nrt_proxy_wait: timed out after ")
            && e.contains("began no tick")
            && e.contains("stuck inside a call")
            && e.ends_with("(NRT_TIMEOUT)"),
        "{e}"
    );
    // Released, the worker goes on: the task's own limit (checked in a tick) ends it.
    HOLD.store(false, Ordering::Release);
    expect!(NRT_SUCCESS, nrt_proxy_wait(c, 30_000, &mut rec));
    assert_eq!(
        (rec.task_id, status(rec.progress_status)),
        (2, status(NRT_TIMEOUT))
    );
    teardown(g, c, inst);
}

#[test]
fn trampolines_check_their_input() {
    let _s = serial();
    let lib = lib_cstring();
    let inst = init(&config(NRT_PROXY_DRIVE_THREAD), &lib);
    let (g, c) = comm0(inst);
    let mut nc = ptr::null_mut();
    expect!(NRT_INVALID, nrt_proxy_comm_nccom(c, ptr::null_mut()));
    expect!(NRT_SUCCESS, nrt_proxy_comm_nccom(c, &mut nc));
    let (mut idle, mut done) = (true, true);
    expect!(
        NRT_INVALID,
        ncclNetworkProxyProgress(nc, 0, 3, ptr::null_mut(), &mut done)
    );
    expect!(
        NRT_SUCCESS,
        ncclNetworkProxyProgress(nc, 0, 3, &mut idle, &mut done)
    );
    assert!(idle && done, "nothing filed: idle and done");
    expect!(
        NRT_INVALID,
        ncclNetworkProxyProgress(nc, 4, 3, &mut idle, &mut done)
    );
    assert!(!idle && !done, "a failed call is neither idle nor done");
    let (ops, src) = valid_fifos();
    expect!(
        NRT_INVALID,
        ncclStartNetworkProxy(
            nc,
            0,
            NCCOM_BB_NONE,
            ops.as_ptr(),
            1,
            src.as_ptr(),
            1,
            ptr::null(),
            0
        )
    );
    expect!(NRT_SUCCESS, ncclStopNetworkProxy(nc, 0));
    teardown(g, c, inst);
    // The progress half's handle is stale now: answered by the progress half.
    expect!(NRT_INVALID_HANDLE, ncclStopNetworkProxy(nc, 0));
}

type InitFn = unsafe extern "C" fn(*const NrtProxyConfig, *mut *mut NrtProxy) -> NRT_STATUS;
type FiniFn = unsafe extern "C" fn(*mut NrtProxy) -> NRT_STATUS;
type CommFn = unsafe extern "C" fn(*mut NrtProxyComm) -> NRT_STATUS;
type GroupCreateFn =
    unsafe extern "C" fn(*mut NrtProxy, u32, *mut *mut NrtProxyGroup) -> NRT_STATUS;

#[test]
fn handles_of_another_loaded_copy_are_refused() {
    let _s = serial();
    let lib = lib_cstring();
    // A second copy of the library (another path: another instance with its own tables).
    let copy = Path::new(env!("CARGO_TARGET_TMPDIR")).join("copy-libnrt_proxy.so");
    std::fs::copy(common::driver_library(), &copy).expect("copy library");
    let copy = CString::new(copy.to_str().expect("utf-8")).expect("no NUL");
    // SAFETY: dlopen of a library file with a NUL-terminated path.
    let h = unsafe { libc::dlopen(copy.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen of the copy failed");
    macro_rules! sym {
        ($name:literal, $ty:ty) => {{
            // SAFETY: dlsym of an entry point whose type is `$ty` (the header's).
            let p = unsafe { libc::dlsym(h, concat!($name, "\0").as_ptr().cast()) };
            assert!(!p.is_null(), "{} missing", $name);
            // SAFETY: as above.
            unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
        }};
    }
    let other_init = sym!("nrt_proxy_init", InitFn);
    let other_fini = sym!("nrt_proxy_fini", FiniFn);
    let other_join = sym!("nrt_proxy_comm_join", CommFn);
    let other_group_create = sym!("nrt_proxy_group_create", GroupCreateFn);
    let mut cfg = config(NRT_PROXY_DRIVE_THREAD);
    cfg.progress_lib = lib.as_ptr();
    let mut other = ptr::null_mut();
    expect!(NRT_SUCCESS, other_init(&cfg, &mut other));
    let inst = init(&config(NRT_PROXY_DRIVE_THREAD), &lib);
    // Instance handles cross in both directions.
    let mut g = ptr::null_mut();
    expect!(NRT_INVALID_HANDLE, nrt_proxy_group_create(other, 2, &mut g));
    expect!(NRT_INVALID_HANDLE, other_group_create(inst, 2, &mut g));
    expect!(NRT_INVALID_HANDLE, nrt_proxy_fini(other));
    let (g, c) = comm0(inst);
    expect!(NRT_INVALID_HANDLE, other_join(c));
    expect!(NRT_SUCCESS, other_fini(other));
    teardown(g, c, inst);
}

#[test]
fn the_library_exports_no_progress_half_symbol() {
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(common::driver_library())
        .output()
        .expect("run nm (binutils)");
    assert!(o.status.success());
    let syms: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_owned))
        .collect();
    for s in &syms {
        assert!(
            !(s.starts_with("neuron") || s.starts_with("nccom_")),
            "libnrt_proxy.so exports the progress half's {s}"
        );
    }
    for want in [
        "nrt_proxy_init",
        "nrt_proxy_submit_network",
        "nrt_get_status_as_str",
        "ncclStartNetworkProxy",
        "ncclNetworkProxyProgress",
        "ncclStopNetworkProxy",
    ] {
        assert!(syms.iter().any(|s| s == want), "{want} not exported");
    }
    let o = Command::new("readelf")
        .arg("-d")
        .arg(common::driver_library())
        .output()
        .expect("run readelf (binutils)");
    assert!(String::from_utf8_lossy(&o.stdout).contains("[libnrt_proxy.so.1]"));
}

#[test]
fn status_names_are_the_progress_half_s() {
    for s in [
        NRT_SUCCESS,
        NRT_QUEUE_FULL,
        NRT_NETWORK_PROXY_FAILURE,
        12345,
    ] {
        // SAFETY: a static string each.
        let ours = unsafe { CStr::from_ptr(nrt_get_status_as_str(s)) };
        assert_eq!(ours, proxy_abi::status_name(s));
    }
    assert_eq!(status(NRT_QUEUE_FULL), "NRT_QUEUE_FULL");
    assert_eq!(nrt_proxy_abi_version(), NRT_PROXY_ABI_VERSION);
}

/// A comm of rank `rank` of the 2-rank group `g` (comm id 9).
fn comm_of(inst: *mut NrtProxy, g: *mut NrtProxyGroup, rank: u32) -> *mut NrtProxyComm {
    let mut cc = std::mem::MaybeUninit::<NrtProxyCommConfig>::uninit();
    expect!(NRT_SUCCESS, nrt_proxy_comm_config_init(cc.as_mut_ptr()));
    // SAFETY: initialized above.
    let mut cc = unsafe { cc.assume_init() };
    cc.nranks = 2;
    cc.rank = rank;
    cc.comm_id = 9;
    cc.group = g;
    cc.callbacks = &CALLBACKS;
    let mut c = ptr::null_mut();
    expect!(NRT_SUCCESS, nrt_proxy_comm_create(inst, &cc, &mut c));
    c
}

/// A network task that never ends (no limit): one send of 64 B to `peer`, which never posts the
/// matching receive, so the queue's driver calls the comm's progress every tick.
fn endless_send(c: *mut NrtProxyComm, id: u32, peer: i32) {
    let (mut ops, src) = valid_fifos();
    ops[0].send_peer = peer;
    let blocks = [block(&ops, &src)];
    let mut t = net_task(id, &blocks, 0);
    t.timeout_ms = NRT_PROXY_TIMEOUT_NONE;
    expect!(NRT_SUCCESS, nrt_proxy_submit_network(c, &t));
}

/// `n` invalidations of distinct ranges of the comm, each answering `NRT_SUCCESS`.
fn invalidate_many(c: *mut NrtProxyComm, n: usize) {
    for i in 0..n {
        let addr = ptr::without_provenance::<c_void>(0x7f00_0000_0000 + i * 0x1000);
        expect!(
            NRT_SUCCESS,
            nrt_proxy_comm_invalidate_range(c, addr, 0x1000)
        );
    }
}

/// Thread mode: while the worker thread runs a task of the comm (inside the progress half's
/// comm on every tick), the comm's thread invalidates ranges: every call answers `NRT_SUCCESS`
/// (applied by the worker at its next tick; before, a call that met the worker inside the comm
/// answered `NRT_FAILURE`). Bad input is still the progress half's `NRT_INVALID`; a left comm is
/// invalidated directly.
#[test]
fn invalidate_range_while_the_worker_runs_the_comm() {
    let _s = serial();
    let lib = lib_cstring();
    let inst = init(&config(NRT_PROXY_DRIVE_THREAD), &lib);
    let (g, c) = comm0(inst);
    expect!(NRT_SUCCESS, nrt_proxy_comm_join(c));
    endless_send(c, 1, 1);
    invalidate_many(c, 200);
    expect!(
        NRT_INVALID,
        nrt_proxy_comm_invalidate_range(c, ptr::null(), 64)
    );
    expect!(
        NRT_INVALID,
        nrt_proxy_comm_invalidate_range(c, BUF.as_ptr().cast::<c_void>(), 0)
    );
    let mut rec = NrtProxyTaskRecord::default();
    expect!(NRT_TIMEOUT, nrt_proxy_wait(c, 10, &mut rec));
    expect!(NRT_SUCCESS, nrt_proxy_comm_abort(c));
    expect!(NRT_SUCCESS, nrt_proxy_wait(c, 30_000, &mut rec));
    assert_eq!(
        (rec.task_id, status(rec.progress_status)),
        (1, status(NRT_CLOSED))
    );
    expect!(NRT_SUCCESS, nrt_proxy_comm_leave(c, 30_000));
    invalidate_many(c, 10);
    teardown(g, c, inst);
}

/// Caller mode, two comms (ranks 0 and 1) on one proxy queue: thread A drives the queue for
/// its comm (`nrt_proxy_drive_until`, holding the drive token) while the other comm's thread
/// invalidates ranges of its own comm, whose task A's ticks run: every call answers
/// `NRT_SUCCESS` (applied at A's next tick, or by the caller itself when the token is free).
#[test]
fn invalidate_range_while_another_thread_drives_the_caller_mode_queue() {
    let _s = serial();
    let lib = lib_cstring();
    let mut cfg = config(NRT_PROXY_DRIVE_CALLER);
    cfg.ranks_per_network_proxy = 2;
    let inst = init(&cfg, &lib);
    let mut g = ptr::null_mut();
    expect!(NRT_SUCCESS, nrt_proxy_group_create(inst, 2, &mut g));
    let c0 = comm_of(inst, g, 0);
    let c1 = comm_of(inst, g, 1);
    expect!(NRT_SUCCESS, nrt_proxy_comm_join(c0));
    expect!(NRT_SUCCESS, nrt_proxy_comm_join(c1));
    // Each sends to the other rank with the tag the other's op does not receive: neither ends.
    endless_send(c0, 1, 1);
    endless_send(c1, 2, 0);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drives = std::sync::Arc::new(AtomicU32::new(0));
    let driver = {
        let (stop, drives) = (stop.clone(), drives.clone());
        let h = c1 as usize;
        std::thread::spawn(move || {
            let c1: *mut NrtProxyComm = ptr::without_provenance_mut(h);
            let mut rec = NrtProxyTaskRecord::default();
            while !stop.load(Ordering::SeqCst) {
                expect!(NRT_TIMEOUT, nrt_proxy_drive_until(c1, 2, 20, &mut rec));
                drives.fetch_add(1, Ordering::SeqCst);
            }
            expect!(NRT_SUCCESS, nrt_proxy_comm_abort(c1));
            expect!(NRT_SUCCESS, nrt_proxy_drive_until(c1, 2, 30_000, &mut rec));
            assert_eq!(
                (rec.task_id, status(rec.progress_status)),
                (2, status(NRT_CLOSED))
            );
        })
    };
    // Invalidate while A's drives run: until A has driven (and timed out) five times.
    let t0 = std::time::Instant::now();
    let mut calls = 0;
    while drives.load(Ordering::SeqCst) < 5 || calls < 300 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "the driving thread stalled"
        );
        invalidate_many(c0, 10);
        calls += 10;
    }
    stop.store(true, Ordering::SeqCst);
    driver.join().expect("the driving thread");
    // The token is free now: the caller applies it itself.
    invalidate_many(c0, 10);
    let mut rec = NrtProxyTaskRecord::default();
    expect!(NRT_SUCCESS, nrt_proxy_comm_abort(c0));
    expect!(NRT_SUCCESS, nrt_proxy_drive_until(c0, 1, 30_000, &mut rec));
    assert_eq!(
        (rec.task_id, status(rec.progress_status)),
        (1, status(NRT_CLOSED))
    );
    expect!(NRT_SUCCESS, nrt_proxy_comm_destroy(c1));
    expect!(NRT_SUCCESS, nrt_proxy_comm_destroy(c0));
    expect!(NRT_SUCCESS, nrt_proxy_group_destroy(g));
    expect!(NRT_SUCCESS, nrt_proxy_fini(inst));
    assert_eq!(live(), (0, 0, 0));
}

#[test]
fn the_mode_advice_weighs_the_host_and_refuses_bad_input() {
    let c = config(NRT_PROXY_DRIVE_THREAD);
    let cpus = proxy_runtime::modes::host_cpus().usable as u32;
    let mut a = NrtProxyModeAdvice::default();
    expect!(NRT_SUCCESS, nrt_proxy_mode_advice(&c, 1, 1, &mut a));
    assert_eq!(a.struct_size as usize, size_of::<NrtProxyModeAdvice>());
    assert_eq!(a.cpus, cpus);
    // One rank, one worker, one runtime thread: 2 busy threads in worker mode, 1 in caller.
    let procs = a.local_processes;
    assert_eq!((a.worker_threads, a.caller_threads), (2 * procs, procs));
    if a.worker_threads <= cpus {
        assert_eq!((a.drive_mode, a.fits), (NRT_PROXY_DRIVE_THREAD, 1));
    }
    // Far more ranks than CPUs: worker mode cannot fit, caller mode (1 thread) may.
    let many = 4 * cpus + 4;
    expect!(NRT_SUCCESS, nrt_proxy_mode_advice(&c, many, 1, &mut a));
    assert_eq!(a.worker_threads, procs * (many + 1));
    assert_eq!(a.drive_mode, NRT_PROXY_DRIVE_CALLER);
    // Bad input: NULLs, zero ranks; nothing is written on a refusal.
    let before = a;
    expect!(
        NRT_INVALID,
        nrt_proxy_mode_advice(ptr::null(), 1, 1, &mut a)
    );
    expect!(
        NRT_INVALID,
        nrt_proxy_mode_advice(&c, 1, 1, ptr::null_mut())
    );
    expect!(NRT_INVALID, nrt_proxy_mode_advice(&c, 0, 1, &mut a));
    assert_eq!(a, before);
}

#[test]
fn a_misspelled_own_shm_provider_is_refused_naming_proxy_shm() {
    let _g = serial();
    let lib = lib_cstring();
    let inst = init(&config(NRT_PROXY_DRIVE_CALLER), &lib);
    let root = c"127.0.0.1:1";
    for wrong in ["proxy_shm", "PROXY-SHM", "proxyshm", "Proxy Shm"] {
        let mut cc = std::mem::MaybeUninit::<NrtProxyCommConfig>::uninit();
        expect!(NRT_SUCCESS, nrt_proxy_comm_config_init(cc.as_mut_ptr()));
        // SAFETY: initialized above.
        let mut cc = unsafe { cc.assume_init() };
        let provider = CString::new(wrong).expect("no NUL");
        cc.nranks = 2;
        cc.rank = 0;
        cc.comm_id = 5;
        cc.provider = provider.as_ptr();
        cc.root_addr = root.as_ptr();
        cc.bootstrap_timeout_ms = 100;
        cc.callbacks = &CALLBACKS;
        let mut comm = ptr::null_mut();
        // Refused before any bootstrap (nothing listens at the root: a bootstrap would time
        // out with NRT_TIMEOUT instead).
        expect!(NRT_INVALID, nrt_proxy_comm_create(inst, &cc, &mut comm));
        assert!(comm.is_null());
        let why = proxy_abi::refusal::take_last().expect("the refusal's text");
        for part in [wrong, "\"proxy-shm\"", "NRT_PROXY_PROVIDER_OWN_SHM"] {
            assert!(why.contains(part), "{why:?} lacks {part:?}");
        }
    }
    assert_eq!(live(), (0, 0, 1), "no comm was made");
    expect!(NRT_SUCCESS, nrt_proxy_fini(inst));
    assert_eq!(live(), (0, 0, 0));
}
