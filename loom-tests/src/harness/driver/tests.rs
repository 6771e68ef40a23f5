use super::*;

#[test]
fn driver_model_bodies_run_on_real_threads() {
    for _ in 0..20 {
        record_handoff();
        worker_wakes_for_a_submission();
        worker_wakes_for_a_join();
        worker_wakes_for_stop();
        slot_release_and_reuse();
        claim_race();
        wake_word_two_notifiers();
        drive_token_handoff();
        leave_timeout_then_drop();
    }
}
