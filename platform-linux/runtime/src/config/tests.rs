use super::*;
use std::collections::HashMap;

fn with(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_lookup(|k| m.get(k).cloned())
}

#[test]
fn defaults_and_every_variable() {
    assert_eq!(with(&[]).unwrap(), Config::default());
    let c = with(&[
        ("NEURON_RT_RANKS_PER_NETWORK_PROXY", "2"),
        ("NEURON_RT_ONE_THREAD_PER_CORE", "1"),
        ("NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY", "0,2-3"),
        ("NEURON_RT_PROXY_SPIN_US", "7"),
        ("NEURON_RT_EXEC_TIMEOUT", "0"),
        ("NEURON_RT_DBG_PROXY_EARLY_COMPLETION", "true"),
        ("NEURON_RT_LOG_LEVEL", "warning"),
        ("NEURON_RT_PROXY_DUMP_SIGNAL", "sigusr1"),
    ])
    .unwrap();
    assert_eq!(c.dump_signal, Some(libc::SIGUSR1));
    assert_eq!(
        with(&[("NEURON_RT_PROXY_DUMP_SIGNAL", "USR2")])
            .unwrap()
            .dump_signal,
        Some(libc::SIGUSR2)
    );
    assert_eq!(c.ranks_per_network_proxy, 2);
    assert!(c.one_thread_per_core && c.early_completion);
    assert_eq!(c.cpu_affinity, [0, 2, 3]);
    assert_eq!(c.spin, Duration::from_micros(7));
    assert_eq!(c.exec_timeout, None);
    assert_eq!(c.timeout_ns(), None);
    assert_eq!(c.log_level, Some(log::LevelFilter::Warn));
    assert_eq!(Config::default().timeout_ns(), Some(30_000_000_000));
}

#[test]
fn bad_values_name_the_variable_and_the_value() {
    for (k, v) in [
        ("NEURON_RT_RANKS_PER_NETWORK_PROXY", "0"),
        ("NEURON_RT_RANKS_PER_NETWORK_PROXY", "two"),
        ("NEURON_RT_ONE_THREAD_PER_CORE", "yes"),
        ("NEURON_RT_LOW_LATENCY_TASKS_CPU_AFFINITY", "3-1"),
        ("NEURON_RT_PROXY_SPIN_US", "-1"),
        ("NEURON_RT_EXEC_TIMEOUT", ""),
        ("NEURON_RT_DBG_PROXY_EARLY_COMPLETION", "2"),
        ("NEURON_RT_LOG_LEVEL", "loud"),
        ("NEURON_RT_PROXY_DUMP_SIGNAL", "KILL"),
        ("NEURON_RT_PROXY_DUMP_SIGNAL", "10"),
    ] {
        let e = with(&[(k, v)]).unwrap_err();
        assert_eq!((e.var, e.value.as_str()), (k, v));
        let msg = e.to_string();
        assert!(msg.contains(k) && msg.contains(&format!("{v:?}")), "{msg}");
    }
}
