//! The proxy engine's own shared-memory transport between the processes of one host.
//!
//! libfabric's shm provider costs 3× Open MPI's shared memory per small message on this kind
//! of host, and its sends can spin forever on a lock a dead peer held (BENCHMARKS.md, and
//! docs/design/09-decisions.md "Our own shared-memory transport"). This crate is the
//! replacement, on the in-memory transport's contract and handoff state machine, across
//! processes:
//!
//! * [`segment`]: one file per rank in `/dev/shm`, mapped by every rank of the comm, unlinked
//!   once all have mapped it;
//! * [`mailbox`]: one single-producer single-consumer ring per (sender, receiver) pair in the
//!   receiver's segment; small messages travel inline;
//! * [`handoff`]: the state word of a large send, in the sender's segment; the receiver reads
//!   the sender's buffer with one `process_vm_readv` (cross-memory attach);
//! * [`ShmTransport`]: the [`proxy_core::progress::net::Transport`] over them;
//! * [`open_shm_comm`]: the set-up over a [`proxy_bootstrap::Bootstrap`].
//!
//! Every word a peer process can write is read once and checked: a peer that breaks the
//! protocol fails the comm, naming it; it cannot make this process touch memory outside its
//! own buffers, loop without bound in a `poll`, or grow its lists without bound. What is
//! trusted, and why:
//!
//! * Payload bytes are copied with plain `memcpy` between our memory and a slot that the
//!   protocol has handed to one side. A peer that writes into a slot it does not own races
//!   with that copy: outside Rust's model (another process), as in every shared-memory
//!   transport written in C; the bytes are `u8`, so it can change only the values received.
//! * Peers are processes of the same user that may read our memory anyway (cross-memory
//!   attach needs ptrace rights; `PR_SET_PTRACER_ANY` is set for the process's life, as
//!   libfabric's shm provider does). A peer that truncates its file before unlinking it could
//!   make our next touch of that mapping fault (`SIGBUS`); sealed memfds would close that.
//!
//! Seed: none (the seed's ranks share one process); the role of `ncclNet` (§1) between the
//! processes of one host.

/// A planted line (proxy-core's `plant.rs`): `plant!(Name, buggy, correct)` is `buggy` while
/// plant `Name` is selected, `correct` otherwise; only the correct code without `--cfg loom`
/// or the `plants` feature.
#[cfg(any(loom, feature = "plants"))]
#[macro_export]
#[doc(hidden)]
macro_rules! plant {
    ($plant:ident, $buggy:expr, $correct:expr $(,)?) => {
        if proxy_core::plant::active(proxy_core::plant::Plant::$plant) {
            $buggy
        } else {
            $correct
        }
    };
}
/// A planted line, in a build without plants: only the correct code.
#[cfg(not(any(loom, feature = "plants")))]
#[macro_export]
#[doc(hidden)]
macro_rules! plant {
    ($plant:ident, $buggy:expr, $correct:expr $(,)?) => {
        $correct
    };
}

pub mod handoff;
pub mod ring;

// The parts over real shared memory and the bootstrap (not under loom, which checks the two
// protocols above).
#[cfg(all(feature = "comm", not(loom)))]
pub mod mailbox;
#[cfg(all(feature = "comm", not(loom)))]
pub mod segment;
#[cfg(all(feature = "comm", not(loom)))]
mod setup;
#[cfg(all(feature = "comm", not(loom)))]
mod transport;

#[cfg(all(test, feature = "comm", not(loom)))]
mod tests;

#[cfg(all(feature = "comm", not(loom)))]
pub use setup::{open_shm_comm, ShmCommConfig, ShmSetupError};
#[cfg(all(feature = "comm", not(loom)))]
pub use transport::{ShmTransport, DROP_READ_LIMIT, MAX_MSG_SIZE, MAX_REQUESTS, MAX_UNEXPECTED};
