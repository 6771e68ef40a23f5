//! A device the proxy queue's worker plays ([`PlayedDevice`]): a [`PolledDevice`] wired into
//! its rank's slot as a poller (`proxy_core::driver::poller`), so that the worker thread polls it
//! at every tick and the device needs no thread of its own. The launcher (the thread that
//! submits the rank's tasks) launches a job, then rings the driver (the bell it wired with
//! [`PlayedDevice::driver_bell`], normally the queue's `wake_driver`); it waits for the end in
//! [`PlayedDevice::wait`], woken by the worker when the job ends.
//!
//! This is worker mode without device threads: on a host whose CPUs are shared (other ranks, the
//! runtime's own threads), a rank costs one busy thread (its worker) instead of two.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use proxy_core::base::bell::BellSlot;
use proxy_core::driver::poller::{Polled, Poller};

use crate::{DeviceError, DeviceStats, Fault, Job, PolledDevice, TimedBackoff, WaitPolicy};

/// A device polled by the worker of its rank's proxy queue (see the module docs).
#[derive(Debug)]
pub struct PlayedDevice {
    rank: u32,
    device: Mutex<PolledDevice>,
    stats: Arc<DeviceStats>,
    /// Launches so far (bumped after the job is in `device`, release).
    launched: AtomicU64,
    /// Launches ended (stored by whoever saw the end, release: the result is in `device`).
    finished: AtomicU64,
    /// The thread in [`PlayedDevice::wait`], unparked at the end.
    waiter: Mutex<Option<Thread>>,
    /// Rung after each launch: the driver of the rank's queue.
    driver_bell: BellSlot,
    /// How long a wait lasts with no poll that moved the device (the worker is gone or stuck):
    /// twice the device's own no-progress timeout.
    unpolled_limit: Duration,
    /// Polls that found the device moving on, and the last one's time (ns since `epoch`).
    moved_at_ns: AtomicU64,
    epoch: Instant,
}

impl PlayedDevice {
    /// A device for `rank` injecting `fault` if given; a launch that makes no progress for
    /// `timeout` fails with [`DeviceError::Timeout`] (checked by the polls).
    pub fn new(rank: u32, fault: Option<Fault>, timeout: Duration) -> Self {
        let device = PolledDevice::new(rank, fault, timeout);
        Self {
            rank,
            stats: device.stats().clone(),
            device: Mutex::new(device),
            launched: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            waiter: Mutex::new(None),
            driver_bell: BellSlot::new(),
            unpolled_limit: timeout.saturating_mul(2),
            moved_at_ns: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PolledDevice> {
        self.device.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The rank of the device.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The device's counters.
    pub fn stats(&self) -> &Arc<DeviceStats> {
        &self.stats
    }

    /// Wire the driver of the rank's queue here (a bell that calls its `wake_driver`): it is
    /// rung after every launch, so a parked worker polls the device.
    pub fn driver_bell(&self) -> &BellSlot {
        &self.driver_bell
    }

    /// Starts `job` and rings the driver (the previous launch must have ended).
    ///
    /// # Safety
    /// As [`PolledDevice::launch`]: the job's memory stays valid until [`PlayedDevice::wait`]
    /// returned for this launch, or the device was launched again or dropped.
    pub unsafe fn launch(&self, job: Job) {
        // SAFETY: this function's contract.
        unsafe { self.lock().launch(job) };
        self.moved_at_ns.store(self.now_ns(), Ordering::Relaxed);
        // Release: the job in `device` is visible to the poller that sees the new count (it
        // also takes the lock).
        self.launched.fetch_add(1, Ordering::Release);
        self.driver_bell.ring();
    }

    /// `true` when the last launch has ended (it does not wait).
    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::Acquire) >= self.launched.load(Ordering::Acquire)
    }

    /// `true` when the last launch ended with an error.
    pub fn failed(&self) -> bool {
        self.finished() && self.lock().failed()
    }

    /// The job of the last launch once it ended (`None` while it runs, or when taken).
    pub fn take_job(&self) -> Option<Job> {
        if !self.finished() {
            return None;
        }
        self.lock().take_job()
    }

    /// Gives up on the running launch: it ends with [`DeviceError::Aborted`] at once (no poll
    /// needed) and no word is touched again. No effect once it ended.
    pub fn abort(&self) {
        let mut d = self.lock();
        d.abort();
        if d.poll_once().is_some() {
            self.end();
        }
    }

    /// Waits for the last launch to end and returns its result. The device's own timeout bounds
    /// a stalled launch while the worker polls it; a wait in which nothing polled the device
    /// on for twice that timeout (the worker is gone) gives the device up.
    ///
    /// # Errors
    /// The device's error; [`DeviceError::Unpolled`] when nothing polled it.
    pub fn wait(&self, policy: WaitPolicy) -> Result<(), DeviceError> {
        self.wait_unless(policy, &|| false)
    }

    /// As [`PlayedDevice::wait`], but gives the device up ([`PlayedDevice::abort`]: the wait
    /// ends with [`DeviceError::Aborted`]) as soon as `give_up` answers `true` before the end
    /// (checked between pauses).
    ///
    /// # Errors
    /// As [`PlayedDevice::wait`].
    pub fn wait_unless(
        &self,
        policy: WaitPolicy,
        give_up: &dyn Fn() -> bool,
    ) -> Result<(), DeviceError> {
        *self.waiter.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread::current());
        let mut b = TimedBackoff::new(WaitPolicy {
            timeout: Duration::MAX,
            ..policy
        });
        while !self.finished() {
            if give_up() {
                self.abort();
                break;
            }
            let quiet = self
                .now_ns()
                .saturating_sub(self.moved_at_ns.load(Ordering::Relaxed));
            if Duration::from_nanos(quiet) > self.unpolled_limit {
                let mut d = self.lock();
                d.abort();
                let _ = d.poll_once();
                drop(d);
                self.end();
                return Err(DeviceError::Unpolled { rank: self.rank });
            }
            let _ = b.pause();
        }
        *self.waiter.lock().unwrap_or_else(|e| e.into_inner()) = None;
        match self.lock().poll_once() {
            Some(r) => r,
            None => Ok(()),
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Marks the last launch ended and wakes its waiter.
    fn end(&self) {
        self.finished
            .store(self.launched.load(Ordering::Acquire), Ordering::Release);
        if let Some(t) = self
            .waiter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            t.unpark();
        }
    }
}

impl Poller for PlayedDevice {
    fn poll(&self) -> Polled {
        if !self.busy() {
            return Polled::Idle;
        }
        // The launcher holds the lock only to launch, take the job or abort: skip this tick.
        let Ok(mut d) = self.device.try_lock() else {
            return Polled::Waiting;
        };
        let ended = d.poll_once().is_some();
        let moved = d.moved();
        drop(d);
        if ended {
            self.end();
            Polled::Moved
        } else if moved {
            self.moved_at_ns.store(self.now_ns(), Ordering::Relaxed);
            Polled::Moved
        } else {
            // Still waiting: the device's own no-progress timeout ends it if this goes on.
            Polled::Waiting
        }
    }

    fn busy(&self) -> bool {
        !self.finished()
    }
}

#[cfg(test)]
mod tests;
