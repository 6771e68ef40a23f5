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

/// The entries libfabric's tcp offers here: those on `lo` are loopback, the others are not;
/// with ranks on more than one host `choose` never returns a loopback entry (an endpoint on
/// 127.0.0.1 cannot be reached from another host: a peer's connect fails with EINVAL or
/// "refused" much later), and when only loopback entries exist it says so.
#[test]
fn ranks_on_several_hosts_never_get_a_loopback_endpoint() {
    let sizes = || HintSizes {
        tx_size: None,
        rx_size: None,
    };
    let Some(list) = InfoList::query(false, sizes()).expect("fi_getinfo") else {
        panic!("libfabric offers nothing here");
    };
    let mut seen_lo = false;
    for e in list
        .entries()
        .filter(|e| name_matches("tcp", &e.prov_name()))
    {
        if e.domain_name() == "lo" {
            seen_lo = true;
            assert!(e.loopback(), "an entry on lo is loopback");
        }
    }
    assert!(seen_lo, "libfabric's tcp offers lo here");
    let request = Request::Explicit("tcp".into());
    let local = choose(&request, None, Some(&list), true).expect("one host: any entry");
    assert!(name_matches("tcp", &local.prov_name()));
    match choose(&request, None, Some(&list), false) {
        Ok(e) => assert!(!e.loopback(), "chose {} across hosts", e.domain_name()),
        Err(e) => assert!(e.to_string().contains("only on a loopback address"), "{e}"),
    }
}
