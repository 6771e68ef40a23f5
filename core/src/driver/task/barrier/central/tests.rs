//! The central barrier's release, one thread playing every member: only the last arrival of a
//! generation releases it, across the wrap of the generation and the count.

use super::*;

#[test]
fn only_the_last_arrival_releases_and_generations_wrap() {
    let members = 3;
    // Start just below the wrap: generations u32::MAX - 1, u32::MAX, 0, 1.
    let first = u32::MAX - 1;
    let count = AtomicU32::new(first.wrapping_sub(1).wrapping_mul(members));
    let released = AtomicU32::new(first.wrapping_sub(1));
    let mut g = first;
    for _ in 0..4 {
        assert!(
            !is_released(&released, g),
            "generation {g} before any arrival"
        );
        for m in 0..members {
            let last = arrive(&count, &released, g, members);
            assert_eq!(last, m == members - 1, "member {m} of generation {g}");
            assert_eq!(
                is_released(&released, g),
                last,
                "generation {g} after member {m}"
            );
        }
        // A released generation stays released; the next one is not.
        assert!(is_released(&released, g.wrapping_sub(1)));
        assert!(!is_released(&released, g.wrapping_add(1)));
        g = g.wrapping_add(1);
    }
    assert_eq!(released.load(Ordering::Relaxed), 1);
}
