//! In-process tests of the exports (the C programs in `ffi/tests/c/` test them across the
//! binary boundary).

use super::*;
use std::ffi::CStr;
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
    cfg.flags = 2;
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
