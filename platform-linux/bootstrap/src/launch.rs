//! A local launcher: one process per rank on this machine, bootstrapped on a loopback root
//! address. Each child gets `PROXY_RANK`, `PROXY_NRANKS` (the first pair of [`LAUNCHER_VARS`])
//! and `NEURON_RT_ROOT_COMM_ID`; its stdout and stderr are captured line by line (and can be
//! echoed with a `[rank r]` prefix).
//!
//! Every wait is bounded: [`LocalLaunch::wait_all`] kills the children still running at its
//! deadline, and dropping a `LocalLaunch` kills and reaps whatever is left (only the children
//! it spawned, by their process ids).

use std::io::{self, BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{LAUNCHER_VARS, ROOT_COMM_ID_ENV, ROOT_FD_ENV};

/// A free TCP port on 127.0.0.1, as a root address. (The port is free when this returns; a
/// process that grabs it before rank 0 binds it makes rank 0's bind fail with a clear error.)
///
/// # Errors
/// Binding 127.0.0.1:0 failed.
pub fn free_loopback_root() -> io::Result<SocketAddr> {
    let l = TcpListener::bind(("127.0.0.1", 0))?;
    l.local_addr()
}

/// Which output stream a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutStream {
    /// The child's stdout.
    Stdout,
    /// The child's stderr.
    Stderr,
}

/// One line of a child's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// The child's rank.
    pub rank: u32,
    /// Which stream.
    pub stream: OutStream,
    /// The line, without its newline.
    pub text: String,
}

/// How a child ended.
#[derive(Clone, Debug)]
pub struct RankExit {
    /// The child's rank.
    pub rank: u32,
    /// Its exit status (`None` if it could not be reaped).
    pub status: Option<ExitStatus>,
    /// It was still running at the deadline and was killed.
    pub killed_at_deadline: bool,
    /// Time from its spawn to its exit (as observed by polling, within ~10 ms).
    pub elapsed: Duration,
}

impl RankExit {
    /// Exited by itself with status 0.
    pub fn success(&self) -> bool {
        !self.killed_at_deadline && self.status.is_some_and(|s| s.success())
    }
}

struct Running {
    child: Child,
    spawned: Instant,
    readers: Vec<JoinHandle<()>>,
    exit: Option<RankExit>,
}

/// A set of local rank processes sharing one root address.
pub struct LocalLaunch {
    nranks: u32,
    root: SocketAddr,
    /// The root's listening socket, bound by the launcher and handed to rank 0 (kept open
    /// here until then, so no other process can take the port in between).
    reserved: Option<TcpListener>,
    echo: bool,
    children: Vec<Option<Running>>,
    tx: Sender<Line>,
    rx: Receiver<Line>,
    lines: Arc<Mutex<Vec<Line>>>,
}

impl std::fmt::Debug for LocalLaunch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLaunch")
            .field("nranks", &self.nranks)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl LocalLaunch {
    /// A launch of `nranks` ranks bootstrapping on `root`; `echo` copies every output line to
    /// this process's stderr as `[rank r] line`.
    pub fn new(nranks: u32, root: SocketAddr, echo: bool) -> Self {
        let (tx, rx) = mpsc::channel();
        Self {
            nranks,
            root,
            reserved: None,
            echo,
            children: (0..nranks).map(|_| None).collect(),
            tx,
            rx,
            lines: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// A launch of `nranks` ranks whose root address the launcher reserves itself: it binds
    /// and listens on a free port of 127.0.0.1 and hands that socket to rank 0 (inherited, its
    /// number in [`ROOT_FD_ENV`]), so two launches started at once can never pick the same port
    /// (with [`free_loopback_root`] the port is free only when it is picked: two test launchers
    /// once got the same one, and their ranks joined each other's root). `echo` as in
    /// [`LocalLaunch::new`].
    ///
    /// # Errors
    /// Binding or listening on 127.0.0.1:0 failed.
    pub fn reserving(nranks: u32, echo: bool) -> io::Result<Self> {
        let l = TcpListener::bind(("127.0.0.1", 0))?;
        let mut launch = Self::new(nranks, l.local_addr()?, echo);
        launch.reserved = Some(l);
        Ok(launch)
    }

    /// The root address the children bootstrap on.
    pub fn root(&self) -> SocketAddr {
        self.root
    }

    /// Spawns `cmd` as `rank`, adding the rank, size and root variables (and removing the other
    /// launchers' rank variables, so that an outer `mpirun` cannot confuse the child). The
    /// child is killed (`SIGKILL`, `PR_SET_PDEATHSIG`) when the thread that called this ends:
    /// spawn from the thread that waits for the ranks.
    ///
    /// # Errors
    /// `rank` out of range or already spawned (`InvalidInput`), or the spawn failed.
    pub fn spawn(&mut self, rank: u32, mut cmd: Command) -> io::Result<()> {
        if rank >= self.nranks || self.children[rank as usize].is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("rank {rank} out of range or already spawned"),
            ));
        }
        for (rv, sv) in &LAUNCHER_VARS[1..] {
            cmd.env_remove(rv).env_remove(sv);
        }
        let (rv, sv) = LAUNCHER_VARS[0];
        cmd.env(rv, rank.to_string())
            .env(sv, self.nranks.to_string())
            .env(ROOT_COMM_ID_ENV, self.root.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // A launcher killed (SIGKILL, so no clean-up of its own) takes its ranks with it, as
        // mpirun's do, instead of leaving them running a sweep nobody reads. The signal comes
        // when the thread that spawned them ends: the launcher spawns and waits on one thread.
        let launcher = std::process::id();
        // SAFETY: runs in the forked child before exec; prctl and getppid are
        // async-signal-safe and change only the child.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) == -1 {
                    return Err(io::Error::last_os_error());
                }
                // The launcher may have died before the prctl: then nobody would signal us.
                if libc::getppid() as u32 != launcher {
                    return Err(io::Error::other("the launcher exited"));
                }
                Ok(())
            });
        }
        if rank == 0 {
            if let Some(l) = &self.reserved {
                let fd = l.as_raw_fd();
                cmd.env(ROOT_FD_ENV, fd.to_string());
                // SAFETY: runs in the forked child before exec; fcntl is async-signal-safe and
                // touches only the child's copy of the descriptor table (the listener stays
                // close-on-exec here, so no other child inherits it).
                unsafe {
                    cmd.pre_exec(move || {
                        if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                            return Err(io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
            }
        }
        let mut child = cmd.spawn()?;
        if rank == 0 {
            // Rank 0 holds the listener now; the launcher's copy is closed.
            self.reserved = None;
        }
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(self.reader(rank, OutStream::Stdout, out));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(self.reader(rank, OutStream::Stderr, err));
        }
        log::debug!("launch: rank {rank} is pid {}", child.id());
        self.children[rank as usize] = Some(Running {
            child,
            spawned: Instant::now(),
            readers,
            exit: None,
        });
        Ok(())
    }

    fn reader(
        &self,
        rank: u32,
        stream: OutStream,
        r: impl Read + Send + 'static,
    ) -> JoinHandle<()> {
        let tx = self.tx.clone();
        let lines = self.lines.clone();
        let echo = self.echo;
        std::thread::spawn(move || {
            for text in BufReader::new(r).lines() {
                let Ok(text) = text else { break };
                if echo {
                    eprintln!("[rank {rank}] {text}");
                }
                let line = Line { rank, stream, text };
                lines
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(line.clone());
                let _ = tx.send(line);
            }
        })
    }

    /// The next output line of any child, waiting at most `timeout`.
    pub fn next_line(&self, timeout: Duration) -> Option<Line> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// Waits (at most `timeout`) for a line of `rank` for which `pred` holds; lines of other
    /// ranks or not matching are kept in [`LocalLaunch::lines`] only.
    pub fn wait_line(
        &self,
        rank: u32,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Option<Line> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match self.next_line(left) {
                Some(l) if l.rank == rank && pred(&l.text) => return Some(l),
                Some(_) => {}
                None => return None,
            }
        }
    }

    /// Every line received so far (after [`LocalLaunch::wait_all`]: every line).
    pub fn lines(&self) -> Vec<Line> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The lines of `rank` on `stream`.
    pub fn output(&self, rank: u32, stream: OutStream) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.rank == rank && l.stream == stream)
            .map(|l| l.text)
            .collect()
    }

    /// The process id of `rank`, if spawned.
    pub fn pid(&self, rank: u32) -> Option<u32> {
        self.children
            .get(rank as usize)
            .and_then(Option::as_ref)
            .map(|r| r.child.id())
    }

    /// Kills `rank` (SIGKILL) if it is still running.
    ///
    /// # Errors
    /// The kill failed (other than "already exited").
    pub fn kill(&mut self, rank: u32) -> io::Result<()> {
        if let Some(Some(r)) = self.children.get_mut(rank as usize) {
            if r.exit.is_none() {
                r.child.kill()?;
            }
        }
        Ok(())
    }

    /// Reaps the children that have exited, without waiting or killing; returns how many are
    /// still running.
    pub fn poll_exits(&mut self) -> usize {
        let mut running = 0;
        for (rank, slot) in self.children.iter_mut().enumerate() {
            let Some(r) = slot else { continue };
            if r.exit.is_some() {
                continue;
            }
            match r.child.try_wait() {
                Ok(Some(status)) => {
                    r.exit = Some(RankExit {
                        rank: rank as u32,
                        status: Some(status),
                        killed_at_deadline: false,
                        elapsed: r.spawned.elapsed(),
                    });
                }
                Ok(None) => running += 1,
                Err(e) => {
                    log::warn!("launch: waiting for rank {rank}: {e}");
                    r.exit = Some(RankExit {
                        rank: rank as u32,
                        status: None,
                        killed_at_deadline: false,
                        elapsed: r.spawned.elapsed(),
                    });
                }
            }
        }
        running
    }

    /// The exits reaped so far (by [`LocalLaunch::poll_exits`] or [`LocalLaunch::wait_all`]).
    pub fn exits(&self) -> Vec<RankExit> {
        self.children
            .iter()
            .flatten()
            .filter_map(|r| r.exit.clone())
            .collect()
    }

    /// Waits for every spawned child to exit, at most `timeout`; children still running at the
    /// deadline are killed (and reported with `killed_at_deadline`). Then collects their output.
    pub fn wait_all(&mut self, timeout: Duration) -> Vec<RankExit> {
        let deadline = Instant::now() + timeout;
        while self.poll_exits() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for (rank, slot) in self.children.iter_mut().enumerate() {
            let Some(r) = slot else { continue };
            if r.exit.is_none() {
                log::warn!(
                    "launch: rank {rank} (pid {}) still running after {timeout:?}: killed",
                    r.child.id()
                );
                let _ = r.child.kill();
                let status = r.child.wait().ok();
                r.exit = Some(RankExit {
                    rank: rank as u32,
                    status,
                    killed_at_deadline: true,
                    elapsed: r.spawned.elapsed(),
                });
            }
            for h in r.readers.drain(..) {
                let _ = h.join();
            }
        }
        self.exits()
    }
}

impl Drop for LocalLaunch {
    fn drop(&mut self) {
        for r in self.children.iter_mut().flatten() {
            if r.exit.is_none() {
                let _ = r.child.kill();
                let _ = r.child.wait();
            }
        }
    }
}
