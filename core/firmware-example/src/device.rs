//! The device side of each rank: `proxy-collectives`' interpreter ([`Device`], a `poll()`
//! state machine that never blocks) polled from the main loop or the drive hook, with a
//! no-progress timeout on the firmware's clock. The port of `proxy-emulator`'s `PolledDevice`
//! (which is std: `Instant`, `Arc<AtomicU64>` counters) to a firmware: counters in `Cell`s,
//! time from [`SysTickClock`].

use core::cell::Cell;

use proxy_collectives::interpreter::{
    Device, DeviceEnv, DeviceError, DevicePoll, Event, Job, Stage,
};
use proxy_core::base::time::Clock;

use crate::clock::SysTickClock;

/// What the interpreter reported (the firmware's [`DeviceEnv`]; one thread, so plain cells).
#[derive(Debug, Default)]
pub struct Counters {
    /// Program executions completed.
    pub executions: Cell<u32>,
    /// Receive entries seen complete.
    pub recv_entries: Cell<u32>,
    /// Bytes of those entries.
    pub recv_bytes: Cell<u64>,
}

impl DeviceEnv for Counters {
    fn record(&self, event: Event) {
        match event {
            Event::Execution => self.executions.set(self.executions.get() + 1),
            Event::RecvEntry { bytes } => {
                self.recv_entries.set(self.recv_entries.get() + 1);
                self.recv_bytes.set(self.recv_bytes.get() + bytes);
            }
            // The firmware's one loop polls the device itself: nobody sleeps to be rung.
            Event::FaultInjected | Event::HostWrite => {}
        }
    }
}

/// One rank's device, polled by the thread that drives the proxy queue.
pub struct FirmwareDevice {
    device: Device,
    counters: Counters,
    /// No-progress limit (ns).
    timeout_ns: u64,
    /// The device's progress count ([`Device::progress`]) at the last `Pending`, and since
    /// when (ns) it has not changed.
    waiting: Option<(u64, u64)>,
    /// The launch's result once it ended.
    result: Option<Result<(), DeviceError>>,
    /// The last poll moved the launch on (progress in any stream, or its end).
    moved: bool,
    /// Polls since the progress count last changed (the clock is read every 64 of them).
    unchanged: u32,
}

impl FirmwareDevice {
    /// The device of `rank`, failing a launch that makes no progress for `timeout_ns`.
    pub fn new(rank: u32, timeout_ns: u64) -> Self {
        Self {
            device: Device::new(rank, None),
            counters: Counters::default(),
            timeout_ns,
            waiting: None,
            result: None,
            moved: false,
            unchanged: 0,
        }
    }

    /// Starts `job`; no word is touched before the next [`FirmwareDevice::poll_once`].
    ///
    /// # Safety
    /// As [`Device::launch`]: every address of `job` stays valid until `poll_once` answered
    /// `Some` for this launch, or the device is dropped.
    pub unsafe fn launch(&mut self, job: Job) {
        // SAFETY: this function's contract.
        unsafe { self.device.launch(job) };
        self.waiting = None;
        self.result = None;
    }

    /// Advances the launch as far as the host words allow, without blocking: `None` while it
    /// runs, `Some(result)` once it ended (and again at every later call). The error is
    /// [`DeviceError::Timeout`] (no stream moved for the timeout) naming the word waited for,
    /// or the interpreter's [`DeviceError::Protocol`].
    pub fn poll_once(&mut self) -> Option<Result<(), DeviceError>> {
        self.moved = false;
        if let Some(r) = &self.result {
            return Some(r.clone());
        }
        self.moved = true;
        let r = match self.device.poll(&self.counters) {
            Ok(DevicePoll::Done | DevicePoll::Idle) => Ok(()),
            // No progress = no stream moved (the answered wait alone may stay while another
            // stream moves).
            Ok(DevicePoll::Pending { waiting_for }) => match self.waiting {
                Some((p, since)) if p == self.device.progress() => {
                    self.unchanged = self.unchanged.wrapping_add(1);
                    if !self.unchanged.is_multiple_of(64)
                        || SysTickClock.now_ns().saturating_sub(since) <= self.timeout_ns
                    {
                        self.moved = false;
                        return None;
                    }
                    self.device.abandon();
                    Err(DeviceError::Timeout {
                        rank: self.device.rank(),
                        waiting_for,
                    })
                }
                _ => {
                    self.waiting = Some((self.device.progress(), SysTickClock.now_ns()));
                    self.unchanged = 0;
                    return None;
                }
            },
            Err(e) => Err(e),
        };
        self.result = Some(r.clone());
        Some(r)
    }

    /// `true` when the last [`FirmwareDevice::poll_once`] moved the launch on: what the drive
    /// hook answers, so the loop idles only when neither the proxy nor a device moved.
    pub fn moved(&self) -> bool {
        self.moved
    }

    /// `true` once the launch ended with an error.
    pub fn failed(&self) -> bool {
        matches!(self.result, Some(Err(_)))
    }

    /// The launch's result once it ended (`None` while it runs).
    pub fn clone_result(&self) -> Option<Result<(), DeviceError>> {
        self.result.clone()
    }

    /// Where the launch is.
    pub fn stage(&self) -> Stage {
        self.device.stage()
    }

    /// The interpreter's counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}
