use super::*;

#[test]
fn cpu_time_moves_when_the_thread_works() {
    let a = thread_usage();
    let mut x = 0u64;
    for i in 0..5_000_000u64 {
        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
    }
    let b = thread_usage();
    assert!(b.cpu_ns > a.cpu_ns, "{a:?} then {b:?} (x = {x})");
}
