//! The C ABI of the driver half: `libnrt_proxy.so`, the seed's libnrt role as a shared library
//! that `dlopen`s a progress half (`libnccom_proxy.so`, the libnccom role) and turns its passive
//! progress function into running collectives: proxy queues per group of ranks, worker threads
//! or caller-driven progress, network and barrier tasks, trigger words and 24-byte status
//! records. Header: `ffi/driver/include/nrt_proxy.h` (cbindgen, from the modules this
//! file declares, in their order, and `src/types.rs`); it includes `nccom_proxy.h` for the FIFO entry types.
//!
//! ```text
//!  C runtime ── nrt_proxy_* ──► this library ── registry, proxy queues, workers (proxy-runtime)
//!                                   │  network task ── seam table ─► neuronStartNetworkProxy ...
//!                                   │  comms, device callbacks ─────► nccom_comm_create ...
//!                                   └─ dlopen(progress_lib | $NEURON_RT_PROXY_PROGRESS_LIB |
//!                                             <own dir>/libnccom_proxy.so.1 |
//!                                             "libnccom_proxy.so.1"), ABI major checked
//! ```
//! The library exports no progress-half symbol: the comms, the seam and the device callbacks
//! are reached only through the loaded library's handle ([`proxy_runtime::loader`]).
//!
//! # The C contract
//! * **Handles** (`nrt_proxy_t`, `nrt_proxy_group_t`, `nrt_proxy_comm_t`, `nrt_proxy_plan_t`)
//!   are opaque, generation-checked and carry the instance id of the loaded copy of the library
//!   (`proxy_abi::handles`, tagged with `instance_id`): NULL, destroyed, never-created
//!   and other copies' handles answer `NRT_INVALID_HANDLE` and are never dereferenced.
//! * **Threads**: see the README's table. One thread at a time per comm (a concurrent call on
//!   the same comm answers `NRT_FAILURE`), except `nrt_proxy_comm_abort` (any thread, any time).
//!   Different comms, groups and instances are independent.
//! * **Memory**: FIFO arrays, schedules and word lists are copied at submit; the buffers and
//!   host words they name must stay valid until the task's final record is popped (or the comm
//!   left). Host words are 4-byte aligned `uint32_t`s accessed only atomically.
//! * **No panic crosses the ABI**: every entry point runs under `catch_unwind` and answers
//!   `NRT_FAILURE` with a log line.
//! * **Logs**: stderr through the `log` facade; `NEURON_RT_LOG_LEVEL` (default `ERROR`),
//!   `RUST_LOG` for finer filters. `nrt_proxy_init` logs the version and the resolved
//!   configuration at `INFO`.
//!
//! Seed: libnrt's `ncclInit` (the `dlopen("libnccom.so")` and slot table), `enc_proxy_queue`,
//! the trampolines `ncclStartNetworkProxy` / `ncclNetworkProxyProgress` (nrt:0x1c1aa0) /
//! `ncclStopNetworkProxy`, §1–§3.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![allow(non_snake_case)]

// One file per concept. The modules with exported functions are declared in the order of the
// header's functions (cbindgen reads the modules in declaration order; blank lines keep rustfmt
// from sorting them).

/// Handle tables and the lookups of every entry point.
mod handles;

/// The objects behind the handles.
mod objects;

/// Version, status names, configuration.
mod config;

/// Instances: init, fini, device callbacks.
mod instance;
mod libs;

/// Groups of this process's ranks.
mod groups;

/// Comms: create, destroy, join, leave.
mod comms;

/// Network and barrier tasks, resubmit.
mod tasks;

/// Records, waits, caller-mode driving.
mod records;

/// Bells: a device's host writes wake its queue's worker, the queue's progress its devices.
pub mod bells;

/// Idle waits: an idle driver blocks on its comm's completion-queue descriptor.
mod idle;

/// Abort, invalidation, health, dump.
mod health;

/// The seed's trampolines to the seam.
mod trampolines;

/// The event trace: start, stop, write.
mod trace;

pub mod host_device;

mod locate;

pub mod plan;

/// The process-wide algorithm of each collective.
mod algos;
mod enums;

pub mod types;

pub use algos::*;
pub use bells::nrt_proxy_notify;
pub use comms::*;
pub use config::*;
pub use groups::*;
pub use handles::{live_comms, live_groups, live_instances};
pub use health::*;
pub use host_device::*;
pub use instance::*;
pub use plan::*;
pub use records::*;
pub use tasks::*;
pub use trace::*;
pub use trampolines::*;
pub use types::*;

pub(crate) use handles::{instance_id, remove_live_retrying, with_live_retrying};
