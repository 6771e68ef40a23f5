use super::*;

#[test]
fn lists() {
    assert_eq!(parse_cpu_list("5").unwrap(), [5]);
    assert_eq!(parse_cpu_list("1-1,0").unwrap(), [1, 0]);
    for bad in ["", " ", "a", "1,", "1-", "-1", "9999", "2-1"] {
        assert!(parse_cpu_list(bad).is_err(), "{bad:?}");
    }
    let allowed = allowed_cpus().expect("affinity mask readable");
    assert!(!allowed.is_empty());
}
