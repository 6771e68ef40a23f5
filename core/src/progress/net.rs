//! The transport trait the send/recv proxy ops drive, shaped after NCCL's net plugin
//! (`ncclNet_t`: connect, isend, irecv, test, iflush, regMr) and the matching tag layout.
//!
//! Seed: `ncclNet->{isend,irecv,iread,iflush,test}`, §1 and §4 (the calls the per-op state
//! machine makes); docs/design.md §5 (tags) and §8 (poll once per round of stream calls per comm).

use alloc::string::String;
use core::fmt;

use crate::base::status::NrtStatus;

/// A transport-chosen handle for one posted send or receive, valid until [`Transport::test`]
/// reports it finished ([`TestOutcome::Done`] or [`TestOutcome::Cancelled`]).
pub type RequestId = u64;

/// What a successful post returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Posted {
    /// The request to test.
    pub request: RequestId,
    /// `true` when the transport has already copied the payload (sends only): the source buffer
    /// may be reused and, with `early_send_completion`, the entry counts as complete now.
    pub payload_copied: bool,
}

/// The answer of [`Transport::test`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestOutcome {
    /// Still in flight; test again later.
    Pending,
    /// Finished; `size` bytes were sent or received. The request id is released.
    Done {
        /// Bytes transferred.
        size: u64,
    },
    /// Finished by [`Transport::cancel`]; no more access to the buffer. The request id is released.
    Cancelled,
}

/// A transport failure, with the provider's own message for the log line (docs/design.md §6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetError {
    /// The status the failure maps to (usually [`NrtStatus::NetworkProxyFailure`], or
    /// [`NrtStatus::Invalid`] for a request the transport cannot take).
    pub status: NrtStatus,
    /// The peer involved, if any.
    pub peer: Option<u32>,
    /// Human-readable detail (for libfabric: `fi_cq_strerror`'s text).
    pub message: String,
}

impl NetError {
    /// A failure with status [`NrtStatus::NetworkProxyFailure`].
    pub fn failure(peer: Option<u32>, message: impl Into<String>) -> Self {
        Self {
            status: NrtStatus::NetworkProxyFailure,
            peer,
            message: message.into(),
        }
    }

    /// A rejected request with status [`NrtStatus::Invalid`].
    pub fn invalid(peer: Option<u32>, message: impl Into<String>) -> Self {
        Self {
            status: NrtStatus::Invalid,
            peer,
            message: message.into(),
        }
    }
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.peer {
            Some(p) => write!(f, "{} (peer {}): {}", self.status, p, self.message),
            None => write!(f, "{}: {}", self.status, self.message),
        }
    }
}

/// A memory registration handle (opaque to `core`).
pub type MrHandle = u64;

/// The network a comm's proxy ops drive: one instance per comm (per rank), used by one thread
/// at a time (the worker of the comm's group, docs/design.md §8).
///
/// Matching is by `(peer, tag)`: entry *i* of a send op meets entry *i* of its partner recv op
/// on the peer whatever order the two sides post in. Sizes must match exactly: a receive smaller
/// than the message is a truncation error (a `NetError` from `test`), never a short receive.
///
/// "Cannot start now" (`Ok(None)` from a post) is back-pressure: the op keeps the entry and
/// retries on a later tick; nothing is lost.
pub trait Transport: Send {
    /// Short name for logs and headers (`"mem"`, `"libfabric/tcp;ofi_rxm"`).
    fn name(&self) -> &str;

    /// Largest message in bytes a single post may carry; `start` rejects larger entries.
    fn max_msg_size(&self) -> u64;

    /// Moves the transport's own progress (reads the completion queue). Called once per round
    /// of progress calls on the comm (a call on a stream at or below the previous call's
    /// stream, or the first after a `start` / `stop`, starts a round, docs/design.md §8), before
    /// the round's first op walk; manual-progress providers move nothing otherwise.
    ///
    /// # Errors
    /// A failure of the transport as a whole (the comm then fails, sticky).
    fn poll(&mut self) -> Result<(), NetError>;

    /// Posts a send of `size` bytes at `buf` to `peer` with `tag`.
    ///
    /// Returns `Ok(None)` when the transport cannot take it now (retry later).
    ///
    /// # Errors
    /// `peer` out of range, `size` over [`Transport::max_msg_size`], or a transport failure.
    ///
    /// # Safety
    /// `buf..buf+size` must be readable and stay valid and unmodified until the request is
    /// finished ([`TestOutcome::Done`] or [`TestOutcome::Cancelled`]), or, if the post answered
    /// `payload_copied`, until this call returns.
    unsafe fn isend(
        &mut self,
        peer: u32,
        buf: *const u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError>;

    /// Posts a receive of exactly `size` bytes into `buf` from `peer` with `tag`.
    ///
    /// Returns `Ok(None)` when the transport cannot take it now (retry later).
    ///
    /// # Errors
    /// `peer` out of range, `size` over the maximum, or a transport failure.
    ///
    /// # Safety
    /// `buf..buf+size` must be writable, not otherwise accessed, and stay valid until the
    /// request is finished ([`TestOutcome::Done`] or [`TestOutcome::Cancelled`]).
    unsafe fn irecv(
        &mut self,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError>;

    /// Tests one request. `Done` and `Cancelled` release the request id.
    ///
    /// Reports what the transport knows; it need not move the transport's progress (a
    /// manual-progress transport reads its completion queue in [`Transport::poll`] only, once
    /// per round). A caller that tests outside the progress half's rounds polls between tests.
    ///
    /// # Errors
    /// The request failed (truncation, peer gone, provider error); the request id is released.
    fn test(&mut self, request: RequestId) -> Result<TestOutcome, NetError>;

    /// Asks the transport to cancel a request. The request still has to be tested until it
    /// reports `Done` or `Cancelled`: only then is its buffer free.
    ///
    /// # Errors
    /// A transport failure; the caller then stops relying on the request.
    fn cancel(&mut self, request: RequestId) -> Result<(), NetError>;

    /// Makes received data visible to the device (GPUDirect-style flush). Host memory needs
    /// none: the default returns `Ok(())`.
    ///
    /// # Errors
    /// A transport failure.
    fn iflush(&mut self, _buf: *mut u8, _size: u64) -> Result<(), NetError> {
        Ok(())
    }

    /// Registers `addr..addr+len` for use by later posts (providers whose `mr_mode` asks for
    /// it). The default needs no registration and returns handle 0.
    ///
    /// # Errors
    /// The range cannot be registered (the message names it).
    fn register(&mut self, _addr: u64, _len: u64) -> Result<MrHandle, NetError> {
        Ok(0)
    }

    /// Releases a registration made by [`Transport::register`].
    ///
    /// # Errors
    /// A transport failure.
    fn deregister(&mut self, _mr: MrHandle) -> Result<(), NetError> {
        Ok(())
    }

    /// The caller is about to free or unmap `addr..addr+len` (`len > 0`, not wrapping; the comm
    /// checks): drop every cached registration that overlaps it, so that a later buffer at the
    /// same address is registered afresh. A registration that posted requests still use must
    /// not be closed under them: it is never handed out again and is released when its last
    /// request completes. The default (a transport that registers nothing) does nothing.
    ///
    /// # Errors
    /// A transport failure (the provider refused to close a registration; it is gone anyway).
    fn invalidate(&mut self, _addr: u64, _len: u64) -> Result<(), NetError> {
        Ok(())
    }

    /// Closes the transport: after it every post fails. Requests still in flight must have been
    /// cancelled and drained first.
    ///
    /// # Errors
    /// A transport failure while closing.
    fn close(&mut self) -> Result<(), NetError> {
        Ok(())
    }

    /// Appends the transport's own state to the comm's first state-dump line, as
    /// ` key=value` fields each with a leading space (requests in flight, registrations, what a
    /// teardown had to quarantine, ...). Writes nothing by default.
    ///
    /// # Errors
    /// Whatever `out` returns.
    fn dump_state(&self, _out: &mut dyn core::fmt::Write) -> core::fmt::Result {
        Ok(())
    }
}

/// Builds the 64-bit transport tag of entry `index` of an op (docs/design.md §5): bit 63 reserved
/// (0), 15 bits `comm_id`, 16 bits source rank, 2 bits `stream`, 14 bits op `tag`, 16 bits
/// `index`. Inputs are masked to their widths (`start` has validated them).
pub const fn make_tag(comm_id: u32, src_rank: u32, stream: u32, op_tag: u32, index: u32) -> u64 {
    ((comm_id as u64 & 0x7FFF) << 48)
        | ((src_rank as u64 & 0xFFFF) << 32)
        | ((stream as u64 & 0x3) << 30)
        | ((op_tag as u64 & 0x3FFF) << 16)
        | (index as u64 & 0xFFFF)
}

/// Largest comm id + 1 that fits the tag (15 bits).
pub const MAX_COMM_ID: u32 = 1 << 15;
/// Largest nranks that fits the tag's 16-bit source rank.
pub const MAX_NRANKS: u32 = 1 << 16;

#[cfg(test)]
mod tests;
