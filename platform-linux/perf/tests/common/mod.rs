//! What several of proxy-perf's integration tests share.

#![allow(dead_code)] // each test binary uses part of the harness

use std::process::Command;

/// Path of `libnccom_proxy.so`: `$NCCOM_PROXY_LIB`; else the one cargo built (proxy-ffi is a
/// dev-dependency) next to this test binary or in its profile directory; else a fresh
/// `cargo build -p proxy-ffi` into a target directory of its own.
pub fn progress_library() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("NCCOM_PROXY_LIB") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary directory");
    for dir in [Some(deps), deps.parent()].into_iter().flatten() {
        let p = dir.join("libnccom_proxy.so");
        if p.is_file() {
            return p;
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = root.join("target/loader-tests");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .current_dir(&root)
        .args(["build", "-p", "proxy-ffi", "--target-dir"])
        .arg(&target)
        .status()
        .expect("run cargo build -p proxy-ffi");
    assert!(st.success(), "cargo build -p proxy-ffi failed");
    target.join("debug/libnccom_proxy.so")
}

/// A command line of `proxy-perf` (without the program name) split on white space, e.g.
/// `argv("all-reduce --ranks 2 -b 8 -e 1M")`; a newline is white space too, so a long line may
/// go on in the next source line. For arguments without spaces only: paths (from `temp_dir()`,
/// which may hold spaces) are pushed separately.
pub fn argv(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// Removes what the killed processes `pids` left in `/dev/shm` (the library's clean-up,
/// `proxy_libfabric::shm_cma::remove_shm_names_of`).
#[cfg(feature = "libfabric")]
pub fn remove_shm_regions(pids: &[i32]) {
    let pids: Vec<u32> = pids.iter().filter_map(|&p| u32::try_from(p).ok()).collect();
    proxy_libfabric::shm_cma::remove_shm_names_of(&pids);
}

/// Without the `libfabric` feature no libfabric shm region can exist, and the engine's own
/// shared memory leaves none once set up (its files are unlinked then): nothing to remove.
#[cfg(not(feature = "libfabric"))]
pub fn remove_shm_regions(_pids: &[i32]) {}
