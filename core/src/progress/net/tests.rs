use super::*;

#[test]
fn tag_fields_do_not_overlap() {
    let t = make_tag(0x7FFF, 0xFFFF, 3, 0x3FFF, 0xFFFF);
    assert_eq!(t, 0x7FFF_FFFF_FFFF_FFFF);
    assert_eq!(make_tag(1, 0, 0, 0, 0), 1 << 48);
    assert_eq!(make_tag(0, 1, 0, 0, 0), 1 << 32);
    assert_eq!(make_tag(0, 0, 1, 0, 0), 1 << 30);
    assert_eq!(make_tag(0, 0, 0, 1, 0), 1 << 16);
    assert_eq!(make_tag(0, 0, 0, 0, 1), 1);
}
