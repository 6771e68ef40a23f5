//! The planner's `log n` algorithms (issue 26) through the real engine: every new algorithm ×
//! collective, with 3, 5 and 8 ranks (the fold of the extra ranks, and a power of two), both
//! layouts, streams and blocks and the `nec.h` options varied from cell to cell, over the
//! in-memory transport with the device emulator; every output byte, the `start` count, the op
//! pools and the protocol counters checked (as `matrix.rs` does for ring and direct).

mod blocks;

use std::time::Duration;

use blocks::{assert_completed, assert_counters, run};
use proxy_collectives::planner::{Algorithm, Collective, DataType, PlanParams};

const PAIRS: [(Collective, Algorithm); 8] = [
    (Collective::AllReduce, Algorithm::RecursiveDoubling),
    (Collective::AllReduce, Algorithm::Rabenseifner),
    (Collective::AllGather, Algorithm::RecursiveDoubling),
    (Collective::AllGather, Algorithm::Bruck),
    (Collective::ReduceScatter, Algorithm::RecursiveHalving),
    (Collective::Broadcast, Algorithm::Binomial),
    (Collective::Broadcast, Algorithm::ScatterAllgather),
    (Collective::AllToAll, Algorithm::Bruck),
];

#[test]
fn log_algorithms_complete_with_every_byte_right() {
    let mut cell = 0usize;
    for (c, algo) in PAIRS {
        for n in [3u32, 5, 8] {
            for in_place in [false, true] {
                let chunk = 1024u64;
                let count = 6 * chunk / 4 + 3;
                let mut p = PlanParams::new(c, count, DataType::F32, 0, n);
                p.chunk_bytes = chunk;
                p.algorithm = algo;
                p.in_place = in_place;
                p.root = n - 2;
                p.streams = [1, 2][cell % 2];
                p.blocks = [1, 3][(cell / 2) % 2];
                p.nec.early_recv = [0, 4][(cell / 3) % 2];
                p.nec.early_send = cell % 5 < 2;
                p.nec.idx_wrap = [0, 4][(cell / 4) % 2];
                p.nec.credits = [128, 1][(cell / 7) % 2];
                // A repeat in place would run the collective on its own output.
                let loops = if in_place { 1 } else { 2 };
                let out = run(&p, 2, loops, Duration::from_secs(30));
                assert_completed(&p, &out, 2, loops);
                assert_counters(&p, &out);
                cell += 1;
            }
        }
    }
}
