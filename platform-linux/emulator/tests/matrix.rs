//! A pairwise matrix over streams {1, 2, 4} × blocks {1, 3} × early receive {off, on} × early
//! send {off, on} × index wrap {0, 4} × send credits {1, 128} × every collective × ranks
//! {2, 3, 4} × algorithm {ring, direct} × in place {no, yes}: every pair of values of any two
//! factors occurs in at least one cell (a covering set built greedily in code, not the full
//! product). Each cell runs two executions of a schedule that repeats the blocks twice (once in place),
//! through the real engine over the in-memory transport with the device emulator, and
//! checks every output byte, the `start` count, the op pools and the protocol counters.

mod blocks;

use std::time::Duration;

use blocks::{assert_completed, assert_counters, run, run_mode, Mode};
use proxy_collectives::planner::{Algorithm, Collective, DataType, PlanParams};

/// The factors, each as its list of values (indices into the lists below).
const LEVELS: [usize; 10] = [3, 2, 2, 2, 2, 2, 6, 3, 2, 2];
const STREAMS: [u32; 3] = [1, 2, 4];
const BLOCKS: [u32; 2] = [1, 3];
const EARLY_RECV: [u32; 2] = [0, 4];
const WRAP: [u32; 2] = [0, 4];
const CREDITS: [u32; 2] = [1, 128];
const RANKS: [u32; 3] = [2, 3, 4];
const ALGOS: [Algorithm; 2] = [Algorithm::Ring, Algorithm::Direct];

/// A pairwise covering set: greedily, the row of the full product that covers the most pairs
/// not yet covered, until every pair is.
#[allow(clippy::needless_range_loop)] // a factor's index reaches several arrays at once
fn pairwise() -> Vec<[usize; 10]> {
    let k = LEVELS.len();
    let mut uncovered = std::collections::HashSet::new();
    for a in 0..k {
        for b in a + 1..k {
            for x in 0..LEVELS[a] {
                for y in 0..LEVELS[b] {
                    uncovered.insert((a, x, b, y));
                }
            }
        }
    }
    let total: usize = LEVELS.iter().product();
    let row_of = |mut i: usize| {
        let mut r = [0usize; 10];
        for (f, &l) in LEVELS.iter().enumerate() {
            r[f] = i % l;
            i /= l;
        }
        r
    };
    let gain = |r: &[usize; 10], unc: &std::collections::HashSet<(usize, usize, usize, usize)>| {
        let mut g = 0;
        for a in 0..k {
            for b in a + 1..k {
                g += usize::from(unc.contains(&(a, r[a], b, r[b])));
            }
        }
        g
    };
    let mut rows = Vec::new();
    while !uncovered.is_empty() {
        let best = (0..total)
            .map(row_of)
            .max_by_key(|r| gain(r, &uncovered))
            .expect("rows");
        for a in 0..k {
            for b in a + 1..k {
                uncovered.remove(&(a, best[a], b, best[b]));
            }
        }
        rows.push(best);
    }
    rows
}

fn params(row: &[usize; 10]) -> PlanParams {
    let c = Collective::ALL[row[6]];
    let n = RANKS[row[7]];
    // 8 chunks of 1 KiB per rank block per part at the finest split (4 streams × 3 blocks):
    // several entries per op side, more than the wrap, each small enough for the in-memory
    // transport to copy at post (early completion).
    let chunk = 1024u64;
    let count = 12 * 8 * chunk / 4;
    let mut p = PlanParams::new(c, count, DataType::F32, 0, n);
    p.chunk_bytes = chunk;
    p.algorithm = ALGOS[row[8]];
    p.in_place = row[9] == 1;
    p.root = n - 1;
    p.streams = STREAMS[row[0]];
    p.blocks = BLOCKS[row[1]];
    p.nec.early_recv = EARLY_RECV[row[2]];
    p.nec.early_send = row[3] == 1;
    p.nec.idx_wrap = WRAP[row[4]];
    p.nec.credits = CREDITS[row[5]];
    p
}

#[test]
fn pairwise_matrix_completes_with_every_byte_right() {
    let rows = pairwise();
    assert!(rows.len() < 40, "{} cells", rows.len());
    for row in &rows {
        let p = params(row);
        // A repeat in place would run the collective on its own output.
        let loops = if p.in_place { 1 } else { 2 };
        let out = run(&p, 2, loops, Duration::from_secs(20));
        assert_completed(&p, &out, 2, loops);
        assert_counters(&p, &out);
    }
}

/// Devices on their own threads (`device-<rank>`), racing the proxy: the finest split with
/// every option on, each collective once, ring and direct by turns.
#[test]
fn threaded_devices_complete_every_option() {
    for i in 0..Collective::ALL.len() {
        let p = params(&[2, 1, 1, 1, 1, 0, i, 2, i % 2, 0]);
        let out = run_mode(&p, 2, 2, Duration::from_secs(20), Mode::Threaded);
        assert_completed(&p, &out, 2, 2);
        assert_counters(&p, &out);
    }
}
