use super::*;

#[test]
fn idle_model_body_runs_on_real_threads() {
    for _ in 0..100 {
        idle_wait_vs_arrival();
    }
}

#[test]
fn idle_kick_model_body_runs_on_real_threads() {
    for _ in 0..100 {
        idle_kick_vs_sleep();
    }
}
