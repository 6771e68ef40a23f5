//! The driver side of a binary seam: `dlopen` a progress-half library (`libnccom_proxy.so` or
//! any library with the same C ABI) by path, resolve its three seam entry points into a
//! [`SeamTable`] and its init half from the same handle, and call through them.
//!
//! ```text
//!  driver (this crate, the seed's libnrt role)          progress half (the .so, libnccom role)
//!  ProgressLib::open(path) ── dlopen(RTLD_NOW|LOCAL) ─► neuronStartNetworkProxy ┐
//!    seam(): SeamTable { start, progress, stop } ◄──── neuronNetworkProxyProgress├ dlsym
//!    init(): InitTable { comm_create, ... } ◄───────── neuronStopNetworkProxy    ┘  nccom_*
//!  ncclStartNetworkProxy / ncclNetworkProxyProgress / ncclStopNetworkProxy
//!    (trampolines, `bool` out-parameters) ── call *table.{start,progress,stop} ──► the .so
//! ```
//!
//! Comms are created, and device callbacks registered, through the library that will progress
//! them ([`ProgressLib::create_comm`], [`ProgressLib::register_device_callbacks`]): a comm
//! handle of one library means nothing to another. The in-process seam
//! ([`SeamTable::in_process`]) stays the default; this is the opt-in binary boundary.
//!
//! The library is never unloaded while a [`ProgressLib`] lives; [`ProgressLib::leak`] keeps it
//! for the life of the process, as the seed's runtime does (and `libnccom_proxy.so` is linked
//! with `-z nodelete`, so even `dlclose` does not unmap it).
//!
//! Seed: `ncclInit`'s `dlopen("libnccom.so")` filling the `.bss` neuron-slot table
//! (nrt:0xc967b8..0xc968d8) and the trampolines `ncclStartNetworkProxy` /
//! `ncclNetworkProxyProgress` (nrt:0x1c1aa0) / `ncclStopNetworkProxy`, §1 and §3.

use std::ffi::{c_void, CStr};
use std::fmt;
use std::path::{Path, PathBuf};
use std::ptr;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use proxy_abi::{
    NccomAbiVersionFn, NccomComm, NccomCommAbortFn, NccomCommConfig, NccomCommCreateFn,
    NccomCommDestroyFn, NccomCommIdleArmFn, NccomCommIdleAvailableFn, NccomCommIdleKickFn,
    NccomCommIdleSleepFn, NccomCommInvalidateRangeFn, NccomCommProtocolStatsFn,
    NccomCommRegisterMemoryFn, NccomDeviceCallbacks, NccomMemGroup, NccomMemGroupCreateFn,
    NccomMemGroupDestroyFn, NccomProtocolStats, NccomRegisterDeviceCallbacksFn,
    NccomTraceCollectFn, NccomTraceCounts, NccomTraceRecord, NccomTraceStartFn, NccomTraceStopFn,
    NeuronNetworkProxyProgressFn, NeuronStartNetworkProxyFn, NeuronStopNetworkProxyFn,
    NeuronStopNetworkProxyStepFn, NrtGetStatusAsStrFn, NCCOM_PROXY_ABI_VERSION,
    NCCOM_PROXY_ABI_VERSION_MAJOR,
};
use proxy_core::base::desc::{NetDestAddr, NetOpInfo, NetSrcAddr};
use proxy_core::base::status::NrtStatus;
use proxy_core::progress::stats::ProtocolStats;
use proxy_core::seam::{ProgressFn, SeamTable, StartFn, StopFn, StopStepFn};

/// Why a progress-half library could not be loaded. Every variant names the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// `dlopen` failed.
    Open {
        /// The path given.
        path: PathBuf,
        /// `dlerror()`'s text.
        message: String,
    },
    /// The library lacks an entry point.
    MissingSymbol {
        /// The path given.
        path: PathBuf,
        /// The missing symbol.
        symbol: &'static str,
        /// `dlerror()`'s text.
        message: String,
    },
    /// The library's ABI major version differs from this driver's.
    AbiMismatch {
        /// The path given.
        path: PathBuf,
        /// What `nccom_abi_version()` returned.
        found: u32,
        /// This driver's `NCCOM_PROXY_ABI_VERSION`.
        expected: u32,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open { path, message } => {
                write!(f, "cannot load progress half {}: {message}", path.display())
            }
            Self::MissingSymbol {
                path,
                symbol,
                message,
            } => write!(
                f,
                "progress half {} has no symbol `{symbol}`: {message}",
                path.display()
            ),
            Self::AbiMismatch {
                path,
                found,
                expected,
            } => write!(
                f,
                "progress half {} has C ABI version {found:#x}; this driver needs major {} \
                 (version {expected:#x})",
                path.display(),
                expected >> 16
            ),
        }
    }
}

impl std::error::Error for LoadError {}

/// The init half of a loaded library: one function pointer per `nccom_*` entry point.
///
/// Seed: the init-ABI slots of the neuron-slot table (comm init, `nec_*` registration), §1.
#[derive(Clone, Copy, Debug)]
pub struct InitTable {
    /// `nccom_abi_version`.
    pub abi_version: NccomAbiVersionFn,
    /// `nrt_get_status_as_str`.
    pub status_as_str: NrtGetStatusAsStrFn,
    /// `nccom_register_device_callbacks`.
    pub register_device_callbacks: NccomRegisterDeviceCallbacksFn,
    /// `nccom_mem_group_create`.
    pub mem_group_create: NccomMemGroupCreateFn,
    /// `nccom_mem_group_destroy`.
    pub mem_group_destroy: NccomMemGroupDestroyFn,
    /// `nccom_comm_create`.
    pub comm_create: NccomCommCreateFn,
    /// `nccom_comm_destroy`.
    pub comm_destroy: NccomCommDestroyFn,
    /// `nccom_comm_register_memory`.
    pub comm_register_memory: NccomCommRegisterMemoryFn,
    /// `nccom_comm_invalidate_range` (ABI 1.1; `None` in a 1.0 library).
    pub comm_invalidate_range: Option<NccomCommInvalidateRangeFn>,
    /// `nccom_comm_abort` (ABI 1.1; `None` in a 1.0 library).
    pub comm_abort: Option<NccomCommAbortFn>,
    /// `nccom_comm_protocol_stats` (ABI 1.2; `None` in a 1.0 or 1.1 library).
    pub comm_protocol_stats: Option<NccomCommProtocolStatsFn>,
    /// `nccom_trace_start` (ABI 1.3; `None` in an older library).
    pub trace_start: Option<NccomTraceStartFn>,
    /// `nccom_trace_stop` (ABI 1.3).
    pub trace_stop: Option<NccomTraceStopFn>,
    /// `nccom_trace_collect` (ABI 1.3).
    pub trace_collect: Option<NccomTraceCollectFn>,
    /// `nccom_comm_idle_available` (ABI 1.4; `None` in an older library: its comms have no
    /// idle wait).
    pub comm_idle_available: Option<NccomCommIdleAvailableFn>,
    /// `nccom_comm_idle_arm` (ABI 1.4).
    pub comm_idle_arm: Option<NccomCommIdleArmFn>,
    /// `nccom_comm_idle_sleep` (ABI 1.4).
    pub comm_idle_sleep: Option<NccomCommIdleSleepFn>,
    /// `nccom_comm_idle_kick` (ABI 1.4).
    pub comm_idle_kick: Option<NccomCommIdleKickFn>,
}

/// A progress-half library loaded with `dlopen`: its seam table and its init half.
///
/// Every function pointer it hands out ([`ProgressLib::seam`], [`ProgressLib::init`]) is valid
/// while this value lives (or forever after [`ProgressLib::leak`]).
pub struct ProgressLib {
    path: PathBuf,
    seam: SeamTable,
    init: InitTable,
    abi_version: u32,
    /// Dropped last: `dlclose` only after nothing can call through the tables.
    _lib: Library,
}

impl fmt::Debug for ProgressLib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProgressLib")
            .field("path", &self.path)
            .field("abi_version", &format_args!("{:#x}", self.abi_version))
            .finish_non_exhaustive()
    }
}

impl ProgressLib {
    /// Loads the library at `path` (`RTLD_NOW | RTLD_LOCAL`), resolves the three seam entry
    /// points and the init half, and checks the ABI major version.
    ///
    /// # Errors
    /// [`LoadError::Open`] when `dlopen` fails, [`LoadError::MissingSymbol`] naming the first
    /// entry point the library lacks (the seam's three first), [`LoadError::AbiMismatch`].
    ///
    /// # Examples
    /// ```no_run
    /// use proxy_runtime::loader::ProgressLib;
    /// let lib = ProgressLib::open("target/debug/libnccom_proxy.so")?;
    /// let seam = lib.seam(); // hand this to the network tasks
    /// # let _ = seam;
    /// # Ok::<(), proxy_runtime::loader::LoadError>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LoadError> {
        let path = path.as_ref().to_owned();
        // SAFETY: loading a library runs its initializers; a progress-half library has none
        // beyond what its toolchain emits. Loading an arbitrary library is the caller's
        // choice of `path`, as with any plugin loader.
        let lib = unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_LOCAL) }.map_err(|e| {
            LoadError::Open {
                path: path.clone(),
                message: e.to_string(),
            }
        })?;
        macro_rules! sym {
            ($name:literal, $ty:ty) => {{
                // SAFETY: the symbol is the C ABI entry point of that name, whose type is
                // `$ty` (proxy-ffi checks its exports against these typedefs at compile time).
                match unsafe { lib.get::<$ty>(concat!($name, "\0").as_bytes()) } {
                    Ok(s) => *s,
                    Err(e) => {
                        return Err(LoadError::MissingSymbol {
                            path,
                            symbol: $name,
                            message: e.to_string(),
                        })
                    }
                }
            }};
        }
        // An entry a newer minor of the ABI added: `None` when the library predates it.
        macro_rules! optional {
            ($name:literal, $ty:ty) => {{
                // SAFETY: as in `sym!`: the entry point of that name has type `$ty`.
                unsafe { lib.get::<$ty>(concat!($name, "\0").as_bytes()) }
                    .ok()
                    .map(|s| *s)
            }};
        }
        let start = sym!("neuronStartNetworkProxy", NeuronStartNetworkProxyFn);
        let progress = sym!("neuronNetworkProxyProgress", NeuronNetworkProxyProgressFn);
        let stop = sym!("neuronStopNetworkProxy", NeuronStopNetworkProxyFn);
        let init = InitTable {
            abi_version: sym!("nccom_abi_version", NccomAbiVersionFn),
            status_as_str: sym!("nrt_get_status_as_str", NrtGetStatusAsStrFn),
            register_device_callbacks: sym!(
                "nccom_register_device_callbacks",
                NccomRegisterDeviceCallbacksFn
            ),
            mem_group_create: sym!("nccom_mem_group_create", NccomMemGroupCreateFn),
            mem_group_destroy: sym!("nccom_mem_group_destroy", NccomMemGroupDestroyFn),
            comm_create: sym!("nccom_comm_create", NccomCommCreateFn),
            comm_destroy: sym!("nccom_comm_destroy", NccomCommDestroyFn),
            comm_register_memory: sym!("nccom_comm_register_memory", NccomCommRegisterMemoryFn),
            comm_invalidate_range: optional!(
                "nccom_comm_invalidate_range",
                NccomCommInvalidateRangeFn
            ),
            comm_abort: optional!("nccom_comm_abort", NccomCommAbortFn),
            comm_protocol_stats: optional!("nccom_comm_protocol_stats", NccomCommProtocolStatsFn),
            trace_start: optional!("nccom_trace_start", NccomTraceStartFn),
            trace_stop: optional!("nccom_trace_stop", NccomTraceStopFn),
            trace_collect: optional!("nccom_trace_collect", NccomTraceCollectFn),
            comm_idle_available: optional!("nccom_comm_idle_available", NccomCommIdleAvailableFn),
            comm_idle_arm: optional!("nccom_comm_idle_arm", NccomCommIdleArmFn),
            comm_idle_sleep: optional!("nccom_comm_idle_sleep", NccomCommIdleSleepFn),
            comm_idle_kick: optional!("nccom_comm_idle_kick", NccomCommIdleKickFn),
        };
        // SAFETY: the library's own version query, no arguments.
        let abi_version = unsafe { (init.abi_version)() };
        if abi_version >> 16 != NCCOM_PROXY_ABI_VERSION_MAJOR {
            return Err(LoadError::AbiMismatch {
                path,
                found: abi_version,
                expected: NCCOM_PROXY_ABI_VERSION,
            });
        }
        // The stepped stop (ABI 1.1, optional): a library without it gets `stop_step: None`,
        // and its network tasks stop synchronously (docs/design.md §3, "Stepped teardown").
        let stop_step = optional!("neuronStopNetworkProxyStep", NeuronStopNetworkProxyStepFn);
        // SAFETY: (all four transmutes) the typedefs differ from the seam table's only in the
        // pointee type of the comm pointer (`nccom_comm_t *` vs `void *`): same C ABI, same
        // arguments.
        let seam = unsafe {
            SeamTable {
                start: std::mem::transmute::<NeuronStartNetworkProxyFn, StartFn>(start),
                progress: std::mem::transmute::<NeuronNetworkProxyProgressFn, ProgressFn>(progress),
                stop: std::mem::transmute::<NeuronStopNetworkProxyFn, StopFn>(stop),
                stop_step: stop_step
                    .map(|f| std::mem::transmute::<NeuronStopNetworkProxyStepFn, StopStepFn>(f)),
            }
        };
        log::info!(
            "loaded progress half {} (C ABI {abi_version:#x})",
            path.display()
        );
        Ok(Self {
            path,
            seam,
            init,
            abi_version,
            _lib: lib,
        })
    }

    /// Keeps the library loaded for the rest of the process (the seed never unloads it) and
    /// returns a `'static` reference, so its seam table can go into long-lived tasks.
    pub fn leak(self) -> &'static Self {
        Box::leak(Box::new(self))
    }

    /// The path the library was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The library's `NCCOM_PROXY_ABI_VERSION`.
    pub fn abi_version(&self) -> u32 {
        self.abi_version
    }

    /// The seam table (the seed's neuron slots), valid while `self` lives. Comm handles for it
    /// come from [`ProgressLib::create_comm`] of the same library.
    pub fn seam(&self) -> SeamTable {
        self.seam
    }

    /// The init half's function pointers, valid while `self` lives.
    pub fn init(&self) -> &InitTable {
        &self.init
    }

    /// Starts the library's event trace (`nccom_trace_start`, ABI 1.3): `mask` classes, a
    /// ring of `capacity` records (0: the library's default).
    ///
    /// # Errors
    /// The library's status; `Failure` (logged) for a library that predates ABI 1.3.
    pub fn trace_start(&self, mask: u32, capacity: usize) -> Result<(), NrtStatus> {
        let f = self.trace_entry("nccom_trace_start", self.init.trace_start)?;
        // SAFETY: the library's entry point, plain values.
        NrtStatus::result_of_code(unsafe { f(mask, capacity) })
    }

    /// Stops the library's event trace (`nccom_trace_stop`, ABI 1.3).
    ///
    /// # Errors
    /// The library's status; `Failure` (logged) for a library that predates ABI 1.3.
    pub fn trace_stop(&self) -> Result<(), NrtStatus> {
        let f = self.trace_entry("nccom_trace_stop", self.init.trace_stop)?;
        // SAFETY: the library's entry point, no arguments.
        NrtStatus::result_of_code(unsafe { f() })
    }

    /// Every event the library recorded (`nccom_trace_collect`, ABI 1.3: asks for the count,
    /// then copies that many; records published in between are left for the next call) and
    /// the counts of the copy.
    ///
    /// # Errors
    /// The library's status; `Failure` (logged) for a library that predates ABI 1.3.
    pub fn trace_collect(&self) -> Result<(Vec<NccomTraceRecord>, NccomTraceCounts), NrtStatus> {
        let f = self.trace_entry("nccom_trace_collect", self.init.trace_collect)?;
        let mut counts = NccomTraceCounts::default();
        // SAFETY: `counts` is a writable local; `cap` 0 writes no record.
        NrtStatus::result_of_code(unsafe { f(ptr::null_mut(), 0, &mut counts) })?;
        let n = usize::try_from(counts.records).unwrap_or(0);
        let mut out = vec![NccomTraceRecord::default(); n];
        // SAFETY: `out` has `n` writable records; `counts` is a writable local.
        NrtStatus::result_of_code(unsafe { f(out.as_mut_ptr(), n, &mut counts) })?;
        out.truncate(usize::try_from(counts.written).unwrap_or(0));
        Ok((out, counts))
    }

    /// `entry` when the library has it, else `Failure`, logged with `name`.
    fn trace_entry<F>(&self, name: &str, entry: Option<F>) -> Result<F, NrtStatus> {
        entry.ok_or_else(|| {
            log::error!(
                "{}: no {name} (ABI {:#x} < 1.3)",
                self.path.display(),
                self.abi_version
            );
            NrtStatus::Failure
        })
    }

    /// The library's `nccom_comm_invalidate_range` as the driver's request carries it
    /// ([`proxy_core::driver::inval::InvalidateFn`], the comm pointer as `void *`), valid while
    /// `self` lives; `None` for a library that predates ABI 1.1.
    pub fn invalidate_fn(&self) -> Option<proxy_core::driver::inval::InvalidateFn> {
        self.init.comm_invalidate_range.map(|f| {
            // SAFETY: the typedefs differ only in the pointee type of the comm pointer
            // (`nccom_comm_t *` vs `void *`): same C ABI, same arguments (as the seam's).
            unsafe {
                std::mem::transmute::<
                    NccomCommInvalidateRangeFn,
                    proxy_core::driver::inval::InvalidateFn,
                >(f)
            }
        })
    }

    /// The library's name for a status value (`nrt_get_status_as_str`).
    pub fn status_str(&self, status: u32) -> String {
        // SAFETY: the function takes any value and returns a static NUL-terminated string.
        let p = unsafe { (self.init.status_as_str)(status) };
        if p.is_null() {
            return format!("NRT_STATUS({status})");
        }
        // SAFETY: non-null, static and NUL-terminated per the C ABI.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// Sets (`Some`) or clears (`None`) the library's process-wide device callbacks, used by
    /// comms created later without their own table.
    ///
    /// # Errors
    /// `Invalid` for a table without `nec_inc_semaphore`.
    pub fn register_device_callbacks(
        &self,
        callbacks: Option<&NccomDeviceCallbacks>,
    ) -> Result<(), NrtStatus> {
        let p = callbacks.map_or(ptr::null(), |c| c as *const NccomDeviceCallbacks);
        // SAFETY: `p` is NULL or a live table whose members have their declared types.
        NrtStatus::result_of_code(unsafe { (self.init.register_device_callbacks)(p) })
    }

    /// Creates an in-memory group of `nranks` ranks in this library.
    ///
    /// # Errors
    /// The library's status (`Invalid` for `nranks` out of range).
    pub fn mem_group(&self, nranks: u32) -> Result<LoadedMemGroup<'_>, NrtStatus> {
        let mut g: *mut NccomMemGroup = ptr::null_mut();
        // SAFETY: `g` is a writable local.
        NrtStatus::result_of_code(unsafe { (self.init.mem_group_create)(nranks, &mut g) })?;
        Ok(LoadedMemGroup {
            lib: self,
            handle: g,
        })
    }

    /// Creates a comm in this library (`nccom_comm_create`).
    ///
    /// # Errors
    /// The library's status (see `nccom_comm_create` in the header).
    ///
    /// # Safety
    /// `config` must be valid as the header says (its `callbacks` NULL or a live table; its
    /// `mem_group` a handle of this library). Unless `config.flags` asks for checked addresses,
    /// the comm trusts every address later given to `start` through it: each must stay valid as
    /// the header's memory contract says.
    pub unsafe fn create_comm(
        &self,
        config: &NccomCommConfig,
    ) -> Result<LoadedComm<'_>, NrtStatus> {
        let mut c: *mut NccomComm = ptr::null_mut();
        // SAFETY: per this function's contract; `c` is a writable local.
        NrtStatus::result_of_code(unsafe { (self.init.comm_create)(config, &mut c) })?;
        Ok(LoadedComm {
            lib: self,
            handle: c,
        })
    }
}

/// An in-memory group of a loaded library; destroyed on drop (its comms keep working).
#[derive(Debug)]
pub struct LoadedMemGroup<'a> {
    lib: &'a ProgressLib,
    handle: *mut NccomMemGroup,
}

impl LoadedMemGroup<'_> {
    /// The handle, for `NccomTransportDesc::mem_group`.
    pub fn as_ptr(&self) -> *mut NccomMemGroup {
        self.handle
    }
}

impl Drop for LoadedMemGroup<'_> {
    fn drop(&mut self) {
        // SAFETY: a handle this library handed out (checked by the library anyway).
        let s = unsafe { (self.lib.init.mem_group_destroy)(self.handle) };
        if let Err(e) = NrtStatus::result_of_code(s) {
            log::warn!("{}: nccom_mem_group_destroy: {e}", self.lib.path.display());
        }
    }
}

/// A comm of a loaded library; destroyed on drop.
#[derive(Debug)]
pub struct LoadedComm<'a> {
    lib: &'a ProgressLib,
    handle: *mut NccomComm,
}

// SAFETY: the C ABI lets any thread call a comm's entry points as long as one thread at a time
// does (docs/design.md §8); a `LoadedComm` is only used through `&mut` or by value, so moving it
// to another thread keeps that rule. The library handle it borrows is shared read-only.
unsafe impl Send for LoadedComm<'_> {}

impl LoadedComm<'_> {
    /// The handle as the seam takes it (`comm` of [`SeamTable`] and the trampolines).
    pub fn as_ptr(&self) -> *mut c_void {
        self.handle.cast()
    }

    /// Registers `[base, base + len)` (for comms created with `NCCOM_COMM_CHECK_ADDRESSES`).
    ///
    /// # Errors
    /// The library's status (`Invalid` for a NULL base or an empty range).
    ///
    /// # Safety
    /// The range must stay valid until the comm is destroyed; host words in it are accessed only
    /// atomically.
    pub unsafe fn register_memory(&self, base: *const u8, len: usize) -> Result<(), NrtStatus> {
        // SAFETY: per this function's contract.
        NrtStatus::result_of_code(unsafe {
            (self.lib.init.comm_register_memory)(self.handle, base.cast(), len)
        })
    }

    /// Drops the transport's cached registrations of `[addr, addr + len)`: call it before
    /// freeing or unmapping a buffer that was posted (docs/design.md §5, "Memory registration").
    /// Calls the library from this thread: only while no task of the comm is on a proxy queue
    /// (else the library answers `Failure` while the driver is inside the comm); a joined comm
    /// asks its queue (`SlotHandle::invalidate_until` with [`ProgressLib::invalidate_fn`]).
    ///
    /// # Errors
    /// The library's status (`Invalid` for a NULL `addr`, a zero `len` or a wrapping range);
    /// `Failure` (logged) when the library predates ABI 1.1 and has no such entry.
    pub fn invalidate_range(&self, addr: *const u8, len: usize) -> Result<(), NrtStatus> {
        let Some(f) = self.lib.init.comm_invalidate_range else {
            log::error!(
                "{}: no nccom_comm_invalidate_range (ABI 1.0)",
                self.lib.path.display()
            );
            return Err(NrtStatus::Failure);
        };
        // SAFETY: a live handle of this library; the library only compares the range.
        NrtStatus::result_of_code(unsafe { f(self.handle, addr.cast(), len) })
    }

    /// Requests an abort of the comm (any thread, any time; docs/design.md §9, "Abort"): the
    /// driving thread's next start or progress on it answers `NRT_CLOSED`.
    ///
    /// # Errors
    /// The library's status; `Failure` (logged) when the library predates ABI 1.1 and has no
    /// such entry.
    pub fn abort(&self) -> Result<(), NrtStatus> {
        let Some(f) = self.lib.init.comm_abort else {
            log::error!("{}: no nccom_comm_abort (ABI 1.0)", self.lib.path.display());
            return Err(NrtStatus::Failure);
        };
        // SAFETY: a live handle of this library (abort may run concurrently with other calls).
        NrtStatus::result_of_code(unsafe { f(self.handle) })
    }

    /// The comm's protocol counters (ABI 1.2; docs/design.md §5, "Protocol counters"),
    /// cumulative since the comm was created. Call it from the thread that drives the comm, or
    /// once nothing drives it (a call while another thread is inside the library on this comm
    /// is refused with `Failure`). A library with a smaller `nccom_protocol_stats_t` than this
    /// crate's fills only its fields (the rest read 0; `size` says how many bytes it wrote).
    ///
    /// # Errors
    /// The library's status; `Failure` (logged) when the library predates ABI 1.2 and has no
    /// such entry.
    pub fn protocol_stats(&self) -> Result<ProtocolStats, NrtStatus> {
        let Some(f) = self.lib.init.comm_protocol_stats else {
            log::error!(
                "{}: no nccom_comm_protocol_stats (ABI {:#x} < 1.2)",
                self.lib.path.display(),
                self.lib.abi_version
            );
            return Err(NrtStatus::Failure);
        };
        let mut out = NccomProtocolStats {
            size: std::mem::size_of::<NccomProtocolStats>() as u32,
            ..NccomProtocolStats::default()
        };
        // SAFETY: a live handle of this library; `out` is a writable, aligned local of `size`
        // bytes.
        NrtStatus::result_of_code(unsafe { f(self.handle, &mut out) })?;
        Ok(out.into())
    }

    /// Destroys the comm now, returning the library's status.
    ///
    /// # Errors
    /// The library's status.
    pub fn destroy(self) -> Result<(), NrtStatus> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: a handle this library handed out, destroyed once (no Drop runs after).
        NrtStatus::result_of_code(unsafe { (me.lib.init.comm_destroy)(me.handle) })
    }
}

impl Drop for LoadedComm<'_> {
    fn drop(&mut self) {
        // SAFETY: a handle this library handed out (checked by the library anyway).
        let s = unsafe { (self.lib.init.comm_destroy)(self.handle) };
        if let Err(e) = NrtStatus::result_of_code(s) {
            log::warn!("{}: nccom_comm_destroy: {e}", self.lib.path.display());
        }
    }
}

/// Trampoline: files one block's FIFOs through `seam` (the seed's `ncclStartNetworkProxy`,
/// called by the network task's INIT once per block and stream).
///
/// # Errors
/// The progress half's status.
///
/// # Safety
/// `comm` must be a live comm of the library `seam` came from (or, for the in-process table, a
/// live `*mut Comm`), used by no other thread during the call.
///
/// Seed: `ncclStartNetworkProxy` (libnrt trampoline → `neuronStartNetworkProxy`), §3 B1.
#[allow(non_snake_case)]
pub unsafe fn ncclStartNetworkProxy(
    seam: &SeamTable,
    comm: *mut c_void,
    stream: u32,
    bb: u32,
    ops: &[NetOpInfo],
    src: &[NetSrcAddr],
    dst: &[NetDestAddr],
) -> Result<(), NrtStatus> {
    // SAFETY: per this function's contract.
    unsafe { seam.start(comm, stream, bb, ops, src, dst) }
}

/// Trampoline: one progress tick through `seam`, with `bool` out-parameters as the seed's
/// driver side has them; the results are AND-ed into `*idle` / `*done` (seed both with `true`
/// before a round of calls).
///
/// # Errors
/// The progress half's status (`NetworkProxyFailure` once the comm has failed).
///
/// # Safety
/// As [`ncclStartNetworkProxy`].
///
/// Seed: `ncclNetworkProxyProgress` (nrt:0x1c1aa0 → `neuronNetworkProxyProgress`), §3 B2.
#[allow(non_snake_case)]
pub unsafe fn ncclNetworkProxyProgress(
    seam: &SeamTable,
    comm: *mut c_void,
    stream: u32,
    bb: u32,
    idle: &mut bool,
    done: &mut bool,
) -> Result<(), NrtStatus> {
    // SAFETY: per this function's contract.
    unsafe { seam.progress(comm, stream, bb, idle, done) }
}

/// Trampoline: stream teardown through `seam`.
///
/// # Errors
/// The progress half's status.
///
/// # Safety
/// As [`ncclStartNetworkProxy`].
///
/// Seed: `ncclStopNetworkProxy` (libnrt trampoline → `neuronStopNetworkProxy`), §3 B3.
#[allow(non_snake_case)]
pub unsafe fn ncclStopNetworkProxy(
    seam: &SeamTable,
    comm: *mut c_void,
    stream: u32,
) -> Result<(), NrtStatus> {
    // SAFETY: per this function's contract.
    unsafe { seam.stop(comm, stream) }
}

// The loader's tests run against the real `libnccom_proxy.so`: they are `proxy-ffi`'s
// `tests/loader.rs` (so that nothing has a dev-dependency cycle through `proxy-ffi`).
