use super::*;

#[test]
fn admitting_counts_and_an_empty_hold_counts_nothing() {
    let before = quarantine_stats();
    let same = admit(Held {
        objects: Vec::new(),
        registrations: Vec::new(),
        contexts: vec![std::ptr::null_mut()],
        requests: 0,
    });
    assert_eq!(same, before);
    let after = admit(Held {
        objects: vec![std::ptr::null_mut(); 5],
        registrations: vec![std::ptr::null_mut(); 2],
        contexts: Vec::new(),
        requests: 3,
    });
    // Other tests of this binary may quarantine concurrently: at least ours is counted.
    assert!(after.transports > before.transports);
    assert!(after.objects >= before.objects + 5);
    assert!(after.registrations >= before.registrations + 2);
    assert!(after.requests >= before.requests + 3);
    assert_eq!(
        format!(
            "{}",
            QuarantineStats {
                transports: 1,
                objects: 5,
                registrations: 2,
                requests: 16
            }
        ),
        "quarantined_transports=1 quarantined_objects=5 quarantined_registrations=2 \
         quarantined_requests=16"
    );
}
