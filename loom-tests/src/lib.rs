//! Loom models of every cross-thread handoff in `proxy-core`, each with a planted-bug twin that
//! the same model must catch (a model that cannot fail proves nothing).
//!
//! Run them with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p loom-tests --release`;
//! see the README's "Loom models" section for running one model and debugging a failure.
//!
//! Layout: `tests/*.rs` hold the models (compiled only under `--cfg loom`); [`harness`] holds the
//! generic model bodies, written against small traits so the real handoff and its twin run the
//! very same model; [`twins`] holds the planted-bug copies. Under plain `cargo test` the crate
//! runs the harness bodies once on real threads as a smoke test.

pub mod harness;
pub mod twins;

/// Runs `f` under `loom::model` and reports whether loom found a failure (a panic in any
/// interleaving: an assertion, a data race on a tracked cell, a causality violation, a
/// deadlock). Used to show that each planted-bug twin is caught.
#[cfg(loom)]
pub fn loom_finds_failure<F>(f: F) -> bool
where
    F: Fn() + Sync + Send + 'static,
{
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loom::model(f)));
    std::panic::set_hook(prev);
    r.is_err()
}
