//! The progress halves loaded so far (`libnccom_proxy.so` or another build of its C ABI), for
//! the life of the process: loaded by `nrt_proxy_init` (`instance.rs`), called by the exported
//! trampolines (`trampolines.rs`) and the trace collection (`trace.rs`).

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock, PoisonError};

use proxy_runtime::loader::ProgressLib;

/// Every progress half loaded so far, by the name it was loaded with (loaded once per name, for
/// the life of the process, as the seed's runtime does).
pub(crate) static LIBS: Mutex<Vec<(PathBuf, &'static ProgressLib)>> = Mutex::new(Vec::new());
/// The first progress half loaded: the one the exported trampolines call.
pub(crate) static DEFAULT_LIB: OnceLock<&'static ProgressLib> = OnceLock::new();

/// Every progress half loaded so far.
pub(crate) fn loaded_libs() -> Vec<&'static ProgressLib> {
    LIBS.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(_, l)| *l)
        .collect()
}
