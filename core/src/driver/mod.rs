//! The driver half (the seed's libnrt role): proxy queues and their registry, network and
//! barrier tasks, status records, trigger words, the park/wake protocol and the SPSC rings. The
//! threads that drive a queue live in the platform crates; everything here is the logic they run.
//!
//! Seed: libnrt's `enc_proxy_queue::process` (nrt:0x1cf7c0) and the proxy tasks, §2–§3, §5.

pub mod dump;
pub mod idle;
pub mod inval;
pub mod oneshot;
pub mod poller;
pub mod queue;
pub mod record;
pub mod registry;
pub mod task;
pub mod trigger;
pub mod wake;
