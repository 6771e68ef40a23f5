use super::*;

#[test]
fn trigger_model_body_runs_on_real_threads() {
    for _ in 0..100 {
        trigger_gate();
    }
}
