//! The progress half (the seed's libnccom role): per [`comm::Comm`] four streams of 352-byte
//! [`op::ProxyOp`]s in an op-FIFO, the send/recv op state machines on the `nec.h` host-memory
//! handshake, the op descriptors the device program hands over, the transport trait and the
//! in-memory transport. Passive: one tick per `progress` call, no thread.
//!
//! Seed: libnccom's `ncclProxyProgress` / `ncclProxyProgressOps` (nccom:0x40f40, nccom:0x40a80), §4.

pub mod comm;
pub mod device;
#[cfg(any(test, feature = "fault-injection"))]
pub mod fault;
pub mod forward;
pub mod mem_transport;
pub mod net;
pub mod op;
#[cfg(any(test, feature = "testing"))]
pub mod script;
#[cfg(any(test, feature = "testing"))]
pub mod scripted;
pub mod sendrecv;
pub mod stats;
