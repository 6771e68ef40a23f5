use super::*;

#[test]
fn registry_model_body_runs_on_real_threads() {
    for _ in 0..100 {
        registry_join_leave();
    }
}
