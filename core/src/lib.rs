//! `proxy-core`: the logic of a host-thread-driven proxy & progress engine for collective
//! communication, `no_std` + `alloc`.
//!
//! Two halves meet at one seam (DESIGN.md §1):
//! * the **progress half** (the seed's libnccom role): per [`comm::Comm`], four streams, each an
//!   op-FIFO of 352-byte [`op::ProxyOp`]s kept in pool blocks of 128, three lists plus the
//!   deferred-by-basic-block map; passive, one tick per `progress` call;
//! * the **driver half** (the seed's libnrt role): proxy tasks, proxy queues, rings and the
//!   registry; the threads themselves live in `proxy-platform-linux`.
//!
//! The crate never names a thread, a clock, a file or a socket: the platform hands those in
//! through small traits. Every cross-thread handoff is written against [`sync`], which switches
//! to loom's types under `--cfg loom`.
//!
//! Seed: "Proxy & Progress Engine (and the libnrt Bridge)", all units.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

extern crate alloc;

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

pub mod comm;
#[cfg(all(test, not(loom)))]
mod comm_tests;
pub mod desc;
pub mod device;
pub mod mem_transport;
pub mod net;
pub mod op;
pub mod planner;
#[cfg(any(loom, feature = "plants"))]
pub mod plant;
pub mod queue;
pub mod record;
pub mod registry;
pub mod ring;
pub mod scripted;
pub mod seam;
pub mod sendrecv;
#[cfg(all(test, not(loom)))]
mod sendrecv_tests;
pub mod status;
pub mod sync;
pub mod task;
pub mod testing;
#[cfg(all(test, not(loom)))]
mod testutil;
pub mod time;
pub mod trigger;
pub mod wake;

pub use status::NrtStatus;
