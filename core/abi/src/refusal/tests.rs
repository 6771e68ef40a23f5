use super::*;

#[test]
fn the_first_lines_in_full_then_one_summary_a_second() {
    let t0 = Instant::now();
    let mut l = Limiter::new();
    for _ in 0..FULL_LINES {
        assert_eq!(l.admit(t0), Decision::Full);
    }
    assert_eq!(l.admit(t0), Decision::Notice);
    // 999 more within the same second: suppressed.
    for i in 1..1000u64 {
        assert_eq!(l.admit(t0 + Duration::from_micros(i)), Decision::Suppressed);
    }
    // The first one a second after the last line summarises all of them, itself included.
    assert_eq!(l.admit(t0 + SUMMARY_INTERVAL), Decision::Summary(1000));
    assert_eq!(
        l.admit(t0 + SUMMARY_INTERVAL + Duration::from_millis(1)),
        Decision::Suppressed
    );
    assert_eq!(
        l.admit(t0 + SUMMARY_INTERVAL * 3),
        Decision::Summary(2),
        "a quiet spell: the next refusal summarises at once"
    );
}

#[test]
fn refusals_are_counted_and_remembered_per_thread() {
    let before = refused_calls();
    clear_last();
    refuse(
        "unit_test_call",
        "bad input",
        format_args!("peer {} out of range", 3),
    );
    assert!(refused_calls() > before);
    assert_eq!(
        take_last().as_deref(),
        Some("unit_test_call: peer 3 out of range")
    );
    assert_eq!(take_last(), None, "taken");
    std::thread::spawn(|| assert_eq!(take_last(), None, "per thread"))
        .join()
        .unwrap();
    // A flood of one kind: every one counted.
    let before = refused_calls();
    for _ in 0..10_000 {
        refuse("unit_test_flood", "busy", format_args!("busy"));
    }
    assert!(refused_calls() >= before + 10_000);
}
