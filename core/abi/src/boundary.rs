//! What both C libraries do at the boundary of every entry point (feature `std`): install the
//! logger on the first call, turn a panic into `NRT_FAILURE` with a log line (no unwind crosses
//! the C ABI), say why a handle lookup failed, and check the C caller's pointers (`c_in`,
//! `c_out`, `c_slice`, `c_string`: NULL, misaligned and oversized arguments are `NRT_INVALID`
//! with a log line naming the call and the argument). Each library links its own copy (its own
//! logger and `Once`), and exports nothing from here.
//!
//! The logger: the `log` facade to stderr, level from `NEURON_RT_LOG_LEVEL` (`ERROR`, `WARN`,
//! `INFO`, `DEBUG`, `TRACE`, `OFF`; default `ERROR`), finer filters from `RUST_LOG`
//! (docs/design.md §8). When the process already has a logger for this copy of `log` (a Rust
//! program linking a library's rlib), that one is kept.

extern crate std;

use core::any::Any;
use core::ffi::{c_char, CStr};
use std::borrow::ToOwned;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::string::String;
use std::sync::Once;

use proxy_core::base::status::NrtStatus;

use crate::handles::{HandleTable, LookupError};
use crate::refusal::refuse;
use crate::{NRT_FAILURE, NRT_STATUS};

fn level_from(s: Option<&str>) -> log::LevelFilter {
    match s.map(|s| s.trim().to_ascii_uppercase()).as_deref() {
        Some("TRACE") => log::LevelFilter::Trace,
        Some("DEBUG") => log::LevelFilter::Debug,
        Some("INFO") => log::LevelFilter::Info,
        Some("WARN" | "WARNING") => log::LevelFilter::Warn,
        Some("OFF" | "NONE") => log::LevelFilter::Off,
        _ => log::LevelFilter::Error,
    }
}

/// Installs the logger if this is the first call (module docs).
pub fn init_logging() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let level = level_from(std::env::var("NEURON_RT_LOG_LEVEL").ok().as_deref());
        let mut b = env_logger::Builder::new();
        b.filter_level(level);
        if let Ok(filters) = std::env::var("RUST_LOG") {
            b.parse_filters(&filters);
        }
        // Err: a logger is already installed; keep it.
        let _ = b.try_init();
    });
}

/// The text of a panic payload (`&str` or `String`), or a placeholder.
pub fn panic_message(p: &(dyn Any + Send)) -> &str {
    if let Some(s) = p.downcast_ref::<&str>() {
        s
    } else if let Some(s) = p.downcast_ref::<String>() {
        s
    } else {
        "non-string panic payload"
    }
}

/// Runs one entry point `what`: installs the logger on first use, answers `f`'s result as an
/// `NRT_STATUS`, and turns a panic into `NRT_FAILURE` with a log line.
pub fn guard(what: &str, f: impl FnOnce() -> Result<(), NrtStatus>) -> NRT_STATUS {
    init_logging();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => NrtStatus::from_result(r).code(),
        Err(p) => {
            log::error!(
                "{what}: caught a panic ({}); returning NRT_FAILURE",
                panic_message(&*p)
            );
            NRT_FAILURE
        }
    }
}

/// The body of a C entry point, the shape every `#[no_mangle] pub unsafe extern "C" fn` of both
/// C libraries has: `entry!(WHAT = "name", body)` declares `const WHAT: &str = "name"` (the name
/// the body's log lines, refusals and lookups use) and runs `body` (a `Result<(), NrtStatus>`)
/// under [`guard`]: logger installed, the result answered as an `NRT_STATUS`, a panic caught
/// and answered `NRT_FAILURE`. A call on a live object looks it up inside the body, with
/// [`with_live`] / [`remove_live`] (a failed lookup answered by [`lookup_status`]) and, for an
/// object a panic poisons, [`call_guarded`].
///
/// The macro wraps the body, never the function: cbindgen, which does not expand macros, reads
/// each exported signature and its docs as written.
///
/// ```ignore
/// #[no_mangle]
/// pub unsafe extern "C" fn nccom_comm_destroy(comm: *mut NccomComm) -> NRT_STATUS {
///     proxy_abi::entry!(WHAT = "nccom_comm_destroy", {
///         let h = comm.addr();
///         /* ... */
///         Ok(())
///     })
/// }
/// ```
#[macro_export]
macro_rules! entry {
    ($what:ident = $name:literal, $body:expr) => {{
        const $what: &str = $name;
        $crate::boundary::guard($what, || $body)
    }};
}

/// `f` on the live object of `table` that the C handle `handle` (a `kind` handle: "comm",
/// "plan", ...) names, for the call `what`, holding the object's slot busy meanwhile.
///
/// # Errors
/// A failed lookup, as [`lookup_status`] answers it (logged); else `f`'s error.
pub fn with_live<T, R, const N: usize>(
    what: &str,
    kind: &str,
    table: &HandleTable<T, N>,
    handle: usize,
    f: impl FnOnce(&mut T) -> Result<R, NrtStatus>,
) -> Result<R, NrtStatus> {
    table
        .with(handle, f)
        .map_err(|e| lookup_status(what, kind, handle, e))?
}

/// Removes the live object of `table` that the C handle `handle` (a `kind` handle) names, for
/// the call `what` (a destroy), and hands it back; every copy of the handle is stale afterwards.
///
/// # Errors
/// A failed lookup, as [`lookup_status`] answers it (logged).
pub fn remove_live<T, const N: usize>(
    what: &str,
    kind: &str,
    table: &HandleTable<T, N>,
    handle: usize,
) -> Result<T, NrtStatus> {
    table
        .remove(handle)
        .map_err(|e| lookup_status(what, kind, handle, e))
}

/// The value of the C handle `p` (a `kind` handle) of the call `what`, NULL refused before any
/// lookup (the progress half's calls name a NULL handle so in the log).
///
/// # Errors
/// `NrtStatus::InvalidHandle` for NULL, logged as `<what>: NULL <kind>`.
pub fn c_handle<T>(what: &str, kind: &str, p: *mut T) -> Result<usize, NrtStatus> {
    match p.addr() {
        0 => {
            log::error!("{what}: NULL {kind}");
            Err(NrtStatus::InvalidHandle)
        }
        h => Ok(h),
    }
}

/// Inserts `value` into `table` for the call `what` (a create of a `kind` object) and answers
/// its C handle, the pointer a C caller is handed.
///
/// # Errors
/// `NrtStatus::Resource` (logged) when the table is full: `N` live objects of the kind.
pub fn insert_live<T, P, const N: usize>(
    what: &str,
    kind: &str,
    table: &HandleTable<T, N>,
    value: T,
) -> Result<*mut P, NrtStatus> {
    let h = table.insert(value).map_err(|_| {
        log::error!("{what}: too many live {kind}s ({N})");
        NrtStatus::Resource
    })?;
    Ok(core::ptr::without_provenance_mut(h))
}

/// The C out-parameter `out` of a call `what` that creates an object: checked as [`c_out`]
/// (named "out") and set to NULL at once, so that every failure leaves NULL there.
///
/// # Errors
/// `NrtStatus::Invalid` (logged) for a NULL or misaligned `out`.
///
/// # Safety
/// As [`c_out`].
pub unsafe fn c_handle_out<'a, P>(
    what: &str,
    out: *mut *mut P,
) -> Result<&'a mut *mut P, NrtStatus> {
    // SAFETY: the caller's contract, as `c_out`'s.
    let out = unsafe { c_out(what, "out", out) }?;
    *out = core::ptr::null_mut();
    Ok(out)
}

/// A live object of a C library that a panic caught inside a call on it leaves in an unknown
/// state (a comm): [`call_guarded`] refuses it from then on.
pub trait Guarded {
    /// The object's poison flag: `true` once a call on it panicked (never cleared).
    fn poisoned(&mut self) -> &mut bool;

    /// Told of every failure `status` a call `what` on the object answered (not of a panic,
    /// which poisons instead). Default: nothing.
    fn note_failure(&mut self, what: &str, status: NrtStatus) {
        let _ = (what, status);
    }
}

/// Runs one call `what` on `obj`, the live object of the C handle `handle` (a `kind` object):
/// a poisoned object is refused with `NRT_FAILURE`; `f`'s failure is told to
/// [`Guarded::note_failure`] and answered; a panic in `f` poisons the object and is answered
/// `NRT_FAILURE` (both logged).
///
/// # Errors
/// `NrtStatus::Failure` for a poisoned object or a caught panic; else `f`'s error.
pub fn call_guarded<T: Guarded, R>(
    what: &str,
    kind: &str,
    handle: usize,
    obj: &mut T,
    f: impl FnOnce(&mut T) -> Result<R, NrtStatus>,
) -> Result<R, NrtStatus> {
    if *obj.poisoned() {
        log::error!("{what}: {kind} {handle:#x} is poisoned by an earlier panic");
        return Err(NrtStatus::Failure);
    }
    match catch_unwind(AssertUnwindSafe(|| f(&mut *obj))) {
        Ok(Err(s)) => {
            obj.note_failure(what, s);
            Err(s)
        }
        Ok(r) => r,
        Err(p) => {
            *obj.poisoned() = true;
            log::error!(
                "{what}: caught a panic in {kind} {handle:#x} ({}); {kind} poisoned, returning \
                 NRT_FAILURE",
                panic_message(&*p)
            );
            Err(NrtStatus::Failure)
        }
    }
}

/// The status of a failed lookup of `handle` (a `kind` handle: "comm", "group", ...) in call
/// `what`, logged: `NRT_INVALID_HANDLE` for a non-handle or a destroyed one, `NRT_FAILURE` for
/// one in use by another call (one thread at a time per object).
pub fn lookup_status(what: &str, kind: &str, handle: usize, e: LookupError) -> NrtStatus {
    match e {
        LookupError::NotAHandle => {
            refuse(
                what,
                "not a handle",
                format_args!("{handle:#x} is not a {kind} handle of this library"),
            );
            NrtStatus::InvalidHandle
        }
        LookupError::Stale => {
            refuse(
                what,
                "destroyed",
                format_args!("{kind} {handle:#x} was destroyed"),
            );
            NrtStatus::InvalidHandle
        }
        LookupError::Busy => {
            refuse(
                what,
                "busy",
                format_args!(
                    "{kind} {handle:#x} is in use by another call right now (one thread at a \
                     time per {kind})"
                ),
            );
            NrtStatus::Failure
        }
    }
}

/// Refuses bad input: records `what: msg` as a refusal (counted, remembered for the calling
/// thread's comm `last_error`, logged at ERROR under the rate limit of `refusal.rs`) and answers
/// `Invalid`: the one way an entry point refuses bad input (docs/design.md §6).
///
/// # Errors
/// Always `NrtStatus::Invalid`.
pub fn bad<T>(what: &str, msg: core::fmt::Arguments<'_>) -> Result<T, NrtStatus> {
    refuse(what, "bad input", msg);
    Err(NrtStatus::Invalid)
}

/// A C out-parameter `name` of the call `what`, checked: NULL or misaligned is `Invalid`.
///
/// # Errors
/// `NrtStatus::Invalid` (logged) for a NULL or misaligned `ptr`.
///
/// # Safety
/// A non-null, aligned `ptr` must be valid for writes of one `T`, and not otherwise accessed,
/// for the returned lifetime (the C caller's contract: storage for the result).
pub unsafe fn c_out<'a, T>(what: &str, name: &str, ptr: *mut T) -> Result<&'a mut T, NrtStatus> {
    if ptr.is_null() || !ptr.is_aligned() {
        return bad(what, format_args!("{name} is NULL or misaligned"));
    }
    // SAFETY: non-null and aligned; writable and unaliased for `'a` by the caller's contract.
    Ok(unsafe { &mut *ptr })
}

/// A C in-parameter `name` of the call `what`, checked: NULL or misaligned is `Invalid`.
///
/// # Errors
/// `NrtStatus::Invalid` (logged) for a NULL or misaligned `ptr`.
///
/// # Safety
/// A non-null, aligned `ptr` must point to an initialized `T` that nothing writes for the
/// returned lifetime.
pub unsafe fn c_in<'a, T>(what: &str, name: &str, ptr: *const T) -> Result<&'a T, NrtStatus> {
    if ptr.is_null() || !ptr.is_aligned() {
        return bad(what, format_args!("{name} is NULL or misaligned"));
    }
    // SAFETY: non-null and aligned; initialized and unwritten for `'a` by the caller's
    // contract.
    Ok(unsafe { &*ptr })
}

/// The C array `name` (`len` elements) of the call `what` as a slice, checked: NULL with a
/// non-zero length, a misaligned pointer and a length whose byte size overflows `isize` are
/// `Invalid` (docs/design.md §6); a zero length is the empty slice whatever `ptr` is.
///
/// # Errors
/// `NrtStatus::Invalid` (logged), as above.
///
/// # Safety
/// A non-null, aligned `ptr` must be valid for `len` reads of `T`, unwritten for the returned
/// lifetime.
pub unsafe fn c_slice<'a, T>(
    what: &str,
    name: &str,
    ptr: *const T,
    len: usize,
) -> Result<&'a [T], NrtStatus> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() || !ptr.is_aligned() {
        return bad(
            what,
            format_args!("{name}: NULL or misaligned pointer with length {len}"),
        );
    }
    if len > isize::MAX as usize / size_of::<T>().max(1) {
        return bad(what, format_args!("{name}: length {len} is too large"));
    }
    // SAFETY: non-null, aligned, size in range; valid for `len` reads per the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// The NUL-terminated UTF-8 C string `name` of the call `what`, copied; `None` for NULL.
///
/// # Errors
/// `NrtStatus::Invalid` (logged) when the string is not UTF-8.
///
/// # Safety
/// `p` must be NULL or point to a readable NUL-terminated string.
pub unsafe fn c_string(
    what: &str,
    name: &str,
    p: *const c_char,
) -> Result<Option<String>, NrtStatus> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null; NUL-terminated and readable by the caller's contract.
    match unsafe { CStr::from_ptr(p) }.to_str() {
        Ok(s) => Ok(Some(s.to_owned())),
        Err(_) => bad(what, format_args!("{name} is not UTF-8")),
    }
}

#[cfg(test)]
mod tests;
