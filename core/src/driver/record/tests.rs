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

/// The trace classes of the task's and the op's transitions (`base::trace::mask`): a task's
/// and an op's begin and end are `ops`, the states between `steps`.
#[test]
fn ops_are_an_op_s_and_a_task_s_begin_and_end_steps_the_rest() {
    use crate::base::state::Machine;
    use crate::base::trace::mask;
    use crate::driver::record::RunState as T;
    use crate::progress::op::OpState as O;
    assert_eq!(O::trace_class(O::DONE, O::HANDSHAKE), mask::OPS);
    assert_eq!(O::trace_class(O::HANDSHAKE, O::TRANSFER), mask::STEPS);
    assert_eq!(O::trace_class(O::TRANSFER, O::DONE), mask::OPS);
    assert_eq!(T::trace_class(T::Init, T::WaitingDeviceTrigger), mask::OPS);
    assert_eq!(
        T::trace_class(T::WaitingDeviceTrigger, T::Progressing),
        mask::STEPS
    );
    assert_eq!(T::trace_class(T::Progressing, T::Done), mask::OPS);
    assert_eq!(T::trace_class(T::Done, T::Init), mask::STEPS);
}
