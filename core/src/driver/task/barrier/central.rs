//! The centralized counter barrier's release (Mellor-Crummey and Scott, "Algorithms for
//! Scalable Synchronization on Shared-Memory Multiprocessors", ACM TOCS 1991, §3.3, the
//! central barrier): every member adds one to a shared arrival count; the member whose add
//! completes a generation (the count reaches `generation × members`) is the last to arrive and
//! releases the generation itself, at once. No member waits for a designated one to notice.
//!
//! The words live wherever the members share memory (the host barrier between processes keeps
//! them in its shared-memory region, `proxy-bootstrap`'s `host_barrier.rs`); this module is the
//! protocol on them, so that loom can model it with the code the product runs (model 18,
//! `loom-tests/tests/central_barrier.rs`).
//!
//! ```text
//!   member i:  (its work)  ──►  count.fetch_add(1, AcqRel)  ─┬─ not last: wait for released ≥ g
//!                                                            └─ last (count = g·members):
//!                                                               released.store(g, Release)
//!   waiter:    released.load(Acquire) ≥ g  ──►  every member's work before its add is visible
//! ```
//!
//! Why the orderings: the adds form one release sequence on `count`, so the last member's
//! acquire add synchronizes with every earlier member's release add; its release store of
//! `released` then carries all of it to every waiter's acquire load. A relaxed add breaks the
//! first link (plant `CentralCountRelaxed`: a waiter released by another member's add may not
//! see an earlier member's work).
//!
//! Generations count from 1 and wrap; the count wraps with them (`u32` arithmetic), which is
//! exact because no member arrives at generation `g + 1` before `g` is released (each member's
//! next arrival follows its own wait for the release), so the count never runs more than one
//! generation ahead of the last release.

use crate::base::sync::{AtomicU32, Ordering};

/// Adds this member's arrival at `generation` (1, 2, ..., wrapping) to `count`, and, when it is
/// the last of `members` to arrive, releases the generation (`released = generation`).
/// Returns `true` when this call released it.
///
/// Every member must call it exactly once per generation, in order, and not before the
/// previous generation was released (see the module docs). `members` ≥ 1.
pub fn arrive(count: &AtomicU32, released: &AtomicU32, generation: u32, members: u32) -> bool {
    // AcqRel: Release publishes this member's work to whoever completes the generation (the
    // adds form one release sequence); Acquire, for the last member, takes everyone's.
    // PLANT: CentralCountRelaxed adds with Relaxed: the last member's release of `released`
    // then carries only its own work, not the earlier members'.
    let before = plant!(
        CentralCountRelaxed,
        count.fetch_add(1, Ordering::Relaxed),
        count.fetch_add(1, Ordering::AcqRel)
    );
    let last = before.wrapping_add(1) == generation.wrapping_mul(members);
    if last {
        // Release: pairs with every waiter's acquire load in `is_released`.
        released.store(generation, Ordering::Release);
    }
    last
}

/// `generation` (or a later one) has been released: every member's work before its arrival
/// at `generation` is visible to the caller. Generations compare wrapping.
pub fn is_released(released: &AtomicU32, generation: u32) -> bool {
    // Acquire: pairs with the releasing member's store.
    released.load(Ordering::Acquire).wrapping_sub(generation) as i32 >= 0
}

#[cfg(test)]
mod tests;
