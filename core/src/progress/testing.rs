//! Small doubles for tests of the engine and of code built on it: a transport that carries
//! nothing and a device whose semaphores are counters in a table.
//!
//! Test scaffolding, compiled only under `cfg(test)` or the `testing` feature.

use alloc::string::String;
use alloc::vec::Vec;

use crate::progress::device::DeviceCallbacks;
use crate::progress::net::{NetError, Posted, RequestId, TestOutcome, Transport};
use crate::progress::scripted::ScriptTable;

/// A transport with no peers: posts fail with `Invalid`, `poll` counts calls.
///
/// Enough for scripted ops, which never post: it keeps their scripts.
#[derive(Debug, Default)]
pub struct NullTransport {
    /// Number of `poll` calls.
    pub polls: u64,
    /// Requests cancelled so far.
    pub cancelled: Vec<RequestId>,
    /// Scripts of the scripted ops filed on the comm that owns this transport.
    pub scripts: ScriptTable,
}

impl Transport for NullTransport {
    fn name(&self) -> &str {
        "null"
    }

    fn max_msg_size(&self) -> u64 {
        u64::from(u32::MAX)
    }

    fn poll(&mut self) -> Result<(), NetError> {
        self.polls += 1;
        Ok(())
    }

    unsafe fn isend(
        &mut self,
        peer: u32,
        _buf: *const u8,
        _size: u64,
        _tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        Err(NetError::invalid(
            Some(peer),
            String::from("null transport carries nothing"),
        ))
    }

    unsafe fn irecv(
        &mut self,
        peer: u32,
        _buf: *mut u8,
        _size: u64,
        _tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        Err(NetError::invalid(
            Some(peer),
            String::from("null transport carries nothing"),
        ))
    }

    fn test(&mut self, _request: RequestId) -> Result<TestOutcome, NetError> {
        Ok(TestOutcome::Cancelled)
    }

    fn cancel(&mut self, request: RequestId) -> Result<(), NetError> {
        self.cancelled.push(request);
        Ok(())
    }

    fn scripts(&mut self) -> Option<&mut ScriptTable> {
        Some(&mut self.scripts)
    }
}

/// Device callbacks that only record: semaphore increments are summed per address in a
/// spin-locked table, host indices read as 0. For tests of code that never touches host words.
#[derive(Debug, Default)]
pub struct RecordingDevice {
    /// `(address, total increments)`.
    pub semaphores: spin::Mutex<Vec<(u64, u64)>>,
}

impl RecordingDevice {
    /// Sum of increments made to `addr`.
    pub fn total(&self, addr: u64) -> u64 {
        self.semaphores
            .lock()
            .iter()
            .find(|(a, _)| *a == addr)
            .map_or(0, |(_, v)| *v)
    }
}

impl DeviceCallbacks for RecordingDevice {
    fn inc_semaphore(&self, addr: u64, val: u32) {
        let mut t = self.semaphores.lock();
        match t.iter_mut().find(|(a, _)| *a == addr) {
            Some((_, v)) => *v += u64::from(val),
            None => t.push((addr, u64::from(val))),
        }
    }

    fn load_host_index(&self, _addr: u64) -> u32 {
        0
    }

    fn store_host_index(&self, _addr: u64, _val: u32) {}
}
