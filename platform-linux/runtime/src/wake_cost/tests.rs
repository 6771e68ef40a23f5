use super::*;

#[test]
fn a_wake_up_costs_something_and_less_than_the_bound() {
    let d = measure(50);
    assert!(d > Duration::ZERO, "{d:?}");
    // A park/unpark is microseconds; 10 ms is the per-step park bound.
    assert!(d < Duration::from_millis(10), "{d:?}");
    assert_eq!(wake_latency(), wake_latency(), "measured once");
}
