//! `proxy-collectives`: the collective side of the device, `no_std` + `alloc` (builds for
//! `thumbv7em-none-eabihf` and `x86_64-unknown-none`): the [`planner`] (from a collective call to
//! one rank's op infos, FIFOs, host words and device program) and the [`interpreter`] that runs
//! such a program against host memory.
//!
//! The crate never names a thread or a clock: the interpreter is a `poll()` state machine that
//! never blocks ([`interpreter::Device::poll`]); how to wait between polls, and the timeout, are
//! the platform's (on Linux `proxy-emulator`'s device thread with its spin/yield/nap policy, or
//! its polled device driven between proxy ticks). Counters go through the small
//! [`interpreter::DeviceEnv`] trait.
//!
//! Dependencies: `proxy-core` (descriptors, host-word handles), `half` (f16 / bf16 elements),
//! `log`.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

extern crate alloc;

pub mod interpreter;
pub mod planner;
