use super::*;
use proxy_core::base::status::NrtStatus;

#[test]
fn status_values_match_core() {
    let pairs = [
        (NRT_SUCCESS, NrtStatus::Success),
        (NRT_FAILURE, NrtStatus::Failure),
        (NRT_INVALID, NrtStatus::Invalid),
        (NRT_INVALID_HANDLE, NrtStatus::InvalidHandle),
        (NRT_RESOURCE, NrtStatus::Resource),
        (NRT_TIMEOUT, NrtStatus::Timeout),
        (NRT_HW_ERROR, NrtStatus::HwError),
        (NRT_QUEUE_FULL, NrtStatus::QueueFull),
        (NRT_UNINITIALIZED, NrtStatus::Uninitialized),
        (NRT_CLOSED, NrtStatus::Closed),
        (NRT_QUEUE_EMPTY, NrtStatus::QueueEmpty),
        (NRT_EXEC_BAD_INPUT, NrtStatus::ExecBadInput),
        (NRT_COLL_PENDING, NrtStatus::CollPending),
        (NRT_EXEC_HW_ERR_COLLECTIVES, NrtStatus::ExecHwErrCollectives),
        (NRT_NETWORK_PROXY_FAILURE, NrtStatus::NetworkProxyFailure),
    ];
    assert_eq!(pairs.len(), NrtStatus::ALL.len());
    for (c, s) in pairs {
        assert_eq!(c, s.code(), "{}", s.as_str());
    }
}
