//! Criterion benchmarks of the proxy engine and the baselines they compare against.
//!
//! Run `cargo bench -p proxy-benches`; each group pairs the engine's piece with a baseline in
//! the same run, so read the ratios (this machine is shared and noisy; absolute times are
//! context only):
//!
//! | group | engine | baseline |
//! | --- | --- | --- |
//! | `spsc_ring` | `proxy_core::driver::ring` push+pop, one thread and two threads | `crossbeam_queue::ArrayQueue` |
//! | `progress_tick` | one `Comm::progress` over 1, 16, 128 active ops (idle scripted ops) | — (per-op cost) |
//! | `seam` | a progress call through the in-process `SeamTable` | `Comm::progress` called directly |
//! | `mem_transport` | one 1 MiB isend/irecv/test through `MemTransport` | `copy_from_slice` of 1 MiB |
//!
//! The targets the benchmarks watch: the seam adds no more than a few ns per call; a tick costs
//! O(active ops) with a small constant; the in-memory transport's large messages cost one copy
//! (ratio to the memcpy baseline close to 1).
