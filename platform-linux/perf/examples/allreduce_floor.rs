//! The engine-free floor of a 2-rank all-reduce: two threads doing the copies and reductions
//! of proxy-perf's 2-rank ring (the in-memory transport's one copy per message, the device's
//! reduction with the kernels the emulator uses), chunk by chunk, with nothing else: no
//! planner, proxy queue, seam, op or host word, one flag per chunk and one barrier per
//! iteration. What proxy-perf's in-process and libfabric shm all-reduce are measured against
//! (BENCHMARKS.md, "Streams and blocks").
//!
//! ```text
//! cargo run --release -p proxy-perf --example allreduce_floor -- [BYTES] [ITERS] [WARMUP] [CHUNK]
//! # defaults: 64M 10 2 512K; prints one line:
//! # floor all-reduce ranks 2 bytes 67108864 chunk 524288 time_us 14000.0 algbw 4.79 busbw 4.79 wrong 0
//! ```
//!
//! Per rank r (segment r = the half it reduces), per chunk c of a half, both steps in chunk
//! order so that they overlap with the peer's:
//! 1. reduce-scatter send: copy `input_r[segment 1−r][c]` into the peer's scratch (the
//!    transport's copy into the posted receive buffer), then raise the peer's flag for c;
//! 2. wait for its own flag for c, `output_r[segment r][c] = input_r + scratch_r` (the device's
//!    reduction), then copy that into the peer's output (the all-gather send).
//!
//! Then a barrier. time = wall time per iteration, algbw = bytes / time, busbw = algbw ×
//! 2(n−1)/n = algbw. The output is checked after the last iteration (`wrong`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use proxy_collectives::planner::data::{count_wrong, fill_input};
use proxy_collectives::planner::kernels::reduce_raw;
use proxy_collectives::planner::{Collective, DataType, PlanParams, RedOp, DEFAULT_CHUNK_BYTES};
use proxy_perf::args::parse_size;

/// A rank's buffers (u64 words: aligned for every element type), by address.
struct Rank {
    input: Vec<u64>,
    output: Vec<u64>,
    scratch: Vec<u64>,
    /// Per chunk: the iteration whose data the peer has copied into `scratch`.
    ready: Vec<AtomicU32>,
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: u64| -> u64 {
        a.get(i).map_or(d, |s| {
            parse_size(s).unwrap_or_else(|e| {
                eprintln!("allreduce_floor: {e}");
                std::process::exit(2)
            })
        })
    };
    let bytes = arg(0, 64 << 20) / 8 * 8;
    let iters = arg(1, 10).max(1) as u32;
    let warmup = arg(2, 2) as u32;
    let chunk = (arg(3, DEFAULT_CHUNK_BYTES) / 4 * 4).max(4) as usize;
    if bytes < 8 {
        eprintln!("allreduce_floor: BYTES must be at least 8");
        std::process::exit(2);
    }
    let half = (bytes / 2) as usize;
    let chunks = half.div_ceil(chunk);
    let words = (bytes as usize).div_ceil(8);
    let ranks: Vec<Rank> = (0..2)
        .map(|_| Rank {
            input: vec![0; words],
            output: vec![0; words],
            scratch: vec![0; half.div_ceil(8)],
            ready: (0..chunks).map(|_| AtomicU32::new(0)).collect(),
        })
        .collect();
    let params = |r: u32| PlanParams::new(Collective::AllReduce, bytes / 4, DataType::F32, r, 2);
    let mut ranks = ranks;
    for (r, k) in ranks.iter_mut().enumerate() {
        // SAFETY: the input vector has `bytes` bytes (words × 8 >= bytes), u8-aligned.
        let input = unsafe {
            std::slice::from_raw_parts_mut(k.input.as_mut_ptr().cast::<u8>(), bytes as usize)
        };
        fill_input(&params(r as u32), r as u32, input);
    }
    // Addresses (usize) shared by the two threads; every access below stays inside these
    // vectors, which outlive the scoped threads.
    let addr = |v: &Vec<u64>| v.as_ptr() as usize;
    let bufs: Vec<(usize, usize, usize)> = ranks
        .iter()
        .map(|k| (addr(&k.input), addr(&k.output), addr(&k.scratch)))
        .collect();
    let barrier = Barrier::new(2);
    let cpus = core_affinity::get_core_ids().unwrap_or_default();
    let total = warmup + iters;
    let mut times = [Duration::ZERO; 2];
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..2usize)
            .map(|r| {
                let (ranks, bufs, barrier, cpus) = (&ranks, &bufs, &barrier, &cpus);
                sc.spawn(move || {
                    if cpus.len() >= 2 {
                        core_affinity::set_for_current(cpus[r]);
                    }
                    let p = 1 - r;
                    let (inp, out, _) = bufs[r];
                    let (_, peer_out, peer_scratch) = bufs[p];
                    let mut t0 = Instant::now();
                    for it in 1..=total {
                        if it == warmup + 1 {
                            barrier.wait();
                            t0 = Instant::now();
                        }
                        for c in 0..chunks {
                            let off = c * chunk;
                            let len = chunk.min(half - off);
                            // 1. The reduce-scatter send of the peer's segment.
                            // SAFETY: `p * half + off .. + len` lies in this rank's input,
                            // `off .. off + len` in the peer's scratch; the peer reads that
                            // scratch range only after the flag below, and this rank writes it
                            // again only after the iteration's barrier.
                            unsafe {
                                std::ptr::copy_nonoverlapping(
                                    (inp + p * half + off) as *const u8,
                                    (peer_scratch + off) as *mut u8,
                                    len,
                                );
                            }
                            ranks[p].ready[c].store(it, Ordering::Release);
                            // 2. Reduce its own segment's chunk, then the all-gather send.
                            let mut spins = 0u32;
                            while ranks[r].ready[c].load(Ordering::Acquire) != it {
                                spins = spins.wrapping_add(1);
                                if spins.is_multiple_of(64) {
                                    std::thread::yield_now();
                                } else {
                                    std::hint::spin_loop();
                                }
                            }
                            let seg = r * half + off;
                            // SAFETY: every range lies in its vector (segment r of the input
                            // and output, the scratch chunk the peer filled before raising the
                            // flag, the same output range of the peer, which only this thread
                            // writes); f32 elements, 4-byte aligned (chunk and half are
                            // multiples of 4).
                            unsafe {
                                reduce_raw(
                                    DataType::F32,
                                    RedOp::Sum,
                                    (out + seg) as *mut u8,
                                    (inp + seg) as *const u8,
                                    (bufs[r].2 + off) as *const u8,
                                    len / 4,
                                );
                                std::ptr::copy_nonoverlapping(
                                    (out + seg) as *const u8,
                                    (peer_out + seg) as *mut u8,
                                    len,
                                );
                            }
                        }
                        barrier.wait();
                    }
                    t0.elapsed()
                })
            })
            .collect();
        for (r, h) in hs.into_iter().enumerate() {
            times[r] = h.join().expect("a floor thread panicked");
        }
    });
    let time = times[0].max(times[1]).as_secs_f64() / f64::from(iters);
    let wrong: u64 = ranks
        .iter()
        .enumerate()
        .map(|(r, k)| {
            // SAFETY: the output vector has `bytes` bytes; the threads have ended.
            let out = unsafe {
                std::slice::from_raw_parts(k.output.as_ptr().cast::<u8>(), bytes as usize)
            };
            count_wrong(&params(r as u32), r as u32, out)
        })
        .sum();
    let algbw = bytes as f64 / time / 1e9;
    println!(
        "floor all-reduce ranks 2 bytes {bytes} chunk {chunk} time_us {:.1} algbw {algbw:.2} busbw {algbw:.2} wrong {wrong}",
        time * 1e6
    );
    std::process::exit(i32::from(wrong != 0));
}
