//! The `nec_*` reverse edge across the binary boundary: a comm's [`DeviceCallbacks`] made of C
//! function pointers, the process-wide registration, and the `dlsym(RTLD_DEFAULT, ...)` fallback.
//!
//! Seed: `nec_inc_semaphore` (the libnccom → libnrt reverse import, resolved at load), §1/§5.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use proxy_abi::{NccomDeviceCallbacks, NccomHostWord};
use proxy_core::base::status::NrtStatus;
use proxy_core::progress::device::DeviceCallbacks;

type IncFn = unsafe extern "C" fn(addr: *mut NccomHostWord, val: u32);
type LoadFn = unsafe extern "C" fn(addr: *mut NccomHostWord) -> u32;
type StoreFn = unsafe extern "C" fn(addr: *mut NccomHostWord, val: u32);

/// A comm's device callbacks, resolved once at comm creation.
#[derive(Clone, Copy, Debug)]
pub struct CDevice {
    inc: IncFn,
    load: Option<LoadFn>,
    store: Option<StoreFn>,
}

impl CDevice {
    /// The callbacks of a C table, or `None` when it has no `nec_inc_semaphore`.
    pub fn from_table(t: &NccomDeviceCallbacks) -> Option<Self> {
        Some(Self {
            inc: t.nec_inc_semaphore?,
            load: t.nec_load_host_index,
            store: t.nec_store_host_index,
        })
    }

    fn word<'a>(addr: u64) -> &'a AtomicU32 {
        // SAFETY: `Comm::start` accepted `addr` only if it is non-null and 4-byte aligned, and
        // the C contract of `nccom_comm_create` (the header's memory contract) makes the caller
        // vouch that it is a live `uint32_t` accessed only atomically while the comm uses it.
        unsafe { AtomicU32::from_ptr(addr as usize as *mut u32) }
    }
}

impl DeviceCallbacks for CDevice {
    fn inc_semaphore(&self, addr: u64, val: u32) {
        // SAFETY: the runtime's own `nec_inc_semaphore`, called with an address it handed to
        // `neuronStartNetworkProxy` as a semaphore register (checked non-null and aligned).
        unsafe { (self.inc)(addr as usize as *mut NccomHostWord, val) }
    }

    fn load_host_index(&self, addr: u64) -> u32 {
        match self.load {
            // SAFETY: as `inc_semaphore`, for a host-index address.
            Some(f) => unsafe { f(addr as usize as *mut NccomHostWord) },
            None => Self::word(addr).load(Ordering::Acquire),
        }
    }

    fn store_host_index(&self, addr: u64, val: u32) {
        match self.store {
            // SAFETY: as `inc_semaphore`, for a host-index address.
            Some(f) => unsafe { f(addr as usize as *mut NccomHostWord, val) },
            None => Self::word(addr).store(val, Ordering::Release),
        }
    }
}

/// The table set with `nccom_register_device_callbacks` (not on any hot path).
static REGISTERED: Mutex<Option<CDevice>> = Mutex::new(None);

/// Sets (`Some`) or clears (`None`) the process-wide callbacks.
pub fn register(dev: Option<CDevice>) {
    *REGISTERED.lock().unwrap_or_else(|e| e.into_inner()) = dev;
}

fn registered() -> Option<CDevice> {
    *REGISTERED.lock().unwrap_or_else(|e| e.into_inner())
}

/// `nec_inc_semaphore` as exported by the executable or any library loaded with `RTLD_GLOBAL`.
fn from_dlsym() -> Option<CDevice> {
    // SAFETY: `dlsym` with a NUL-terminated name and the RTLD_DEFAULT pseudo-handle.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"nec_inc_semaphore".as_ptr()) };
    if sym.is_null() {
        return None;
    }
    // SAFETY: a symbol named `nec_inc_semaphore` is, by the seed's ABI, the function
    // `void nec_inc_semaphore(volatile uint32_t *addr, uint32_t val)`.
    let inc = unsafe { std::mem::transmute::<*mut libc::c_void, IncFn>(sym) };
    Some(CDevice {
        inc,
        load: None,
        store: None,
    })
}

/// The callbacks of a new comm: its own table, else the registered one, else `dlsym`.
///
/// # Errors
/// `Invalid` for a table without `nec_inc_semaphore`; `Uninitialized` when none of the three
/// sources has one.
pub fn resolve(own: Option<&NccomDeviceCallbacks>) -> Result<CDevice, NrtStatus> {
    if let Some(t) = own {
        return CDevice::from_table(t).ok_or_else(|| {
            log::error!("nccom_comm_create: config.callbacks has a NULL nec_inc_semaphore");
            NrtStatus::Invalid
        });
    }
    if let Some(d) = registered() {
        return Ok(d);
    }
    if let Some(d) = from_dlsym() {
        log::debug!("nccom_comm_create: using nec_inc_semaphore found with dlsym(RTLD_DEFAULT)");
        return Ok(d);
    }
    log::error!(
        "nccom_comm_create: no device callbacks: config.callbacks is NULL, none registered with \
         nccom_register_device_callbacks, and dlsym(RTLD_DEFAULT, \"nec_inc_semaphore\") found \
         nothing (an executable must export it, e.g. link with -rdynamic)"
    );
    Err(NrtStatus::Uninitialized)
}
