//! The host device through C (`nrt_proxy_host_device_*`), called through the rlib: its states,
//! its refusals, and its library thread. The collective it plays end to end (2 and 4 ranks,
//! caller and thread mode, every word checked) is `examples/allreduce.c`, built and run by
//! `tests/c_programs.rs` and by the `install` step.

use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};

use nrt_proxy::host_device::live_host_devices;
use nrt_proxy::*;
use proxy_abi::*;

mod common;
use common::plan::{layout, PlanMemory};

macro_rules! expect {
    ($want:expr, $call:expr) => {{
        // SAFETY: each call passes valid or deliberately NULL / stale arguments the function
        // checks.
        let got = unsafe { $call };
        assert_eq!(
            nrt_proxy_status_name(got),
            nrt_proxy_status_name($want),
            "{}",
            stringify!($call)
        );
    }};
}

fn nrt_proxy_status_name(s: NRT_STATUS) -> String {
    format!("{s}")
}

/// Rank 0 of a 2-rank i32 all-reduce: its plan and its buffers and host words.
struct Setup {
    plan: *mut NrtProxyPlan,
    addrs: NrtProxyPlanAddresses,
    _mem: [Vec<u64>; 4],
}

fn setup() -> Setup {
    let mut pp = std::mem::MaybeUninit::<NrtProxyPlanParams>::uninit();
    expect!(NRT_SUCCESS, nrt_proxy_plan_params_init(pp.as_mut_ptr()));
    // SAFETY: initialized above.
    let mut pp = unsafe { pp.assume_init() };
    pp.collective = NRT_PROXY_COLL_ALL_REDUCE;
    pp.dtype = NRT_PROXY_DTYPE_I32;
    pp.rank = 0;
    pp.nranks = 2;
    pp.count = 1024;
    let mut plan = ptr::null_mut();
    expect!(NRT_SUCCESS, nrt_proxy_plan_create(&pp, &mut plan));
    let PlanMemory { mem, addrs } = PlanMemory::new(&layout(plan));
    Setup {
        plan,
        addrs,
        _mem: mem,
    }
}

#[test]
fn states_refusals_and_the_library_thread() {
    let s = setup();
    let before = live_host_devices();
    let mut dev = ptr::null_mut();
    // Bad input: NULL out, NULL addresses, a bad plan, addresses the plan cannot use.
    expect!(
        NRT_INVALID,
        nrt_proxy_host_device_create(s.plan, &s.addrs, ptr::null_mut())
    );
    expect!(
        NRT_INVALID,
        nrt_proxy_host_device_create(s.plan, ptr::null(), &mut dev)
    );
    assert!(dev.is_null());
    expect!(
        NRT_INVALID_HANDLE,
        nrt_proxy_host_device_create(ptr::null_mut(), &s.addrs, &mut dev)
    );
    let no_words = NrtProxyPlanAddresses {
        words: 0,
        ..s.addrs
    };
    expect!(
        NRT_INVALID,
        nrt_proxy_host_device_create(s.plan, &no_words, &mut dev)
    );
    expect!(
        NRT_SUCCESS,
        nrt_proxy_host_device_create(s.plan, &s.addrs, &mut dev)
    );
    assert_eq!(live_host_devices(), before + 1);

    // Nothing launched: idle. NULL state refused.
    let mut state = 99u32;
    expect!(NRT_SUCCESS, nrt_proxy_host_device_poll(dev, &mut state));
    assert_eq!(state, NRT_PROXY_DEVICE_IDLE);
    expect!(
        NRT_INVALID,
        nrt_proxy_host_device_poll(dev, ptr::null_mut())
    );
    expect!(NRT_INVALID, nrt_proxy_host_device_wait(dev, 0));

    // A launch whose net-stage trigger nobody consumes: pending, the device wrote 1 to it.
    let trigger = AtomicU32::new(0xFFFF_FFFF);
    let trig = [trigger.as_ptr()];
    expect!(
        NRT_INVALID,
        nrt_proxy_host_device_launch(dev, 1, ptr::null(), 1, ptr::null(), 0, ptr::null_mut())
    );
    let five = [trigger.as_ptr(); 5];
    expect!(
        NRT_INVALID,
        nrt_proxy_host_device_launch(dev, 1, five.as_ptr(), 5, ptr::null(), 0, ptr::null_mut())
    );
    expect!(
        NRT_SUCCESS,
        nrt_proxy_host_device_launch(dev, 1, trig.as_ptr(), 1, ptr::null(), 0, ptr::null_mut())
    );
    for _ in 0..3 {
        expect!(NRT_SUCCESS, nrt_proxy_host_device_poll(dev, &mut state));
        assert_eq!(state, NRT_PROXY_DEVICE_PENDING);
    }
    assert_eq!(
        trigger.load(Ordering::Acquire),
        1,
        "the net-stage trigger written"
    );

    // The same launch on a library thread: still pending, so a short wait times out; polls
    // are refused while it runs; a second start is refused; destroy stops the thread.
    expect!(NRT_SUCCESS, nrt_proxy_host_device_start(dev));
    expect!(NRT_INVALID, nrt_proxy_host_device_start(dev));
    expect!(NRT_INVALID, nrt_proxy_host_device_poll(dev, &mut state));
    expect!(NRT_TIMEOUT, nrt_proxy_host_device_wait(dev, 20));
    expect!(NRT_SUCCESS, nrt_proxy_host_device_destroy(dev));
    expect!(NRT_INVALID_HANDLE, nrt_proxy_host_device_destroy(dev));
    expect!(
        NRT_INVALID_HANDLE,
        nrt_proxy_host_device_poll(dev, &mut state)
    );
    assert_eq!(live_host_devices(), before);
    expect!(NRT_SUCCESS, nrt_proxy_plan_destroy(s.plan));
}
