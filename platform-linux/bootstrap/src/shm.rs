//! A shared-memory region in a file (under `/dev/shm`), mapped by every process of one host:
//! the meeting place of a [`crate::HostBarrier`]'s local ranks.
//!
//! The region is an array of 64-byte lines, each holding one `AtomicU32` at its start (one word
//! per line, so ranks writing their own word do not share a cache line).
//!
//! Seed: none (the seed's ranks of a host share one process); docs/design.md §4.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;

/// Bytes per line of the region.
pub(crate) const LINE: usize = 64;

/// A mapping of a region file, `lines` lines long. Unmapped on drop (the file itself is
/// unlinked by whoever created it, see `crate::host_barrier`).
#[derive(Debug)]
pub(crate) struct ShmRegion {
    ptr: NonNull<u8>,
    lines: usize,
}

// SAFETY: the mapping is only accessed through `&AtomicU32` (atomic, shareable between threads
// and processes); the pointer itself is owned by this value and unmapped once, on drop.
unsafe impl Send for ShmRegion {}
// SAFETY: as above: every access is atomic.
unsafe impl Sync for ShmRegion {}

impl ShmRegion {
    /// Creates `path` (which must not exist; mode 0600), sizes it to `lines` zeroed lines and
    /// maps it.
    ///
    /// # Errors
    /// The file exists, cannot be created or sized, or the map fails.
    pub(crate) fn create(path: &Path, lines: usize) -> io::Result<Self> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        let len = Self::len_of(lines)?;
        if let Err(e) = f.set_len(len as u64) {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        Self::map(&f, lines).inspect_err(|_| {
            let _ = std::fs::remove_file(path);
        })
    }

    /// Opens and maps `path`, which must be exactly `lines` lines long.
    ///
    /// # Errors
    /// The file cannot be opened, has another size, or the map fails.
    pub(crate) fn open(path: &Path, lines: usize) -> io::Result<Self> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        let want = Self::len_of(lines)? as u64;
        let have = f.metadata()?.len();
        if have != want {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is {have} bytes, expected {want}", path.display()),
            ));
        }
        Self::map(&f, lines)
    }

    fn len_of(lines: usize) -> io::Result<usize> {
        if lines == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a region of 0 lines",
            ));
        }
        lines
            .checked_mul(LINE)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "region too large"))
    }

    fn map(f: &File, lines: usize) -> io::Result<Self> {
        let len = Self::len_of(lines)?;
        // SAFETY: a fresh shared mapping of `len` bytes of an open file (the mapping outlives
        // the descriptor, which may be closed after the call); no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
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
        Ok(Self { ptr, lines })
    }

    /// The word at the start of `line`.
    ///
    /// # Panics
    /// If `line >= self.lines()` (a caller's indexing bug).
    pub(crate) fn word(&self, line: usize) -> &AtomicU32 {
        assert!(
            line < self.lines,
            "line {line} of a {}-line region",
            self.lines
        );
        // SAFETY: `line * LINE` is inside the live mapping (checked above), 64-byte aligned (the
        // mapping is page-aligned), so an AtomicU32 may live there; every process touches the
        // region only through atomics, and the mapping lives as long as `self`.
        unsafe { &*self.ptr.as_ptr().add(line * LINE).cast::<AtomicU32>() }
    }
}

impl Drop for ShmRegion {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, of this length, unmapped exactly once; no
        // reference into it outlives `self` (`word` borrows `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.lines * LINE);
        }
    }
}
