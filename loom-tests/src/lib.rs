//! Loom models of every cross-thread handoff in `proxy-core` (run with `RUSTFLAGS="--cfg loom"`).
