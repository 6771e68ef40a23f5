use super::*;

#[test]
fn invalidate_model_bodies_run_on_real_threads() {
    for _ in 0..100 {
        invalidate_vs_worker();
        invalidate_withdraw_vs_take();
    }
}
