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
