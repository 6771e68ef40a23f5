//! `NEURON_RT_DBG_PROXY_EARLY_COMPLETION` reaches the tasks: with it every network and barrier
//! task is submitted with its skip flag and ends DONE at INIT (edge 1), success, without a
//! single `start` through the seam and without waiting for a device trigger.

use std::sync::Arc;

use proxy_collectives::planner::{plan, Addresses, Collective, DataType, PlanParams};
use proxy_core::progress::comm::{Comm, CommConfig};
use proxy_core::progress::mem_transport::MemFabric;
use proxy_emulator::WaitPolicy;
use proxy_perf::engine::{seam_starts, Engine, Execution};
use proxy_runtime::hostmem::{HostMem, HostMemCallbacks, LINE};
use proxy_runtime::Config;

#[test]
fn early_completion_skips_every_task_and_files_nothing() {
    let n = 2u32;
    let cfg = Config::from_lookup(|k| {
        (k == "NEURON_RT_DBG_PROXY_EARLY_COMPLETION" || k == "NEURON_RT_EXEC_TIMEOUT").then(|| {
            if k == "NEURON_RT_EXEC_TIMEOUT" {
                "5"
            } else {
                "1"
            }
            .to_string()
        })
    })
    .expect("valid settings");
    assert!(cfg.early_completion);
    let fabric = MemFabric::new(n).unwrap();
    let mems: Vec<Arc<HostMem>> = (0..n)
        .map(|_| Arc::new(HostMem::new(64).unwrap()))
        .collect();
    let comms = (0..n)
        .map(|r| {
            let mut c = Comm::new(
                CommConfig::new(r, n, 1),
                Box::new(fabric.endpoint(r).unwrap()),
                Arc::new(HostMemCallbacks::new(mems[r as usize].clone())),
                Arc::new(proxy_core::base::time::MonotonicClock),
            )
            .unwrap();
            // SAFETY: the buffers below outlive the engine (declared first, dropped last).
            unsafe { c.trust_all_addresses() };
            c
        })
        .collect();
    let mut bufs: Vec<Vec<u64>> = (0..n).map(|_| vec![0u64; 64]).collect();
    let mut engine = Engine::new(comms, &cfg, WaitPolicy::default()).unwrap();
    let starts0 = seam_starts();
    for r in 0..n {
        let p = plan(&PlanParams::new(
            Collective::AllReduce,
            8,
            DataType::F32,
            r,
            n,
        ))
        .unwrap();
        let base = bufs[r as usize].as_mut_ptr() as u64;
        let words = mems[r as usize].base_addr();
        let a = Addresses {
            input: base,
            output: base + 128,
            scratch: base + 256,
            words: words + 3 * LINE as u64,
            word_stride: LINE as u64,
        };
        let exec = Execution {
            id: 1,
            blocks: vec![(0, 1, p.fifos(&a))],
            schedule: vec![1],
            // Armed trigger words that no device will ever write: only a skipped task ends.
            net_triggers: vec![words],
            barrier_triggers: vec![words + LINE as u64],
            barrier_done: Vec::new(),
            leader: r == 0,
            label: None,
        };
        for w in [words, words + LINE as u64] {
            mems[r as usize]
                .word_at(w)
                .unwrap()
                .store(proxy_core::driver::trigger::TRIGGER_ARMED);
        }
        // SAFETY: the buffers and words outlive the engine.
        unsafe { engine.submit(r, exec) }.unwrap();
    }
    for r in 0..n {
        engine
            .wait(r, &|| false)
            .expect("both tasks DONE with success at INIT");
    }
    assert_eq!(
        seam_starts(),
        starts0,
        "a skipped network task files nothing"
    );
    drop(engine);
    drop(bufs);
}
