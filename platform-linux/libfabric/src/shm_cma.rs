//! shm's large messages: whether CMA (`process_vm_readv`) is available, detected once per process
//! at the first open, and the provider settings that keep shm's SAR protocol out of the engine's
//! way (docs/design.md §5, "shm without CMA").
//!
//! libfabric 1.17's shm sends a message larger than its inject size (4096 B) with CMA when the
//! peer can be reached with `process_vm_writev` (`smr_cma_check`, probed per peer when the AV
//! maps it) and `FI_SHM_DISABLE_CMA` is not set (`smr_ep_ctrl`); otherwise with SAR (up to
//! `FI_SHM_SAR_THRESHOLD`, default: no limit) or mmap (above it) (`smr_select_proto`). SAR
//! serializes every send to a peer behind one unanswered SAR send (`smr_generic_sendmsg` answers
//! `-FI_EAGAIN` while the peer's `sar_status` is set), which deadlocks the engine's plans; mmap
//! does not: like CMA it only holds a response slot until the receiver has copied the message.
//! So, before the first `fi_getinfo` of the process, the transport sets
//! `FI_SHM_SAR_THRESHOLD=4096` (unless it is set already), which makes every shm send above the
//! inject size that cannot use CMA use mmap; and it names its shm endpoints without `/` (mmap's
//! per-message file is `<endpoint name>_<id>` under /dev/shm, and the provider's default name
//! `fi_shm://...` makes `shm_open` fail with `EINVAL`).

use std::sync::OnceLock;

/// The `FI_SHM_SAR_THRESHOLD` the transport sets: shm's inject size (`SMR_INJECT_SIZE`), so that
/// no send takes the SAR protocol (sends up to it are inline or inject, larger ones CMA or mmap).
pub const SAR_THRESHOLD: usize = 4096;

/// How libfabric's shm moves a message larger than its inject size, as this process sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShmLargeMessages {
    /// CMA is available: the receiver reads the sender's buffer with `process_vm_readv`.
    pub cma: bool,
    /// Why CMA is or is not available (the variable, the probe's errno, the Yama setting).
    pub cma_reason: String,
    /// `FI_SHM_SAR_THRESHOLD` as the provider reads it (`None`: not set when the process first
    /// opened a transport, and not set by it either — only the case when the probe ran from a
    /// test, never after [`prepare_provider_env`]).
    pub sar_threshold: Option<usize>,
}

impl ShmLargeMessages {
    /// The protocol shm uses for sends above the inject size: `"cma"`, `"mmap"` or `"sar"`.
    pub fn path(&self) -> &'static str {
        if self.cma {
            "cma"
        } else if self.sar_threshold.is_some_and(|t| t <= SAR_THRESHOLD) {
            "mmap"
        } else {
            "sar"
        }
    }

    /// One line for logs and headers, e.g. `mmap (CMA unavailable: FI_SHM_DISABLE_CMA=1)`.
    pub fn describe(&self) -> String {
        let what = if self.cma { "available" } else { "unavailable" };
        format!("{} (CMA {what}: {})", self.path(), self.cma_reason)
    }
}

/// libfabric's boolean parameter syntax (`fi_parse_bool`): `Some(true)` for `1`, `true`, `yes`,
/// `on`; `Some(false)` for `0`, `false`, `no`, `off` (case-insensitive); `None` otherwise.
pub fn parse_fi_bool(value: &str) -> Option<bool> {
    let v = value.trim();
    if v == "1"
        || ["true", "yes", "on"]
            .iter()
            .any(|t| v.eq_ignore_ascii_case(t))
    {
        Some(true)
    } else if v == "0"
        || ["false", "no", "off"]
            .iter()
            .any(|t| v.eq_ignore_ascii_case(t))
    {
        Some(false)
    } else {
        None
    }
}

/// Reads one word of this process through `process_vm_readv` (the call CMA uses): `Err(errno)`
/// when the kernel refuses it (a seccomp filter, a kernel without cross-memory attach).
pub fn probe_process_vm_readv() -> Result<(), i32> {
    let source: u64 = 0x5afe_c0de_0000_0001;
    let mut target: u64 = 0;
    let local = libc::iovec {
        iov_base: (&raw mut target).cast(),
        iov_len: size_of::<u64>(),
    };
    let remote = libc::iovec {
        iov_base: (&raw const source).cast_mut().cast(),
        iov_len: size_of::<u64>(),
    };
    // SAFETY: both iovecs describe live, properly sized locals of this frame; the kernel writes
    // only `target` (8 bytes) and reads only `source`.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    if n as usize != size_of::<u64>() || target != source {
        return Err(libc::EIO);
    }
    Ok(())
}

/// `kernel.yama.ptrace_scope` (`None` without Yama).
fn ptrace_scope() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Whether this process has `CAP_SYS_PTRACE` in its effective set (`/proc/self/status`).
fn has_cap_sys_ptrace() -> bool {
    const CAP_SYS_PTRACE: u32 = 19;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1u64 << CAP_SYS_PTRACE) != 0)
}

/// Whether CMA is available between this process and the other rank processes of the host, and
/// why: `FI_SHM_DISABLE_CMA` (what the provider reads), else a `process_vm_readv` of this
/// process, else Yama's `ptrace_scope` (from 1 on, the kernel refuses `process_vm_readv` between
/// sibling processes without `CAP_SYS_PTRACE`, and libfabric's per-peer probe fails with it).
pub fn detect_cma() -> (bool, String) {
    if let Ok(v) = std::env::var("FI_SHM_DISABLE_CMA") {
        if parse_fi_bool(&v) == Some(true) {
            return (false, format!("FI_SHM_DISABLE_CMA={v}"));
        }
    }
    if let Err(errno) = probe_process_vm_readv() {
        return (
            false,
            format!(
                "process_vm_readv on this process failed: {}",
                std::io::Error::from_raw_os_error(errno)
            ),
        );
    }
    match ptrace_scope() {
        Some(s) if s >= 3 => (
            false,
            format!("kernel.yama.ptrace_scope={s}: process_vm_readv between processes is refused"),
        ),
        Some(s) if s >= 1 && !has_cap_sys_ptrace() => (
            false,
            format!(
                "kernel.yama.ptrace_scope={s} without CAP_SYS_PTRACE: process_vm_readv between \
                 rank processes is refused"
            ),
        ),
        Some(s) => (
            true,
            format!("process_vm_readv works (kernel.yama.ptrace_scope={s})"),
        ),
        None => (true, "process_vm_readv works (no Yama)".to_owned()),
    }
}

/// `FI_SHM_SAR_THRESHOLD` as set in the environment (`None`: unset or not a number).
fn sar_threshold_env() -> Option<usize> {
    std::env::var("FI_SHM_SAR_THRESHOLD")
        .ok()
        .and_then(|v| v.trim().parse().ok())
}

/// Detects CMA and reads the SAR threshold now, without touching the environment (tests; the
/// transport uses [`prepare_provider_env`]).
pub fn detect() -> ShmLargeMessages {
    let (cma, cma_reason) = detect_cma();
    ShmLargeMessages {
        cma,
        cma_reason,
        sar_threshold: sar_threshold_env(),
    }
}

/// The process's answer, from the first [`prepare_provider_env`].
static PREPARED: OnceLock<ShmLargeMessages> = OnceLock::new();

/// Once per process, before the transport's first `fi_getinfo` (libfabric reads its provider
/// parameters when it initializes, at the process's first `fi_getinfo`): detects CMA, sets
/// `FI_SHM_SAR_THRESHOLD` to [`SAR_THRESHOLD`] unless the variable is set already (a larger
/// value set by the user is kept and logged at WARN: it brings SAR back). Returns the answer (the
/// same on every call); the transport logs it at INFO when it opens a shm endpoint.
pub fn prepare_provider_env() -> &'static ShmLargeMessages {
    PREPARED.get_or_init(|| {
        if std::env::var_os("FI_SHM_SAR_THRESHOLD").is_none() {
            // Before any fi_getinfo of this crate (this runs first, under the OnceLock), so
            // libfabric has not read its parameters yet unless another library of the process
            // initialized it earlier (then the value is ignored, and shm without CMA keeps SAR).
            // Rust's own environment accesses are serialized with this one; libfabric reads the
            // variable only from inside fi_getinfo, which this crate calls after this returns.
            std::env::set_var("FI_SHM_SAR_THRESHOLD", SAR_THRESHOLD.to_string());
        }
        let d = detect();
        if d.sar_threshold.is_none_or(|t| t > SAR_THRESHOLD) && !d.cma {
            log::warn!(
                "libfabric/shm: FI_SHM_SAR_THRESHOLD={} keeps shm's SAR protocol for sends up to \
                 it while CMA is unavailable: SAR serializes every send to a peer behind one \
                 unanswered SAR send, and the engine's plans can deadlock (docs/design.md §5); \
                 unset it or set it to at most {SAR_THRESHOLD}",
                std::env::var("FI_SHM_SAR_THRESHOLD").unwrap_or_default()
            );
        }
        log::debug!(
            "libfabric/shm: large messages (over 4096 B): {}; FI_SHM_SAR_THRESHOLD={}",
            d.describe(),
            d.sar_threshold
                .map_or_else(|| "unset".to_owned(), |t| t.to_string())
        );
        d
    })
}

/// The answer of [`prepare_provider_env`], once a transport was opened in this process.
pub fn shm_large_messages() -> Option<&'static ShmLargeMessages> {
    PREPARED.get()
}

/// The name a shm endpoint of this process gets before `fi_enable`: unique on the host (pid, uid
/// and a per-process sequence number, like the provider's own `fi_shm://<pid>:<uid>:<idx>`), and
/// without `/`, so that mmap's per-message files (`<name>_<msg id>`) can be created.
pub(crate) fn endpoint_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    // SAFETY: getpid and getuid cannot fail and touch no memory.
    let (pid, uid) = unsafe { (libc::getpid(), libc::getuid()) };
    format!("pxyshm_{pid}_{uid}_{seq}")
}

#[cfg(test)]
mod tests;

/// Removes what the processes `pids` left in `/dev/shm` when they were killed (or closed with
/// requests in flight): libfabric shm's regions (`<pid>:...`), the transport's named shm
/// endpoints and their per-message files (`pxyshm_<pid>_...`), and the process's live mark
/// (`pxyshm_<pid>_live`, `exits/mark.rs`). For a launcher or test harness that ended those
/// processes; never call it for a process that still runs (its peers could no longer map its
/// names). Returns how many names were removed; a name that cannot be removed is skipped.
pub fn remove_shm_names_of(pids: &[u32]) -> usize {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return 0;
    };
    let mut removed = 0;
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if pids.iter().any(|p| {
            name.starts_with(&format!("{p}:")) || name.starts_with(&format!("pxyshm_{p}_"))
        }) && std::fs::remove_file(e.path()).is_ok()
        {
            removed += 1;
        }
    }
    removed
}
