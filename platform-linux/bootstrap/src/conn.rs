//! One bootstrap TCP connection ([`Conn`]: non-blocking, buffered frames both ways) and the
//! bounded wait every blocking call uses ([`BoundedWait`], pausing by [`POLL_BACKOFF`]).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use proxy_core::base::backoff::{Backoff, BackoffPolicy, StdPause};

use crate::wire::{Frame, Preface};
use crate::*;

/// The bootstrap's pauses between polls (the project's one backoff, `base::backoff`): no
/// spinning (the answer comes from another process, often another host), 32 yields, then naps
/// from 50 µs doubling to 2 ms.
pub(crate) const POLL_BACKOFF: BackoffPolicy = BackoffPolicy {
    spins: 0,
    yields: 32,
    nap_ns: 50_000,
    max_nap_ns: 2_000_000,
};

/// A fresh [`Backoff`] under [`POLL_BACKOFF`].
pub(crate) fn poll_backoff() -> Backoff {
    Backoff::new(POLL_BACKOFF)
}

/// One bounded wait: warnings every `warn_interval`, an error after `timeout`.
pub(crate) struct BoundedWait {
    pub(crate) start: Instant,
    pub(crate) timeout: Duration,
    pub(crate) warn_interval: Duration,
    pub(crate) warned: u32,
    pub(crate) backoff: Backoff,
}

impl BoundedWait {
    pub(crate) fn new(timeout: Duration, warn_interval: Duration) -> Self {
        Self {
            start: Instant::now(),
            timeout,
            warn_interval,
            warned: 0,
            backoff: poll_backoff(),
        }
    }

    /// Called when the condition is not met yet: `Err(waited)` once the timeout has passed,
    /// else warns when due, backs off and returns `Ok`.
    pub(crate) fn tick(
        &mut self,
        rank: u32,
        nranks: u32,
        what: impl FnOnce() -> String,
    ) -> Result<(), Duration> {
        let waited = self.start.elapsed();
        if waited >= self.timeout {
            return Err(waited);
        }
        if !self.warn_interval.is_zero()
            && waited >= self.warn_interval.saturating_mul(self.warned + 1)
        {
            self.warned += 1;
            log::warn!(
                "bootstrap rank {rank}/{nranks}: still waiting for {} after {:.1} s (timeout {:.1} s)",
                what(),
                waited.as_secs_f64(),
                self.timeout.as_secs_f64()
            );
        }
        self.backoff.pause(&StdPause);
        Ok(())
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.start + self.timeout
    }
}

/// Idle time before the first keepalive probe, and the interval between probes, of every
/// bootstrap connection (`TCP_KEEPIDLE`, `TCP_KEEPINTVL`; whole seconds, the kernel's unit).
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(1);
/// How long a bootstrap connection may go without the peer acknowledging data or keepalive
/// probes before the kernel resets it (`TCP_USER_TIMEOUT`): a peer host that is gone (link down,
/// host crashed) fails the connection within about this, plus one probe interval. A stopped but
/// living process is not affected (its kernel still acknowledges).
pub const PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// `setsockopt` of one `c_int` option.
fn set_int_opt(fd: i32, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `fd` is an open socket owned by the caller's stream for the whole call; the option
    // value is a live c_int of the length passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets keepalive ([`KEEPALIVE_IDLE`]) and `TCP_USER_TIMEOUT` ([`PEER_TIMEOUT`]) on `stream`.
pub(crate) fn set_liveness_options(stream: &TcpStream) -> io::Result<()> {
    let fd = stream.as_raw_fd();
    let idle = KEEPALIVE_IDLE.as_secs().max(1) as i32;
    set_int_opt(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, idle)?;
    set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, idle)?;
    set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 2)?;
    set_int_opt(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_USER_TIMEOUT,
        PEER_TIMEOUT.as_millis() as i32,
    )
}

/// `getsockopt` of one `c_int` option (tests read the liveness options back).
#[cfg(test)]
pub(crate) fn int_opt(stream: &TcpStream, level: i32, name: i32) -> io::Result<i32> {
    let mut value: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: the stream's socket is open for the call; value and len are live and len is
    // value's size.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            level,
            name,
            (&mut value as *mut i32).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One TCP connection of the bootstrap: non-blocking, with its own read and write buffers.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) stream: TcpStream,
    pub(crate) addr: SocketAddr,
    /// Received bytes not parsed yet.
    pub(crate) rbuf: Vec<u8>,
    /// Bytes to send; `wbuf[wpos..]` is still unsent.
    pub(crate) wbuf: Vec<u8>,
    pub(crate) wpos: usize,
    /// Our preface has been queued (it goes before our first frame).
    pub(crate) preface_sent: bool,
    /// The peer's preface has been read and checked.
    pub(crate) preface_seen: bool,
    /// The peer closed its side (read returned 0).
    pub(crate) eof: bool,
    /// We shut down our sending side.
    pub(crate) shut: bool,
}

/// Bytes one read of a connection takes at most.
const READ_CHUNK: usize = 16 << 10;

thread_local! {
    /// What one `read` of a connection lands in, per thread, zeroed once: the dead-peer watch
    /// reads every connection from the progress rounds, mostly to find nothing, and a zeroed
    /// 16 KiB stack array per read was most of that check's cost (one per connection instead
    /// would hold 16 KiB per rank at a root).
    static READ_BUF: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0; READ_CHUNK].into_boxed_slice());
}

impl Conn {
    pub(crate) fn new(stream: TcpStream, addr: SocketAddr) -> io::Result<Self> {
        stream.set_nonblocking(true)?;
        // Small frames: latency matters more than packet count.
        let _ = stream.set_nodelay(true);
        // Dead-peer detection (docs/design.md §9, "Liveness"): a peer host that stops answering
        // resets the connection after about PEER_TIMEOUT. A platform without the options keeps
        // the plain connection (the exec timeout stays the last resort).
        if let Err(e) = set_liveness_options(&stream) {
            log::warn!("bootstrap connection with {addr}: cannot set TCP keepalive options: {e}");
        }
        Ok(Self {
            stream,
            addr,
            rbuf: Vec::new(),
            wbuf: Vec::new(),
            wpos: 0,
            preface_sent: false,
            preface_seen: false,
            eof: false,
            shut: false,
        })
    }

    pub(crate) fn queue(&mut self, f: &Frame) {
        if !self.preface_sent {
            self.preface_sent = true;
            self.wbuf.extend_from_slice(&wire::preface());
        }
        f.encode(&mut self.wbuf);
    }

    pub(crate) fn unsent(&self) -> usize {
        self.wbuf.len() - self.wpos
    }

    /// Writes what the socket takes now.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        while self.wpos < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
        }
        Ok(())
    }

    /// Reads what the socket holds now (up to a little more than one maximal frame buffered).
    pub(crate) fn fill(&mut self) -> io::Result<()> {
        READ_BUF.with_borrow_mut(|chunk| self.fill_with(chunk))
    }

    /// [`Conn::fill`] through `chunk`.
    fn fill_with(&mut self, chunk: &mut [u8]) -> io::Result<()> {
        while !self.eof && self.rbuf.len() <= MAX_FRAME as usize + 8 {
            match self.stream.read(chunk) {
                Ok(0) => self.eof = true,
                Ok(n) => self.rbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Checks the peer's preface once it is complete (consuming it).
    pub(crate) fn take_preface(&mut self) -> Preface {
        let p = wire::read_preface(&self.rbuf);
        if let Preface::Version(_) = p {
            self.rbuf.drain(..wire::PREFACE_LEN);
            self.preface_seen = true;
        }
        p
    }

    /// The next whole frame (the preface must have been taken).
    pub(crate) fn next_frame(&mut self) -> Result<Option<Frame>, wire::WireError> {
        match Frame::decode(&self.rbuf)? {
            Some((f, used)) => {
                self.rbuf.drain(..used);
                Ok(Some(f))
            }
            None => Ok(None),
        }
    }

    /// Best effort: queue `f`, write what goes now, then stop sending.
    pub(crate) fn send_last(&mut self, f: &Frame) {
        self.queue(f);
        let _ = self.flush();
        if self.unsent() == 0 {
            let _ = self.stream.shutdown(Shutdown::Write);
            self.shut = true;
        }
    }

    /// One round of a lingering close: writes what is still unsent, shuts down our side once
    /// all is out, and reads and discards what the peer still sends. `true` when this
    /// connection is finished (the peer's EOF, or a socket error).
    fn linger_once(&mut self) -> bool {
        if self.flush().is_err() {
            return true;
        }
        if self.unsent() == 0 && !self.shut {
            let _ = self.stream.shutdown(Shutdown::Write);
            self.shut = true;
        }
        let res = self.fill();
        self.rbuf.clear();
        res.is_err() || self.eof
    }

    /// A lingering close of `conns` after [`Conn::send_last`]: until each peer closed its side
    /// or `budget` has passed. Closing a socket whose receive buffer still holds bytes the peer
    /// sent makes the kernel answer with a reset instead of a FIN, and a reset can discard our
    /// last frame (an `Abort`, a `Reject`) before the peer reads it; so the failing side first
    /// waits for the peer to read that frame and close.
    pub(crate) fn linger<'a>(conns: impl IntoIterator<Item = &'a mut Conn>, budget: Duration) {
        let mut open: Vec<&mut Conn> = conns.into_iter().collect();
        let deadline = Instant::now() + budget;
        let mut backoff = poll_backoff();
        loop {
            open.retain_mut(|c| !c.linger_once());
            if open.is_empty() || Instant::now() >= deadline {
                return;
            }
            backoff.pause(&StdPause);
        }
    }
}
