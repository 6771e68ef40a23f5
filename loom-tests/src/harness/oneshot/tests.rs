use super::*;

#[test]
fn oneshot_model_body_runs_on_real_threads() {
    for _ in 0..100 {
        oneshot_set_vs_wait();
    }
}
