use super::*;

#[test]
fn percentile_is_nearest_rank() {
    let mut v: Vec<u64> = (1..=100).rev().collect();
    assert_eq!(percentile(&mut v, 50.0), Some(50));
    assert_eq!(percentile(&mut v, 99.0), Some(99));
    assert_eq!(percentile(&mut v, 100.0), Some(100));
    assert_eq!(percentile(&mut v, 0.0), Some(1));
    assert_eq!(percentile(&mut [], 50.0), None);
}

#[test]
fn measured_batches_hide_warm_up_batches() {
    let r = Recorder::new(Duration::from_secs(3600));
    r.batch(1, Duration::from_nanos(1000));
    assert_eq!(
        r.mean_ns(),
        Some(1000.0),
        "warm-up batches when nothing else"
    );
    let r = Recorder::new(Duration::ZERO);
    r.batch(10, Duration::from_nanos(100));
    r.batch(30, Duration::from_nanos(500));
    assert_eq!(r.mean_ns(), Some(15.0));
    r.sample(7);
    r.sample(9);
    assert_eq!(r.percentile(50.0), Some(7));
    assert_eq!(r.sample_mean(), Some(8.0));
}
