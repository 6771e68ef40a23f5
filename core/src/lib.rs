//! `proxy-core`: the logic of a host-thread-driven proxy & progress engine for collective
//! communication, `no_std` + `alloc`.
//!
//! Two halves meet at one seam (docs/design.md §1), and the modules are grouped the same way:
//! * [`progress`], the **progress half** (the seed's libnccom role): per
//!   [`progress::comm::Comm`], four streams, each an op-FIFO of 352-byte
//!   [`progress::op::ProxyOp`]s kept in pool blocks of 128, three lists plus the
//!   deferred-by-basic-block map; the send/recv op state machines, the op descriptors, the
//!   transport trait and the in-memory transport. Passive, one tick per `progress` call;
//! * [`driver`], the **driver half** (the seed's libnrt role): proxy tasks, proxy queues, status
//!   records, trigger words, the wake protocol, SPSC rings and the registry; the threads that
//!   drive a queue live in the platform crates (`proxy-runtime` on Linux);
//! * the shared pieces: [`seam`] (the three entry points as a table of `extern "C"` function
//!   pointers), [`status`](base::status) (`NRT_*` codes), [`time`](base::time) (the clock
//!   trait) and [`sync`](base::sync) (the one facade over atomics, `Arc`, `UnsafeCell` and
//!   locks).
//!
//! The crate never names a thread, a clock, a file or a socket: the platform hands those in
//! through small traits. Every cross-thread handoff is written against [`sync`](base::sync),
//! which switches to loom's types under `--cfg loom`. docs/architecture.md draws the crates, the
//! state machines and the threads.
//!
//! Seed: "Proxy & Progress Engine (and the libnrt Bridge)", all units.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

extern crate alloc;
// The `std` feature (and the crate's own tests) add the std thread parker and the monotonic
// clock that every std platform, test and model shares; the core logic never uses std.
#[cfg(any(test, feature = "std"))]
extern crate std;

/// A planted line (see `plant.rs`): `plant!(Name, buggy, correct)` is `buggy` while plant
/// `Name` is selected and `correct` otherwise; `plant!(Name => { buggy })` runs the block while
/// `Name` is selected (it returns from the function, or adds a step before the correct code).
#[cfg(any(loom, feature = "plants"))]
macro_rules! plant {
    ($plant:ident, $buggy:expr, $correct:expr $(,)?) => {
        if $crate::plant::active($crate::plant::Plant::$plant) {
            $buggy
        } else {
            $correct
        }
    };
    ($plant:ident => $buggy:block) => {
        if $crate::plant::active($crate::plant::Plant::$plant) $buggy
    };
}
/// A planted line, in a build without plants: only the correct code (see `plant.rs`).
#[cfg(not(any(loom, feature = "plants")))]
macro_rules! plant {
    ($plant:ident, $buggy:expr, $correct:expr $(,)?) => {
        $correct
    };
    ($plant:ident => $buggy:block) => {};
}

pub mod base;
pub mod driver;
#[cfg(any(loom, feature = "plants"))]
pub mod plant;
pub mod progress;
pub mod seam;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(all(test, not(loom)))]
mod testutil;

pub use base::status::NrtStatus;
