//! One rank's segment: a file under `/dev/shm`, created and sized by its owner, mapped by every
//! rank of the comm, and unlinked by its owner once every rank has mapped it.
//!
//! ```text
//!  line 0                      header: magic, version, nranks, owner rank, owner pid, layout
//!  for sender s in 0..nranks:  mailbox s → owner: tail line (s writes), head line (owner
//!                              writes), MAILBOX_SLOTS slots of SLOT_BYTES
//!  send words                  SEND_WORDS words of 8 bytes: the state of the owner's large
//!                              sends (handoff.rs), written by their receivers and the owner
//! ```
//!
//! Everything two processes share lives here and is touched only through atomics, except the
//! slot bytes, which the protocol hands from one side to the other (mailbox.rs).
//!
//! Seed: none (the seed's ranks share one process); docs/design/09-decisions.md, "Our own
//! shared-memory transport".

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Bytes per cache line: the unit of the layout (no two writers share one).
pub const LINE: usize = 64;
/// Largest message in bytes carried inline in a slot (copied at `isend`): 4 KiB, a page, so
/// that the chunks of the collectives' pipelines (powers of two) stay inline up to it; larger
/// messages are read by the receiver straight out of the sender's buffer (cross-memory attach).
pub const INLINE_MAX: usize = 4096;
/// Bytes of one mailbox slot: a [`LINE`] of header and up to [`INLINE_MAX`] payload bytes.
pub const SLOT_BYTES: usize = LINE + INLINE_MAX;
/// Slots per (sender, receiver) mailbox: messages posted to one peer and not yet drained by it.
/// A power of two: the ring's indices wrap at 2^32, which it divides.
pub const MAILBOX_SLOTS: usize = 16;
const _: () = assert!(MAILBOX_SLOTS.is_power_of_two());
/// Large sends one rank keeps in flight at most (one state word each).
pub const SEND_WORDS: usize = 1024;
/// Largest rank count of one comm: the segments grow as `nranks` mailboxes each, and the host
/// holds `nranks²` of them (64 ranks: 4.1 MiB per rank, 260 MiB on the host).
pub const MAX_RANKS: u32 = 64;

/// The segment's magic word ("PXSHMSEG", little-endian).
const MAGIC: u64 = u64::from_le_bytes(*b"PXSHMSEG");
/// The layout version; a peer with another one is refused.
const VERSION: u32 = 1;

/// Bytes of one mailbox: its two control lines and its slots.
pub const MAILBOX_BYTES: usize = 2 * LINE + MAILBOX_SLOTS * SLOT_BYTES;

/// The layout of a segment for `nranks` ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Ranks of the comm.
    pub nranks: u32,
}

impl Layout {
    /// Offset of the mailbox from `sender` to the owner.
    pub fn mailbox(&self, sender: u32) -> usize {
        LINE + sender as usize * MAILBOX_BYTES
    }

    /// Offset of the send words.
    pub fn send_words(&self) -> usize {
        LINE + self.nranks as usize * MAILBOX_BYTES
    }

    /// Total bytes.
    pub fn bytes(&self) -> usize {
        self.send_words() + SEND_WORDS * 8
    }
}

/// What a segment's header says about its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The owner's rank.
    pub rank: u32,
    /// The owner's process id (the cross-memory attach target).
    pub pid: u32,
}

/// A mapping of one rank's segment. Unmapped on drop; the file is unlinked on drop too if this
/// mapping created it and [`Segment::unlink`] has not run yet.
#[derive(Debug)]
pub struct Segment {
    ptr: NonNull<u8>,
    layout: Layout,
    /// The file, while this mapping created it and it is still linked.
    owned_path: Mutex<Option<PathBuf>>,
}

// SAFETY: the mapping is touched only through atomics and through the copies of the mailbox
// protocol, which the transport's single driving thread makes; the pointer is owned by this
// value and unmapped once, on drop.
unsafe impl Send for Segment {}
// SAFETY: as above: shared access is atomic.
unsafe impl Sync for Segment {}

impl Segment {
    /// Creates `path` (which must not exist; mode 0600), reserves `layout.bytes()` bytes of
    /// memory for it (so a full `/dev/shm` is an error here, never a `SIGBUS` later), maps it
    /// and writes the header naming `owner`.
    ///
    /// # Errors
    /// The file exists or cannot be created, the memory cannot be reserved, or the map fails.
    pub fn create(path: &Path, layout: Layout, owner: Owner) -> io::Result<Self> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        let made = Self::reserve(&f, layout.bytes()).and_then(|()| Self::map(&f, layout));
        let mut seg = match made {
            Ok(s) => s,
            Err(e) => {
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
        };
        seg.owned_path = Mutex::new(Some(path.to_owned()));
        seg.word32(8).store(VERSION, Ordering::Relaxed);
        seg.word32(12).store(layout.nranks, Ordering::Relaxed);
        seg.word32(16).store(owner.rank, Ordering::Relaxed);
        seg.word32(20).store(owner.pid, Ordering::Relaxed);
        seg.word32(24).store(SLOT_BYTES as u32, Ordering::Relaxed);
        seg.word32(28)
            .store(MAILBOX_SLOTS as u32, Ordering::Relaxed);
        seg.word32(32).store(SEND_WORDS as u32, Ordering::Relaxed);
        // Last, with release: a peer that reads the magic with acquire sees the rest.
        seg.word64(0).store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Opens and maps `path`, a segment another rank created, and checks its header against
    /// what the set-up exchanged: this layout, and `owner`.
    ///
    /// # Errors
    /// The file cannot be opened or mapped, has another size, or its header differs (another
    /// version of this library, another comm, a file that is not a segment).
    pub fn open(path: &Path, layout: Layout, owner: Owner) -> io::Result<Self> {
        // Not through a symbolic link; a regular file only.
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        let meta = f.metadata()?;
        if !meta.file_type().is_file() {
            return Err(bad(format!("{} is not a regular file", path.display())));
        }
        let have = meta.len();
        if have != layout.bytes() as u64 {
            return Err(bad(format!(
                "{} is {have} bytes, expected {} for {} ranks",
                path.display(),
                layout.bytes(),
                layout.nranks
            )));
        }
        let seg = Self::map(&f, layout)?;
        // The magic first, with acquire: the owner stored it last, with release.
        if seg.word64(0).load(Ordering::Acquire) != MAGIC {
            return Err(bad(format!("{} is not a segment", path.display())));
        }
        let header = [
            (seg.word32(8).load(Ordering::Relaxed), VERSION, "version"),
            (
                seg.word32(12).load(Ordering::Relaxed),
                layout.nranks,
                "nranks",
            ),
            (seg.word32(16).load(Ordering::Relaxed), owner.rank, "rank"),
            (seg.word32(20).load(Ordering::Relaxed), owner.pid, "pid"),
            (
                seg.word32(24).load(Ordering::Relaxed),
                SLOT_BYTES as u32,
                "slot bytes",
            ),
            (
                seg.word32(28).load(Ordering::Relaxed),
                MAILBOX_SLOTS as u32,
                "slots",
            ),
            (
                seg.word32(32).load(Ordering::Relaxed),
                SEND_WORDS as u32,
                "send words",
            ),
        ];
        for (have, want, what) in header {
            if have != want {
                return Err(bad(format!(
                    "{}: {what} {have}, expected {want}",
                    path.display()
                )));
            }
        }
        Ok(seg)
    }

    /// Removes the file (every rank has mapped it; the memory lives until the last unmap).
    /// Does nothing on a mapping that did not create the file or has already unlinked it.
    ///
    /// # Errors
    /// The removal failed (the file stays until the host's next clean-up of `/dev/shm`).
    pub fn unlink(&self) -> io::Result<()> {
        let path = self
            .owned_path
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match path {
            Some(p) => std::fs::remove_file(p),
            None => Ok(()),
        }
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The first byte of the mapping.
    pub fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The 32-bit word at byte `offset`.
    ///
    /// # Panics
    /// If the word is not inside the mapping or `offset` is not 4-aligned (a caller's bug).
    pub fn word32(&self, offset: usize) -> &AtomicU32 {
        assert!(
            offset.is_multiple_of(4) && offset + 4 <= self.layout.bytes(),
            "word at {offset}"
        );
        // SAFETY: inside the live mapping (checked), 4-aligned (the mapping is page-aligned),
        // and every process touches the control words only through atomics; the reference
        // borrows `self`, so it cannot outlive the mapping.
        unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    /// The 64-bit word at byte `offset`.
    ///
    /// # Panics
    /// If the word is not inside the mapping or `offset` is not 8-aligned (a caller's bug).
    pub fn word64(&self, offset: usize) -> &AtomicU64 {
        assert!(
            offset.is_multiple_of(8) && offset + 8 <= self.layout.bytes(),
            "word at {offset}"
        );
        // SAFETY: as in `word32`, 8-aligned.
        unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    /// Send word `index` of the owner (`index < SEND_WORDS`).
    ///
    /// # Panics
    /// If `index >= SEND_WORDS` (a caller's bug; peers' indices are checked before).
    pub fn send_word(&self, index: u32) -> &AtomicU64 {
        assert!((index as usize) < SEND_WORDS, "send word {index}");
        self.word64(self.layout.send_words() + index as usize * 8)
    }

    /// Reserves the file's memory (`posix_fallocate`, so that tmpfs refuses now, not at a
    /// later touch of a page with `SIGBUS`).
    fn reserve(f: &File, len: usize) -> io::Result<()> {
        // SAFETY: plain syscall on an open descriptor.
        let rc = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len as libc::off_t) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(())
    }

    fn map(f: &File, layout: Layout) -> io::Result<Self> {
        if layout.nranks == 0 || layout.nranks > MAX_RANKS {
            return Err(bad(format!(
                "{} ranks: the shm transport takes 1..={MAX_RANKS}",
                layout.nranks
            )));
        }
        // SAFETY: a fresh shared mapping of `len` bytes of an open file (the mapping outlives
        // the descriptor); no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.bytes(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Self {
            ptr,
            layout,
            owned_path: Mutex::new(None),
        })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        let _ = self.unlink();
        // SAFETY: the mapping made in `map`, of this length, unmapped exactly once; no
        // reference into it outlives `self` (every accessor borrows `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.layout.bytes());
        }
    }
}

fn bad(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}
