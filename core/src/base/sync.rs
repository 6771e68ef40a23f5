//! The one place in `proxy-core` that names atomics, fences, `UnsafeCell`, `Arc` and the
//! spin hint.
//!
//! Under `--cfg loom` every name resolves to loom's model-checked counterpart, so the rings, the
//! slot states, the wake protocol, the registry refcount and the in-memory transport's
//! mailboxes are checked by the models in `loom-tests/` exactly as they ship. Nothing else in
//! the crate may import atomics, `Arc` or `UnsafeCell` from `core`, `alloc`, `std` or `loom`
//! (the test command's `facade` step greps `core/src` for them and fails). Two names here are not
//! loom's under `--cfg loom`: the plant selector's storage (`NonLoomPlantAtomicU8`, for
//! `crate::plant` only) and the dump's diagnostic words (`DiagAtomicU32`).
//!
//! No 64-bit atomics: `thumbv7em-none-eabihf` has 8/16/32-bit atomics with CAS only, so every
//! state word, index and counter shared between threads is a `u32` or `usize`.
//!
//! The one lock, [`Mutex`], is for cold paths only (the registry's group table); the hot path
//! (submit, tick, park/wake) is lock-free.
//!
//! Loom models `SeqCst` loads and stores as `AcqRel` (loom#108); protocols that need a
//! store→load order (the park/wake Dekker pattern) use an explicit [`fence`] with `SeqCst`,
//! which loom does model.

#[cfg(not(loom))]
pub use core::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU8, AtomicUsize, Ordering,
};

/// **Not** loom's atomics, under `--cfg loom` too: the storage of the process-wide plant
/// selector ([`crate::plant`]) and nothing else. The selector is a static (loom atomics cannot
/// be) and must add no branch points to a model; it is set once before a model runs.
#[cfg(any(loom, feature = "plants"))]
pub(crate) use core::sync::atomic::{
    AtomicU8 as NonLoomPlantAtomicU8, Ordering as NonLoomPlantOrdering,
};

/// **Not** loom's atomics, under `--cfg loom` too: words that only describe where a thread is,
/// for a state dump (the driving thread's activity, `driver::dump`), read `Relaxed` by another
/// thread and handing nothing over. Written on hot paths, so they must add no branch points to
/// the models (which do not check them).
pub use core::sync::atomic::{AtomicU32 as DiagAtomicU32, Ordering as DiagOrdering};

/// **Not** loom's atomics, under `--cfg loom` too: the process-wide event-trace switch
/// ([`crate::base::trace`]: the installed tracer's pointer, a static, and its on/off flag). Read
/// on hot paths, so they must add no branch points to the models; a tracer is installed once,
/// before the threads that record into it start, and never freed. The trace ring itself (the
/// records handed from writers to the drain) uses the loom-checked names above. Also the "wired"
/// flag of a hook ([`crate::base::wired`]: a slot's poller, a queue's idle wait): wired before
/// the threads that use it run, read at every tick; the hook itself is reached through a lock.
pub use core::sync::atomic::{
    AtomicBool as SwitchAtomicBool, AtomicPtr as SwitchAtomicPtr, AtomicU32 as SwitchAtomicU32,
    Ordering as SwitchOrdering,
};

#[cfg(not(loom))]
pub use alloc::sync::Arc;
#[cfg(loom)]
pub use loom::sync::Arc;

/// A reference count that loom does not model: `alloc::sync::Arc` under every cfg. For objects
/// that are shared read-only for a comm's life (its device callbacks and clock, `Arc<dyn _>`
/// from the platform): their counts are no handoff, and loom's `Arc` cannot hold a `dyn` value.
/// Everything whose count *is* a handoff (ring ends, mailboxes, slots) uses [`Arc`].
pub use alloc::sync::Arc as PlainArc;

/// A lock for cold paths (the registry's group table): `spin`'s test-and-set mutex (no_std).
/// Lock it with `try_lock` in a loop that relaxes between attempts (a yield on Linux), or with
/// `lock` to spin.
#[cfg(not(loom))]
pub type Mutex<T> = spin::Mutex<T>;
/// A lock for cold paths (the registry's group table): loom's model-checked `Mutex` under
/// `--cfg loom`, because loom cannot schedule a spin loop under its preemption bound (a spinning
/// waiter would read as a livelock that is not there). Its `lock` blocks and returns a
/// `LockResult`.
#[cfg(loom)]
pub type Mutex<T> = loom::sync::Mutex<T>;

/// Hint to the CPU that the caller is in a spin-wait loop.
///
/// Under loom this is `loom::thread::yield_now`, so a spinning model thread lets the others run
/// instead of exhausting the model's branch budget.
#[inline]
pub fn spin_loop() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// An `UnsafeCell` with loom's closure API (`with` / `with_mut`), so loom can track every
/// access to data that is handed between threads.
///
/// Seed: none (infrastructure; the shape follows tokio's and crossbeam's loom facades).
#[derive(Debug)]
pub struct UnsafeCell<T>(
    #[cfg(not(loom))] core::cell::UnsafeCell<T>,
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
);

impl<T> UnsafeCell<T> {
    /// Wraps `value`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        Self(core::cell::UnsafeCell::new(value))
    }

    /// Wraps `value`.
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        Self(loom::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a shared raw pointer to the contents.
    ///
    /// The caller's protocol must guarantee no concurrent `with_mut` on the same cell while `f`
    /// dereferences the pointer; under loom a violation is reported as a data race.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        #[cfg(not(loom))]
        {
            f(self.0.get())
        }
        #[cfg(loom)]
        {
            self.0.with(f)
        }
    }

    /// Runs `f` with a unique raw pointer to the contents.
    ///
    /// The caller's protocol must guarantee that no other access to the cell overlaps `f`; under
    /// loom a violation is reported as a data race.
    #[inline]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(not(loom))]
        {
            f(self.0.get())
        }
        #[cfg(loom)]
        {
            self.0.with_mut(f)
        }
    }
}

/// Pads and aligns a value to a cache line (128 bytes on x86_64 for the adjacent-line
/// prefetcher), so the producer's and consumer's hot indices never share a line.
pub use crossbeam_utils::CachePadded;
