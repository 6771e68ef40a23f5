//! The process-wide algorithm of each collective through C (`nrt_proxy_algorithm_set` /
//! `_get`, ABI 1.4): refusals, what plans resolve to, and the state dump naming the algorithm
//! of a task submitted with its plan (`nrt_proxy_submit_plan`).
//!
//! Its own test binary: the table is process-wide (and so is the logger that captures the
//! dump lines); the environment's part (`NEURON_RT_PROXY_ALGO_<COLL>`) runs in child processes
//! of it.

use std::ffi::CString;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use nrt_proxy::*;
use proxy_abi::*;

mod common;
use common::plan::{layout, PlanBlocks, PlanMemory};

static SERIAL: Mutex<()> = Mutex::new(());

/// One test at a time (the table is the process's); the capturing logger installed before
/// the library's first call (which would install its own).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    dump_lines();
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

macro_rules! expect {
    ($want:expr, $call:expr) => {{
        // SAFETY: each call passes valid or deliberately bad arguments the function checks.
        let got = unsafe { $call };
        assert_eq!(got, $want, "{}", stringify!($call));
    }};
}

fn params(algorithm: u32) -> NrtProxyPlanParams {
    let mut pp = std::mem::MaybeUninit::<NrtProxyPlanParams>::uninit();
    expect!(NRT_SUCCESS, nrt_proxy_plan_params_init(pp.as_mut_ptr()));
    // SAFETY: initialized above.
    let mut pp = unsafe { pp.assume_init() };
    pp.collective = NRT_PROXY_COLL_ALL_REDUCE;
    pp.algorithm = algorithm;
    pp.dtype = NRT_PROXY_DTYPE_I32;
    pp.nranks = 2;
    pp.count = 1024;
    pp
}

/// The algorithm a plan with `params` resolves to.
fn resolved(p: &NrtProxyPlanParams) -> u32 {
    let mut plan = ptr::null_mut();
    expect!(NRT_SUCCESS, nrt_proxy_plan_create(p, &mut plan));
    let a = layout(plan).algorithm;
    expect!(NRT_SUCCESS, nrt_proxy_plan_destroy(plan));
    a
}

/// `true` (and a note) when a variable the tuner reads is set in the environment: the
/// table's first values are then not the defaults a test expects.
fn tuner_env_set() -> bool {
    let set = std::env::vars().any(|(k, _)| {
        k.starts_with("NEURON_RT_PROXY_ALGO_")
            || k == "NEURON_RT_PROXY_TUNER_LINK"
            || k == "NEURON_RT_PROXY_TUNER_PROGRESS_CPUS"
            || k == "NEURON_RT_PROXY_TUNER_CPU_BLOCKS"
            || k == "NEURON_RT_PROXY_TUNE_FILE"
    });
    if set {
        eprintln!("skipped: the tuner's variables are set in the environment");
    }
    set
}

fn get(c: u32) -> u32 {
    let mut a = 99;
    expect!(NRT_SUCCESS, nrt_proxy_algorithm_get(c, &mut a));
    a
}

#[test]
fn set_get_clear_and_refusals() {
    let _s = serial();
    if std::env::vars().any(|(k, _)| k.starts_with("NEURON_RT_PROXY_ALGO_")) {
        eprintln!("skipped: NEURON_RT_PROXY_ALGO_* set in the environment");
        return;
    }
    assert!(nrt_proxy_abi_version() >= 0x0001_0004);
    for c in 0..6 {
        assert_eq!(get(c), NRT_PROXY_ALGO_AUTO);
    }
    let auto = params(NRT_PROXY_ALGO_AUTO);
    assert_eq!(resolved(&auto), NRT_PROXY_ALGO_DIRECT, "the tuner's choice");
    // Bad input changes nothing.
    expect!(NRT_INVALID, nrt_proxy_algorithm_set(6, NRT_PROXY_ALGO_RING));
    expect!(
        NRT_INVALID,
        nrt_proxy_algorithm_set(NRT_PROXY_COLL_ALL_REDUCE, 10)
    );
    expect!(
        NRT_INVALID,
        nrt_proxy_algorithm_set(NRT_PROXY_COLL_ALL_REDUCE, NRT_PROXY_ALGO_BRUCK)
    );
    expect!(
        NRT_INVALID,
        nrt_proxy_algorithm_set(NRT_PROXY_COLL_BROADCAST, NRT_PROXY_ALGO_RABENSEIFNER)
    );
    let mut a = 0;
    expect!(NRT_INVALID, nrt_proxy_algorithm_get(6, &mut a));
    expect!(
        NRT_INVALID,
        nrt_proxy_algorithm_get(NRT_PROXY_COLL_ALL_REDUCE, ptr::null_mut())
    );
    assert_eq!(get(NRT_PROXY_COLL_ALL_REDUCE), NRT_PROXY_ALGO_AUTO);
    // Set: auto plans of that collective follow; named ones keep theirs; others unchanged.
    expect!(
        NRT_SUCCESS,
        nrt_proxy_algorithm_set(NRT_PROXY_COLL_ALL_REDUCE, NRT_PROXY_ALGO_RABENSEIFNER)
    );
    assert_eq!(get(NRT_PROXY_COLL_ALL_REDUCE), NRT_PROXY_ALGO_RABENSEIFNER);
    assert_eq!(get(NRT_PROXY_COLL_ALL_GATHER), NRT_PROXY_ALGO_AUTO);
    assert_eq!(resolved(&auto), NRT_PROXY_ALGO_RABENSEIFNER);
    assert_eq!(resolved(&params(NRT_PROXY_ALGO_RING)), NRT_PROXY_ALGO_RING);
    let mut ag = params(NRT_PROXY_ALGO_AUTO);
    ag.collective = NRT_PROXY_COLL_ALL_GATHER;
    assert_eq!(resolved(&ag), NRT_PROXY_ALGO_DIRECT);
    // Clear: the tuner again.
    expect!(
        NRT_SUCCESS,
        nrt_proxy_algorithm_set(NRT_PROXY_COLL_ALL_REDUCE, NRT_PROXY_ALGO_AUTO)
    );
    assert_eq!(get(NRT_PROXY_COLL_ALL_REDUCE), NRT_PROXY_ALGO_AUTO);
    assert_eq!(resolved(&auto), NRT_PROXY_ALGO_DIRECT);
}

#[test]
fn the_kind_of_link_moves_the_tuners_choice() {
    let _s = serial();
    if tuner_env_set() {
        return;
    }
    assert!(nrt_proxy_abi_version() >= 0x0001_0006);
    let link = || {
        let mut k = 99;
        expect!(NRT_SUCCESS, nrt_proxy_tuner_link_get(&mut k));
        k
    };
    assert_eq!(link(), NRT_PROXY_LINK_MEMORY, "the default");
    // 4 ranks, 8 B: in memory direct; over shared memory or a network, where a message costs
    // more than a step, recursive doubling.
    let mut p = params(NRT_PROXY_ALGO_AUTO);
    p.nranks = 4;
    p.count = 2;
    assert_eq!(resolved(&p), NRT_PROXY_ALGO_DIRECT);
    expect!(NRT_INVALID, nrt_proxy_tuner_link_set(3));
    expect!(NRT_INVALID, nrt_proxy_tuner_link_get(ptr::null_mut()));
    assert_eq!(
        link(),
        NRT_PROXY_LINK_MEMORY,
        "a refused set changes nothing"
    );
    for k in [NRT_PROXY_LINK_SHARED_MEMORY, NRT_PROXY_LINK_NETWORK] {
        expect!(NRT_SUCCESS, nrt_proxy_tuner_link_set(k));
        assert_eq!(link(), k);
        assert_eq!(resolved(&p), NRT_PROXY_ALGO_RECURSIVE_DOUBLING, "link {k}");
    }
    // A named algorithm is kept whatever the link.
    let mut named = p;
    named.algorithm = NRT_PROXY_ALGO_DIRECT;
    assert_eq!(resolved(&named), NRT_PROXY_ALGO_DIRECT);
    expect!(NRT_SUCCESS, nrt_proxy_tuner_link_set(NRT_PROXY_LINK_MEMORY));
    assert_eq!(resolved(&p), NRT_PROXY_ALGO_DIRECT);
}

/// One of the tuner's process-wide values through its `_get` call.
fn tuner_value(get: unsafe extern "C" fn(*mut u32) -> NRT_STATUS) -> u32 {
    let mut v = 99;
    // SAFETY: `v` is writable.
    assert_eq!(unsafe { get(&mut v) }, NRT_SUCCESS);
    v
}

/// Puts the tuner's crowded-host values back to their defaults (unknown CPUs, no CPU blocks)
/// however a test ends: the table is the process's.
struct ResetCrowding;

impl Drop for ResetCrowding {
    fn drop(&mut self) {
        // SAFETY: plain value arguments.
        unsafe {
            nrt_proxy_tuner_cpu_blocks_set(0);
            nrt_proxy_tuner_progress_cpus_set(0);
        }
    }
}

/// A crowded host (ABI 1.7): with the CPUs the ranks progress on set below the host's ranks,
/// an all-reduce over a host map of one host takes the hierarchy (a reduce to one leader and a
/// broadcast) at 8 B on 8 ranks; without the CPUs, or without a map, the tuner's choice is as
/// before. Refusals change nothing.
#[test]
fn a_crowded_host_moves_the_tuners_choice_to_the_hierarchy() {
    let _s = serial();
    if tuner_env_set() {
        return;
    }
    assert!(nrt_proxy_abi_version() >= 0x0001_0007);
    let cpus = || tuner_value(nrt_proxy_tuner_progress_cpus_get);
    assert_eq!(cpus(), 0, "the default: unknown");
    let _reset = ResetCrowding;
    let mut p = params(NRT_PROXY_ALGO_AUTO);
    p.nranks = 8;
    p.count = 2;
    let before = resolved_hosts(&p, &[8]);
    assert_eq!(before, NRT_PROXY_ALGO_RECURSIVE_DOUBLING);
    expect!(NRT_INVALID, nrt_proxy_tuner_progress_cpus_set(u32::MAX));
    expect!(
        NRT_INVALID,
        nrt_proxy_tuner_progress_cpus_get(ptr::null_mut())
    );
    assert_eq!(cpus(), 0, "a refused set changes nothing");
    expect!(NRT_SUCCESS, nrt_proxy_tuner_progress_cpus_set(2));
    assert_eq!(cpus(), 2);
    assert_eq!(resolved_hosts(&p, &[8]), NRT_PROXY_ALGO_HIERARCHICAL);
    // Without a map every rank is its own host: nothing is crowded, nothing to build on.
    assert_eq!(resolved(&p), NRT_PROXY_ALGO_RECURSIVE_DOUBLING);
    // As many CPUs as ranks: not crowded.
    expect!(NRT_SUCCESS, nrt_proxy_tuner_progress_cpus_set(8));
    assert_eq!(resolved_hosts(&p, &[8]), before);
    expect!(NRT_SUCCESS, nrt_proxy_tuner_progress_cpus_set(0));
    assert_eq!(resolved_hosts(&p, &[8]), before);
}

/// Ranks in CPU blocks (ABI 1.8): on a crowded host whose ranks' threads are pinned in
/// consecutive blocks, the hierarchy of a one-host plan works in the blocks: the leader of 4
/// ranks on 2 CPUs gathers one member (scratch for 1 member's vector) where with one leader it
/// gathers 3. Off, or not crowded: one leader. Refusals change nothing.
#[test]
fn ranks_in_cpu_blocks_make_the_hierarchys_groups() {
    let _s = serial();
    if tuner_env_set() {
        return;
    }
    assert!(nrt_proxy_abi_version() >= 0x0001_0008);
    let on = || tuner_value(nrt_proxy_tuner_cpu_blocks_get);
    assert_eq!(on(), 0, "the default: not known");
    let _reset = ResetCrowding;
    let mut p = params(NRT_PROXY_ALGO_HIERARCHICAL);
    p.nranks = 4;
    p.rank = 0;
    p.count = 2;
    let scratch = |p: &NrtProxyPlanParams| {
        let mut plan = ptr::null_mut();
        expect!(
            NRT_SUCCESS,
            nrt_proxy_plan_create_hosts(p, [4u32].as_ptr(), 1, &mut plan)
        );
        let s = layout(plan).scratch_bytes;
        expect!(NRT_SUCCESS, nrt_proxy_plan_destroy(plan));
        s
    };
    let one_leader = scratch(&p);
    assert_eq!(one_leader, 3 * 8, "3 members' 8 B vectors");
    expect!(NRT_INVALID, nrt_proxy_tuner_cpu_blocks_set(2));
    expect!(NRT_INVALID, nrt_proxy_tuner_cpu_blocks_get(ptr::null_mut()));
    assert_eq!(on(), 0, "a refused set changes nothing");
    expect!(NRT_SUCCESS, nrt_proxy_tuner_cpu_blocks_set(1));
    assert_eq!(on(), 1);
    // Not crowded (CPUs unknown): one leader still.
    assert_eq!(scratch(&p), one_leader);
    expect!(NRT_SUCCESS, nrt_proxy_tuner_progress_cpus_set(2));
    assert_eq!(
        scratch(&p),
        8,
        "one member's vector, and the leaders' exchange"
    );
    expect!(NRT_SUCCESS, nrt_proxy_tuner_cpu_blocks_set(0));
    assert_eq!(scratch(&p), one_leader);
}

/// The dump lines (target `proxy_dump`) logged so far, captured by a logger installed at the
/// first call.
fn dump_lines() -> Vec<String> {
    static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());
    struct Capture;
    impl log::Log for Capture {
        fn enabled(&self, m: &log::Metadata<'_>) -> bool {
            m.target() == proxy_core::base::dump_lines::DUMP_TARGET
        }
        fn log(&self, r: &log::Record<'_>) {
            if self.enabled(r.metadata()) {
                LINES
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(r.args().to_string());
            }
        }
        fn flush(&self) {}
    }
    static CAPTURE: Capture = Capture;
    if log::set_logger(&CAPTURE).is_ok() {
        log::set_max_level(log::LevelFilter::Error);
    }
    LINES.lock().unwrap_or_else(|e| e.into_inner()).clone()
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

/// A task submitted with its plan and blocked on its device: the comm's dump names the plan's
/// collective, the algorithm it resolved to and why (`api`: set through the C call).
#[test]
fn the_dump_names_the_algorithm_of_an_active_collective() {
    let _s = serial();
    if std::env::vars().any(|(k, _)| k.starts_with("NEURON_RT_PROXY_ALGO_")) {
        eprintln!("skipped: NEURON_RT_PROXY_ALGO_* set in the environment");
        return;
    }
    // Caller mode: nothing runs the queue but this thread.
    let lib = CString::new(common::progress_library().to_str().expect("utf-8 path")).unwrap();
    let mut cfg = std::mem::MaybeUninit::<NrtProxyConfig>::uninit();
    expect!(NRT_SUCCESS, nrt_proxy_config_init(cfg.as_mut_ptr()));
    // SAFETY: initialized above.
    let mut cfg = unsafe { cfg.assume_init() };
    cfg.drive_mode = NRT_PROXY_DRIVE_CALLER;
    cfg.spin_us = 0;
    cfg.progress_lib = lib.as_ptr();
    let mut inst = ptr::null_mut();
    expect!(NRT_SUCCESS, nrt_proxy_init(&cfg, &mut inst));
    let mut g = ptr::null_mut();
    expect!(NRT_SUCCESS, nrt_proxy_group_create(inst, 2, &mut g));
    let mut cc = std::mem::MaybeUninit::<NrtProxyCommConfig>::uninit();
    expect!(NRT_SUCCESS, nrt_proxy_comm_config_init(cc.as_mut_ptr()));
    // SAFETY: initialized above.
    let mut cc = unsafe { cc.assume_init() };
    cc.nranks = 2;
    cc.comm_id = 31;
    cc.group = g;
    cc.callbacks = &CALLBACKS;
    let mut c = ptr::null_mut();
    expect!(NRT_SUCCESS, nrt_proxy_comm_create(inst, &cc, &mut c));
    expect!(NRT_SUCCESS, nrt_proxy_comm_join(c));

    expect!(
        NRT_SUCCESS,
        nrt_proxy_algorithm_set(NRT_PROXY_COLL_ALL_REDUCE, NRT_PROXY_ALGO_RING)
    );
    let mut plan = ptr::null_mut();
    expect!(
        NRT_SUCCESS,
        nrt_proxy_plan_create(&params(NRT_PROXY_ALGO_AUTO), &mut plan)
    );
    expect!(
        NRT_SUCCESS,
        nrt_proxy_algorithm_set(NRT_PROXY_COLL_ALL_REDUCE, NRT_PROXY_ALGO_AUTO)
    );
    let l = layout(plan);
    assert_eq!(l.algorithm, NRT_PROXY_ALGO_RING);
    let memory = PlanMemory::new(&l);
    let PlanBlocks {
        fifos: _fifos,
        blocks,
    } = PlanBlocks::new(plan, &l, &memory.addrs);
    // Armed and never written: the task files its blocks and waits for its device.
    let trigger = AtomicU32::new(0xFFFF_FFFF);
    let trig = [trigger.as_ptr()];
    let task = NrtProxyNetworkTask {
        struct_size: size_of::<NrtProxyNetworkTask>() as u32,
        task_id: 5,
        blocks: blocks.as_ptr(),
        n_blocks: blocks.len(),
        schedule: ptr::null(),
        n_schedule: 0,
        trigger_words: trig.as_ptr(),
        n_trigger_words: 1,
        flags: NRT_PROXY_TASK_WAIT_FOR_DEVICE,
        reserved: 0,
        timeout_ms: NRT_PROXY_TIMEOUT_NONE,
    };
    expect!(
        NRT_INVALID_HANDLE,
        nrt_proxy_submit_plan(c, &task, ptr::null_mut())
    );
    expect!(NRT_SUCCESS, nrt_proxy_submit_plan(c, &task, plan));
    // The plan may go: the task keeps its names.
    expect!(NRT_SUCCESS, nrt_proxy_plan_destroy(plan));
    let mut tick = 0;
    for _ in 0..4 {
        expect!(NRT_SUCCESS, nrt_proxy_tick(c, &mut tick));
    }
    expect!(NRT_SUCCESS, nrt_proxy_comm_dump(c, 1_000));
    let lines = dump_lines();
    let task_line = lines
        .iter()
        .find(|l| l.contains(" task=5 kind=network "))
        .unwrap_or_else(|| panic!("no line of task 5:\n{}", lines.join("\n")));
    assert!(
        task_line.contains("state=WaitingDeviceTrigger")
            && task_line.ends_with(" collective=all-reduce algo=ring why=api"),
        "{task_line}"
    );
    // Leaving ends the task (NRT_CLOSED); then everything goes.
    expect!(NRT_SUCCESS, nrt_proxy_comm_leave(c, 10_000));
    let mut rec = NrtProxyTaskRecord::default();
    expect!(NRT_SUCCESS, nrt_proxy_try_pop(c, &mut rec));
    assert_eq!((rec.task_id, rec.progress_status), (5, NRT_CLOSED));
    expect!(NRT_SUCCESS, nrt_proxy_comm_destroy(c));
    expect!(NRT_SUCCESS, nrt_proxy_group_destroy(g));
    expect!(NRT_SUCCESS, nrt_proxy_fini(inst));
    drop(memory);
}

/// Runs the test `name` of this binary in a child process with `env` set; its output when it
/// fails.
fn run_child(name: &str, env: &[(&str, &str)]) {
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("NRT_PROXY_ALGO_TEST_CHILD", "1")
        .envs(env.iter().copied())
        .output()
        .expect("run the child");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{name}: {text}"
    );
}

/// `NEURON_RT_PROXY_ALGO_<COLL>` gives the table's first values (the same parser as
/// proxy-perf's); a set replaces them; a bad value refuses every plan, set and get, naming it.
#[test]
fn the_environment_gives_the_first_values_and_a_bad_one_is_refused() {
    let _s = serial();
    run_child(
        "child_env_table",
        &[
            ("NEURON_RT_PROXY_ALGO_ALL_REDUCE", "rabenseifner"),
            ("NEURON_RT_PROXY_ALGO_ALL_GATHER", "auto"),
        ],
    );
    run_child(
        "child_env_bad",
        &[("NEURON_RT_PROXY_ALGO_BROADCAST", "bruck")],
    );
    run_child(
        "child_env_progress_cpus",
        &[("NEURON_RT_PROXY_TUNER_PROGRESS_CPUS", " 2 ")],
    );
    for bad in ["two", "-1", "2000000"] {
        run_child(
            "child_env_bad",
            &[("NEURON_RT_PROXY_TUNER_PROGRESS_CPUS", bad)],
        );
    }
}

/// `NEURON_RT_PROXY_TUNE_FILE`: its constants choose `auto` plans; a bad file refuses every
/// plan, naming it.
#[test]
fn a_calibration_file_chooses_and_a_bad_one_is_refused() {
    let _s = serial();
    let dir = std::env::temp_dir();
    let good = dir.join(format!("nrt-proxy-tune-{}.json", std::process::id()));
    let m = proxy_collectives::planner::tuner::CostModel {
        step_ns: 50_000,
        entry_ns: 100,
        byte_ps: 35,
        reduce_ps: 35,
    };
    proxy_runtime::tune_file::TuneFile::new(m, "test".into(), 1, 0.0)
        .write(&good)
        .unwrap();
    run_child(
        "child_tune_file",
        &[("NEURON_RT_PROXY_TUNE_FILE", good.to_str().unwrap())],
    );
    std::fs::write(&good, "{\"version\": 1, \"cost_model\": {}}").unwrap();
    run_child(
        "child_tune_file_bad",
        &[("NEURON_RT_PROXY_TUNE_FILE", good.to_str().unwrap())],
    );
    std::fs::remove_file(&good).unwrap();
}

#[test]
fn child_tune_file() {
    if !child() {
        return;
    }
    // 8 ranks, 8 B: the defaults pick recursive doubling; steps of 50 µs pick direct (one).
    let mut p = params(NRT_PROXY_ALGO_AUTO);
    p.nranks = 8;
    p.count = 2;
    assert_eq!(resolved(&p), NRT_PROXY_ALGO_DIRECT);
}

#[test]
fn child_tune_file_bad() {
    if !child() {
        return;
    }
    let mut plan = ptr::null_mut();
    expect!(
        NRT_INVALID,
        nrt_proxy_plan_create(&params(NRT_PROXY_ALGO_AUTO), &mut plan)
    );
    assert!(plan.is_null());
}

/// The algorithm a plan with `params` and host map `hosts` resolves to.
fn resolved_hosts(p: &NrtProxyPlanParams, hosts: &[u32]) -> u32 {
    let mut plan = ptr::null_mut();
    expect!(
        NRT_SUCCESS,
        nrt_proxy_plan_create_hosts(p, hosts.as_ptr(), hosts.len(), &mut plan)
    );
    let a = layout(plan).algorithm;
    expect!(NRT_SUCCESS, nrt_proxy_plan_destroy(plan));
    a
}

/// `nrt_proxy_plan_create_hosts`: the hierarchical all-reduce over a host map, its refusals;
/// without a calibration file the tuner keeps a flat algorithm for 8 B on 4 + 4 ranks.
#[test]
fn host_maps_through_c() {
    let _s = serial();
    if std::env::vars().any(|(k, _)| k.starts_with("NEURON_RT_PROXY_")) {
        eprintln!("skipped: NEURON_RT_PROXY_* set in the environment");
        return;
    }
    let mut p = params(NRT_PROXY_ALGO_HIERARCHICAL);
    p.nranks = 4;
    p.rank = 3;
    assert_eq!(resolved_hosts(&p, &[2, 2]), NRT_PROXY_ALGO_HIERARCHICAL);
    assert_eq!(resolved_hosts(&p, &[1, 3]), NRT_PROXY_ALGO_HIERARCHICAL);
    assert_eq!(
        resolved_hosts(&p, &[]),
        NRT_PROXY_ALGO_HIERARCHICAL,
        "no map: flat inside"
    );
    let mut plan = ptr::null_mut();
    for (hosts, n) in [
        (ptr::null::<u32>(), 2usize),
        ([2u32, 0].as_ptr(), 2),
        ([2u32, 3].as_ptr(), 2),
        ([1u32; 65].as_ptr(), 65),
    ] {
        expect!(
            NRT_INVALID,
            nrt_proxy_plan_create_hosts(&p, hosts, n, &mut plan)
        );
        assert!(plan.is_null());
    }
    let mut auto = params(NRT_PROXY_ALGO_AUTO);
    auto.nranks = 8;
    auto.count = 2;
    assert_ne!(resolved_hosts(&auto, &[4, 4]), NRT_PROXY_ALGO_HIERARCHICAL);
}

#[test]
fn a_slow_link_between_hosts_in_the_calibration_file_picks_hierarchical() {
    let _s = serial();
    let file =
        std::env::temp_dir().join(format!("nrt-proxy-tune-hosts-{}.json", std::process::id()));
    std::fs::write(
        &file,
        r#"{"version": 1,
            "cost_model": {"step_ns": 2000, "entry_ns": 1000, "byte_ps": 35, "reduce_ps": 35},
            "inter_host_cost_model": {"step_ns": 30000, "entry_ns": 2000, "byte_ps": 800, "reduce_ps": 35}}"#,
    )
    .unwrap();
    run_child(
        "child_tune_file_hosts",
        &[("NEURON_RT_PROXY_TUNE_FILE", file.to_str().unwrap())],
    );
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn child_tune_file_hosts() {
    if !child() {
        return;
    }
    let mut auto = params(NRT_PROXY_ALGO_AUTO);
    auto.nranks = 8;
    auto.count = 2;
    assert_eq!(resolved_hosts(&auto, &[4, 4]), NRT_PROXY_ALGO_HIERARCHICAL);
    // Without the map the ranks do not span hosts: flat.
    assert_ne!(resolved(&auto), NRT_PROXY_ALGO_HIERARCHICAL);
}

fn child() -> bool {
    std::env::var_os("NRT_PROXY_ALGO_TEST_CHILD").is_some()
}

#[test]
fn child_env_table() {
    if !child() {
        return;
    }
    assert_eq!(get(NRT_PROXY_COLL_ALL_REDUCE), NRT_PROXY_ALGO_RABENSEIFNER);
    assert_eq!(get(NRT_PROXY_COLL_ALL_GATHER), NRT_PROXY_ALGO_AUTO);
    let auto = params(NRT_PROXY_ALGO_AUTO);
    assert_eq!(resolved(&auto), NRT_PROXY_ALGO_RABENSEIFNER);
    expect!(
        NRT_SUCCESS,
        nrt_proxy_algorithm_set(NRT_PROXY_COLL_ALL_REDUCE, NRT_PROXY_ALGO_AUTO)
    );
    assert_eq!(resolved(&auto), NRT_PROXY_ALGO_DIRECT);
}

#[test]
fn child_env_progress_cpus() {
    if !child() {
        return;
    }
    let mut c = 0;
    expect!(NRT_SUCCESS, nrt_proxy_tuner_progress_cpus_get(&mut c));
    assert_eq!(c, 2);
    let mut p = params(NRT_PROXY_ALGO_AUTO);
    p.nranks = 8;
    p.count = 2;
    assert_eq!(resolved_hosts(&p, &[8]), NRT_PROXY_ALGO_HIERARCHICAL);
}

#[test]
fn child_env_bad() {
    if !child() {
        return;
    }
    let mut plan = ptr::null_mut();
    expect!(
        NRT_INVALID,
        nrt_proxy_plan_create(&params(NRT_PROXY_ALGO_RING), &mut plan)
    );
    assert!(plan.is_null());
    expect!(
        NRT_INVALID,
        nrt_proxy_algorithm_set(NRT_PROXY_COLL_BROADCAST, NRT_PROXY_ALGO_BINOMIAL)
    );
    let mut a = 0;
    expect!(
        NRT_INVALID,
        nrt_proxy_algorithm_get(NRT_PROXY_COLL_ALL_REDUCE, &mut a)
    );
}
