//! Large messages at the edges: the receiver's cross-memory read of a sender's buffer, and the
//! endpoint's drop, which withdraws its lent buffers and waits for the reads in progress.

use super::{handoff, Edge, Request, SendState, ShmTransport, DROP_READ_LIMIT};

/// Reads `len` bytes at `addr` of process `pid` into `buf` (`process_vm_readv`, repeated on a
/// partial read).
pub(crate) fn cma_read(pid: u32, addr: u64, buf: *mut u8, len: u64) -> std::io::Result<()> {
    let mut done = 0u64;
    while done < len {
        let n = (len - done) as usize;
        let local = libc::iovec {
            // SAFETY (arithmetic only): `done < len`, inside the receive buffer.
            iov_base: buf.wrapping_add(done as usize).cast(),
            iov_len: n,
        };
        let remote = libc::iovec {
            iov_base: (addr.wrapping_add(done)) as usize as *mut libc::c_void,
            iov_len: n,
        };
        // SAFETY: the kernel writes at most `n` bytes into the local range, which is the rest
        // of a receive buffer lent to us until its request finishes; the remote range is only
        // read, in another process, and checked by the kernel (EFAULT when it is not mapped).
        let rc = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if rc == 0 {
            return Err(std::io::Error::other("process_vm_readv read nothing"));
        }
        done += rc as u64;
    }
    Ok(())
}

impl Drop for ShmTransport {
    /// Withdraws every large send still unclaimed, then waits for the reads a receiver has
    /// already begun (COPYING), so that the caller may free its buffers once the endpoint is
    /// gone: a receiver never gets bytes of a buffer its owner took back. The wait ends early
    /// when the reader's process is gone and is bounded by [`DROP_READ_LIMIT`] (logged).
    fn drop(&mut self) {
        let lent: Vec<(u32, u32, u32)> = self
            .slab
            .iter()
            .filter_map(|r| match r {
                Request::SendLent {
                    peer,
                    word,
                    generation,
                    ..
                } => Some((*peer, *word, *generation)),
                _ => None,
            })
            .collect();
        for &(_, word, generation) in &lent {
            let _ = handoff::transition(self.own().send_word(word), generation, Edge::Withdraw);
        }
        let start = std::time::Instant::now();
        for (peer, word, generation) in lent {
            let w = self.own().send_word(word);
            while handoff::read(w, generation) == Ok(SendState::Copying) {
                if !process_alive(self.pids[peer as usize]) {
                    break;
                }
                if start.elapsed() > DROP_READ_LIMIT {
                    log::error!(
                        "{}: rank {peer} still reads a buffer of ours after {DROP_READ_LIMIT:?}; \
                         the endpoint closes anyway",
                        self.name
                    );
                    return;
                }
                std::thread::yield_now();
            }
        }
    }
}

/// Whether process `pid` still exists (`kill(pid, 0)`; a process we may not signal exists).
fn process_alive(pid: u32) -> bool {
    // SAFETY: signal 0 sends nothing; it only checks that the process exists.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}
