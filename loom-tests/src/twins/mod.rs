//! Planted-bug twins: copies of the shipping handoffs with one deliberate bug each. Every model
//! in `tests/` runs against the real handoff (must pass) and against its twin (loom must report
//! a failure). They live here, not behind a cargo feature or a `cfg` in `proxy-core`, because
//! features unify across a build and would swap the real code out of every model, and a `cfg`
//! would need a second build of the core.
//!
//! The copies of the driver half ([`queue`], [`record`], [`trigger`], [`registry`]) take the
//! bug as a const parameter, so one copy serves several twins; its `NONE` instantiation plants
//! nothing and must pass the same models (that shows the copy is faithful, so a twin's failure
//! comes from its planted bug). Every planted line is marked `PLANTED BUG`.

pub mod handoff;
pub mod queue;
pub mod record;
pub mod registry;
pub mod ring;
pub mod semaphore;
pub mod trigger;
