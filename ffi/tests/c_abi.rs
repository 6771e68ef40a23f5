//! The C ABI tested from C: the programs in `ffi/tests/c/` are compiled with `cc` (or `$CC`)
//! against the committed header and the `libnccom_proxy.so` cargo built for this test, then run:
//!
//! * `seam_sendrecv.c` `dlopen`s the library, creates two comms over the in-memory transport,
//!   plays the device and sends 1 MiB twice through the seam (bytes and semaphores checked);
//! * `bad_input.c` links `-lnccom_proxy` and checks the status of every kind of bad input;
//! * `abort_thread.c` links `-lnccom_proxy -pthread` and aborts a comm from a second thread while
//!   the main thread drives it (the loop ends `NRT_CLOSED`), then races aborts against a destroy;
//! * both again under valgrind (memcheck: no invalid access, no definite leak). A missing
//!   valgrind (or pkg-config, for the link test) fails its test unless
//!   `PROXY_ALLOW_SKIP_VALGRIND=1` (`PROXY_ALLOW_SKIP_PKG_CONFIG=1`) says to skip it.
//!
//! `NCCOM_PROXY_LIB=/path/libnccom_proxy.so` tests another build of the library.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Compiles `tests/c/<name>.c` into the test's scratch directory as `<out>`.
fn compile(name: &str, out: &str, extra: &[&str]) -> PathBuf {
    let src = manifest_dir().join("tests/c").join(format!("{name}.c"));
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(out);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.args(["-std=c11", "-g", "-O1", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(manifest_dir().join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .args(extra);
    let o = cmd.output().unwrap_or_else(|e| {
        panic!("cannot run the C compiler `{cc}`: {e} (install gcc, or set CC)")
    });
    assert!(
        o.status.success(),
        "compiling {} failed:\n{cmd:?}\n{}{}",
        src.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    exe
}

fn build_sendrecv(out: &str) -> PathBuf {
    // -rdynamic: rank 1's comm finds this program's nec_inc_semaphore with dlsym(RTLD_DEFAULT).
    compile("seam_sendrecv", out, &["-rdynamic", "-ldl"])
}

fn build_bad_input(out: &str) -> PathBuf {
    build_linked("bad_input", out, &[])
}

fn build_abort_thread(out: &str) -> PathBuf {
    build_linked("abort_thread", out, &["-pthread"])
}

/// Compiles `tests/c/<name>.c` linked with `-lnccom_proxy` (rpath to the library's directory).
fn build_linked(name: &str, out: &str, more: &[&str]) -> PathBuf {
    let dir = installed_lib_dir();
    let dir = dir.to_str().expect("utf-8 path");
    let mut flags = vec![
        format!("-L{dir}"),
        "-lnccom_proxy".to_owned(),
        format!("-Wl,-rpath,{dir}"),
    ];
    flags.extend(more.iter().map(|s| (*s).to_owned()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    compile(name, out, &flags)
}

/// A directory laid out as an installation: `libnccom_proxy.so` (the link name) and
/// `libnccom_proxy.so.1` (the SONAME, which a linked program loads), both links to the library
/// under test.
fn installed_lib_dir() -> PathBuf {
    // Once per test binary: the tests run in parallel.
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nccom-lib");
        std::fs::create_dir_all(&dir).expect("mkdir");
        for name in ["libnccom_proxy.so", "libnccom_proxy.so.1"] {
            let link = dir.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(common::library(), &link).expect("symlink");
        }
        dir
    })
    .clone()
}

/// Runs `cmd`, prints its output, and fails the test on a non-zero exit. Without cargo's
/// `LD_LIBRARY_PATH`, which lists `target/debug` before `deps` and would make a program linked
/// with `-rpath` load a stale `libnccom_proxy.so` uplifted there by an earlier `cargo build`.
fn run(mut cmd: Command) -> String {
    cmd.env_remove("LD_LIBRARY_PATH");
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr);
    println!("{cmd:?}\n--- stdout\n{stdout}--- stderr\n{stderr}");
    assert!(o.status.success(), "{cmd:?} failed with {}", o.status);
    stdout
}

#[test]
fn c_program_sends_1_mib_through_the_dlopened_seam() {
    let exe = build_sendrecv("seam_sendrecv");
    let mut cmd = Command::new(exe);
    cmd.arg(common::library());
    let out = run(cmd);
    assert!(out.contains("seam_sendrecv: ok"), "{out}");
}

#[test]
fn c_program_aborts_a_comm_from_another_thread() {
    let exe = build_abort_thread("abort_thread");
    let out = run(Command::new(exe));
    assert!(out.contains("abort_thread: ok"), "{out}");
}

#[test]
fn c_program_gets_a_status_for_every_bad_input() {
    let exe = build_bad_input("bad_input");
    let out = run(Command::new(exe));
    assert!(out.contains("bad_input: ok"), "{out}");
}

/// A missing tool fails its test unless `opt_out=1` says to skip it: then the skip is printed
/// (stdout and stderr) and this answers `true`.
///
/// # Panics
/// When `tool` is missing and the opt-out variable is not `1`.
fn tool_missing_allowed(tool: &str, opt_out: &str) -> bool {
    if std::env::var(opt_out).as_deref() == Ok("1") {
        println!("note: {tool} is not installed and {opt_out}=1: this test is NOT RUN");
        eprintln!("note: {tool} is not installed and {opt_out}=1: this test is NOT RUN");
        return true;
    }
    panic!("{tool} is not installed (ci.sh setup installs it); set {opt_out}=1 to skip this test");
}

#[test]
fn c_programs_under_valgrind() {
    let have = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have && tool_missing_allowed("valgrind", "PROXY_ALLOW_SKIP_VALGRIND") {
        return;
    }
    let valgrind = |exe: &Path| {
        let mut cmd = Command::new("valgrind");
        cmd.args([
            "--tool=memcheck",
            "--error-exitcode=1",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite,possible",
            "--show-leak-kinds=definite,possible",
            "--track-origins=yes",
            "-q",
        ])
        .arg(exe)
        // Quieter logs: valgrind's own report is what matters here.
        .env("NEURON_RT_LOG_LEVEL", "OFF");
        cmd
    };
    let mut cmd = valgrind(&build_sendrecv("seam_sendrecv_vg"));
    cmd.arg(common::library());
    assert!(run(cmd).contains("seam_sendrecv: ok"));
    let cmd = valgrind(&build_bad_input("bad_input_vg"));
    assert!(run(cmd).contains("bad_input: ok"));
    let cmd = valgrind(&build_abort_thread("abort_thread_vg"));
    assert!(run(cmd).contains("abort_thread: ok"));
}

#[test]
fn c_program_links_with_the_pkg_config_file() {
    let have = Command::new("pkg-config")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have && tool_missing_allowed("pkg-config", "PROXY_ALLOW_SKIP_PKG_CONFIG") {
        return;
    }
    // An "installed" tree: the header, the library and the filled-in .pc file.
    let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pc-prefix");
    let (inc, libdir) = (prefix.join("include"), prefix.join("lib"));
    let pcdir = libdir.join("pkgconfig");
    for d in [&inc, &pcdir] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    std::fs::copy(
        manifest_dir().join("include/nccom_proxy.h"),
        inc.join("nccom_proxy.h"),
    )
    .expect("copy header");
    std::fs::copy(common::library(), libdir.join("libnccom_proxy.so")).expect("copy library");
    // The SONAME a linked program loads.
    let so1 = libdir.join("libnccom_proxy.so.1");
    let _ = std::fs::remove_file(&so1);
    std::os::unix::fs::symlink("libnccom_proxy.so", &so1).expect("symlink");
    let pc = std::fs::read_to_string(manifest_dir().join("nccom_proxy.pc.in"))
        .expect("nccom_proxy.pc.in")
        .replace("@PREFIX@", prefix.to_str().expect("utf-8 path"))
        .replace("@LIBDIR@", libdir.to_str().expect("utf-8 path"))
        .replace("@VERSION@", env!("CARGO_PKG_VERSION"));
    std::fs::write(pcdir.join("nccom_proxy.pc"), pc).expect("write .pc");
    let mut cmd = Command::new("pkg-config");
    cmd.args(["--cflags", "--libs", "nccom_proxy"])
        .env("PKG_CONFIG_PATH", &pcdir);
    let flags = run(cmd);
    let flags: Vec<&str> = flags.split_whitespace().collect();
    assert!(flags.contains(&"-lnccom_proxy"), "{flags:?}");
    let exe = compile("bad_input", "bad_input_pc", &flags);
    let out = run(Command::new(exe));
    assert!(out.contains("bad_input: ok"), "{out}");
}
