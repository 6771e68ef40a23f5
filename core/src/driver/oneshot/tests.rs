use super::*;
use crate::base::sync::PlainArc as Arc;
use crate::base::time::MonotonicClock;
use crate::driver::wake::ThreadPark;
use std::string::String;
use std::time::{Duration, Instant};
use std::vec::Vec;

#[test]
fn a_value_set_once_is_seen_and_a_second_set_is_refused() {
    let o = OneShot::new();
    assert_eq!(o.get(), None);
    assert!(o.set(7u32));
    assert!(!o.set(8));
    assert_eq!(o.get(), Some(7));
    assert_eq!(o.wait(&ThreadPark, &MonotonicClock, Some(0)), Some(7));
}

#[test]
fn a_wait_for_a_value_never_set_ends_at_its_timeout() {
    let o: OneShot<u32> = OneShot::new();
    let t0 = Instant::now();
    assert_eq!(o.wait(&ThreadPark, &MonotonicClock, Some(20_000_000)), None);
    // A bound that fails the test, not a speed check.
    assert!(
        t0.elapsed() >= Duration::from_millis(20),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(o.wait(&ThreadPark, &MonotonicClock, Some(0)), None);
}

#[test]
fn two_waiters_both_get_the_value_set_by_a_third_thread() {
    let o = Arc::new(OneShot::new());
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let o = o.clone();
            std::thread::spawn(move || o.wait(&ThreadPark, &MonotonicClock, Some(10_000_000_000)))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(5));
    assert!(o.set(String::from("done")));
    for w in waiters {
        assert_eq!(w.join().unwrap().as_deref(), Some("done"));
    }
}
