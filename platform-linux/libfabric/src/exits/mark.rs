//! A process's live mark: the check before an shm send without a system call.
//!
//! The mark is a robust, process-shared `pthread_mutex_t` in a small file of its own in
//! `/dev/shm` (`pxyshm_<pid>_live`, [`path_of`]), locked by a thread of the process that
//! never lets go ([`mark_this_process`]). A robust mutex's lock word holds its holder's thread
//! id, and when that thread ends (and with it, when its process ends, however it ends: a
//! `SIGKILL` too) the kernel sets the word's owner-died bit from the thread's robust list. So a
//! peer that maps the file read-only can ask "does the process still run?" with one atomic
//! load of the word ([`Mark::held`]: a thread id and no owner-died bit), where the pidfd's
//! `poll(2)` is a system call on every send. A prober never writes: two probers, or a prober
//! and the process's own threads, cannot disturb each other's answer. Anything but "held" (not
//! marked yet, the holder gone) sends the caller to the pidfd ([`super::PeerExit`]), which
//! alone decides "exited"; and the watchdog asks the pidfd only (a robust list the kernel
//! could not walk, as when the OOM reaper took the memory first, would leave the word "held").
//! The word is glibc's `__lock`, the first field of the mutex on Linux; the holder checks at
//! creation that it reads its own thread id there, and makes no mark otherwise. Peers map
//! only a file of their own user, mode 0600.
//!
//! The file is removed at the process's normal exit (`atexit`); a killed process leaves it,
//! 64 bytes, and the next process with that pid replaces it (a new file: mappings of the old
//! one, held by its peers, keep the old one). The test helpers that remove a killed process's
//! shm regions by the `pxyshm_<pid>_` prefix remove it too.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Bytes of a mark's file (a `pthread_mutex_t` is 40 on x86-64 and aarch64 glibc).
const MARK_BYTES: usize = 64;

/// The mark file of process `pid`.
pub(crate) fn path_of(pid: u32) -> String {
    format!("/dev/shm/pxyshm_{pid}_live")
}

/// A mapped mark (this process's, read-write; or a peer's, read-only).
#[derive(Debug)]
pub(crate) struct Mark {
    mutex: *mut libc::pthread_mutex_t,
}

/// The thread id bits of a robust futex word (`FUTEX_TID_MASK`, linux/futex.h).
const FUTEX_TID_MASK: u32 = 0x3fff_ffff;
/// Set by the kernel in a robust futex word whose holder ended (`FUTEX_OWNER_DIED`).
const FUTEX_OWNER_DIED: u32 = 0x4000_0000;

const _: () = assert!(std::mem::size_of::<libc::pthread_mutex_t>() <= MARK_BYTES);

// SAFETY: the mutex lives in a shared mapping that this value owns until its drop; the owner's
// uses are pthread calls (thread-safe), a peer's are atomic loads of the lock word.
unsafe impl Send for Mark {}
// SAFETY: as for Send.
unsafe impl Sync for Mark {}

impl Mark {
    /// Maps the mark file at `path` (`create`: a new file with a new, unlocked robust
    /// process-shared mutex, any old file at `path` removed first, mapped read-write; else an
    /// existing file, read-only). `None` when the file cannot be made, opened or mapped, is too
    /// short, or (a peer's) is not this user's own with mode 0600.
    fn map(path: &str, create: bool) -> Option<Self> {
        if create {
            let _ = std::fs::remove_file(path);
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(create)
            .create_new(create)
            .mode(0o600)
            .open(path)
            .ok()?;
        if create {
            file.set_len(MARK_BYTES as u64).ok()?;
        } else {
            use std::os::unix::fs::MetadataExt as _;
            let m = file.metadata().ok()?;
            // SAFETY: geteuid has no preconditions.
            let me = unsafe { libc::geteuid() };
            if m.len() < MARK_BYTES as u64 || m.uid() != me || m.mode() & 0o777 != 0o600 {
                return None;
            }
        }
        let prot = if create {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a new shared mapping of MARK_BYTES of an open file at least that long; the
        // result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                MARK_BYTES,
                prot,
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

    /// `true` when the mark's holder runs: its lock word holds a thread id and no owner-died
    /// bit. `false` means "ask the pidfd" (not locked yet, or its holder has ended). One
    /// atomic load; never writes.
    pub(crate) fn held(&self) -> bool {
        let w = self.word().load(Ordering::Acquire);
        w & FUTEX_TID_MASK != 0 && w & FUTEX_OWNER_DIED == 0
    }

    /// The mutex's lock word (glibc's `__lock`, its first field).
    fn word(&self) -> &AtomicU32 {
        // SAFETY: the mapping is MARK_BYTES ≥ size_of::<pthread_mutex_t>() long, page-aligned,
        // and lives as long as `self`; its first 4 bytes are the futex word, which other
        // threads and processes (and the kernel) change only atomically.
        unsafe { &*self.mutex.cast::<AtomicU32>() }
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
                // The lock word must read this thread's id (the layout `held` relies on).
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() } as u32;
                let locked =
                    mark.lock() && mark.word().load(Ordering::Acquire) & FUTEX_TID_MASK == tid;
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
    /// mutex owner-dead) it reads not held, every time after, and to two probers at once (a
    /// prober never takes the lock); a free mark reads not held; a missing file maps to
    /// nothing, and so does a file of another mode.
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
        let peer = std::sync::Arc::new(Mark::map(&path, false).expect("map it as a peer"));
        assert!(!peer.held(), "nobody holds it yet");
        let (locked_tx, locked_rx) = std::sync::mpsc::channel();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            assert!(mark.lock());
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            assert_eq!(mark.word().load(Ordering::Acquire) & FUTEX_TID_MASK, tid);
            locked_tx.send(()).unwrap();
            let _ = end_rx.recv();
            // Ends holding the lock.
            std::mem::forget(mark);
        });
        locked_rx.recv().unwrap();
        assert!(peer.held(), "its holder runs");
        end_tx.send(()).unwrap();
        holder.join().unwrap();
        let probers: Vec<_> = (0..2)
            .map(|_| {
                let p = std::sync::Arc::clone(&peer);
                std::thread::spawn(move || (0..100_000).all(|_| !p.held()))
            })
            .collect();
        for p in probers {
            assert!(p.join().unwrap(), "a dead holder read as held");
        }
        let mut perm = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o644);
        std::fs::set_permissions(&path, perm).unwrap();
        assert!(Mark::map(&path, false).is_none(), "mode 0644 is not a mark");
        std::fs::remove_file(&path).unwrap();
        assert!(Mark::map(&path, false).is_none(), "no file, no mark");
        assert!(Mark::of_peer(u32::MAX).is_none());
    }
}
