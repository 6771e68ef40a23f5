//! [`BootstrapError`]: every failure of the bootstrap, naming the rank that reports it.

use std::fmt;
use std::io;
use std::time::Duration;

use proxy_core::NrtStatus;

/// A bootstrap failure. Every variant names the rank that reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BootstrapError {
    /// Bad arguments or environment (no rank, unparsable root address, rank ≥ size, ...).
    Config(String),
    /// A socket call failed.
    Io {
        /// Reporting rank.
        rank: u32,
        /// What was being done.
        context: String,
        /// The OS error kind.
        kind: io::ErrorKind,
        /// The OS error text.
        message: String,
    },
    /// A bounded wait ran out.
    Timeout {
        /// Reporting rank.
        rank: u32,
        /// What was awaited (names the missing ranks where known).
        what: String,
        /// How long it waited.
        waited: Duration,
    },
    /// A peer broke the protocol (a malformed or unexpected frame).
    Protocol {
        /// Reporting rank.
        rank: u32,
        /// What happened.
        message: String,
    },
    /// The job is misconfigured: ranks launched with different sizes, a rank taken twice, or
    /// different protocol versions. Reported at once by the root and the offending rank.
    Misconfigured {
        /// Reporting rank.
        rank: u32,
        /// What differs, naming both sides.
        message: String,
    },
    /// A peer went away without closing cleanly (its process exited or was killed).
    PeerLost {
        /// Reporting rank.
        rank: u32,
        /// The rank that went away.
        peer: u32,
        /// What was seen.
        message: String,
    },
    /// Another rank failed first and aborted the bootstrap.
    Aborted {
        /// Reporting rank.
        rank: u32,
        /// The rank that failed first.
        origin: u32,
        /// Its status.
        status: NrtStatus,
        /// Its error message.
        reason: String,
    },
    /// The bootstrap was closed, or the peer needed has closed its side.
    Closed {
        /// Reporting rank.
        rank: u32,
        /// What was attempted.
        what: String,
    },
}

impl BootstrapError {
    /// The status this failure maps to: `Timeout` for a timeout (also one forwarded by an abort),
    /// `Invalid` for configuration and a misconfigured job, `Closed` for use after close, else
    /// `NetworkProxyFailure`.
    pub fn status(&self) -> NrtStatus {
        match self {
            Self::Config(_) | Self::Misconfigured { .. } => NrtStatus::Invalid,
            Self::Timeout { .. } => NrtStatus::Timeout,
            Self::Aborted { status, .. } => *status,
            Self::Closed { .. } => NrtStatus::Closed,
            Self::Io { .. } | Self::Protocol { .. } | Self::PeerLost { .. } => {
                NrtStatus::NetworkProxyFailure
            }
        }
    }

    /// The rank this failure says is gone: the peer of [`BootstrapError::PeerLost`] (on a leaf
    /// also a leaf the root reported lost). `None` for every other failure.
    pub fn lost_rank(&self) -> Option<u32> {
        match self {
            Self::PeerLost { peer, .. } => Some(*peer),
            _ => None,
        }
    }

    /// What rank `rank` reports when a peer's `Abort { origin, status, reason }` frame reaches
    /// it (an undefined status code reads as `NRT_FAILURE`).
    pub(crate) fn aborted(rank: u32, origin: u32, status: u32, reason: String) -> Self {
        Self::Aborted {
            rank,
            origin,
            status: NrtStatus::from_code(status).unwrap_or(NrtStatus::Failure),
            reason,
        }
    }

    pub(crate) fn io(rank: u32, context: impl Into<String>, e: &io::Error) -> Self {
        Self::Io {
            rank,
            context: context.into(),
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

impl fmt::Display for BootstrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(m) => write!(f, "bootstrap configuration: {m}"),
            Self::Io {
                rank,
                context,
                message,
                ..
            } => write!(f, "bootstrap rank {rank}: {context}: {message}"),
            Self::Timeout { rank, what, waited } => write!(
                f,
                "bootstrap rank {rank}: timed out after {:.1} s waiting for {what}",
                waited.as_secs_f64()
            ),
            Self::Protocol { rank, message } | Self::Misconfigured { rank, message } => {
                write!(f, "bootstrap rank {rank}: {message}")
            }
            Self::PeerLost {
                rank,
                peer,
                message,
            } => write!(f, "bootstrap rank {rank}: lost rank {peer}: {message}"),
            Self::Aborted {
                rank,
                origin,
                status,
                reason,
            } => write!(
                f,
                "bootstrap rank {rank}: aborted by rank {origin} ({}): {reason}",
                status.as_str()
            ),
            Self::Closed { rank, what } => write!(f, "bootstrap rank {rank}: {what}: closed"),
        }
    }
}

impl std::error::Error for BootstrapError {}
