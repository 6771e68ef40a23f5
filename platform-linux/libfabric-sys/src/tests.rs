use super::*;

#[test]
fn hand_written_constants_match_the_headers() {
    assert_eq!(fi_version_num(1, 17), 0x0001_0011);
    assert_eq!(fi_major(fi_version_num(2, 3)), 2);
    assert_eq!(fi_minor(fi_version_num(2, 3)), 3);
    assert_eq!(FI_ADDR_UNSPEC, !0u64);
    assert_eq!(
        fi_major(fi_version_num(FI_MAJOR_VERSION, FI_MINOR_VERSION)),
        FI_MAJOR_VERSION
    );
}

#[test]
fn runtime_library_is_at_least_1_17() {
    // SAFETY: `fi_version` takes no arguments and only returns a number.
    let v = unsafe { fi_version() };
    assert!(
        v >= fi_version_num(1, 17),
        "runtime libfabric {v:#x} older than 1.17"
    );
}
