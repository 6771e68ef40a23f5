use super::*;

#[test]
fn abort_model_body_runs_on_real_threads() {
    for _ in 0..100 {
        abort_race();
    }
}
