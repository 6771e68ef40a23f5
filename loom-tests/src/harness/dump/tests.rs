use super::*;

#[test]
fn dump_model_bodies_run_on_real_threads() {
    for _ in 0..100 {
        dump_request_vs_serve();
        parked_worker_serves_a_dump();
    }
}
