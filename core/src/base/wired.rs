//! A hook wired into a structure after the thing it points at exists, read on hot paths:
//! [`Wired`]. A queue slot's poller (`driver::poller::PollerSlot`) and a queue's idle wait
//! (`driver::idle::IdleSlot`) are ones.
//!
//! Unwired, a look costs one load of a flag; wired, a reader lock (`spin::RwLock`: two RMWs).
//! [`Wired::wire`] takes the writer lock for one pointer swap. The flag is a switch word, not a
//! loom one ([`crate::base::sync`]'s `SwitchAtomicBool`): a hook is wired before the threads
//! that use it run, and a look must add no branch point to the models.

use crate::base::sync::{PlainArc, SwitchAtomicBool as AtomicBool, SwitchOrdering as Ordering};

/// A hook of type `T` (usually a `dyn Trait`), `None` until wired.
pub struct Wired<T: ?Sized> {
    /// Set while a hook is wired (written under the writer lock).
    wired: AtomicBool,
    hook: spin::RwLock<Option<PlainArc<T>>>,
}

impl<T: ?Sized> Default for Wired<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: ?Sized> core::fmt::Debug for Wired<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Wired")
            .field("wired", &self.is_wired())
            .finish()
    }
}

impl<T: ?Sized> Wired<T> {
    /// Nothing wired.
    pub const fn new() -> Self {
        Self {
            wired: AtomicBool::new(false),
            hook: spin::RwLock::new(None),
        }
    }

    /// Wires `hook` (`None` unwires), returning the one wired before.
    pub fn wire(&self, hook: Option<PlainArc<T>>) -> Option<PlainArc<T>> {
        let mut slot = self.hook.write();
        self.wired.store(hook.is_some(), Ordering::Release);
        core::mem::replace(&mut *slot, hook)
    }

    /// `true` while a hook is wired.
    #[inline]
    pub fn is_wired(&self) -> bool {
        self.wired.load(Ordering::Acquire)
    }

    /// `f` on the wired hook (under the reader lock), `None` when nothing is wired.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        if !self.is_wired() {
            return None;
        }
        self.hook.read().as_deref().map(f)
    }
}
