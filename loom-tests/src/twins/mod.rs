//! Planted-bug twins: copies of the shipping handoffs with one deliberate bug each. Every model
//! in `tests/` runs against the real handoff (must pass) and against its twin (loom must report
//! a failure). They live here, not behind a cargo feature, because features unify across a
//! build and would swap the real code out of every model.

pub mod handoff;
pub mod ring;
pub mod semaphore;
