use super::*;
use core::fmt::Write;

#[test]
fn prefixed_puts_the_prefix_before_every_line() {
    let mut s = String::new();
    {
        let mut p = Prefixed::new(&mut s, "proxy-dump queue=1");
        write!(p, "a=1\nb=").unwrap();
        writeln!(p, "2").unwrap();
        writeln!(p, "c=3").unwrap();
    }
    assert_eq!(
        s,
        "proxy-dump queue=1 a=1\nproxy-dump queue=1 b=2\nproxy-dump queue=1 c=3\n"
    );
}
