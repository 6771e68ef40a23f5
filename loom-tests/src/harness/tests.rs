use super::*;

#[test]
fn ring_model_body_runs_on_real_threads() {
    for _ in 0..100 {
        spsc_ring();
    }
}

#[test]
fn handoff_model_body_runs_on_real_threads() {
    for _ in 0..100 {
        handoff_cancel_vs_claim();
    }
}

#[test]
fn semaphore_model_body_runs_on_real_threads() {
    semaphore_edge();
}

#[test]
fn nap_model_body_runs_on_real_threads() {
    for _ in 0..100 {
        driver::worker_naps_until_rung();
    }
}

#[test]
fn shm_model_bodies_run_on_real_threads() {
    for _ in 0..100 {
        shm::shm_ring();
        shm::shm_withdraw_vs_claim();
    }
}
