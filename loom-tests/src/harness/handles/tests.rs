use super::*;

#[test]
fn handle_model_bodies_run_on_real_threads() {
    for _ in 0..200 {
        insert_race();
        concurrent_calls();
        remove_vs_insert();
    }
}
