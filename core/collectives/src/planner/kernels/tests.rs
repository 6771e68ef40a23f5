use super::*;
use alloc::vec;

fn enc(d: DataType, vals: &[i64]) -> alloc::vec::Vec<u64> {
    // u64 backing keeps every type aligned.
    let mut out = vec![0u64; vals.len()];
    // SAFETY: the u64 vector has 8 bytes per value, more than any element needs.
    let bytes =
        unsafe { core::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, out.len() * 8) };
    for (i, &v) in vals.iter().enumerate() {
        d.encode(v, &mut bytes[i * d.size()..]);
    }
    out
}

#[test]
fn every_type_and_op_and_alias() {
    let a = [3i64, 1, 7, 2, 0, 5, 4];
    let b = [2i64, 6, 1, 2, 3, 1, 4];
    for d in DataType::ALL {
        for op in RedOp::ALL {
            let want = enc(
                d,
                &core::array::from_fn::<i64, 7, _>(|i| op.apply_i64(a[i], b[i])),
            );
            // distinct
            let (x, y) = (enc(d, &a), enc(d, &b));
            let mut z = enc(d, &[0; 7]);
            // SAFETY: three distinct vectors of 7 u64 (≥ 7 elements of any type).
            unsafe {
                reduce_raw(
                    d,
                    op,
                    z.as_mut_ptr().cast(),
                    x.as_ptr().cast(),
                    y.as_ptr().cast(),
                    7,
                )
            };
            assert_eq!(z[..], want[..], "{d:?} {op:?}");
            // dst == a
            let mut x2 = enc(d, &a);
            let p = x2.as_mut_ptr() as *mut u8;
            // SAFETY: dst == a, b distinct.
            unsafe { reduce_raw(d, op, p, p, y.as_ptr().cast(), 7) };
            assert_eq!(x2[..], want[..], "{d:?} {op:?} dst=a");
            // dst == b
            let mut y2 = enc(d, &b);
            let p = y2.as_mut_ptr() as *mut u8;
            // SAFETY: dst == b, a distinct.
            unsafe { reduce_raw(d, op, p, x.as_ptr().cast(), p, 7) };
            assert_eq!(y2[..], want[..], "{d:?} {op:?} dst=b");
        }
    }
}

#[test]
fn names_round_trip() {
    for d in DataType::ALL {
        assert_eq!(DataType::from_name(d.name()), Some(d));
    }
    assert_eq!(DataType::from_name("bf16"), Some(DataType::Bf16));
    for o in RedOp::ALL {
        assert_eq!(RedOp::from_name(o.name()), Some(o));
    }
}
