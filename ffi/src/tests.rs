//! In-process tests of the exports (the C programs in `ffi/tests/c/` test them across the
//! binary boundary).

use super::*;
use crate::comms::with_comm;
use proxy_abi::boundary::guard;
use proxy_core::base::status::NrtStatus;
use std::ffi::{c_int, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};

unsafe extern "C" fn inc(addr: *mut NccomHostWord, val: u32) {
    // SAFETY: the proxy passes semaphore addresses the test gave it: live, aligned AtomicU32s.
    unsafe { AtomicU32::from_ptr(addr) }.fetch_add(val, Ordering::Release);
}

const CALLBACKS: NccomDeviceCallbacks = NccomDeviceCallbacks {
    nec_inc_semaphore: Some(inc),
    nec_load_host_index: None,
    nec_store_host_index: None,
};

fn config(rank: u32, nranks: u32, group: *mut NccomMemGroup) -> NccomCommConfig {
    NccomCommConfig {
        rank,
        nranks,
        comm_id: 5,
        flags: 0,
        transport: NccomTransportDesc {
            kind: NCCOM_TRANSPORT_MEM,
            reserved: 0,
            mem_group: group,
            libfabric: NccomLibfabricDesc {
                provider: ptr::null(),
                root_addr: ptr::null(),
                bootstrap_timeout_ms: 0,
            },
        },
        callbacks: &CALLBACKS,
        drain_limit_ns: 0,
    }
}

fn group(nranks: u32) -> *mut NccomMemGroup {
    let mut g = ptr::null_mut();
    // SAFETY: `g` is a writable local.
    let s = unsafe { nccom_mem_group_create(nranks, &mut g) };
    assert_eq!(s, NRT_SUCCESS);
    g
}

fn create(cfg: &NccomCommConfig) -> Result<*mut NccomComm, NRT_STATUS> {
    let mut c = ptr::dangling_mut();
    // SAFETY: `cfg` and `c` are live locals.
    match unsafe { nccom_comm_create(cfg, &mut c) } {
        NRT_SUCCESS => Ok(c),
        s => {
            assert!(c.is_null(), "*out is NULL on failure");
            Err(s)
        }
    }
}

#[test]
fn status_strings_match_core() {
    for s in NrtStatus::ALL {
        // SAFETY: the function returns a static NUL-terminated string.
        let c = unsafe { CStr::from_ptr(nrt_get_status_as_str(s.code())) };
        assert_eq!(c.to_str().unwrap(), s.as_str());
    }
    // SAFETY: as above.
    let c = unsafe { CStr::from_ptr(nrt_get_status_as_str(8)) };
    assert_eq!(c.to_str().unwrap(), "NRT_UNKNOWN_STATUS");
    assert_eq!(nccom_abi_version() >> 16, NCCOM_PROXY_ABI_VERSION_MAJOR);
}

#[test]
fn trace_collect_checks_its_arrays() {
    let ok = NrtStatus::Success.code();
    let invalid = NrtStatus::Invalid.code();
    let mut counts = NccomTraceCounts {
        written: 9,
        ..NccomTraceCounts::default()
    };
    // SAFETY: (all four) NULL or valid local pointers, as the contract allows.
    unsafe {
        assert_eq!(
            nccom_trace_collect(ptr::null_mut(), 0, ptr::null_mut()),
            invalid
        );
        assert_eq!(
            nccom_trace_collect(ptr::null_mut(), 4, &mut counts),
            invalid
        );
        assert_eq!(counts.written, 9, "nothing written on a refusal");
        // No tracer started in this process: nothing recorded.
        assert_eq!(nccom_trace_collect(ptr::null_mut(), 0, &mut counts), ok);
        let mut out = [NccomTraceRecord::default(); 2];
        assert_eq!(nccom_trace_collect(out.as_mut_ptr(), 2, &mut counts), ok);
    }
    assert_eq!(counts, NccomTraceCounts::default());
}

#[test]
fn comm_handles_detect_null_unknown_destroyed_and_double_destroy() {
    let g = group(2);
    let c = create(&config(0, 2, g)).unwrap();
    let mut local = 0u64;
    let never: *mut NccomComm = (&mut local as *mut u64).cast();
    let (mut i, mut d) = (1, 1);
    // SAFETY: every pointer is either a handle (checked by the library) or a live local.
    unsafe {
        assert_eq!(
            neuronStopNetworkProxy(ptr::null_mut(), 0),
            NRT_INVALID_HANDLE
        );
        assert_eq!(neuronStopNetworkProxy(never, 0), NRT_INVALID_HANDLE);
        assert_eq!(
            neuronStopNetworkProxy(g.cast(), 0),
            NRT_INVALID_HANDLE,
            "a group handle is not a comm handle"
        );
        assert_eq!(nccom_mem_group_destroy(c.cast()), NRT_INVALID_HANDLE);
        assert_eq!(
            neuronNetworkProxyProgress(c, 0, 1, &mut i, &mut d),
            NRT_SUCCESS
        );
        assert_eq!((i, d), (1, 1));
        assert_eq!(nccom_comm_destroy(c), NRT_SUCCESS);
        assert_eq!(nccom_comm_destroy(c), NRT_INVALID_HANDLE);
        assert_eq!(
            neuronNetworkProxyProgress(c, 0, 1, &mut i, &mut d),
            NRT_INVALID_HANDLE
        );
        assert_eq!(nccom_mem_group_destroy(g), NRT_SUCCESS);
        assert_eq!(nccom_mem_group_destroy(g), NRT_INVALID_HANDLE);
        assert_eq!(nccom_mem_group_destroy(ptr::null_mut()), NRT_INVALID_HANDLE);
    }
}

#[test]
fn bad_configs_are_rejected_and_leave_the_rank_free() {
    let g = group(2);
    let mut cfg = config(2, 2, g);
    assert_eq!(create(&cfg), Err(NRT_INVALID), "rank >= nranks");
    cfg = config(0, 3, g);
    assert_eq!(create(&cfg), Err(NRT_INVALID), "group nranks differs");
    cfg = config(0, 2, g);
    cfg.comm_id = 1 << 15;
    assert_eq!(create(&cfg), Err(NRT_INVALID), "comm id");
    cfg = config(0, 2, g);
    cfg.flags = 4;
    assert_eq!(create(&cfg), Err(NRT_INVALID), "flags");
    cfg = config(0, 2, g);
    cfg.transport.kind = 9;
    assert_eq!(create(&cfg), Err(NRT_INVALID), "kind");
    cfg = config(0, 2, g);
    cfg.transport.kind = NCCOM_TRANSPORT_LIBFABRIC;
    // Invalid in every build: with a mem group (and without the `libfabric` feature at all).
    assert_eq!(
        create(&cfg),
        Err(NRT_INVALID),
        "libfabric kind with a mem group"
    );
    cfg = config(0, 2, g);
    cfg.transport.kind = NCCOM_TRANSPORT_SHM;
    assert_eq!(create(&cfg), Err(NRT_INVALID), "shm kind with a mem group");
    cfg.transport.mem_group = ptr::null_mut();
    let provider = c"shm";
    cfg.transport.libfabric.provider = provider.as_ptr();
    assert_eq!(create(&cfg), Err(NRT_INVALID), "shm kind with a provider");
    cfg = config(0, 2, ptr::without_provenance_mut(0x1234));
    assert_eq!(create(&cfg), Err(NRT_INVALID_HANDLE), "bad group");
    let empty = NccomDeviceCallbacks::default();
    cfg = config(0, 2, g);
    cfg.callbacks = &empty;
    assert_eq!(create(&cfg), Err(NRT_INVALID), "no nec_inc_semaphore");
    // SAFETY: NULL config / out are checked.
    unsafe {
        let mut c = ptr::null_mut();
        assert_eq!(nccom_comm_create(ptr::null(), &mut c), NRT_INVALID);
        assert_eq!(
            nccom_comm_create(&config(0, 2, g), ptr::null_mut()),
            NRT_INVALID
        );
    }
    // None of the failures took rank 0.
    let c = create(&config(0, 2, g)).unwrap();
    assert_eq!(
        create(&config(0, 2, g)),
        Err(NRT_INVALID),
        "rank taken twice"
    );
    // SAFETY: handles of this library.
    unsafe {
        assert_eq!(nccom_comm_destroy(c), NRT_SUCCESS);
        assert_eq!(nccom_mem_group_destroy(g), NRT_SUCCESS);
    }
}

#[test]
fn a_panic_in_a_comm_call_is_caught_and_poisons_the_comm() {
    let g = group(1);
    let c = create(&config(0, 1, g)).unwrap();
    let r = guard("test", || with_comm("test", c, |_| panic!("planted")));
    assert_eq!(r, NRT_FAILURE);
    let r = guard("test", || panic!("planted outside a comm"));
    assert_eq!(r, NRT_FAILURE);
    // SAFETY: handles of this library.
    unsafe {
        assert_eq!(neuronStopNetworkProxy(c, 0), NRT_FAILURE, "poisoned");
        assert_eq!(nccom_comm_destroy(c), NRT_SUCCESS, "released (and leaked)");
        assert_eq!(nccom_comm_destroy(c), NRT_INVALID_HANDLE);
        assert_eq!(nccom_mem_group_destroy(g), NRT_SUCCESS);
    }
}

/// Host words and a buffer for one send op of rank 0 to rank 1 that never finishes: its device
/// never arms the host index, so the op waits for the handshake forever.
struct Stuck {
    words: [AtomicU32; 3],
    buf: [u8; 64],
}

impl Stuck {
    fn new() -> Box<Self> {
        Box::new(Stuck {
            words: [AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)],
            buf: [0; 64],
        })
    }

    /// Files the send op on stream 0, block 1.
    fn start(&self, c: *mut NccomComm) -> NRT_STATUS {
        let addr = |i: usize| self.words[i].as_ptr() as u64;
        let op = NetOpInfo {
            send_peer: 1,
            recv_peer: -1,
            tag: 1,
            tx_entry_cnt: 1,
            data_type_sz: 1,
            post_send_idx_addr: addr(0),
            send_handshake_sem_addr: addr(1),
            send_complete_sem_addr: addr(2),
            ..NetOpInfo::default()
        };
        let src = NetSrcAddr {
            net_op_idx: 0,
            mark: proxy_core::base::desc::EXEC_COMPLETE,
            addr: self.buf.as_ptr() as u64,
            size: 64,
            dest_rank: -1,
            reserved: 0,
        };
        // SAFETY: live locals; the words and the buffer outlive the comm (the caller destroys
        // it before dropping `self`).
        unsafe { neuronStartNetworkProxy(c, 0, 1, &op, 1, &src, 1, ptr::null(), 0) }
    }
}

fn progress(c: *mut NccomComm) -> (NRT_STATUS, c_int, c_int) {
    let (mut i, mut d) = (1, 1);
    // SAFETY: live locals.
    let s = unsafe { neuronNetworkProxyProgress(c, 0, 1, &mut i, &mut d) };
    (s, i, d)
}

#[test]
fn abort_while_a_call_holds_the_comm_then_the_seam_answers_closed() {
    let g = group(2);
    let c = create(&config(0, 2, g)).unwrap();
    let stuck = Stuck::new();
    assert_eq!(stuck.start(c), NRT_SUCCESS);
    assert_eq!(
        progress(c),
        (NRT_SUCCESS, 1, 0),
        "idle, waiting for the handshake"
    );
    // The abort is accepted while a call holds the comm's slot BUSY (where every other entry
    // answers NRT_FAILURE): it never takes the slot.
    let inner = with_comm("test", c, |_| {
        // SAFETY: a handle of this library.
        assert_eq!(unsafe { neuronStopNetworkProxy(c, 0) }, NRT_FAILURE, "busy");
        // SAFETY: a handle of this library.
        assert_eq!(unsafe { nccom_comm_abort(c) }, NRT_SUCCESS);
        Ok(())
    });
    assert_eq!(inner, Ok(()));
    // SAFETY: handles of this library (or NULL / a foreign pointer, which are checked).
    unsafe {
        assert_eq!(
            nccom_comm_abort(c),
            NRT_SUCCESS,
            "a second abort changes nothing"
        );
        assert_eq!(nccom_comm_abort(ptr::null_mut()), NRT_INVALID_HANDLE);
        assert_eq!(nccom_comm_abort(g.cast()), NRT_INVALID_HANDLE);
    }
    // Applied at the next progress: NRT_CLOSED, neither idle nor done; start is refused.
    assert_eq!(progress(c), (NRT_CLOSED, 0, 0));
    assert_eq!(progress(c), (NRT_CLOSED, 0, 0));
    assert_eq!(stuck.start(c), NRT_CLOSED);
    let mut local = [0u8; 8];
    // SAFETY: handles of this library; the range is only compared.
    unsafe {
        assert_eq!(
            neuronStopNetworkProxy(c, 0),
            NRT_SUCCESS,
            "stop still works"
        );
        assert_eq!(
            nccom_comm_invalidate_range(c, local.as_mut_ptr().cast(), local.len()),
            NRT_SUCCESS,
            "invalidate still works"
        );
        assert_eq!(nccom_comm_destroy(c), NRT_SUCCESS);
        assert_eq!(nccom_comm_destroy(c), NRT_INVALID_HANDLE);
        assert_eq!(nccom_comm_abort(c), NRT_INVALID_HANDLE, "after destroy");
        assert_eq!(nccom_mem_group_destroy(g), NRT_SUCCESS);
    }
    drop(stuck);
}

#[test]
fn abort_from_another_thread_ends_a_driving_loop_with_closed() {
    let g = group(2);
    let c = create(&config(0, 2, g)).unwrap();
    let stuck = Stuck::new();
    assert_eq!(stuck.start(c), NRT_SUCCESS);
    let handle = c.addr();
    let calls = AtomicU32::new(0);
    let (status, n) = std::thread::scope(|s| {
        let driver = s.spawn(|| {
            let c: *mut NccomComm = ptr::without_provenance_mut(handle);
            for n in 0..10_000_000u32 {
                calls.store(n, Ordering::Relaxed);
                let (st, i, d) = progress(c);
                if st != NRT_SUCCESS {
                    assert_eq!((i, d), (0, 0));
                    return (st, n);
                }
                assert_eq!(d, 0, "the stuck op is never done (idle {i})");
            }
            panic!("no abort seen in 10M progress calls");
        });
        // Abort once the driver is looping (it may be inside a call or between two).
        for _ in 0..10_000_000u32 {
            if calls.load(Ordering::Relaxed) >= 100 {
                break;
            }
            std::thread::yield_now();
        }
        let c: *mut NccomComm = ptr::without_provenance_mut(handle);
        // SAFETY: a handle of this library.
        assert_eq!(unsafe { nccom_comm_abort(c) }, NRT_SUCCESS);
        driver.join().unwrap()
    });
    assert_eq!(status, NRT_CLOSED);
    assert!(n >= 100, "the driver made {n} calls before the abort");
    // SAFETY: handles of this library.
    unsafe {
        assert_eq!(nccom_comm_destroy(c), NRT_SUCCESS);
        assert_eq!(nccom_mem_group_destroy(g), NRT_SUCCESS);
    }
}

#[test]
fn aborts_racing_a_destroy_answer_success_or_invalid_handle() {
    for _ in 0..50 {
        let g = group(1);
        let c = create(&config(0, 1, g)).unwrap();
        let handle = c.addr();
        let answers = std::thread::scope(|s| {
            let aborter = s.spawn(move || {
                let c: *mut NccomComm = ptr::without_provenance_mut(handle);
                let mut seen = Vec::new();
                for _ in 0..200 {
                    // SAFETY: a handle of this library (live or destroyed: both are checked).
                    seen.push(unsafe { nccom_comm_abort(c) });
                }
                seen
            });
            std::thread::yield_now();
            // SAFETY: a handle of this library. The aborter never takes the comm's slot, so
            // the destroy is never refused.
            assert_eq!(unsafe { nccom_comm_destroy(c) }, NRT_SUCCESS);
            aborter.join().unwrap()
        });
        assert!(
            answers
                .iter()
                .all(|&a| a == NRT_SUCCESS || a == NRT_INVALID_HANDLE),
            "{answers:?}"
        );
        // SAFETY: handles of this library.
        unsafe {
            assert_eq!(nccom_comm_abort(c), NRT_INVALID_HANDLE);
            assert_eq!(nccom_mem_group_destroy(g), NRT_SUCCESS);
        }
        assert!(
            aborts().iter().all(|(h, ..)| *h != handle),
            "destroy removed the comm's abort handle"
        );
    }
}

#[test]
fn invalidate_range_validates_its_input() {
    let g = group(1);
    let c = create(&config(0, 1, g)).unwrap();
    let mut local = [0u8; 64];
    let p: *const c_void = local.as_mut_ptr().cast();
    // SAFETY: handles of this library (or NULL / a foreign pointer, which are checked); the
    // ranges are only compared, never accessed.
    unsafe {
        assert_eq!(nccom_comm_invalidate_range(c, p, 64), NRT_SUCCESS);
        assert_eq!(nccom_comm_invalidate_range(c, ptr::null(), 64), NRT_INVALID);
        assert_eq!(nccom_comm_invalidate_range(c, p, 0), NRT_INVALID);
        assert_eq!(
            nccom_comm_invalidate_range(c, ptr::without_provenance(usize::MAX - 8), 64),
            NRT_INVALID,
            "wraps"
        );
        assert_eq!(
            nccom_comm_invalidate_range(ptr::null_mut(), p, 64),
            NRT_INVALID_HANDLE
        );
        assert_eq!(
            nccom_comm_invalidate_range(g.cast(), p, 64),
            NRT_INVALID_HANDLE
        );
        assert_eq!(nccom_comm_destroy(c), NRT_SUCCESS);
        assert_eq!(nccom_comm_invalidate_range(c, p, 64), NRT_INVALID_HANDLE);
        assert_eq!(nccom_mem_group_destroy(g), NRT_SUCCESS);
    }
}

#[test]
fn stop_step_tears_a_stream_down_without_blocking_and_checks_its_input() {
    let g = group(2);
    let c = create(&config(0, 2, g)).unwrap();
    let stuck = Stuck::new();
    let step = |c: *mut NccomComm, stream: u32, done: &mut c_int| {
        // SAFETY: `done` is a live local; the handle is checked by the library.
        unsafe { neuronStopNetworkProxyStep(c, stream, done) }
    };
    // An empty stream is torn down at once.
    let mut done = 0;
    assert_eq!(step(c, 0, &mut done), NRT_SUCCESS);
    assert_eq!(done, 1);
    // A stream with an op waiting for its handshake: done within a bounded number of steps,
    // then the stream is empty (progress reports idle and done) and takes a new block.
    assert_eq!(stuck.start(c), NRT_SUCCESS);
    assert_eq!(progress(c), (NRT_SUCCESS, 1, 0));
    let mut steps = 0;
    done = 0;
    while done == 0 {
        steps += 1;
        assert!(steps <= 100, "the teardown ends within 100 steps");
        assert_eq!(step(c, 0, &mut done), NRT_SUCCESS);
    }
    assert_eq!(progress(c), (NRT_SUCCESS, 1, 1), "the stream is empty");
    assert_eq!(stuck.start(c), NRT_SUCCESS, "and reusable");
    // Bad input: answered, `done` untouched.
    done = 7;
    assert_eq!(step(c, 4, &mut done), NRT_INVALID);
    assert_eq!(done, 7);
    // SAFETY: NULL `done` and NULL / foreign handles are checked, never dereferenced.
    unsafe {
        assert_eq!(
            neuronStopNetworkProxyStep(c, 0, ptr::null_mut()),
            NRT_INVALID
        );
        assert_eq!(
            neuronStopNetworkProxyStep(ptr::null_mut(), 0, &mut done),
            NRT_INVALID_HANDLE
        );
        assert_eq!(
            neuronStopNetworkProxyStep(g.cast(), 0, &mut done),
            NRT_INVALID_HANDLE
        );
        assert_eq!(nccom_comm_destroy(c), NRT_SUCCESS);
        assert_eq!(
            neuronStopNetworkProxyStep(c, 0, &mut done),
            NRT_INVALID_HANDLE,
            "after destroy"
        );
        assert_eq!(nccom_mem_group_destroy(g), NRT_SUCCESS);
    }
    assert_eq!(done, 7);
    drop(stuck);
}

#[test]
fn protocol_stats_follow_the_size_protocol_and_check_their_input() {
    let g = group(2);
    let c = create(&config(0, 2, g)).unwrap();
    let stuck = Stuck::new();
    let stats = |c: *mut NccomComm, size: u32| {
        let mut out = NccomProtocolStats {
            size,
            starts: 0xDEAD,
            peak_outstanding_recv: 0xBEEF,
            ..NccomProtocolStats::default()
        };
        // SAFETY: `out` is a live local of `size_of` bytes (the sizes asked for are at most
        // that; the library writes at most `size`).
        let s = unsafe { nccom_comm_protocol_stats(c, &mut out) };
        (s, out)
    };
    let full = std::mem::size_of::<NccomProtocolStats>() as u32;
    assert_eq!(full, 72);
    let (s, out) = stats(c, full);
    assert_eq!(s, NRT_SUCCESS);
    assert_eq!(
        out,
        NccomProtocolStats {
            size: full,
            ..NccomProtocolStats::default()
        }
    );
    // Two accepted starts, one rejected (stream 4): two counted.
    assert_eq!(stuck.start(c), NRT_SUCCESS);
    assert_eq!(stuck.start(c), NRT_SUCCESS);
    // SAFETY: live locals; stream 4 is rejected before anything is read.
    let bad =
        unsafe { neuronStartNetworkProxy(c, 4, 1, ptr::null(), 0, ptr::null(), 0, ptr::null(), 0) };
    assert_eq!(bad, NRT_INVALID);
    let (s, out) = stats(c, full);
    assert_eq!(
        (s, out.size, out.starts, out.peak_outstanding_recv),
        (NRT_SUCCESS, full, 2, 0)
    );
    // An older, smaller struct: only its bytes are written.
    let (s, out) = stats(c, 16);
    assert_eq!((s, out.size, out.starts), (NRT_SUCCESS, 16, 2));
    assert_eq!(out.peak_outstanding_recv, 0xBEEF, "past `size`: untouched");
    // Too small for the header, NULL or misaligned out, bad handles: answered, nothing written.
    let (s, out) = stats(c, 7);
    assert_eq!((s, out.size, out.starts), (NRT_INVALID, 7, 0xDEAD));
    let mut raw = [0u64; 10];
    raw[0] = u64::from(full);
    // SAFETY: NULL and misaligned pointers are checked before any access; handles are looked
    // up, never dereferenced.
    unsafe {
        assert_eq!(nccom_comm_protocol_stats(c, ptr::null_mut()), NRT_INVALID);
        let misaligned = raw
            .as_mut_ptr()
            .cast::<u8>()
            .add(4)
            .cast::<NccomProtocolStats>();
        assert_eq!(nccom_comm_protocol_stats(c, misaligned), NRT_INVALID);
    }
    assert_eq!(stats(ptr::null_mut(), full).0, NRT_INVALID_HANDLE);
    assert_eq!(stats(g.cast(), full).0, NRT_INVALID_HANDLE);
    // SAFETY: live handles of this library.
    unsafe {
        assert_eq!(nccom_comm_destroy(c), NRT_SUCCESS);
    }
    assert_eq!(stats(c, full).0, NRT_INVALID_HANDLE, "after destroy");
    // SAFETY: as above.
    unsafe { assert_eq!(nccom_mem_group_destroy(g), NRT_SUCCESS) };
    drop(stuck);
}

/// The idle wait's entry points (ABI 1.4) on an in-memory comm: no descriptor (available 0,
/// arm unavailable, sleep at once, kick a no-op; `NCCOM_COMM_IDLE_WAIT` accepted and ignored),
/// busy comm, NULL outputs and bad or destroyed handles refused with their statuses.
#[test]
fn an_in_memory_comm_has_no_idle_wait_and_the_entries_check_their_input() {
    let g = group(1);
    let mut cfg = config(0, 1, g);
    cfg.flags = NCCOM_COMM_IDLE_WAIT;
    let c = create(&cfg).expect("the flag is accepted");
    let (mut available, mut armed, mut woken) = (7u32, 7u32, 7u32);
    // SAFETY: handles of this library (or NULL / a foreign pointer, which are checked); the
    // outputs are live locals or NULL.
    unsafe {
        assert_eq!(nccom_comm_idle_available(c, &mut available), NRT_SUCCESS);
        assert_eq!(available, 0, "in-memory: no descriptor");
        assert_eq!(nccom_comm_idle_arm(c, &mut armed), NRT_SUCCESS);
        assert_eq!(armed, NCCOM_IDLE_UNAVAILABLE);
        let t = std::time::Instant::now();
        assert_eq!(
            nccom_comm_idle_sleep(c, 5_000_000_000, &mut woken),
            NRT_SUCCESS
        );
        assert_eq!(woken, 0);
        assert!(
            t.elapsed() < std::time::Duration::from_secs(1),
            "no wait to sleep on"
        );
        assert_eq!(nccom_comm_idle_kick(c), NRT_SUCCESS);
        assert_eq!(nccom_comm_idle_available(c, ptr::null_mut()), NRT_INVALID);
        assert_eq!(nccom_comm_idle_arm(c, ptr::null_mut()), NRT_INVALID);
        assert_eq!(nccom_comm_idle_sleep(c, 0, ptr::null_mut()), NRT_INVALID);
        for bad in [ptr::null_mut(), g.cast::<NccomComm>()] {
            assert_eq!(
                nccom_comm_idle_available(bad, &mut available),
                NRT_INVALID_HANDLE
            );
            assert_eq!(nccom_comm_idle_arm(bad, &mut armed), NRT_INVALID_HANDLE);
            assert_eq!(
                nccom_comm_idle_sleep(bad, 0, &mut woken),
                NRT_INVALID_HANDLE
            );
            assert_eq!(nccom_comm_idle_kick(bad), NRT_INVALID_HANDLE);
        }
    }
    // Arm and sleep take the comm's slot (serialized with progress); the kick does not.
    let inner = with_comm("test", c, |_| {
        // SAFETY: a handle of this library; live locals.
        unsafe {
            assert_eq!(nccom_comm_idle_arm(c, &mut armed), NRT_FAILURE, "busy");
            assert_eq!(nccom_comm_idle_kick(c), NRT_SUCCESS, "never takes the slot");
        }
        Ok(())
    });
    assert_eq!(inner, Ok(()));
    // SAFETY: handles of this library.
    unsafe {
        assert_eq!(nccom_comm_destroy(c), NRT_SUCCESS);
        assert_eq!(nccom_comm_idle_kick(c), NRT_INVALID_HANDLE, "after destroy");
        assert_eq!(
            nccom_comm_idle_arm(c, &mut armed),
            NRT_INVALID_HANDLE,
            "after destroy"
        );
        assert_eq!(nccom_mem_group_destroy(g), NRT_SUCCESS);
    }
}
