//! Twin of `DirectHostWords::inc_semaphore` with the bug: the increment is `Relaxed`, so the
//! payload written before it is not published to a device that reads the count with acquire.

use proxy_core::sync::{AtomicU32, Ordering};

use crate::harness::SemaphoreEdge;

/// The reverse edge with a `Relaxed` increment (PLANTED BUG: should be `Release`).
pub struct RelaxedSemaphore;

impl SemaphoreEdge for RelaxedSemaphore {
    fn inc(&self, word: &AtomicU32, val: u32) {
        word.fetch_add(val, Ordering::Relaxed); // BUG: Release needed
    }
}
