use super::*;

#[test]
fn lines_allocation_and_bounds() {
    let m = Arc::new(HostMem::new(3).unwrap());
    assert!(m.len() >= 3 * LINE && m.len().is_multiple_of(page_size()));
    assert_eq!(m.base_addr() % page_size() as u64, 0);
    let t: TriggerWord = m.alloc().unwrap();
    let s: Semaphore = m.alloc().unwrap();
    assert_eq!(t.load(), TRIGGER_ARMED);
    assert_eq!(s.addr() - t.addr(), LINE as u64);
    let cb = HostMemCallbacks::new(m.clone());
    cb.inc_semaphore(s.addr(), 2);
    cb.inc_semaphore(s.addr(), 3);
    assert_eq!(s.load(), 5);
    cb.store_host_index(t.addr(), 7);
    assert_eq!(cb.load_host_index(t.addr()), 7);
    // outside or misaligned: ignored
    cb.inc_semaphore(m.base_addr() + m.len() as u64, 1);
    cb.inc_semaphore(s.addr() + 1, 1);
    assert_eq!(cb.load_host_index(8), 0);
    assert_eq!(s.load(), 5);
    for _ in 2..m.lines() {
        m.alloc::<Index>().unwrap();
    }
    assert!(m.alloc::<Index>().is_err());
    assert!(HostMem::new(0).is_err());
}

#[test]
fn a_second_mapping_of_the_fd_sees_the_same_words() {
    let a = HostMem::new(1).unwrap();
    let fd = a.fd().try_clone_to_owned().unwrap();
    let b = HostMem::from_fd(fd).unwrap();
    assert_ne!(a.base_addr(), b.base_addr());
    a.line_word(0).unwrap().store(42);
    assert_eq!(b.line_word(0).unwrap().load(), 42);
}
