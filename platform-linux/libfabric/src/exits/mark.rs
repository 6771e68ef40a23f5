//! A process's live mark: the check before an shm send without a system call.
//!
//! The mark is a robust, process-shared `pthread_mutex_t` in a small file of its own in
//! `/dev/shm` (`pxyshm_<pid>_live`, [`path_of`]), locked by a thread of the process that
//! never lets go ([`mark_this_process`]). When a thread holding a robust mutex ends (and with
//! it, when its process ends, however it ends: a `SIGKILL` too), the kernel marks the mutex
//! owner-dead from the thread's robust list. So a peer that maps the file can ask "does the
//! process still run?" with `pthread_mutex_trylock`: `EBUSY` means the holder runs, and that
//! is a compare-and-swap in user space (glibc's robust trylock), where the pidfd's `poll(2)`
//! is a system call on every send. Any other answer (the lock taken: not marked yet, or its
//! holder gone, whose lock is then made consistent: a free lock from then on) is let go at
//! once and the caller asks the pidfd ([`super::PeerExit`]), so the mark only ever speeds up
//! the "still runs" answer and never decides "exited" alone.
//!
//! The file is removed at the process's normal exit (`atexit`); a killed process leaves it,
//! 64 bytes, and the next process with that pid replaces it (a new file: mappings of the old
//! one, held by its peers, keep the old one). The test helpers that remove a killed process's
//! shm regions by the `pxyshm_<pid>_` prefix remove it too.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::OnceLock;
use std::time::Duration;

/// Bytes of a mark's file (a `pthread_mutex_t` is 40 on x86-64 and aarch64 glibc).
const MARK_BYTES: usize = 64;

/// The mark file of process `pid`.
pub(crate) fn path_of(pid: u32) -> String {
    format!("/dev/shm/pxyshm_{pid}_live")
}

/// A mapped mark (this process's, or a peer's).
#[derive(Debug)]
pub(crate) struct Mark {
    mutex: *mut libc::pthread_mutex_t,
}

// SAFETY: the mutex lives in a shared mapping that this value owns until its drop, and a
// process-shared pthread mutex is made for concurrent use from any thread of any process.
unsafe impl Send for Mark {}
// SAFETY: as for Send: every use is a pthread call, which is thread-safe.
unsafe impl Sync for Mark {}

impl Mark {
    /// Maps the mark file at `path` (`create`: a new file with a new, unlocked robust
    /// process-shared mutex, any old file at `path` removed first). `None` when the file
    /// cannot be made, opened or mapped, or is too short.
    fn map(path: &str, create: bool) -> Option<Self> {
        if create {
            let _ = std::fs::remove_file(path);
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(create)
            .mode(0o600)
            .open(path)
            .ok()?;
        if create {
            file.set_len(MARK_BYTES as u64).ok()?;
        } else if file.metadata().ok()?.len() < MARK_BYTES as u64 {
            return None;
        }
        // SAFETY: a new shared mapping of MARK_BYTES of an open file at least that long; the
        // result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                MARK_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let mark = Self { mutex: p.cast() };
        if create && !mark.init() {
            return None;
        }
        Some(mark)
    }

    /// Initialises the mutex of a new file: robust and process-shared. `false` on failure.
    fn init(&self) -> bool {
        let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
        // SAFETY: the attribute object is initialised before use and destroyed after; the
        // mutex is ours alone (a new file no peer knows yet) and lies within the mapping.
        unsafe {
            if libc::pthread_mutexattr_init(attr.as_mut_ptr()) != 0 {
                return false;
            }
            let ok =
                libc::pthread_mutexattr_setpshared(attr.as_mut_ptr(), libc::PTHREAD_PROCESS_SHARED)
                    == 0
                    && libc::pthread_mutexattr_setrobust(
                        attr.as_mut_ptr(),
                        libc::PTHREAD_MUTEX_ROBUST,
                    ) == 0
                    && libc::pthread_mutex_init(self.mutex, attr.as_ptr()) == 0;
            libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
            ok
        }
    }

    /// Maps peer `pid`'s mark; `None` when it has none (another build, not an shm user, not
    /// marked yet) or it cannot be mapped.
    pub(crate) fn of_peer(pid: u32) -> Option<Self> {
        Self::map(&path_of(pid), false)
    }

    /// `true` when the mark's holder runs (the lock is held by someone else). `false` means
    /// "ask the pidfd": the lock was free (not marked yet) or its holder has ended; the lock,
    /// if this call took it, is let go before returning.
    pub(crate) fn held(&self) -> bool {
        // SAFETY: the mutex lies in our live mapping and was initialised robust and
        // process-shared by its process (a file of another kind reads as "not held" or as a
        // lock we take and let go at once; a pthread call on it touches only the mapping).
        match unsafe { libc::pthread_mutex_trylock(self.mutex) } {
            libc::EBUSY => true,
            ret @ (0 | libc::EOWNERDEAD) => {
                // Let go at once; a dead holder's lock made consistent first, so that it is a
                // free lock from now on (glibc leaves an unrecoverable one locked by the next
                // thread that tries it, which would then read as held).
                // SAFETY: this thread holds the lock it just took.
                unsafe {
                    if ret == libc::EOWNERDEAD {
                        libc::pthread_mutex_consistent(self.mutex);
                    }
                    libc::pthread_mutex_unlock(self.mutex);
                }
                false
            }
            _ => false,
        }
    }

    /// Locks the mutex for the calling thread (the holder). `false` on failure.
    fn lock(&self) -> bool {
        // SAFETY: as in `held`; a lock that blocks waits only for a prober's brief hold.
        match unsafe { libc::pthread_mutex_lock(self.mutex) } {
            0 => true,
            libc::EOWNERDEAD => {
                // SAFETY: we hold it; making it consistent keeps it usable.
                unsafe { libc::pthread_mutex_consistent(self.mutex) == 0 }
            }
            _ => false,
        }
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, of MARK_BYTES, unmapped once.
        unsafe { libc::munmap(self.mutex.cast(), MARK_BYTES) };
    }
}

/// This process's mark file, for the `atexit` removal (with the pid that made it: a forked
/// child inherits the handler and must not remove its parent's file).
static OWN_PATH: OnceLock<(u32, CString)> = OnceLock::new();

extern "C" fn remove_own_mark() {
    if let Some((pid, path)) = OWN_PATH.get() {
        if *pid == std::process::id() {
            // SAFETY: a NUL-terminated path; unlink only reads it.
            unsafe { libc::unlink(path.as_ptr()) };
        }
    }
}

/// Marks this process (once; later calls return at once): creates its mark file and starts
/// the thread that holds the mark's lock for the process's life (it does nothing else: it
/// parks). Returns whether the mark is in place; `false` (logged) leaves the peers on their
/// pidfd checks alone. Called before this process's shm endpoint names are handed out.
pub(crate) fn mark_this_process() -> bool {
    static MARKED: OnceLock<bool> = OnceLock::new();
    *MARKED.get_or_init(|| {
        let pid = std::process::id();
        let path = path_of(pid);
        let Some(mark) = Mark::map(&path, true) else {
            log::info!("shm live mark: cannot make {path}: peers check this process by pidfd");
            return false;
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("shm-live-mark".into())
            .spawn(move || {
                let locked = mark.lock();
                let _ = tx.send(locked);
                // Hold the lock (and the mapping) until the process ends.
                loop {
                    std::thread::park();
                }
            });
        let locked = spawned.is_ok() && rx.recv_timeout(Duration::from_secs(1)).unwrap_or(false);
        if !locked {
            log::info!("shm live mark: {path} not locked: peers check this process by pidfd");
            let _ = std::fs::remove_file(&path);
            return false;
        }
        if let Ok(c) = CString::new(path) {
            if OWN_PATH.set((pid, c)).is_ok() {
                // SAFETY: registers a function without arguments that only unlinks a path.
                unsafe { libc::atexit(remove_own_mark) };
            }
        }
        true
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mark held by a thread reads held; once that thread ends (the kernel marks the robust
    /// mutex owner-dead) it reads not held, every time after; a free mark reads not held and
    /// stays free; a missing file maps to nothing.
    #[test]
    fn a_mark_reads_held_while_its_holder_runs() {
        struct Remove(String);
        impl Drop for Remove {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        let path = format!("/dev/shm/pxyshm_test_{}_live", std::process::id());
        let _remove = Remove(path.clone());
        let mark = Mark::map(&path, true).expect("make a mark");
        let peer = Mark::map(&path, false).expect("map it as a peer");
        assert!(!peer.held(), "nobody holds it yet");
        assert!(!peer.held(), "the probe let go of it");
        let (locked_tx, locked_rx) = std::sync::mpsc::channel();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            assert!(mark.lock());
            locked_tx.send(()).unwrap();
            let _ = end_rx.recv();
            // Ends holding the lock.
            std::mem::forget(mark);
        });
        locked_rx.recv().unwrap();
        for _ in 0..3 {
            assert!(peer.held(), "its holder runs");
        }
        end_tx.send(()).unwrap();
        holder.join().unwrap();
        for _ in 0..3 {
            assert!(!peer.held(), "its holder has ended");
        }
        std::fs::remove_file(&path).unwrap();
        assert!(Mark::map(&path, false).is_none(), "no file, no mark");
        assert!(Mark::of_peer(u32::MAX).is_none());
    }
}
