//! Peers' process exits, checked before a send over shm.
//!
//! libfabric's shm provider (1.17) guards each endpoint's shared region with a plain spin lock
//! in the region itself: a sender takes the *receiver's* lock to queue its command
//! (`smr_generic_sendmsg`: `pthread_spin_lock(&peer_smr->lock)`), and the receiver takes its own
//! in every progress call. A process killed while it held its lock (a spinning receiver holds
//! it much of the time) leaves it held for good, and the next send to it spins inside
//! `fi_tsend` / `fi_tinject` forever, where no timeout of ours can reach. Measured here: 3
//! ranks over shm, one killed mid-run, a survivor hung in `pthread_spin_lock` under
//! `post_now` in 2 to 3 runs of 60 (`platform-linux/perf/tests/liveness.rs`, BENCHMARKS.md).
//!
//! So over shm every peer's process is watched through a pidfd (`pidfd_open(2)`, Linux 5.3;
//! the pid travels in the endpoint's name, [`crate::LibfabricTransport::local_name`]), and a
//! send to a peer whose process has exited fails at once with an error naming it instead of
//! being posted: one `poll(2)` of that peer's pidfd per send post. The pids are taken in this
//! process's pid namespace, as shm's own cross-memory attach takes them (processes of one host
//! that do not share a pid namespace are not told apart by pid). What this leaves open: a
//! peer that dies while holding its lock *after* the check, while our post is already
//! spinning on it (the kill must land in those few microseconds); fixing that needs a robust
//! lock in the provider.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A peer process's pidfd: readable once the process has exited (`pidfd_open(2)`).
#[derive(Debug)]
pub(crate) struct PeerExit {
    pid: u32,
    fd: OwnedFd,
}

impl PeerExit {
    /// The pidfd of process `pid`, or `None` when the kernel cannot give one (before 5.3, a
    /// pid of another namespace, a process already reaped): the peer is then not watched.
    pub(crate) fn open(pid: u32) -> Option<Self> {
        let p = libc::pid_t::try_from(pid).ok().filter(|&p| p > 0)?;
        // SAFETY: pidfd_open takes a pid and flags 0 and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p, 0) };
        let fd = i32::try_from(fd).ok().filter(|&fd| fd >= 0)?;
        // SAFETY: `fd` is a descriptor the call above just opened for us alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Some(Self { pid, fd })
    }

    /// The watched process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// `true` once the process has exited (a zombie counts: it holds no lock any more, and
    /// never will release one). One non-blocking `poll(2)`.
    pub(crate) fn exited(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, timeout 0 (never blocks).
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n > 0 && p.revents & libc::POLLIN != 0
    }
}

#[cfg(test)]
mod tests;
