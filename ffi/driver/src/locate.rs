//! Where `nrt_proxy_init` looks for the progress half (`libnccom_proxy.so.1`).
//!
//! In order, the first that names a library:
//! 1. `config->progress_lib` (a path, or a name for the dynamic linker's search);
//! 2. `$NEURON_RT_PROXY_PROGRESS_LIB` (the same);
//! 3. `libnccom_proxy.so.1` **in the directory this library was loaded from** (`dladdr` of one
//!    of its own functions): an installed prefix holds both libraries in one `lib/`, and a
//!    program linked with `-Wl,-rpath` (pkg-config, CMake) finds `libnrt_proxy.so` through its
//!    RUNPATH, which does not cover a `dlopen` made from inside that library;
//! 4. `libnccom_proxy.so.1` through the dynamic linker's standard search (`LD_LIBRARY_PATH`, the
//!    cache, `/usr/lib`, ...).
//!
//! With 1 or 2 only the named library is tried (an explicit choice never falls back to
//! another copy); with neither, 3 and then 4.
//!
//! Seed: libnrt's `ncclInit` loads `libnccom.so` by name (§1); the own-directory step is ours.

use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};

use crate::PROGRESS_LIB_SONAME;

/// The directory of the object that contains `addr` (a function of this library), as the
/// dynamic linker reports it; `None` when it reports none or no absolute path (a library
/// linked into an executable reports the executable).
pub(crate) fn dir_of(addr: *const c_void) -> Option<PathBuf> {
    // SAFETY: `Dl_info` is plain data (pointers and integers): all zeros is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads `addr` as an address and writes `info`, which is writable.
    let found = unsafe { libc::dladdr(addr, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: `dli_fname` is a NUL-terminated string owned by the dynamic linker, valid while
    // the object is loaded; it is copied out at once.
    let file = unsafe { CStr::from_ptr(info.dli_fname) }.to_str().ok()?;
    let file = Path::new(file);
    file.is_absolute()
        .then(|| file.parent().map(Path::to_path_buf))
        .flatten()
}

/// The libraries to try, in order: `explicit` alone when given (config, then environment),
/// else the SONAME beside this library (when that file exists) and then the SONAME by the
/// standard search.
pub(crate) fn candidates(explicit: Option<String>, own_dir: Option<PathBuf>) -> Vec<PathBuf> {
    if let Some(e) = explicit {
        return vec![PathBuf::from(e)];
    }
    let mut v = Vec::with_capacity(2);
    if let Some(beside) = own_dir.map(|d| d.join(PROGRESS_LIB_SONAME)) {
        if beside.is_file() {
            v.push(beside);
        }
    }
    v.push(PathBuf::from(PROGRESS_LIB_SONAME));
    v
}

#[cfg(test)]
mod tests;
