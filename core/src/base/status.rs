//! Status codes: the public values of `nrt_status.h`, shared by the Rust API and the C ABI.

use core::fmt;

/// A runtime status code, with the numeric values of the public `nrt_status.h` (these numbers
/// are ABI: the C entry points return them as `NRT_STATUS`).
///
/// In the Rust API `Ok(())` stands for [`NrtStatus::Success`]; errors carry any other value.
///
/// Seed: `NRT_STATUS` / `nrt_get_status_as_str`, §1 (the seam returns these).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NrtStatus {
    /// `NRT_SUCCESS` (0): the call did what it was asked.
    Success = 0,
    /// `NRT_FAILURE` (1): an unclassified failure (also what a caught panic maps to).
    Failure = 1,
    /// `NRT_INVALID` (2): an argument is out of range or malformed (docs/design.md §6).
    Invalid = 2,
    /// `NRT_INVALID_HANDLE` (3): the handle is not a live object (destroyed or never created).
    InvalidHandle = 3,
    /// `NRT_RESOURCE` (4): an allocation or a fixed-capacity table is exhausted.
    Resource = 4,
    /// `NRT_TIMEOUT` (5): a bounded wait ran out (task timeout, stop's drain limit).
    Timeout = 5,
    /// `NRT_HW_ERROR` (6): the hardware (here: the host-memory device model) reported an error.
    HwError = 6,
    /// `NRT_QUEUE_FULL` (7): a bounded ring is full; the item stays with its producer.
    QueueFull = 7,
    /// `NRT_UNINITIALIZED` (13): the object has not been set up yet.
    Uninitialized = 13,
    /// `NRT_CLOSED` (14): the object was closed; tasks of a comm that left end with this.
    Closed = 14,
    /// `NRT_QUEUE_EMPTY` (15): nothing to take from a ring.
    QueueEmpty = 15,
    /// `NRT_EXEC_BAD_INPUT` (1002): an execution's input is malformed.
    ExecBadInput = 1002,
    /// `NRT_COLL_PENDING` (1100): a collective is still in flight.
    CollPending = 1100,
    /// `NRT_EXEC_HW_ERR_COLLECTIVES` (1200): a collective failed on the device side.
    ExecHwErrCollectives = 1200,
    /// `NRT_NETWORK_PROXY_FAILURE` (1206): the progress half failed (sticky per comm).
    NetworkProxyFailure = 1206,
}

impl NrtStatus {
    /// Every defined status, in numeric order.
    pub const ALL: [NrtStatus; 15] = [
        Self::Success,
        Self::Failure,
        Self::Invalid,
        Self::InvalidHandle,
        Self::Resource,
        Self::Timeout,
        Self::HwError,
        Self::QueueFull,
        Self::Uninitialized,
        Self::Closed,
        Self::QueueEmpty,
        Self::ExecBadInput,
        Self::CollPending,
        Self::ExecHwErrCollectives,
        Self::NetworkProxyFailure,
    ];

    /// The numeric `NRT_STATUS` value.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The status with numeric value `code`, or `None` for a value `nrt_status.h` does not define.
    pub fn from_code(code: u32) -> Option<Self> {
        Self::ALL.iter().copied().find(|s| s.code() == code)
    }

    /// The C enumerator name (`"NRT_SUCCESS"`, ...).
    ///
    /// Seed: `nrt_get_status_as_str`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Success => "NRT_SUCCESS",
            Self::Failure => "NRT_FAILURE",
            Self::Invalid => "NRT_INVALID",
            Self::InvalidHandle => "NRT_INVALID_HANDLE",
            Self::Resource => "NRT_RESOURCE",
            Self::Timeout => "NRT_TIMEOUT",
            Self::HwError => "NRT_HW_ERROR",
            Self::QueueFull => "NRT_QUEUE_FULL",
            Self::Uninitialized => "NRT_UNINITIALIZED",
            Self::Closed => "NRT_CLOSED",
            Self::QueueEmpty => "NRT_QUEUE_EMPTY",
            Self::ExecBadInput => "NRT_EXEC_BAD_INPUT",
            Self::CollPending => "NRT_COLL_PENDING",
            Self::ExecHwErrCollectives => "NRT_EXEC_HW_ERR_COLLECTIVES",
            Self::NetworkProxyFailure => "NRT_NETWORK_PROXY_FAILURE",
        }
    }

    /// `Ok(())` for [`NrtStatus::Success`], else `Err(self)`.
    pub fn into_result(self) -> Result<(), NrtStatus> {
        if self == Self::Success {
            Ok(())
        } else {
            Err(self)
        }
    }

    /// A numeric status as a `Result`: `Ok(())` for `NRT_SUCCESS`, `Err` with the status for a
    /// defined failure, and `Err(NrtStatus::Failure)` for a value `nrt_status.h` does not define
    /// (what a seam or init call through a C function pointer answered).
    pub fn result_of_code(code: u32) -> Result<(), NrtStatus> {
        Self::from_code(code).unwrap_or(Self::Failure).into_result()
    }

    /// The status a `Result` of this crate's API stands for (`Ok` → `Success`).
    pub fn from_result(r: Result<(), NrtStatus>) -> Self {
        match r {
            Ok(()) => Self::Success,
            Err(s) => s,
        }
    }
}

impl fmt::Display for NrtStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.as_str(), self.code())
    }
}

impl core::error::Error for NrtStatus {}

#[cfg(test)]
mod tests;
