//! A transport that wraps another ([`TransportWrapper`]): it names its inner transport and
//! overrides only the calls it changes; every other call goes to the inner one. The blanket
//! `impl<W: TransportWrapper> Transport for W` makes every wrapper a [`Transport`], so a wrapper
//! never forgets to forward a call (a hand-written forwarder that skipped `register` once left a
//! wrapped libfabric transport without registrations).
//!
//! Wrappers built on it: the fault injector (`progress::fault::FaultTransport`), proxy-perf's
//! stalling transport, and the test doubles of `crate::testing`.
//!
//! Seed: none (the seed has one transport, the `ncclNet` plugin); docs/design.md §5.

use crate::progress::net::{MrHandle, NetError, Posted, RequestId, TestOutcome, Transport};

/// A transport that forwards to an inner [`Transport`] whatever it does not override. Each
/// method's contract is [`Transport`]'s method of the same name.
pub trait TransportWrapper: Send {
    /// The wrapped transport.
    fn inner(&self) -> &dyn Transport;

    /// The wrapped transport, mutably.
    fn inner_mut(&mut self) -> &mut dyn Transport;

    /// [`Transport::name`]; the inner transport's by default.
    fn name(&self) -> &str {
        self.inner().name()
    }

    /// [`Transport::max_msg_size`] in bytes; the inner transport's by default.
    fn max_msg_size(&self) -> u64 {
        self.inner().max_msg_size()
    }

    /// [`Transport::poll`].
    ///
    /// # Errors
    /// As [`Transport::poll`].
    fn poll(&mut self) -> Result<(), NetError> {
        self.inner_mut().poll()
    }

    /// [`Transport::isend`].
    ///
    /// # Errors
    /// As [`Transport::isend`].
    ///
    /// # Safety
    /// As [`Transport::isend`].
    unsafe fn isend(
        &mut self,
        peer: u32,
        buf: *const u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        // SAFETY: forwarded under this function's contract, which is the inner call's.
        unsafe { self.inner_mut().isend(peer, buf, size, tag) }
    }

    /// [`Transport::irecv`].
    ///
    /// # Errors
    /// As [`Transport::irecv`].
    ///
    /// # Safety
    /// As [`Transport::irecv`].
    unsafe fn irecv(
        &mut self,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        // SAFETY: forwarded under this function's contract, which is the inner call's.
        unsafe { self.inner_mut().irecv(peer, buf, size, tag) }
    }

    /// [`Transport::test`].
    ///
    /// # Errors
    /// As [`Transport::test`].
    fn test(&mut self, request: RequestId) -> Result<TestOutcome, NetError> {
        self.inner_mut().test(request)
    }

    /// [`Transport::cancel`].
    ///
    /// # Errors
    /// As [`Transport::cancel`].
    fn cancel(&mut self, request: RequestId) -> Result<(), NetError> {
        self.inner_mut().cancel(request)
    }

    /// [`Transport::iflush`].
    ///
    /// # Errors
    /// As [`Transport::iflush`].
    fn iflush(&mut self, buf: *mut u8, size: u64) -> Result<(), NetError> {
        self.inner_mut().iflush(buf, size)
    }

    /// [`Transport::register`].
    ///
    /// # Errors
    /// As [`Transport::register`].
    fn register(&mut self, addr: u64, len: u64) -> Result<MrHandle, NetError> {
        self.inner_mut().register(addr, len)
    }

    /// [`Transport::deregister`].
    ///
    /// # Errors
    /// As [`Transport::deregister`].
    fn deregister(&mut self, mr: MrHandle) -> Result<(), NetError> {
        self.inner_mut().deregister(mr)
    }

    /// [`Transport::invalidate`].
    ///
    /// # Errors
    /// As [`Transport::invalidate`].
    fn invalidate(&mut self, addr: u64, len: u64) -> Result<(), NetError> {
        self.inner_mut().invalidate(addr, len)
    }

    /// [`Transport::close`].
    ///
    /// # Errors
    /// As [`Transport::close`].
    fn close(&mut self) -> Result<(), NetError> {
        self.inner_mut().close()
    }

    /// [`Transport::dump_state`].
    ///
    /// # Errors
    /// Whatever `out` returns.
    fn dump_state(&self, out: &mut dyn core::fmt::Write) -> core::fmt::Result {
        self.inner().dump_state(out)
    }
}

impl<W: TransportWrapper> Transport for W {
    fn name(&self) -> &str {
        TransportWrapper::name(self)
    }

    fn max_msg_size(&self) -> u64 {
        TransportWrapper::max_msg_size(self)
    }

    fn poll(&mut self) -> Result<(), NetError> {
        TransportWrapper::poll(self)
    }

    unsafe fn isend(
        &mut self,
        peer: u32,
        buf: *const u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        // SAFETY: forwarded under this function's contract.
        unsafe { TransportWrapper::isend(self, peer, buf, size, tag) }
    }

    unsafe fn irecv(
        &mut self,
        peer: u32,
        buf: *mut u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        // SAFETY: forwarded under this function's contract.
        unsafe { TransportWrapper::irecv(self, peer, buf, size, tag) }
    }

    fn test(&mut self, request: RequestId) -> Result<TestOutcome, NetError> {
        TransportWrapper::test(self, request)
    }

    fn cancel(&mut self, request: RequestId) -> Result<(), NetError> {
        TransportWrapper::cancel(self, request)
    }

    fn iflush(&mut self, buf: *mut u8, size: u64) -> Result<(), NetError> {
        TransportWrapper::iflush(self, buf, size)
    }

    fn register(&mut self, addr: u64, len: u64) -> Result<MrHandle, NetError> {
        TransportWrapper::register(self, addr, len)
    }

    fn deregister(&mut self, mr: MrHandle) -> Result<(), NetError> {
        TransportWrapper::deregister(self, mr)
    }

    fn invalidate(&mut self, addr: u64, len: u64) -> Result<(), NetError> {
        TransportWrapper::invalidate(self, addr, len)
    }

    fn close(&mut self) -> Result<(), NetError> {
        TransportWrapper::close(self)
    }

    fn dump_state(&self, out: &mut dyn core::fmt::Write) -> core::fmt::Result {
        TransportWrapper::dump_state(self, out)
    }
}
