//! The vocabulary both halves speak, below both of them: the status codes ([`status`]), the
//! one facade over atomics and locks ([`sync`]), the clock trait ([`time`]), the op descriptors
//! and the stream count ([`desc`]), host-memory words ([`host_word`]), the abort flag
//! ([`abort`]), the SPSC ring ([`ring`]), the lines of a state dump ([`dump_lines`]), the
//! one idiom of every state machine ([`state`]), the one backoff policy ([`backoff`]) and the
//! bells that end a sleeping thread's nap ([`bell`]), the event recorder ([`trace`]), and
//! hooks wired after their structure exists ([`wired`]).
//!
//! The layering rule: `base` imports nothing of the crate but `base`; the driver half
//! (`crate::driver`) and the progress half (`crate::progress`) import `base` and meet
//! otherwise only at [`crate::seam`]. ci.sh's `facade` step checks the rule.

pub mod abort;
pub mod backoff;
pub mod bell;
pub mod desc;
pub mod dump_lines;
pub mod host_word;
pub mod ring;
pub mod slab;
pub mod state;
pub mod status;
pub mod sync;
pub mod time;
pub mod trace;
pub mod wired;
