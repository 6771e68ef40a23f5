use super::*;

#[test]
fn codes_match_nrt_status_h() {
    assert_eq!(NrtStatus::Success.code(), 0);
    assert_eq!(NrtStatus::QueueFull.code(), 7);
    assert_eq!(NrtStatus::Uninitialized.code(), 13);
    assert_eq!(NrtStatus::QueueEmpty.code(), 15);
    assert_eq!(NrtStatus::ExecBadInput.code(), 1002);
    assert_eq!(NrtStatus::CollPending.code(), 1100);
    assert_eq!(NrtStatus::ExecHwErrCollectives.code(), 1200);
    assert_eq!(NrtStatus::NetworkProxyFailure.code(), 1206);
}

#[test]
fn round_trip_and_display() {
    for s in NrtStatus::ALL {
        assert_eq!(NrtStatus::from_code(s.code()), Some(s));
    }
    assert_eq!(NrtStatus::from_code(8), None);
    assert_eq!(
        alloc::format!("{}", NrtStatus::NetworkProxyFailure),
        "NRT_NETWORK_PROXY_FAILURE (1206)"
    );
}
