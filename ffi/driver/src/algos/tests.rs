//! The override table as the environment gives it, and what a plan's parameters become.

use super::*;

fn lookup(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn the_environment_overrides_auto_plans_only() {
    let t = load(lookup(&[(
        "NEURON_RT_PROXY_ALGO_ALL_REDUCE",
        "rabenseifner",
    )]))
    .unwrap();
    let mut p = PlanParams::new(
        Collective::AllReduce,
        2,
        proxy_collectives::planner::DataType::F32,
        0,
        8,
    );
    let l = choose_in(&t, &mut p);
    assert_eq!(p.algorithm, Algorithm::Rabenseifner);
    assert_eq!(
        (l.collective, l.algorithm, l.why),
        ("all-reduce", "rabenseifner", "env")
    );
    // A plan that names its algorithm keeps it.
    let mut p = PlanParams::new(
        Collective::AllReduce,
        2,
        proxy_collectives::planner::DataType::F32,
        0,
        8,
    );
    p.algorithm = Algorithm::Ring;
    let l = choose_in(&t, &mut p);
    assert_eq!(
        (p.algorithm, l.algorithm, l.why),
        (Algorithm::Ring, "ring", "asked")
    );
    // Other collectives: the tuner.
    let mut p = PlanParams::new(
        Collective::Broadcast,
        2,
        proxy_collectives::planner::DataType::F32,
        0,
        32,
    );
    let l = choose_in(&t, &mut p);
    assert_eq!(
        (p.algorithm, l.algorithm, l.why),
        (Algorithm::Auto, "binomial", "tuner")
    );
}

#[test]
fn a_bad_variable_is_named() {
    let e = load(lookup(&[(
        "NEURON_RT_PROXY_ALGO_ALL_GATHER",
        "rabenseifner",
    )]))
    .unwrap_err();
    assert!(
        e.starts_with("NEURON_RT_PROXY_ALGO_ALL_GATHER=rabenseifner: rabenseifner does not support all-gather"),
        "{e}"
    );
    let e = load(lookup(&[("NEURON_RT_PROXY_ALGO_BROADCAST", "fast")])).unwrap_err();
    assert!(
        e.starts_with("NEURON_RT_PROXY_ALGO_BROADCAST=fast: not an algorithm"),
        "{e}"
    );
}

#[test]
fn a_calibration_file_gives_auto_plans_its_constants() {
    let path = std::env::temp_dir().join(format!("nrt-proxy-algos-{}.json", std::process::id()));
    let m = proxy_collectives::planner::tuner::CostModel {
        step_ns: 9_000,
        entry_ns: 100,
        byte_ps: 80,
        reduce_ps: 20,
    };
    proxy_runtime::tune_file::TuneFile::new(m, "test".into(), 1, 0.0)
        .write(&path)
        .unwrap();
    let value: &'static str = Box::leak(path.display().to_string().into_boxed_str());
    let pairs: &'static [(&'static str, &'static str)] =
        Box::leak(Box::new([("NEURON_RT_PROXY_TUNE_FILE", value)]));
    let t = load(lookup(pairs)).unwrap();
    let mut p = PlanParams::new(
        Collective::AllReduce,
        2,
        proxy_collectives::planner::DataType::F32,
        0,
        8,
    );
    let l = choose_in(&t, &mut p);
    assert_eq!(p.cost_model, m);
    // Dear steps: one step (direct) instead of the default's recursive doubling.
    assert_eq!((l.algorithm, l.why), ("direct", "tuner-calibrated"));
    std::fs::write(&path, "{\"version\": 1}").unwrap();
    let e = load(lookup(pairs)).err().unwrap();
    assert!(
        e.starts_with(&format!(
            "NEURON_RT_PROXY_TUNE_FILE={value}: missing field `cost_model`"
        )),
        "{e}"
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn the_link_variable_picks_the_defaults_and_a_bad_one_is_named() {
    use proxy_collectives::planner::tuner::LinkKind;
    let plan = |t: &Table| {
        let mut p = PlanParams::new(
            Collective::AllReduce,
            2,
            proxy_collectives::planner::DataType::F32,
            0,
            4,
        );
        let l = choose_in(t, &mut p);
        (p.cost_model, l.algorithm, l.why)
    };
    let t = load(lookup(&[])).unwrap();
    assert_eq!(t.link, LinkKind::Memory);
    assert_eq!(
        plan(&t),
        (LinkKind::Memory.default_cost_model(), "direct", "tuner")
    );
    let t = load(lookup(&[("NEURON_RT_PROXY_TUNER_LINK", " network ")])).unwrap();
    assert_eq!(t.link, LinkKind::Network);
    assert_eq!(
        plan(&t),
        (
            LinkKind::Network.default_cost_model(),
            "recursive-doubling",
            "tuner"
        )
    );
    let e = load(lookup(&[("NEURON_RT_PROXY_TUNER_LINK", "tcp")])).unwrap_err();
    assert_eq!(
        e,
        "NEURON_RT_PROXY_TUNER_LINK=tcp: not a kind of link (memory, shared-memory, network)"
    );
    // The C constants are the kinds' indices.
    use crate::types::{
        NRT_PROXY_LINK_MEMORY, NRT_PROXY_LINK_NETWORK, NRT_PROXY_LINK_SHARED_MEMORY,
    };
    assert_eq!(
        [
            LINKS[NRT_PROXY_LINK_MEMORY as usize],
            LINKS[NRT_PROXY_LINK_SHARED_MEMORY as usize],
            LINKS[NRT_PROXY_LINK_NETWORK as usize]
        ],
        [LinkKind::Memory, LinkKind::SharedMemory, LinkKind::Network]
    );
}
