//! The driver half's C ABI tested from C: the programs in `tests/c/` are compiled with `cc`
//! against the committed headers (`nrt_proxy.h`, `nccom_proxy.h`), linked with `-lnrt_proxy`
//! (through its SONAME `libnrt_proxy.so.1`), and run with the progress half's path:
//!
//! * `exchange.c`: a C runtime with its own device thread runs a 2-rank exchange through both
//!   libraries over the in-memory transport (worker-thread mode, and caller-driven mode), three
//!   executions (the later ones resubmitted), every byte, record field and semaphore checked;
//!   and again with the host driving the seam itself through the exported trampolines
//!   (`ncclStartNetworkProxy` / `ncclNetworkProxyProgress` / `ncclStopNetworkProxy`);
//! * `ring_allreduce.c`: the same kind of runtime runs a 4-rank ring all-reduce with its FIFOs
//!   and device programs from the C planner (`nrt_proxy_plan_*`: 2 streams x 2 basic blocks, 2
//!   chunks per ring step in every part, the device interpreting each block's program), thread
//!   and caller mode, twice (resubmitted), every output word checked;
//! * `plan_bad_input.c`: the planner's entry points given NULLs, wrong sizes, values out of
//!   range, too-small arrays (nothing written), bad addresses and stale or foreign handles;
//! * `driver_bad_input.c`: the driver half's entry points given NULLs, stream >= 4, block id
//!   none, zero-length FIFOs, mismatched lengths, destroyed / never-created / other-kind
//!   handles, handles of a second loaded copy of `libnrt_proxy.so` (both ways), double join and
//!   leave, submit after leave, a full ring (the refused task submitted again later), a progress
//!   half of ABI major 2 (`fake_progress_v2.c`), the trampolines' checks; exact statuses, the
//!   comm's health and last error, everything destroyed;
//! * `minimal.c` (the README's program) through the installed pkg-config files;
//! * `dump_signal.c`: `nrt_proxy_init` reads `NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY` and
//!   `NEURON_RT_PROXY_DUMP_SIGNAL` from the environment (the worker pinned, the signal dumps the
//!   instance's proxy queues, `nrt_proxy_fini` removes the handler), and refuses bad values;
//! * `examples/raii_exchange.cpp`, the README's C++17 example (RAII wrappers of every handle),
//!   compiled with `g++ -std=c++17 -Wall -Wextra -Werror`;
//! * with the feature `libfabric`, `tcp_exchange.c`: two processes, one rank each, over
//!   libfabric tcp on loopback (the comm through the progress half, the barrier through the
//!   driver's own bootstrap), thread and caller mode, each pair of processes killed after 180 s;
//!   and again with `NEURON_RT_PROXY_IDLE=block` (the driver slept on the CQ descriptor, the
//!   progress half's idle entry points answer as documented), over the engine's own shared
//!   memory (`provider` `"proxy-shm"`), and with rank 1 killed mid-collective over both (rank
//!   0's wait ends with a failed task, it tears down and exits 0);
//! * the same under valgrind (memcheck: no invalid access, no definite leak), spin budgets 0:
//!   the in-memory programs, both bad-input programs, and the tcp exchange in thread mode (both
//!   processes).
//!   A missing valgrind fails unless `PROXY_ALLOW_SKIP_VALGRIND=1`.
//!
//! `NCCOM_PROXY_LIB=/path/libnccom_proxy.so` tests another build of the progress half.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

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
fn c_runtime_runs_a_4_rank_ring_all_reduce() {
    let exe = compile("ring_allreduce", "ring_allreduce", &["-pthread"]);
    for mode in ["thread", "caller"] {
        let mut cmd = Command::new(&exe);
        cmd.arg(progress_library()).arg(mode);
        assert!(run(cmd).contains(&format!("ring_allreduce: ok: {mode} mode, 4 ranks")));
    }
}

/// The README's C++17 example (`examples/raii_exchange.cpp`, every handle in an RAII wrapper):
/// compiled with `g++ -std=c++17 -Wall -Wextra -Werror` and run (a 2-rank send-recv from the
/// planner, every word checked).
#[test]
fn cpp17_raii_example_exchanges() {
    let exe = common::compile_cpp("examples/raii_exchange.cpp", "raii_exchange", &["-pthread"]);
    let mut cmd = Command::new(&exe);
    cmd.arg(progress_library());
    assert!(run(cmd).contains("raii_exchange: ok: 2 ranks"));
    // The same with the library's host devices (nrt::HostDevice) instead of its own device.
    let mut cmd = Command::new(&exe);
    cmd.arg("--host-device").arg(progress_library());
    assert!(run(cmd).contains("the library's host devices"));
}

/// A runtime that repeats a bad call 100000 times and calls one comm from two threads at once
/// for 300 ms (`tests/c/refusal_flood.c`): every call answers its status, and the log gets the
/// first 10 refusals of each kind in full, then at most one summary line a second per kind.
#[test]
fn refused_calls_do_not_flood_the_log() {
    let exe = compile("refusal_flood", "refusal_flood", &["-pthread"]);
    let o = Command::new(exe)
        .arg(progress_library())
        .env_remove("LD_LIBRARY_PATH")
        .env("NEURON_RT_LOG_LEVEL", "ERROR")
        .output()
        .expect("run refusal_flood");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("refusal_flood: ok"), "{stdout}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("ERROR")).collect();
    let (ticks, busy) = (
        lines
            .iter()
            .filter(|l| l.contains("nrt_proxy_tick"))
            .count(),
        lines
            .iter()
            .filter(|l| l.contains("in use by another call"))
            .count(),
    );
    println!(
        "{stdout}{} ERROR lines: {ticks} for the bad call, {busy} busy",
        lines.len()
    );
    // 10 in full, the 11th with its note, a summary a second (the loop takes well under 10 s),
    // and the fini's summary of the rest.
    assert!(
        (12..=22).contains(&ticks),
        "{ticks} lines for 100000 bad calls:\n{stderr}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("are counted and summarised")),
        "no note:\n{stderr}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("more refusals (bad input) not logged")),
        "no summary line:\n{stderr}"
    );
    // At most 11 in full, one a second for the 300 ms of two threads, and the fini's.
    assert!(busy <= 14, "{busy} lines for the busy comm:\n{stderr}");
}

/// `examples/allreduce.c`: an all-reduce on the library's host devices (no device code), 2 and
/// 4 ranks, caller and thread mode, and thread mode with bells (devices attached to their comms,
/// workers napping), every word checked; also under memcheck (caller and bells mode).
#[test]
fn example_allreduce_runs_on_host_devices() {
    let exe = common::compile_c_at("examples/allreduce.c", "allreduce", &["-pthread"]);
    for mode in ["caller", "thread", "bells"] {
        for n in ["2", "4"] {
            let mut cmd = Command::new(&exe);
            cmd.args([mode, n])
                .env("NEURON_RT_PROXY_PROGRESS_LIB", progress_library());
            assert!(run(cmd).contains(&format!("allreduce: ok: {mode} mode, {n} ranks")));
        }
    }
    if common::have_valgrind() {
        let mut cmd = common::valgrind(&exe);
        cmd.args(["caller", "2"])
            .env("NEURON_RT_PROXY_PROGRESS_LIB", progress_library());
        assert!(run(cmd).contains("allreduce: ok: caller mode, 2 ranks"));
        // The bells' threads (rings, naps, a device thread's unpark at stop) under memcheck.
        let mut cmd = common::valgrind(&exe);
        cmd.args(["bells", "2"])
            .env("NEURON_RT_PROXY_PROGRESS_LIB", progress_library());
        assert!(run(cmd).contains("allreduce: ok: bells mode, 2 ranks"));
    }
}

#[test]
fn c_plan_api_answers_bad_input() {
    let exe = compile("plan_bad_input", "plan_bad_input", &[]);
    let mut cmd = Command::new(exe);
    cmd.arg(progress_library());
    assert!(run(cmd).contains("plan_bad_input: ok"));
}

/// The arguments of `driver_bad_input`: the progress half, a copy of `libnrt_proxy.so` at another
/// path (a second loaded instance), and the stub progress half of ABI major 2.
fn bad_input_args() -> [std::path::PathBuf; 3] {
    static ARGS: std::sync::OnceLock<[std::path::PathBuf; 3]> = std::sync::OnceLock::new();
    ARGS.get_or_init(|| {
        let tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
        let copy = tmp.join("bad-input-copy-libnrt_proxy.so");
        std::fs::copy(common::driver_library(), &copy).expect("copy libnrt_proxy.so");
        let fake = common::fake_progress("bad-input-libfake_progress_v2.so", &[]);
        [progress_library(), copy, fake]
    })
    .clone()
}

#[test]
fn c_driver_api_answers_bad_input() {
    let exe = compile("driver_bad_input", "driver_bad_input", &["-ldl"]);
    let mut cmd = Command::new(exe);
    cmd.args(bad_input_args());
    assert!(run(cmd).contains("driver_bad_input: ok"));
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
    let exe = compile("ring_allreduce", "ring_allreduce_vg", &["-pthread"]);
    for mode in ["thread", "caller"] {
        let mut cmd = common::valgrind(&exe);
        cmd.arg(progress_library()).arg(mode);
        assert!(run(cmd).contains(&format!("ring_allreduce: ok: {mode} mode")));
    }
    let mut cmd = common::valgrind(&compile("plan_bad_input", "plan_bad_input_vg", &[]));
    cmd.arg(progress_library());
    assert!(run(cmd).contains("plan_bad_input: ok"));
    let mut cmd = common::valgrind(&compile(
        "driver_bad_input",
        "driver_bad_input_vg",
        &["-ldl"],
    ));
    cmd.args(bad_input_args());
    assert!(run(cmd).contains("driver_bad_input: ok"));
    let mut cmd = common::valgrind(&compile("minimal", "minimal_vg", &[]));
    cmd.arg(progress_library());
    assert!(run(cmd).contains("minimal: ok"));
}

#[test]
fn readme_program_is_tests_c_minimal_c() {
    let readme = std::fs::read_to_string(common::manifest_dir().join("README.md")).expect("README");
    let minimal = std::fs::read_to_string(common::manifest_dir().join("tests/c/minimal.c"))
        .expect("minimal.c");
    assert!(
        readme.contains(&format!("```c\n{minimal}```")),
        "ffi/driver/README.md must hold tests/c/minimal.c verbatim"
    );
}

/// An "installed" tree: both headers, both libraries with their SONAME links, both filled-in
/// `.pc` files; `tests/c/minimal.c` built with `pkg-config --cflags --libs nrt_proxy` and run
/// twice: given the progress half's path, and with none (the driver then loads
/// `libnccom_proxy.so.1`, found here through `LD_LIBRARY_PATH`).
#[test]
fn minimal_program_links_with_the_pkg_config_files() {
    let have = Command::new("pkg-config")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have && common::tool_missing_allowed("pkg-config", "PROXY_ALLOW_SKIP_PKG_CONFIG") {
        return;
    }
    let dir = common::manifest_dir();
    let prefix = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("nrt-pc-prefix");
    let (inc, libdir) = (prefix.join("include"), prefix.join("lib"));
    let pcdir = libdir.join("pkgconfig");
    for d in [&inc, &pcdir] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    std::fs::copy(dir.join("include/nrt_proxy.h"), inc.join("nrt_proxy.h")).expect("copy");
    std::fs::copy(
        dir.join("../include/nccom_proxy.h"),
        inc.join("nccom_proxy.h"),
    )
    .expect("copy");
    for (name, lib, pc_in) in [
        (
            "nrt_proxy",
            common::driver_library(),
            dir.join("nrt_proxy.pc.in"),
        ),
        (
            "nccom_proxy",
            progress_library(),
            dir.join("../nccom_proxy.pc.in"),
        ),
    ] {
        let so = format!("lib{name}.so");
        std::fs::copy(&lib, libdir.join(&so)).expect("copy library");
        let so1 = libdir.join(format!("{so}.1"));
        let _ = std::fs::remove_file(&so1);
        std::os::unix::fs::symlink(&so, &so1).expect("symlink");
        let pc = std::fs::read_to_string(pc_in)
            .expect(".pc.in")
            .replace("@PREFIX@", prefix.to_str().expect("utf-8 path"))
            .replace("@LIBDIR@", libdir.to_str().expect("utf-8 path"))
            .replace("@VERSION@", env!("CARGO_PKG_VERSION"));
        std::fs::write(pcdir.join(format!("{name}.pc")), pc).expect("write .pc");
    }
    let mut cmd = Command::new("pkg-config");
    cmd.args(["--cflags", "--libs", "nrt_proxy"])
        .env("PKG_CONFIG_PATH", &pcdir);
    let flags = run(cmd);
    let flags: Vec<&str> = flags.split_whitespace().collect();
    assert!(flags.contains(&"-lnrt_proxy"), "{flags:?}");
    let src = dir.join("tests/c/minimal.c");
    let exe = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("minimal_pc");
    let o = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .args(&flags)
        .output()
        .expect("run cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut cmd = Command::new(&exe);
    cmd.arg(libdir.join("libnccom_proxy.so"));
    assert!(run(cmd).contains("minimal: ok"));
    // No path: the SONAME, through the library search path.
    let o = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &libdir)
        .env_remove("NEURON_RT_PROXY_PROGRESS_LIB")
        .output()
        .expect("run minimal");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("minimal: ok"),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // And through the environment variable, with no search path.
    let mut cmd = Command::new(&exe);
    cmd.env(
        "NEURON_RT_PROXY_PROGRESS_LIB",
        libdir.join("libnccom_proxy.so"),
    );
    assert!(run(cmd).contains("minimal: ok"));
}

/// Two processes, one rank each, over libfabric `tcp;ofi_rxm` on loopback (`FI_TCP_IFACE=lo`):
/// the comm through the progress half's libfabric transport, the barrier through the driver's
/// own bootstrap; a network and a barrier task per execution, the second resubmitted, every
/// byte checked; with worker threads, then caller-driven (`nrt_proxy_drive_until`). Needs a
/// progress half built with `proxy-ffi/libfabric` (checked first).
#[cfg(feature = "libfabric")]
#[test]
fn c_runtime_exchanges_between_two_processes_over_libfabric_tcp() {
    let exe = compile("tcp_exchange", "tcp_exchange", &["-pthread", "-ldl"]);
    for mode in ["thread", "caller"] {
        tcp_pair(mode, &[], || Command::new(&exe));
    }
}

/// The same two processes over the engine's own shared memory (`provider`
/// `NRT_PROXY_PROVIDER_OWN_SHM`, ABI 1.9) instead of libfabric tcp: every byte and record
/// checked, thread and caller mode; the progress half's log says the comm is proxy-shm's (its
/// set-up line), not libfabric's. Runs in a build without libfabric too.
#[test]
fn c_runtime_exchanges_between_two_processes_over_own_shm() {
    let exe = compile("tcp_exchange", "tcp_exchange_shm", &["-pthread", "-ldl"]);
    for mode in ["thread", "caller"] {
        let outs = tcp_pair(
            mode,
            &[
                ("TCP_EXCHANGE_OWN_SHM", "1"),
                ("NEURON_RT_LOG_LEVEL", "info"),
            ],
            || Command::new(&exe),
        );
        for (rank, (_, err)) in outs.iter().enumerate() {
            // proxy-shm's set-up line (`rank R/2: shm comm C mapped 2 segments`).
            assert!(
                err.contains(&format!("rank {rank}/2: shm comm ")) && err.contains("mapped 2"),
                "{mode} rank {rank}: no sign of the own shared-memory transport:\n{err}"
            );
            assert!(
                !err.contains("libfabric/tcp"),
                "{mode} rank {rank}: a libfabric comm:\n{err}"
            );
        }
    }
}

/// A peer killed mid-collective through the driver library: rank 1 SIGKILLs itself in the
/// second execution with its sends and receives posted (`TCP_EXCHANGE_KILL_PEER=1`; 4 entries
/// of 4 MiB, 16 MiB each way, so large messages are in flight: rendezvous on tcp, cross-memory
/// reads on own shm), over libfabric tcp (in a build with libfabric) and over the engine's own
/// shared memory, thread and caller mode, three times each. Rank 0 must end its wait with a
/// failed network task, or a failed barrier task where the bytes had crossed (not hang:
/// bounded by the program's 60 s wait and `TCP_PAIR_LIMIT`; not crash: exit 0 after leaving,
/// destroying and finishing, saying `peer lost`); rank 1 must die by the signal, not fail
/// earlier.
#[test]
fn c_runtime_survives_a_peer_killed_mid_collective() {
    use std::os::unix::process::ExitStatusExt;
    let exe = compile("tcp_exchange", "tcp_exchange_kill", &["-pthread", "-ldl"]);
    // Over libfabric tcp too when the progress half has libfabric.
    let kinds: &[&str] = if cfg!(feature = "libfabric") {
        &["0", "1"]
    } else {
        &["1"]
    };
    for &own_shm in kinds {
        for mode in ["thread", "caller"] {
            for round in 0..3 {
                let env = [
                    ("TCP_EXCHANGE_KILL_PEER", "1"),
                    ("TCP_EXCHANGE_OWN_SHM", own_shm),
                    ("TCP_EXCHANGE_ENTRY_BYTES", "4194304"),
                ];
                let outs = run_pair(&progress_library(), mode, &env, || Command::new(&exe));
                let what = format!("own shm {own_shm}, {mode}, round {round}");
                let (st0, out0, err0) = &outs[0];
                assert!(st0.success(), "{what}: rank 0 ended {st0}:\n{out0}{err0}");
                assert!(
                    out0.contains(&format!("tcp_exchange: peer lost: rank 0, {mode} mode")),
                    "{what}: {out0}"
                );
                assert!(!out0.contains("ended NRT_SUCCESS"), "{what}: {out0}");
                let (st1, out1, err1) = &outs[1];
                assert_eq!(
                    st1.signal(),
                    Some(9),
                    "{what}: rank 1 ended {st1}:\n{out1}{err1}"
                );
            }
        }
    }
}

/// The same two processes with `NEURON_RT_PROXY_IDLE=block`, thread and caller mode: the
/// exchange is as exact; each rank's proxy queue has the comm's idle wait wired and its driver
/// slept on the CQ descriptor at least once (the dump's `idle=wired idle_sleeps=N`, N >= 1);
/// the progress half's idle entry points, called directly after the leave, say the comm has a
/// descriptor, arm, end a sleep at once on a kick, and refuse NULLs (`tcp_exchange.c`).
#[cfg(feature = "libfabric")]
#[test]
fn c_runtime_blocks_on_the_cq_descriptor_with_neuron_rt_proxy_idle_block() {
    let exe = compile("tcp_exchange", "tcp_exchange_idle", &["-pthread", "-ldl"]);
    for mode in ["thread", "caller"] {
        let outs = tcp_pair(mode, &[("NEURON_RT_PROXY_IDLE", "block")], || {
            Command::new(&exe)
        });
        for (rank, (out, err)) in outs.iter().enumerate() {
            assert!(
                out.contains("tcp_exchange: idle wait: available 1, armed "),
                "{mode} rank {rank}: {out}"
            );
            assert!(
                !out.contains("woken after a kick 0"),
                "{mode} rank {rank}: {out}"
            );
            let sleeps = err
                .lines()
                .filter_map(|l| l.split(" idle=wired idle_sleeps=").nth(1))
                .filter_map(|t| t.split_whitespace().next()?.parse::<u64>().ok())
                .next()
                .unwrap_or_else(|| {
                    panic!("{mode} rank {rank}: no `idle=wired idle_sleeps=` in the dump:\n{err}")
                });
            assert!(
                sleeps >= 1,
                "{mode} rank {rank}: the driver never slept on the descriptor:\n{err}"
            );
        }
    }
}

/// A progress half of ABI 1.3, which predates the idle wait's entry points: the same two
/// processes with `NEURON_RT_PROXY_IDLE=block` over a copy of the progress half whose four
/// `nccom_comm_idle_*` names in its dynamic symbol table are renamed (same length, so the ELF
/// stays whole and `dlsym` finds none of them). The driver must not ask for the idle wait
/// (`NCCOM_COMM_IDLE_WAIT`), its queue has none (`idle=none` in the dump) and yields, and every
/// byte arrives, in thread and caller mode.
#[cfg(feature = "libfabric")]
#[test]
fn a_progress_half_without_the_idle_entry_points_runs_without_the_idle_wait() {
    let exe = compile("tcp_exchange", "tcp_exchange_old", &["-pthread", "-ldl"]);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("progress-1.3");
    std::fs::create_dir_all(&dir).expect("create the old library's directory");
    let old = dir.join("libnccom_proxy.so");
    let mut bytes = std::fs::read(progress_library()).expect("read the progress half");
    let (from, to) = (b"nccom_comm_idle_", b"nccom_comm_idlX_");
    let mut renamed = 0;
    let mut i = 0;
    while let Some(at) = bytes[i..].windows(from.len()).position(|w| w == from) {
        bytes[i + at..i + at + to.len()].copy_from_slice(to);
        renamed += 1;
        i += at + from.len();
    }
    assert!(
        renamed >= 4,
        "only {renamed} idle names found in the progress half"
    );
    std::fs::write(&old, &bytes).expect("write the old library");
    for mode in ["thread", "caller"] {
        let outs = tcp_pair_with(&old, mode, &[("NEURON_RT_PROXY_IDLE", "block")], || {
            Command::new(&exe)
        });
        for (rank, (out, err)) in outs.iter().enumerate() {
            assert!(
                out.contains("tcp_exchange: idle wait: no entry points"),
                "{mode} rank {rank}: {out}"
            );
            assert!(
                err.contains(" idle=none idle_sleeps=0"),
                "{mode} rank {rank}: the queue must have no idle wait:\n{err}"
            );
            assert!(!err.contains("idle=wired"), "{mode} rank {rank}:\n{err}");
        }
    }
}

/// The same two processes in thread mode, each under valgrind (memcheck: no invalid access, no
/// definite leak, in our code or libfabric's), spin budgets 0. Loopback only.
#[cfg(feature = "libfabric")]
#[test]
fn c_runtime_exchanges_over_libfabric_tcp_under_valgrind() {
    if !common::have_valgrind()
        && common::tool_missing_allowed("valgrind", "PROXY_ALLOW_SKIP_VALGRIND")
    {
        return;
    }
    let exe = compile("tcp_exchange", "tcp_exchange_vg", &["-pthread", "-ldl"]);
    tcp_pair("thread", &[], || common::valgrind(&exe));
}

/// Runs `tcp_exchange` as ranks 0 and 1 (`cmd()` gives the command before its arguments, `env`
/// is added to its environment) on two fresh loopback ports, checks both succeed and returns
/// each rank's (stdout, stderr). Each process's output goes to a file (no pipe can fill); both
/// are killed if they have not ended within `TCP_PAIR_LIMIT`.
fn tcp_pair(mode: &str, env: &[(&str, &str)], cmd: impl Fn() -> Command) -> Vec<(String, String)> {
    tcp_pair_with(&progress_library(), mode, env, cmd)
}

/// [`tcp_pair`] over the progress half `lib`.
fn tcp_pair_with(
    lib: &std::path::Path,
    mode: &str,
    env: &[(&str, &str)],
    cmd: impl Fn() -> Command,
) -> Vec<(String, String)> {
    let mut outs = Vec::new();
    for (rank, (status, out, err)) in run_pair(lib, mode, env, cmd).into_iter().enumerate() {
        assert!(status.success(), "{mode}: rank {rank} failed with {status}");
        assert!(
            out.contains(&format!("tcp_exchange: ok: rank {rank}, {mode} mode")),
            "{out}"
        );
        outs.push((out, err));
    }
    outs
}

/// Far above a valgrind run's ~15 s; the programs' own waits end within 2 minutes.
const TCP_PAIR_LIMIT: std::time::Duration = std::time::Duration::from_secs(180);

/// Runs the pair of [`tcp_pair_with`] and returns each rank's exit status, stdout and stderr,
/// unchecked; panics naming the rank that was still running after `TCP_PAIR_LIMIT` (both are
/// killed then).
fn run_pair(
    lib: &std::path::Path,
    mode: &str,
    env: &[(&str, &str)],
    cmd: impl Fn() -> Command,
) -> Vec<(std::process::ExitStatus, String, String)> {
    use std::time::{Duration, Instant};
    // Over the own shared memory the progress half needs no libfabric; over tcp it does.
    let own_shm = env.contains(&("TCP_EXCHANGE_OWN_SHM", "1"));
    let nm = Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(lib)
        .output()
        .expect("run nm (binutils)");
    assert!(
        own_shm || String::from_utf8_lossy(&nm.stdout).contains(" fi_getinfo"),
        "{} was built without libfabric: build it with `cargo build -p proxy-ffi --features \
         libfabric` (or test with --features proxy-ffi/libfabric,proxy-driver-ffi/libfabric)",
        lib.display()
    );
    // Two distinct free loopback ports: the progress half's bootstrap and the driver's.
    let root = proxy_bootstrap::launch::free_loopback_root().expect("free port");
    let barrier = loop {
        let b = proxy_bootstrap::launch::free_loopback_root().expect("free port");
        if b != root {
            break b;
        }
    };
    let tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    // One pair at a time per tag: the tests of this file run in parallel in one process.
    static PAIRS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let pair = PAIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tag = format!("{}-{mode}-{pair}", std::process::id());
    let mut children: Vec<_> = (0..2u32)
        .map(|rank| {
            let out = tmp.join(format!("tcp_exchange-{tag}-{rank}.out"));
            let err = tmp.join(format!("tcp_exchange-{tag}-{rank}.err"));
            let mut c = cmd();
            c.arg(lib)
                .arg(rank.to_string())
                .arg(root.to_string())
                .arg(barrier.to_string())
                .arg(mode)
                .env("FI_TCP_IFACE", "lo")
                .envs(env.iter().copied())
                .env_remove("LD_LIBRARY_PATH")
                .stdout(std::fs::File::create(&out).expect("create output file"))
                .stderr(std::fs::File::create(&err).expect("create output file"));
            let child = c.spawn().expect("spawn tcp_exchange");
            (rank, child, out, err)
        })
        .collect();
    let start = Instant::now();
    let mut status = [None, None];
    while status.iter().any(Option::is_none) && start.elapsed() < TCP_PAIR_LIMIT {
        for (rank, child, ..) in &mut children {
            if status[*rank as usize].is_none() {
                status[*rank as usize] = child.try_wait().expect("wait tcp_exchange");
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for (rank, child, ..) in &mut children {
        if status[*rank as usize].is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    let mut outs = Vec::new();
    for (rank, _, out, err) in &children {
        let out = std::fs::read_to_string(out).unwrap_or_default();
        let err = std::fs::read_to_string(err).unwrap_or_default();
        println!("{mode} rank {rank} ({:?}):\n{out}{err}", start.elapsed());
        let st = status[*rank as usize].unwrap_or_else(|| {
            panic!("{mode}: rank {rank} still running after {TCP_PAIR_LIMIT:?}: killed")
        });
        outs.push((st, out, err));
    }
    outs
}

/// `NEURON_RT_PROXY_DUMP_SIGNAL=USR1` and `NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY=0`, with a
/// config from `nrt_proxy_config_init`: the instance logs both in its configuration, the raised
/// signal dumps its two proxy queues (one per rank, each written by its worker), and the program tears down
/// cleanly afterwards (the handler removed at the last reference). A malformed value of either
/// variable makes `nrt_proxy_init` answer `NRT_INVALID` naming it.
#[test]
fn init_reads_the_dump_signal_and_cpu_affinity_from_the_environment() {
    let exe = compile("dump_signal", "dump_signal", &[]);
    let mut child = Command::new(&exe)
        .arg(progress_library())
        .arg(libc::SIGUSR1.to_string())
        .env_remove("LD_LIBRARY_PATH")
        .env("NEURON_RT_PROXY_DUMP_SIGNAL", "USR1")
        .env("NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY", "0")
        .env("NEURON_RT_LOG_LEVEL", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run dump_signal");
    // Both streams on reader threads, every line to one channel.
    let (tx, rx) = mpsc::channel::<(bool, String)>();
    let readers: Vec<_> = [
        (
            false,
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        ),
        (true, Box::new(child.stderr.take().unwrap())),
    ]
    .into_iter()
    .map(|(is_err, r)| {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines().map_while(Result::ok) {
                let _ = tx.send((is_err, line));
            }
        })
    })
    .collect();
    drop(tx);
    let mut log = String::new();
    let (mut raised, mut dumped) = (false, false);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !(raised && dumped) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok((is_err, line)) = rx.recv_timeout(left) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no dump within 60 s (raised: {raised}); output so far:\n{log}");
        };
        raised |= !is_err && line == "raised";
        dumped |= is_err && line.contains("proxy-dump registry groups=2 written=2");
        log.push_str(&line);
        log.push('\n');
    }
    // The dump is in the log: let the program tear down.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"\n").expect("write to dump_signal");
    drop(stdin);
    let status = child.wait().expect("wait for dump_signal");
    for r in readers {
        r.join().unwrap();
    }
    log.extend(rx.try_iter().map(|(_, l)| l + "\n"));
    println!("{log}");
    assert!(status.success(), "dump_signal failed with {status}:\n{log}");
    assert!(log.contains("dump_signal: ok"), "{log}");
    assert!(
        log.contains("cpu_affinity: [0]"),
        "the configuration logged: {log}"
    );
    assert!(
        log.contains(&format!("dump_signal: Some({})", libc::SIGUSR1)),
        "the configuration logged: {log}"
    );
    assert!(
        log.contains(&format!("signal {} dumps every proxy queue", libc::SIGUSR1)),
        "{log}"
    );
    for (var, value) in [
        ("NEURON_RT_PROXY_DUMP_SIGNAL", "TERM"),
        ("NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY", "0-x"),
    ] {
        let o = Command::new(&exe)
            .arg(progress_library())
            .arg(libc::SIGUSR1.to_string())
            .env_remove("LD_LIBRARY_PATH")
            .env(var, value)
            .stdin(Stdio::null())
            .output()
            .expect("run dump_signal");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{var}={value}: {err}");
        assert!(
            err.contains("nrt_proxy_init(&cfg, &inst): NRT_INVALID") && err.contains(var),
            "{var}={value}: {err}"
        );
    }
}
