//! Helpers shared by the integration tests of `proxy-driver-ffi`: where the two libraries are,
//! compiling and running C programs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub mod plan;

pub fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The first existing file `name` in the test binary's directory (`target/<profile>/deps`) or
/// its parent.
fn next_to_test_binary(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary directory").to_owned();
    [Some(deps.clone()), deps.parent().map(Path::to_owned)]
        .into_iter()
        .flatten()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// This package's `libnrt_proxy.so` (cargo builds it before the integration tests).
pub fn driver_library() -> PathBuf {
    next_to_test_binary("libnrt_proxy.so")
        .expect("libnrt_proxy.so next to the test binary (cargo builds it before the tests)")
}

/// The progress half: `$NCCOM_PROXY_LIB`, else the `libnccom_proxy.so` of this target
/// directory (built by `cargo build -p proxy-ffi`, or any workspace build), else one built now
/// with `cargo build -p proxy-ffi` into a target directory of its own, under this build's
/// (`CARGO_TARGET_TMPDIR`: a `CARGO_TARGET_DIR` elsewhere is honoured).
pub fn progress_library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        if let Some(p) = std::env::var_os("NCCOM_PROXY_LIB") {
            return PathBuf::from(p);
        }
        if let Some(p) = next_to_test_binary("libnccom_proxy.so") {
            return p;
        }
        let root = manifest_dir().join("../..");
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("driver-ffi-tests");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .current_dir(&root)
            .args(["build", "-p", "proxy-ffi", "--target-dir"])
            .arg(&target)
            .status()
            .expect("run cargo build -p proxy-ffi");
        assert!(st.success(), "cargo build -p proxy-ffi failed");
        target.join("debug/libnccom_proxy.so")
    })
    .clone()
}

/// Compiles the stub progress half `tests/c/fake_progress_v2.c` (warnings are errors) with
/// `$CC` into the scratch directory as the shared library `<out>`; `defines` go to the compiler
/// (`-DFAKE_ABI=0x00010004u`: a stub of ABI 1.4 instead of 2.0).
pub fn fake_progress(out: &str, defines: &[&str]) -> PathBuf {
    let lib = Path::new(env!("CARGO_TARGET_TMPDIR")).join(out);
    let o = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-Wall", "-Wextra", "-Werror"])
        .args(defines)
        .arg("-o")
        .arg(&lib)
        .arg(manifest_dir().join("tests/c/fake_progress_v2.c"))
        .output()
        .expect("run cc (install gcc)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    lib
}

/// A directory laid out as an installation of `libnrt_proxy.so`: the link name and the SONAME
/// (`libnrt_proxy.so.1`), both links to the library under test.
pub fn installed_lib_dir() -> PathBuf {
    // Once per test binary: the tests run in parallel.
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nrt-lib");
        std::fs::create_dir_all(&dir).expect("mkdir");
        for name in ["libnrt_proxy.so", "libnrt_proxy.so.1"] {
            let link = dir.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(driver_library(), &link).expect("symlink");
        }
        dir
    })
    .clone()
}

/// Compiles `tests/c/<name>.c` (C11, warnings are errors) linked with `-lnrt_proxy` into the
/// scratch directory as `<out>`.
pub fn compile(name: &str, out: &str, extra: &[&str]) -> PathBuf {
    let src = manifest_dir().join("tests/c").join(format!("{name}.c"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    build(&cc, "-std=c11", &src, out, extra)
}

/// Compiles the C11 file `path` (relative to the crate, e.g. an example; warnings are errors)
/// with `$CC` linked with `-lnrt_proxy` into the scratch directory as `<out>`.
pub fn compile_c_at(path: &str, out: &str, extra: &[&str]) -> PathBuf {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    build(&cc, "-std=c11", &manifest_dir().join(path), out, extra)
}

/// Compiles the C++ file `path` (relative to the crate; C++17, warnings are errors) with `$CXX`
/// (default `g++`) linked with `-lnrt_proxy` into the scratch directory as `<out>`.
pub fn compile_cpp(path: &str, out: &str, extra: &[&str]) -> PathBuf {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    build(&cxx, "-std=c++17", &manifest_dir().join(path), out, extra)
}

fn build(cc: &str, std: &str, src: &Path, out: &str, extra: &[&str]) -> PathBuf {
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(out);
    let lib = installed_lib_dir();
    let mut cmd = Command::new(cc);
    cmd.args([std, "-g", "-O1", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(manifest_dir().join("include"))
        .arg("-I")
        .arg(manifest_dir().join("../include"))
        .arg(src)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        .arg("-lnrt_proxy")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(extra);
    let o = cmd.output().unwrap_or_else(|e| {
        panic!("cannot run the compiler `{cc}`: {e} (install gcc / g++, or set CC / CXX)")
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

/// Runs `cmd` (without cargo's `LD_LIBRARY_PATH`, so the rpath decides), prints its output,
/// fails on a non-zero exit, and returns its stdout.
pub fn run(mut cmd: Command) -> String {
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

/// A missing tool fails its test unless `opt_out=1` says to skip it (then the skip is printed
/// and this answers `true`).
pub fn tool_missing_allowed(tool: &str, opt_out: &str) -> bool {
    if std::env::var(opt_out).as_deref() == Ok("1") {
        println!("note: {tool} is not installed and {opt_out}=1: this test is NOT RUN");
        eprintln!("note: {tool} is not installed and {opt_out}=1: this test is NOT RUN");
        return true;
    }
    panic!("{tool} is not installed (ci.sh setup installs it); set {opt_out}=1 to skip this test");
}

/// `valgrind` memcheck around `exe` (definite and possible leaks and invalid accesses fail, as
/// a runtime's valgrind gate would), spin budgets 0.
pub fn valgrind(exe: &Path) -> Command {
    let mut cmd = Command::new("valgrind");
    cmd.args([
        "--tool=memcheck",
        "--error-exitcode=1",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite,possible",
        "--show-leak-kinds=definite,possible",
        "-q",
    ])
    .arg(exe)
    .env("NEURON_RT_PROXY_SPIN_US", "0")
    .env("NEURON_RT_LOG_LEVEL", "OFF");
    cmd
}

pub fn have_valgrind() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}
