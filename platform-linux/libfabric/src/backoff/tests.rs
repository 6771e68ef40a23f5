use super::*;

#[test]
fn spacing_starts_after_a_long_streak_doubles_and_ends_on_a_post() {
    let t0 = Instant::now();
    let mut p = PostPressure::default();
    assert!(p.may_post(t0));
    assert!(!p.on(PostEvent::Again, t0, 1));
    assert_eq!(p, PostPressure::Streak { since: t0 });
    // Short back-pressure (connection setup, a full queue) is never spaced.
    let t1 = t0 + STORM_AFTER / 2;
    assert!(!p.on(PostEvent::Again, t1, 1));
    assert!(p.may_post(t1));
    // Past STORM_AFTER: spacing starts with MIN_WAIT.
    let t2 = t0 + STORM_AFTER;
    assert!(
        p.on(PostEvent::Again, t2, 1),
        "spacing starts (logged once)"
    );
    assert!(!p.may_post(t2));
    assert!(!p.may_post(t2 + MIN_WAIT / 2));
    assert!(p.may_post(t2 + MIN_WAIT));
    // Each further refusal doubles the wait, up to MAX_WAIT.
    let mut now = t2 + MIN_WAIT;
    let mut waits = Vec::new();
    for _ in 0..12 {
        assert!(!p.on(PostEvent::Again, now, 1), "started only once");
        let PostPressure::Spacing { wait, until, .. } = p else {
            panic!("spacing: {p:?}");
        };
        assert_eq!(until, now + wait);
        waits.push(wait);
        now = until;
    }
    assert_eq!(waits[0], MIN_WAIT * 2);
    assert_eq!(waits[1], MIN_WAIT * 4);
    assert_eq!(*waits.last().unwrap(), MAX_WAIT);
    assert!(waits.windows(2).all(|w| w[0] <= w[1]));
    // An accepted post ends it.
    assert!(!p.on(PostEvent::Posted, now, 1));
    assert_eq!(p, PostPressure::Clear);
    assert!(p.may_post(now));
    // A new streak starts from the beginning.
    p.on(PostEvent::Again, now, 1);
    assert_eq!(p, PostPressure::Streak { since: now });
}
