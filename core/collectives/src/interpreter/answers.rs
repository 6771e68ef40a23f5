//! What a poll of the [`Device`](super::Device) answers: the word a pending device waits for
//! ([`WaitingFor`]), a poll's outcome ([`DevicePoll`]) and a launch's failure
//! ([`DeviceError`]). The module docs of [`crate::interpreter`] describe when each is given.

use alloc::string::String;
use core::fmt;

use crate::planner::Side;

/// The one host word a pending device waits for, and the value it waits for: what a caller's
/// timeout message names. `seen` is the value the device read last; every other field is fixed
/// for one wait, so a change of the whole value means the device moved on (or the word moved).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitingFor {
    /// Net stage (edge 3): the network task's trigger word at `addr` to be consumed (read 0).
    NetTrigger {
        /// Address of the trigger word.
        addr: u64,
        /// The value read last (1 while the proxy has not consumed it).
        seen: u32,
    },
    /// `WaitHandshake`: the handshake semaphore of `op`'s `side` to reach `target` (its value
    /// at the start of the execution + 1).
    Handshake {
        /// Op index in the plan.
        op: u32,
        /// Op side.
        side: Side,
        /// Address of the handshake semaphore.
        addr: u64,
        /// The value that ends the wait.
        target: u32,
        /// The value read last.
        seen: u32,
    },
    /// `Wait`: the complete semaphore of `op`'s `side` to reach `target` (its value at the
    /// start of the execution + `upto` entries).
    Complete {
        /// Op index in the plan.
        op: u32,
        /// Op side.
        side: Side,
        /// Address of the complete semaphore.
        addr: u64,
        /// Entries of this execution that must be complete.
        upto: u32,
        /// The value that ends the wait.
        target: u32,
        /// The value read last.
        seen: u32,
    },
    /// Barrier stage (edge 8): the barrier-done semaphore to reach `target` (its value before
    /// the barrier trigger + 1).
    BarrierDone {
        /// Address of the barrier-done semaphore.
        addr: u64,
        /// The value that ends the wait.
        target: u32,
        /// The value read last.
        seen: u32,
    },
}

impl WaitingFor {
    /// Address of the word waited on.
    pub const fn addr(&self) -> u64 {
        match *self {
            WaitingFor::NetTrigger { addr, .. }
            | WaitingFor::Handshake { addr, .. }
            | WaitingFor::Complete { addr, .. }
            | WaitingFor::BarrierDone { addr, .. } => addr,
        }
    }

    /// The value of the word read last.
    pub const fn seen(&self) -> u32 {
        match *self {
            WaitingFor::NetTrigger { seen, .. }
            | WaitingFor::Handshake { seen, .. }
            | WaitingFor::Complete { seen, .. }
            | WaitingFor::BarrierDone { seen, .. } => seen,
        }
    }
}

impl fmt::Display for WaitingFor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WaitingFor::NetTrigger { addr, seen } => {
                write!(
                    f,
                    "net trigger word {addr:#x} to be consumed (last value {seen:#x})"
                )
            }
            WaitingFor::Handshake {
                op,
                side,
                addr,
                target,
                seen,
            } => write!(
                f,
                "op {op} {side:?} handshake semaphore {addr:#x} to reach {target} (last value \
                 {seen})"
            ),
            WaitingFor::Complete {
                op,
                side,
                addr,
                upto,
                target,
                seen,
            } => write!(
                f,
                "op {op} {side:?} complete semaphore {addr:#x} to reach {target} (+{upto}; last \
                 value {seen})"
            ),
            WaitingFor::BarrierDone { addr, target, seen } => write!(
                f,
                "barrier-done semaphore {addr:#x} to reach {target} (last value {seen})"
            ),
        }
    }
}

/// What one [`Device::poll`](super::Device::poll) reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevicePoll {
    /// The launch waits for a host word; poll again later.
    Pending {
        /// The word and the value waited for: with several streams waiting, the wait of the
        /// stream that has waited longest (moved least recently; ties: the first). Another
        /// stream may move while this stays: [`Device::progress`](super::Device::progress) tells.
        waiting_for: WaitingFor,
    },
    /// The launch completed (answered again by every later poll until the next launch).
    Done,
    /// Nothing is launched (never, or the launch was abandoned).
    Idle,
}

/// A device failure: the proxy did not answer in time, or broke the protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceError {
    /// The caller's time limit passed with no progress in any stream ([`Device::progress`](super::Device::progress)
    /// unchanged) while the device waited for `waiting_for` (the interpreter itself never
    /// times out: its callers do).
    Timeout {
        /// Rank of the device.
        rank: u32,
        /// What it waited for (the last [`DevicePoll::Pending`]).
        waiting_for: WaitingFor,
    },
    /// A semaphore rose beyond what the protocol allows (e.g. more completions than posted
    /// entries, or two handshakes in one execution), the job names an invalid host word, or
    /// its program does not fit its plan.
    Protocol {
        /// Rank of the device.
        rank: u32,
        /// What was seen.
        what: String,
    },
    /// The launcher gave up on the execution while the device waited (its abort flag).
    Aborted {
        /// Rank of the device.
        rank: u32,
    },
    /// The device's thread ended without reporting the launch's end (it panicked).
    Lost {
        /// Rank of the device.
        rank: u32,
    },
    /// Nothing polled the device on for twice its no-progress timeout: the thread that plays
    /// it (its proxy queue's worker) is gone or stuck.
    Unpolled {
        /// Rank of the device.
        rank: u32,
    },
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Timeout { rank, waiting_for } => {
                write!(f, "device {rank}: timed out waiting for {waiting_for}")
            }
            DeviceError::Protocol { rank, what } => {
                write!(f, "device {rank}: protocol violation: {what}")
            }
            DeviceError::Aborted { rank } => write!(f, "device {rank}: execution aborted"),
            DeviceError::Unpolled { rank } => write!(
                f,
                "device {rank}: nothing polled the device (its queue's worker is gone or stuck)"
            ),
            DeviceError::Lost { rank } => {
                write!(
                    f,
                    "device {rank}: the device thread ended during the launch"
                )
            }
        }
    }
}

impl core::error::Error for DeviceError {}
