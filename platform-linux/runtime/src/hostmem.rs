//! Host memory the device (here: its emulator, possibly in another process) reaches: a
//! page-aligned `mmap` region over a `memfd`, so another process can map the same pages, with
//! every word on its own 128-byte line (as `nec.h` pads `enc_net_host_memory`).
//!
//! Words are handed out as typed handles ([`TriggerWord`], [`HostIndex`], [`Semaphore`],
//! [`BarrierDone`], [`LineWord`]) over core's [`HostWord`], each borrowing its region, so no
//! handle outlives the mapping (getting the bare [`HostWord`] out, for a task, is
//! [`Word::word`], an `unsafe fn` whose caller keeps the region alive); [`HostMemCallbacks`] implements core's
//! [`DeviceCallbacks`] over a region, checking every address against it.
//!
//! Seed: the host-memory words of §5 (`start_proxy_task_host_mem_addrs`, host indices,
//! semaphores), `nec_inc_semaphore`; docs/design.md §5.

use std::ffi::CStr;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use proxy_core::base::host_word::HostWord;
use proxy_core::driver::trigger::TRIGGER_ARMED;
use proxy_core::progress::device::DeviceCallbacks;

/// Bytes per word line: each word sits alone on its own 128-byte line.
pub const LINE: usize = 128;

/// A shared host-memory region of whole lines (page-aligned, zero-filled at creation).
///
/// Liveness: every [`Word`] handed out borrows the region, so it cannot outlive the mapping.
/// A bare [`HostWord`] taken out of one ([`Word::word`], `unsafe`) or an address given to a
/// task, op or emulator must not be used after the region is dropped: keep the region in an
/// `Arc` next to them.
#[derive(Debug)]
pub struct HostMem {
    base: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
    /// Next free line for the bump allocator.
    next: AtomicUsize,
}

// SAFETY: the mapping is shared memory accessed only through atomic words (HostWord); the
// region itself is immutable after creation apart from the atomic allocator cursor.
unsafe impl Send for HostMem {}
// SAFETY: as above.
unsafe impl Sync for HostMem {}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

impl HostMem {
    /// A new region of at least `lines` lines (rounded up to whole pages), backed by a fresh
    /// memfd (close-on-exec; see [`HostMem::fd`] to share it).
    ///
    /// # Errors
    /// `InvalidInput` for 0 lines or an overflowing size; the OS error of `memfd_create`,
    /// `ftruncate` or `mmap`.
    pub fn new(lines: usize) -> io::Result<Self> {
        if lines == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "0 lines"));
        }
        let page = page_size();
        let len = lines
            .checked_mul(LINE)
            .and_then(|b| b.checked_next_multiple_of(page))
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "region too large"))?;
        const NAME: &CStr = c"proxy-hostmem";
        // SAFETY: NAME is NUL-terminated; flags are valid.
        let raw = unsafe { libc::memfd_create(NAME.as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: valid fd; len fits off_t (checked by the mul above on 64-bit).
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Self::map(fd, len)
    }

    /// Maps an existing region (e.g. a memfd received from another process) whole.
    ///
    /// # Errors
    /// `InvalidInput` when its size is 0 or not a multiple of [`LINE`]; the OS error of
    /// `fstat` or `mmap`.
    pub fn from_fd(fd: OwnedFd) -> io::Result<Self> {
        // SAFETY: zeroed stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd and out-parameter.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let len = st.st_size as usize;
        if len == 0 || !len.is_multiple_of(LINE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("region of {len} bytes is not whole {LINE}-byte lines"),
            ));
        }
        Self::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<Self> {
        // SAFETY: a fresh shared mapping of `len` bytes of `fd`; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).expect("mmap returned null");
        Ok(Self {
            base,
            len,
            fd,
            next: AtomicUsize::new(0),
        })
    }

    /// The memfd (to share with another process: `dup` it, which clears close-on-exec, or
    /// pass it over a unix socket).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` for an empty region (never: regions have at least one page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of lines.
    pub fn lines(&self) -> usize {
        self.len / LINE
    }

    /// Address of the first byte.
    pub fn base_addr(&self) -> u64 {
        self.base.as_ptr() as u64
    }

    /// `true` when `[addr, addr + size)` lies inside the region.
    pub fn contains(&self, addr: u64, size: u64) -> bool {
        let base = self.base_addr();
        addr >= base
            && addr
                .checked_add(size)
                .is_some_and(|end| end <= base + self.len as u64)
    }

    /// The word at the start of line `line`, or `None` past the end.
    pub fn line_word(&self, line: usize) -> Option<LineWord<'_>> {
        if line >= self.lines() {
            return None;
        }
        // SAFETY: the address is inside the live, page-aligned mapping (so 4-byte aligned),
        // which is only ever accessed through atomics; the handle borrows the region, so the
        // mapping outlives it.
        let word = unsafe { HostWord::from_addr(self.base_addr() + (line * LINE) as u64) }?;
        Some(Word::new(word, line))
    }

    /// The word at `addr` if it is a 4-byte-aligned word inside the region.
    pub fn word_at(&self, addr: u64) -> Option<LineWord<'_>> {
        if !self.contains(addr, 4) || !addr.is_multiple_of(4) {
            return None;
        }
        // SAFETY: inside the live mapping and aligned (checked above); the handle borrows the
        // region, so the mapping outlives it.
        let word = unsafe { HostWord::from_addr(addr) }?;
        Some(Word::new(word, (addr - self.base_addr()) as usize / LINE))
    }

    fn alloc_line(&self) -> io::Result<(usize, LineWord<'_>)> {
        let line = self.next.fetch_add(1, Ordering::Relaxed);
        match self.line_word(line) {
            Some(w) => Ok((line, w)),
            None => {
                self.next.fetch_sub(1, Ordering::Relaxed);
                Err(io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    format!("host memory region of {} lines is full", self.lines()),
                ))
            }
        }
    }

    /// Allocates a word of kind `K` on the next free line (its initial value is `K::INITIAL`).
    ///
    /// # Errors
    /// `OutOfMemory` when every line is taken.
    pub fn alloc<K: WordKind>(&self) -> io::Result<Word<'_, K>> {
        let (line, word) = self.alloc_line()?;
        word.store(K::INITIAL);
        Ok(Word::new(word.word, line))
    }
}

impl Drop for HostMem {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `map`; the liveness contract says no handle is
        // used after the region is dropped.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// The kind of a host-memory word (a marker type).
pub trait WordKind {
    /// Value written at allocation.
    const INITIAL: u32;
    /// Name for logs.
    const NAME: &'static str;
}

/// Marker: a trigger word (seed §5), armed = `0xFFFF_FFFF`.
#[derive(Debug)]
pub enum Trigger {}
/// Marker: a host index (device → proxy).
#[derive(Debug)]
pub enum Index {}
/// Marker: a semaphore increment register (proxy → device).
#[derive(Debug)]
pub enum Sem {}
/// Marker: a barrier-done semaphore.
#[derive(Debug)]
pub enum BarrierSem {}

/// Marker: a word found by its line or address ([`HostMem::line_word`], [`HostMem::word_at`]),
/// of no particular kind.
#[derive(Debug)]
pub enum Line {}

impl WordKind for Trigger {
    const INITIAL: u32 = TRIGGER_ARMED;
    const NAME: &'static str = "trigger";
}
impl WordKind for Index {
    const INITIAL: u32 = 0;
    const NAME: &'static str = "host index";
}
impl WordKind for Sem {
    const INITIAL: u32 = 0;
    const NAME: &'static str = "semaphore";
}
impl WordKind for BarrierSem {
    const INITIAL: u32 = 0;
    const NAME: &'static str = "barrier-done";
}

impl WordKind for Line {
    const INITIAL: u32 = 0;
    const NAME: &'static str = "word";
}

/// A typed word of a [`HostMem`] region, borrowing the region (`'m`): it cannot outlive the
/// mapping.
pub struct Word<'m, K> {
    word: HostWord,
    line: usize,
    _mem: PhantomData<&'m HostMem>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Word<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Word<'_, K> {}

impl<K: WordKind> std::fmt::Debug for Word<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@line{}({:#x})", K::NAME, self.line, self.word.addr())
    }
}

impl<K> Word<'_, K> {
    /// A handle on `word`, line `line` of the region the lifetime borrows.
    fn new(word: HostWord, line: usize) -> Self {
        Self {
            word,
            line,
            _mem: PhantomData,
            _kind: PhantomData,
        }
    }

    /// The untyped handle (what tasks and op infos take). It carries no lifetime.
    ///
    /// # Safety
    /// The returned handle and every copy of it must not be used after the region is dropped
    /// (keep the region, e.g. its `Arc`, alive next to the task or op that holds the handle).
    pub unsafe fn word(&self) -> HostWord {
        self.word
    }

    /// The address (for an op info's `*_addr` field).
    pub fn addr(&self) -> u64 {
        self.word.addr()
    }

    /// The line index inside the region (the same in every process that maps it).
    pub fn line(&self) -> usize {
        self.line
    }

    /// Reads the word (acquire).
    pub fn load(&self) -> u32 {
        self.word.load()
    }

    /// Writes the word (release).
    pub fn store(&self, v: u32) {
        self.word.store(v)
    }

    /// Adds `v` (wrapping, release) and returns the previous value: a semaphore increment.
    pub fn fetch_add(&self, v: u32) -> u32 {
        self.word.fetch_add(v)
    }
}

/// A trigger word (armed = [`TRIGGER_ARMED`]).
pub type TriggerWord<'m> = Word<'m, Trigger>;
/// A host index word.
pub type HostIndex<'m> = Word<'m, Index>;
/// A semaphore increment register.
pub type Semaphore<'m> = Word<'m, Sem>;
/// A barrier-done semaphore.
pub type BarrierDone<'m> = Word<'m, BarrierSem>;
/// A word found by its line or address.
pub type LineWord<'m> = Word<'m, Line>;

/// Core's [`DeviceCallbacks`] over a [`HostMem`] region: every address is checked against the
/// region (an address outside it is logged and ignored; a load returns 0).
///
/// Seed: `nec_inc_semaphore` and the host-index reads of §5.
#[derive(Debug, Clone)]
pub struct HostMemCallbacks {
    mem: Arc<HostMem>,
}

impl HostMemCallbacks {
    /// Callbacks over `mem` (kept alive by this value).
    pub fn new(mem: Arc<HostMem>) -> Self {
        Self { mem }
    }

    /// The region.
    pub fn region(&self) -> &Arc<HostMem> {
        &self.mem
    }

    fn word(&self, addr: u64, what: &str) -> Option<LineWord<'_>> {
        let w = self.mem.word_at(addr);
        if w.is_none() {
            log::error!(
                "{what} at {addr:#x}: not an aligned word of host memory [{:#x}, {:#x})",
                self.mem.base_addr(),
                self.mem.base_addr() + self.mem.len() as u64
            );
        }
        w
    }
}

impl DeviceCallbacks for HostMemCallbacks {
    fn inc_semaphore(&self, addr: u64, val: u32) {
        if let Some(w) = self.word(addr, "inc_semaphore") {
            w.fetch_add(val);
        }
    }

    fn load_host_index(&self, addr: u64) -> u32 {
        self.word(addr, "load_host_index").map_or(0, |w| w.load())
    }

    fn store_host_index(&self, addr: u64, val: u32) {
        if let Some(w) = self.word(addr, "store_host_index") {
            w.store(val);
        }
    }
}

#[cfg(test)]
mod tests;
