use super::*;

#[test]
fn trace_model_body_runs_on_real_threads() {
    for _ in 0..100 {
        trace_writers_vs_drain();
    }
}

#[test]
fn shared_lane_model_body_runs_on_real_threads() {
    for _ in 0..100 {
        trace_lane_shared();
    }
}
