use super::*;

#[test]
fn the_first_request_wins_and_success_is_no_reason() {
    let h = AbortHandle::new();
    let h2 = h.clone();
    assert!(h.same_as(&h2));
    assert!(!h.same_as(&AbortHandle::new()));
    assert_eq!(h.aborted(), None);
    assert!(h2.abort_with(NrtStatus::NetworkProxyFailure));
    assert!(!h.abort(), "a second request changes nothing");
    assert_eq!(h.aborted(), Some(NrtStatus::NetworkProxyFailure));
    let s = AbortHandle::new();
    assert!(s.abort_with(NrtStatus::Success));
    assert_eq!(s.aborted(), Some(NrtStatus::Closed));
}
