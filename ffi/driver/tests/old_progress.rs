//! A progress half of an older minor: the stub of `tests/c/fake_progress_v2.c` built as C ABI
//! 1.4, which `libnrt_proxy.so` loads (same major). What a newer minor of the progress half
//! added is refused with `NRT_INVALID` naming both versions, before any call into it: a comm
//! over the engine's own shared memory (`provider` `"proxy-shm"`, progress half ABI 1.5).
//!
//! A test binary of its own: the first progress half a process loads is the one the exported
//! trampolines call, and here that is the stub.

mod common;

use std::ffi::CString;
use std::ptr;

use nrt_proxy::*;
use proxy_abi::*;

#[test]
fn own_shm_over_a_progress_half_of_abi_1_4_is_refused_naming_both_versions() {
    let fake = common::fake_progress("libfake_progress_v1_4.so", &["-DFAKE_ABI=0x00010004u"]);
    let fake = CString::new(fake.to_str().expect("utf-8")).expect("no NUL");

    let mut c = std::mem::MaybeUninit::<NrtProxyConfig>::uninit();
    // SAFETY: a writable config.
    let s = unsafe { nrt_proxy_config_init(c.as_mut_ptr()) };
    assert_eq!(s, NRT_SUCCESS);
    // SAFETY: initialized by the call above.
    let mut c = unsafe { c.assume_init() };
    c.progress_lib = fake.as_ptr();
    let mut inst = ptr::null_mut();
    // SAFETY: a valid config and out-parameter.
    assert_eq!(unsafe { nrt_proxy_init(&c, &mut inst) }, NRT_SUCCESS);
    assert!(!inst.is_null());

    let mut cc = std::mem::MaybeUninit::<NrtProxyCommConfig>::uninit();
    // SAFETY: a writable config.
    let s = unsafe { nrt_proxy_comm_config_init(cc.as_mut_ptr()) };
    assert_eq!(s, NRT_SUCCESS);
    // SAFETY: initialized by the call above.
    let mut cc = unsafe { cc.assume_init() };
    let provider = CString::new(NRT_PROXY_PROVIDER_OWN_SHM).expect("no NUL");
    let root = c"127.0.0.1:1";
    cc.nranks = 2;
    cc.rank = 0;
    cc.comm_id = 3;
    cc.provider = provider.as_ptr();
    cc.root_addr = root.as_ptr();
    let mut comm = ptr::null_mut();
    // SAFETY: valid config and out-parameter.
    let s = unsafe { nrt_proxy_comm_create(inst, &cc, &mut comm) };
    assert_eq!(s, NRT_INVALID, "status {s}");
    assert!(comm.is_null());
    let why = proxy_abi::refusal::take_last().expect("the refusal's text");
    for part in ["proxy-shm", "C ABI 1.5", "0x10004"] {
        assert!(why.contains(part), "{why:?} lacks {part:?}");
    }
    // SAFETY: the instance made above.
    assert_eq!(unsafe { nrt_proxy_fini(inst) }, NRT_SUCCESS);
}
