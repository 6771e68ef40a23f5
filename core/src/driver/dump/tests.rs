use super::*;

#[test]
fn a_ticket_is_answered_only_by_a_dump_served_after_it() {
    let d = DumpRequests::new();
    let mut served = 0;
    assert!(!d.pending() && !d.pending_since(served));
    assert!(!d.serve(&mut served, || panic!("nothing to serve")));
    let t1 = d.request();
    let t2 = d.request();
    assert!(d.pending() && d.pending_since(served) && !d.answered(t1));
    let mut dumps = 0;
    assert!(d.serve(&mut served, || dumps += 1));
    assert!(d.answered(t1) && d.answered(t2) && !d.pending());
    assert_eq!(served, 2);
    let t3 = d.request();
    assert!(
        !d.answered(t3),
        "a later request is not answered by an earlier dump"
    );
    assert!(d.serve(&mut served, || dumps += 1));
    assert_eq!((dumps, d.counts()), (2, (3, 3)));
}

#[test]
fn tickets_wrap() {
    let d = DumpRequests::new();
    d.requested.store(u32::MAX, Ordering::Relaxed);
    d.written.store(u32::MAX, Ordering::Relaxed);
    let mut served = u32::MAX;
    let t = d.request();
    assert_eq!(t, 0);
    assert!(!d.answered(t));
    d.serve(&mut served, || {});
    assert!(d.answered(t) && d.answered(u32::MAX));
}
