//! Check data: inputs chosen so that no reduction order can change the result, the exact
//! expected output of every collective, and a bit-exact comparison (issue 6, correctness).
//!
//! Every input element is a small non-negative integer derived from (rank, index): `0..=7` for
//! sums, `1..=2` for products, `0..=100` otherwise. With at most [`MAX_EXACT_RANKS`] ranks the
//! results are exact in every type (bf16 holds integers up to 256 exactly), and integer sums
//! and products wrap anyway. The poison byte [`POISON`] makes a value no expected element has
//! (NaN for the float types, −1 or 255 for the integers).

use super::{Collective, PlanParams, RedOp};

/// Byte an output is filled with before a checked run.
pub const POISON: u8 = 0xFF;

/// Ranks up to which every expected value is exact in every type (products of up to 8 values
/// of at most 2 stay ≤ 256).
pub const MAX_EXACT_RANKS: u32 = 8;

fn mix(rank: u32, index: u64) -> u64 {
    // splitmix64 of (rank, index).
    let mut z = index
        .wrapping_add(u64::from(rank).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(0x632B_E59B_D9B4_E019);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Element `index` of `rank`'s input.
pub fn input_value(p: &PlanParams, rank: u32, index: u64) -> i64 {
    let h = mix(rank, index);
    if p.collective.reduces() {
        match p.op {
            RedOp::Sum => (h % 8) as i64,
            RedOp::Prod => 1 + (h % 2) as i64,
            RedOp::Min | RedOp::Max => (h % 101) as i64,
        }
    } else {
        (h % 101) as i64
    }
}

fn fold(p: &PlanParams, index_of: impl Fn(u32) -> u64) -> i64 {
    let mut acc = input_value(p, 0, index_of(0));
    for q in 1..p.nranks {
        acc = p.op.apply_i64(acc, input_value(p, q, index_of(q)));
    }
    acc
}

/// Element `index` of `rank`'s expected output.
pub fn expected_value(p: &PlanParams, rank: u32, index: u64) -> i64 {
    let n = p.nranks;
    let m = p.count;
    match p.collective {
        Collective::AllReduce => fold(p, |_| index),
        Collective::ReduceScatter => fold(p, |_| u64::from(rank) * m + index),
        Collective::AllGather => input_value(p, (index / m) as u32, index % m),
        Collective::Broadcast => input_value(p, p.root, index),
        Collective::SendRecv => input_value(p, (rank + n - 1) % n, index),
        Collective::AllToAll => input_value(p, (index / m) as u32, u64::from(rank) * m + index % m),
    }
}

/// Writes `rank`'s input into `input` (its whole input buffer, [`Collective::buffer_elems`]).
///
/// # Panics
/// If `input` is shorter than the input buffer.
pub fn fill_input(p: &PlanParams, rank: u32, input: &mut [u8]) {
    let elt = p.dtype.size();
    let (n_in, _) = p.collective.buffer_elems(p.count, p.nranks);
    for (i, e) in input[..n_in as usize * elt]
        .chunks_exact_mut(elt)
        .enumerate()
    {
        p.dtype.encode(input_value(p, rank, i as u64), e);
    }
}

/// Elements of `rank`'s output `output` (its whole output buffer) that differ bit-wise from the
/// expected result.
///
/// # Panics
/// If `output` is shorter than the output buffer.
pub fn count_wrong(p: &PlanParams, rank: u32, output: &[u8]) -> u64 {
    let elt = p.dtype.size();
    let (_, n_out) = p.collective.buffer_elems(p.count, p.nranks);
    let mut want = [0u8; 8];
    let mut wrong = 0;
    for (i, e) in output[..n_out as usize * elt].chunks_exact(elt).enumerate() {
        p.dtype.encode(expected_value(p, rank, i as u64), &mut want);
        if e != &want[..elt] {
            wrong += 1;
        }
    }
    wrong
}
