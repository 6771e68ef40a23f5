//! Element types, reduction ops and the reduction kernels the device (emulator) runs.
//!
//! The kernels are plain element-wise loops over slices, written so the compiler vectorises
//! them for `f32`, `f64`, `i32` and `u8` (`f16` / `bf16` go through `f32`, via the `half`
//! crate). Integer sums and products wrap (so every reduction order gives the same bits).

use half::{bf16, f16};

/// Element type of a collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// 32-bit signed integer (wrapping arithmetic).
    I32,
    /// 8-bit unsigned integer (wrapping arithmetic).
    U8,
}

impl DataType {
    /// Every type.
    pub const ALL: [DataType; 6] = [
        DataType::F32,
        DataType::F64,
        DataType::F16,
        DataType::Bf16,
        DataType::I32,
        DataType::U8,
    ];

    /// Size in bytes.
    pub const fn size(self) -> usize {
        match self {
            DataType::F32 | DataType::I32 => 4,
            DataType::F64 => 8,
            DataType::F16 | DataType::Bf16 => 2,
            DataType::U8 => 1,
        }
    }

    /// nccl-tests' name (`float`, `double`, `half`, `bfloat16`, `int32`, `uint8`).
    pub const fn name(self) -> &'static str {
        match self {
            DataType::F32 => "float",
            DataType::F64 => "double",
            DataType::F16 => "half",
            DataType::Bf16 => "bfloat16",
            DataType::I32 => "int32",
            DataType::U8 => "uint8",
        }
    }

    /// Parses nccl-tests' name or the Rust-style one (`f32`, `f64`, `f16`, `bf16`, `i32`,
    /// `u8`).
    pub fn from_name(s: &str) -> Option<Self> {
        let short = |d: DataType| match d {
            DataType::F32 => "f32",
            DataType::F64 => "f64",
            DataType::F16 => "f16",
            DataType::Bf16 => "bf16",
            DataType::I32 => "i32",
            DataType::U8 => "u8",
        };
        Self::ALL
            .into_iter()
            .find(|&d| d.name() == s || short(d) == s)
    }

    /// `true` for the floating-point types.
    pub const fn is_float(self) -> bool {
        !matches!(self, DataType::I32 | DataType::U8)
    }

    /// Encodes `v` (an integer small enough to be exact in this type, or any value for the
    /// wrapping integer types) as this type's little-endian bytes into `out[..size]`.
    ///
    /// # Panics
    /// If `out` is shorter than [`DataType::size`].
    pub fn encode(self, v: i64, out: &mut [u8]) {
        match self {
            DataType::F32 => out[..4].copy_from_slice(&(v as f32).to_le_bytes()),
            DataType::F64 => out[..8].copy_from_slice(&(v as f64).to_le_bytes()),
            DataType::F16 => out[..2].copy_from_slice(&f16::from_f64(v as f64).to_le_bytes()),
            DataType::Bf16 => out[..2].copy_from_slice(&bf16::from_f64(v as f64).to_le_bytes()),
            DataType::I32 => out[..4].copy_from_slice(&(v as i32).to_le_bytes()),
            DataType::U8 => out[0] = v as u8,
        }
    }
}

/// Reduction op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RedOp {
    /// Sum (wrapping for integers).
    Sum,
    /// Product (wrapping for integers).
    Prod,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

impl RedOp {
    /// Every op.
    pub const ALL: [RedOp; 4] = [RedOp::Sum, RedOp::Prod, RedOp::Min, RedOp::Max];

    /// nccl-tests' name (`sum`, `prod`, `min`, `max`).
    pub const fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Min => "min",
            RedOp::Max => "max",
        }
    }

    /// Parses a name.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == s)
    }

    /// Applies the op to two exact integers (the reference the checker folds with).
    pub fn apply_i64(self, a: i64, b: i64) -> i64 {
        match self {
            RedOp::Sum => a.wrapping_add(b),
            RedOp::Prod => a.wrapping_mul(b),
            RedOp::Min => a.min(b),
            RedOp::Max => a.max(b),
        }
    }
}

/// An element type the kernels work on.
trait Elem: Copy {
    fn sum(a: Self, b: Self) -> Self;
    fn prod(a: Self, b: Self) -> Self;
    fn min(a: Self, b: Self) -> Self;
    fn max(a: Self, b: Self) -> Self;
}

macro_rules! float_elem {
    ($t:ty) => {
        impl Elem for $t {
            #[inline(always)]
            fn sum(a: Self, b: Self) -> Self {
                a + b
            }
            #[inline(always)]
            fn prod(a: Self, b: Self) -> Self {
                a * b
            }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self {
                if b < a {
                    b
                } else {
                    a
                }
            }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self {
                if b > a {
                    b
                } else {
                    a
                }
            }
        }
    };
}
float_elem!(f32);
float_elem!(f64);

macro_rules! int_elem {
    ($t:ty) => {
        impl Elem for $t {
            #[inline(always)]
            fn sum(a: Self, b: Self) -> Self {
                a.wrapping_add(b)
            }
            #[inline(always)]
            fn prod(a: Self, b: Self) -> Self {
                a.wrapping_mul(b)
            }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self {
                Ord::min(a, b)
            }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self {
                Ord::max(a, b)
            }
        }
    };
}
int_elem!(i32);
int_elem!(u8);

macro_rules! half_elem {
    ($t:ty) => {
        impl Elem for $t {
            #[inline(always)]
            fn sum(a: Self, b: Self) -> Self {
                <$t>::from_f32(a.to_f32() + b.to_f32())
            }
            #[inline(always)]
            fn prod(a: Self, b: Self) -> Self {
                <$t>::from_f32(a.to_f32() * b.to_f32())
            }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self {
                if b.to_f32() < a.to_f32() {
                    b
                } else {
                    a
                }
            }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self {
                if b.to_f32() > a.to_f32() {
                    b
                } else {
                    a
                }
            }
        }
    };
}
half_elem!(f16);
half_elem!(bf16);

/// `dst[i] = f(a[i], b[i])` over three distinct slices.
#[inline(always)]
fn map3<T: Elem>(dst: &mut [T], a: &[T], b: &[T], f: impl Fn(T, T) -> T) {
    for ((d, &x), &y) in dst.iter_mut().zip(a).zip(b) {
        *d = f(x, y);
    }
}

/// `dst[i] = f(dst[i], b[i])`.
#[inline(always)]
fn map2<T: Elem>(dst: &mut [T], b: &[T], f: impl Fn(T, T) -> T) {
    for (d, &y) in dst.iter_mut().zip(b) {
        *d = f(*d, y);
    }
}

/// `dst[i] = f(dst[i], dst[i])`.
#[inline(always)]
fn map1<T: Elem>(dst: &mut [T], f: impl Fn(T, T) -> T) {
    for d in dst.iter_mut() {
        *d = f(*d, *d);
    }
}

/// The three aliasing cases the kernels accept.
enum Alias {
    /// `dst`, `a` and `b` are distinct.
    None,
    /// `dst == a` (b distinct).
    DstA,
    /// `dst == b` (a distinct).
    DstB,
    /// `dst == a == b`.
    All,
    /// `a == b`, `dst` distinct.
    Ab,
}

/// Dispatch on the op, monomorphised so each loop is a tight, vectorisable one.
///
/// # Safety
/// As [`reduce_raw`], for element type `T` (`elems` elements of `T`, aligned for `T`).
#[inline(always)]
unsafe fn reduce_typed<T: Elem>(
    op: RedOp,
    dst: *mut T,
    a: *const T,
    b: *const T,
    elems: usize,
    alias: Alias,
) {
    macro_rules! go {
        ($f:expr) => {
            match alias {
                Alias::None => {
                    // SAFETY: the caller guarantees three distinct, valid, aligned ranges.
                    let (d, x, y) = unsafe {
                        (
                            core::slice::from_raw_parts_mut(dst, elems),
                            core::slice::from_raw_parts(a, elems),
                            core::slice::from_raw_parts(b, elems),
                        )
                    };
                    map3(d, x, y, $f)
                }
                Alias::DstA | Alias::DstB => {
                    let other = if matches!(alias, Alias::DstA) { b } else { a };
                    // SAFETY: `dst` and `other` are distinct, valid, aligned ranges. Every op is
                    // commutative, so `f(dst, other)` equals the requested order's result
                    // (for NaN-free floats; min/max pick the same value either way otherwise).
                    let (d, y) = unsafe {
                        (
                            core::slice::from_raw_parts_mut(dst, elems),
                            core::slice::from_raw_parts(other, elems),
                        )
                    };
                    if matches!(alias, Alias::DstA) {
                        map2(d, y, $f)
                    } else {
                        map2(d, y, |p, q| $f(q, p))
                    }
                }
                Alias::All => {
                    // SAFETY: one valid, aligned range.
                    let d = unsafe { core::slice::from_raw_parts_mut(dst, elems) };
                    map1(d, $f)
                }
                Alias::Ab => {
                    // SAFETY: `dst` and `a` (== `b`) are distinct, valid, aligned ranges.
                    let (d, x) = unsafe {
                        (
                            core::slice::from_raw_parts_mut(dst, elems),
                            core::slice::from_raw_parts(a, elems),
                        )
                    };
                    map3(d, x, x, $f)
                }
            }
        };
    }
    // One arm per op so each loop body is inlined (a function pointer would stop
    // vectorisation).
    match op {
        RedOp::Sum => go!(T::sum),
        RedOp::Prod => go!(T::prod),
        RedOp::Min => go!(T::min),
        RedOp::Max => go!(T::max),
    }
}

/// `dst[i] = a[i] op b[i]` for `elems` elements of `dtype`.
///
/// # Safety
/// `dst`, `a` and `b` must each be valid for `elems` elements of `dtype` (reads; writes for
/// `dst`), aligned to the element size, and not accessed by anyone else during the call.
/// `dst` may be equal to `a` and/or `b`; otherwise the three ranges must not overlap.
pub unsafe fn reduce_raw(
    dtype: DataType,
    op: RedOp,
    dst: *mut u8,
    a: *const u8,
    b: *const u8,
    elems: usize,
) {
    if elems == 0 {
        return;
    }
    let d = dst as *const u8;
    let alias = match (d == a, d == b, a == b) {
        (true, true, _) => Alias::All,
        (true, false, _) => Alias::DstA,
        (false, true, _) => Alias::DstB,
        (false, false, true) => Alias::Ab,
        (false, false, false) => Alias::None,
    };
    // SAFETY: forwarded from this function's contract, typed per `dtype` (same size and an
    // alignment the caller guarantees).
    unsafe {
        match dtype {
            DataType::F32 => reduce_typed::<f32>(op, dst.cast(), a.cast(), b.cast(), elems, alias),
            DataType::F64 => reduce_typed::<f64>(op, dst.cast(), a.cast(), b.cast(), elems, alias),
            DataType::F16 => reduce_typed::<f16>(op, dst.cast(), a.cast(), b.cast(), elems, alias),
            DataType::Bf16 => {
                reduce_typed::<bf16>(op, dst.cast(), a.cast(), b.cast(), elems, alias)
            }
            DataType::I32 => reduce_typed::<i32>(op, dst.cast(), a.cast(), b.cast(), elems, alias),
            DataType::U8 => reduce_typed::<u8>(op, dst, a, b, elems, alias),
        }
    }
}

#[cfg(test)]
mod tests;
