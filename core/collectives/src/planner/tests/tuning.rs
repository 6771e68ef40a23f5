//! The tuner's overrides and labels: the environment variables' names and parser (shared by
//! proxy-perf and the C library), and why a plan has its algorithm.

use alloc::string::{String, ToString};

use super::params;
use crate::planner::tuner::{self, algo_env_var, algos_from_env, parse_algo, DEFAULT_COST_MODEL};
use crate::planner::{Algorithm, Collective, DataType};

#[test]
fn env_var_names_follow_the_collective_names() {
    for c in Collective::ALL {
        let want = alloc::format!(
            "NEURON_RT_PROXY_ALGO_{}",
            c.name().to_ascii_uppercase().replace('-', "_")
        );
        assert_eq!(algo_env_var(c), want);
    }
}

#[test]
fn parse_accepts_names_and_refuses_unknown_or_unsupported() {
    let c = Collective::AllReduce;
    assert_eq!(
        parse_algo(c, "V", " rabenseifner\n"),
        Ok(Algorithm::Rabenseifner)
    );
    assert_eq!(parse_algo(c, "V", "auto"), Ok(Algorithm::Auto));
    assert_eq!(
        parse_algo(c, "V", "tree").unwrap_err(),
        "V=tree: not an algorithm (auto, ring, direct, recursive-doubling, rabenseifner, \
         recursive-halving, bruck, binomial, scatter-allgather, hierarchical)"
    );
    assert_eq!(
        parse_algo(c, "V", "bruck").unwrap_err(),
        "V=bruck: bruck does not support all-reduce (it does: auto, ring, direct, \
         recursive-doubling, rabenseifner, hierarchical)"
    );
    for c in Collective::ALL {
        for a in Algorithm::ALL {
            assert_eq!(parse_algo(c, "V", a.name()).is_ok(), a.supports(c));
        }
    }
}

#[test]
fn env_overrides_each_collective_and_names_the_bad_variable() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    assert_eq!(algos_from_env(&|_| None), Ok([None; 6]));
    let got = algos_from_env(&env(&[
        ("NEURON_RT_PROXY_ALGO_ALL_REDUCE", "ring"),
        ("NEURON_RT_PROXY_ALGO_BROADCAST", "auto"),
        ("NEURON_RT_PROXY_ALGO_ALL_TO_ALL", "bruck"),
        ("NEURON_RT_PROXY_ALGO_ALL_GATHER", ""),
    ]))
    .unwrap();
    assert_eq!(
        got,
        [
            Some(Algorithm::Ring),
            None,
            None,
            None,
            None,
            Some(Algorithm::Bruck)
        ]
    );
    let e: String =
        algos_from_env(&env(&[("NEURON_RT_PROXY_ALGO_REDUCE_SCATTER", "binomial")])).unwrap_err();
    assert!(
        e.starts_with("NEURON_RT_PROXY_ALGO_REDUCE_SCATTER=binomial: binomial does not support"),
        "{e}"
    );
}

#[test]
fn labels_name_the_resolved_algorithm_and_why() {
    let mut p = params(Collective::AllReduce, 8, 2, DataType::F32, Algorithm::Auto);
    let l = p.label();
    assert_eq!(
        (l.collective, l.algorithm, l.why),
        ("all-reduce", "recursive-doubling", "tuner")
    );
    p.cost_model.step_ns = DEFAULT_COST_MODEL.step_ns + 1;
    assert_eq!(p.label().why, "tuner-calibrated");
    p.algorithm = Algorithm::Ring;
    let l = p.label();
    assert_eq!((l.algorithm, l.why), ("ring", "asked"));
    assert_eq!(tuner::why(&p), "asked");
}
