use super::*;

#[test]
fn fi_bool_syntax_is_libfabrics() {
    for t in ["1", "true", "TRUE", "yes", "On"] {
        assert_eq!(parse_fi_bool(t), Some(true), "{t}");
    }
    for f in ["0", "false", "No", "OFF"] {
        assert_eq!(parse_fi_bool(f), Some(false), "{f}");
    }
    for x in ["", "2", "maybe"] {
        assert_eq!(parse_fi_bool(x), None, "{x}");
    }
}

#[test]
fn paths_follow_cma_and_the_threshold() {
    let mut d = ShmLargeMessages {
        cma: true,
        cma_reason: "x".into(),
        sar_threshold: Some(SAR_THRESHOLD),
    };
    assert_eq!(d.path(), "cma");
    d.cma = false;
    assert_eq!(d.path(), "mmap");
    assert_eq!(d.describe(), "mmap (CMA unavailable: x)");
    d.sar_threshold = Some(SAR_THRESHOLD + 1);
    assert_eq!(d.path(), "sar");
    d.sar_threshold = None;
    assert_eq!(d.path(), "sar");
}

#[test]
fn endpoint_names_are_unique_and_have_no_slash() {
    let a = endpoint_name();
    let b = endpoint_name();
    assert_ne!(a, b);
    assert!(!a.contains('/') && a.starts_with("pxyshm_"), "{a}");
    assert!(a.len() < 64, "{a}");
}
