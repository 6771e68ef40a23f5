//! `--trace FILE`: the engine's event records (`proxy_core::base::trace`) drained into a
//! Chrome Trace Event / Perfetto JSON timeline and a per-op latency breakdown in text, through
//! `proxy-trace` (the one writer, shared with the C libraries); docs/tracing.md walks through
//! one.

pub use proxy_trace::*;

use proxy_core::base::trace::Tracer;

/// Records the ring holds (80 bytes each with the slot's flag: 80 MiB, allocated with `--trace`
/// only). A run records only the executions it traces (the checked ones, or with `--trace-all`
/// the whole run); past this the ring drops and counts.
pub const CAPACITY: usize = 1 << 20;

/// The process's tracer of [`CAPACITY`] records, installed at the first call (off until
/// [`Tracer::set_on`]).
///
/// # Errors
/// A message when another tracer was installed in this process first (by a library).
pub fn tracer() -> Result<&'static Tracer, String> {
    proxy_trace::tracer(CAPACITY)
}

/// `--trace-mask`: the event classes to record (`proxy_core::base::trace::mask::parse`).
///
/// # Errors
/// A message naming the word that is not a class.
pub fn parse_mask(s: &str) -> Result<u32, String> {
    proxy_core::base::trace::mask::parse(s).map_err(|w| {
        format!("unknown event class `{w}` (ops, steps, transport, transitions, drive, sleep, all)")
    })
}
