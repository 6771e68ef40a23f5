use super::*;

#[test]
fn provider_names_match_exactly_or_by_core_component() {
    assert!(name_matches("tcp;ofi_rxm", "tcp;ofi_rxm"));
    assert!(name_matches("tcp", "tcp;ofi_rxm"));
    assert!(name_matches("SHM", "shm"));
    assert!(name_matches("efa", "efa"));
    assert!(!name_matches("ofi_rxm", "tcp;ofi_rxm"));
    assert!(!name_matches("tcp;ofi_rxd", "tcp;ofi_rxm"));
    assert!(!name_matches("sh", "shm"));
    assert!(!name_matches("doesnotexist", "tcp;ofi_rxm"));
}

#[test]
fn explicit_provider_wins() {
    assert_eq!(
        Request::from(Some(" shm "), false),
        Request::Explicit("shm".into())
    );
}
