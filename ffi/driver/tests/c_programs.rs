//! The driver half's C ABI tested from C: the programs in `tests/c/` are compiled with `cc`
//! against the committed headers (`nrt_proxy.h`, `nccom_proxy.h`), linked with `-lnrt_proxy`
//! (through its SONAME `libnrt_proxy.so.1`), and run with the progress half's path:
//!
//! * `exchange.c`: a C runtime with its own device thread runs a 2-rank exchange through both
//!   libraries over the in-memory transport (worker-thread mode, and caller-driven mode), three
//!   executions (the later ones resubmitted), every byte, record field and semaphore checked;
//!   and again with the host driving the seam itself through the exported trampolines
//!   (`ncclStartNetworkProxy` / `ncclNetworkProxyProgress` / `ncclStopNetworkProxy`);
//! * the same under valgrind (memcheck: no invalid access, no definite leak), spin budgets 0.
//!   A missing valgrind fails unless `PROXY_ALLOW_SKIP_VALGRIND=1`.
//!
//! `NCCOM_PROXY_LIB=/path/libnccom_proxy.so` tests another build of the progress half.

mod common;

use std::process::Command;

use common::{compile, progress_library, run};

#[test]
fn c_runtime_exchanges_through_both_libraries_with_worker_threads() {
    let exe = compile("exchange", "exchange", &["-pthread"]);
    let mut cmd = Command::new(exe);
    cmd.arg(progress_library()).arg("thread");
    assert!(run(cmd).contains("exchange: ok: thread mode"));
}

#[test]
fn c_runtime_exchanges_through_both_libraries_caller_driven() {
    let exe = compile("exchange", "exchange_caller", &["-pthread"]);
    let mut cmd = Command::new(exe);
    cmd.arg(progress_library()).arg("caller");
    assert!(run(cmd).contains("exchange: ok: caller mode"));
}

#[test]
fn c_runtime_exchanges_through_the_trampolines_only() {
    let exe = compile("exchange", "exchange_tramp", &["-pthread"]);
    let mut cmd = Command::new(exe);
    cmd.arg(progress_library()).arg("trampolines");
    assert!(run(cmd).contains("exchange: ok: trampolines mode"));
}

#[test]
fn c_programs_under_valgrind() {
    if !common::have_valgrind()
        && common::tool_missing_allowed("valgrind", "PROXY_ALLOW_SKIP_VALGRIND")
    {
        return;
    }
    let exe = compile("exchange", "exchange_vg", &["-pthread"]);
    for mode in ["thread", "caller", "trampolines"] {
        let mut cmd = common::valgrind(&exe);
        cmd.arg(progress_library()).arg(mode);
        assert!(run(cmd).contains(&format!("exchange: ok: {mode} mode")));
    }
}
