use super::*;

#[test]
fn round_trip() {
    let r = TaskRecord {
        task_id: 1,
        slot: 2,
        comm_id: 3,
        streams: 0b101,
        progress_status: NrtStatus::Closed.code(),
        run_state: RunState::Done as u32,
    };
    let s = StatusRecord::new(TaskRecord::default());
    assert_eq!(s.load().state(), Some(RunState::Init));
    s.publish(&r);
    assert_eq!(s.load(), r);
    assert!(r.is_done());
    assert_eq!(r.status(), NrtStatus::Closed);
    for v in 0..6 {
        assert_eq!(RunState::from_u32(v).unwrap() as u32, v);
    }
    assert_eq!(RunState::from_u32(6), None);
}
