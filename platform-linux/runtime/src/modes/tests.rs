use super::*;
use std::collections::HashMap;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| m.get(k).cloned()
}

fn inputs(cpus: usize, procs: u32, worker: usize, caller: usize) -> ModeInputs {
    ModeInputs {
        cpus: HostCpus::new(cpus, None),
        processes: LocalProcesses {
            count: procs,
            source: "test",
        },
        worker_threads: worker,
        caller_threads: caller,
    }
}

#[test]
fn worker_mode_when_its_threads_fit() {
    // 1 process, 2 ranks: 2 devices + 2 workers + producer on 8 CPUs.
    let a = advise(inputs(8, 1, 5, 2));
    assert_eq!((a.mode, a.fits), (DriveMode::Thread, true));
    assert_eq!((a.worker_threads, a.caller_threads), (5, 2));
}

#[test]
fn caller_mode_when_only_its_threads_fit() {
    let a = advise(inputs(2, 1, 5, 2));
    assert_eq!((a.mode, a.fits), (DriveMode::Caller, true));
}

#[test]
fn the_other_processes_on_the_host_count() {
    // The case: 4 rank processes on 2 CPUs, each 3 threads in worker mode and 1 in
    // caller mode: 12 against 4, neither fits, caller has fewer, and no wait spins.
    let a = advise(inputs(2, 4, 3, 1));
    assert_eq!((a.worker_threads, a.caller_threads), (12, 4));
    assert_eq!((a.mode, a.fits), (DriveMode::Caller, false));
    let text = a.to_string();
    assert!(text.starts_with("caller (worker mode needs 12"), "{text}");
    assert!(text.contains("no spinning"), "{text}");
    // Alone on the host the same process fits in caller mode.
    assert!(advise(inputs(2, 1, 3, 1)).fits);
}

#[test]
fn neither_fits_picks_the_fewer_threads() {
    assert_eq!(advise(inputs(1, 2, 2, 3)).mode, DriveMode::Thread);
    assert_eq!(advise(inputs(1, 2, 3, 3)).mode, DriveMode::Caller);
}

#[test]
fn a_quota_lowers_the_cpus_rounding_up() {
    assert_eq!(HostCpus::new(8, Some(1.5)).usable, 2);
    assert_eq!(HostCpus::new(2, Some(16.0)).usable, 2);
    assert_eq!(HostCpus::new(4, None).usable, 4);
    assert_eq!(
        HostCpus::new(4, Some(0.0)).usable,
        4,
        "a zero quota is no quota"
    );
    assert_eq!(parse_cpu_max("150000 100000\n"), Some(1.5));
    assert_eq!(parse_cpu_max("max 100000"), None);
    assert_eq!(parse_cpu_max("junk"), None);
    // The machine's own answer is at least one CPU and never above the affinity count.
    let h = host_cpus();
    assert!(h.usable >= 1 && h.usable <= h.affinity, "{h:?}");
}

#[test]
fn launchers_tell_the_processes_on_the_host() {
    let got = |pairs: &[(&str, &str)]| local_processes_from(env(pairs));
    assert_eq!(got(&[]), Ok(None));
    assert_eq!(
        got(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "4")]),
        Ok(Some(LocalProcesses {
            count: 4,
            source: "OMPI_COMM_WORLD_LOCAL_SIZE"
        }))
    );
    // Ours wins over the launcher's.
    assert_eq!(
        got(&[
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
            ("NEURON_RT_PROXY_LOCAL_RANKS", "2")
        ])
        .unwrap()
        .unwrap()
        .count,
        2
    );
    assert_eq!(got(&[("MPI_LOCALNRANKS", "3")]).unwrap().unwrap().count, 3);
    assert_eq!(got(&[("PMIX_LOCAL_SIZE", "5")]).unwrap().unwrap().count, 5);
    // SLURM: "2(x3),1" is nodes 0-2 with 2 tasks, node 3 with 1.
    let slurm = |node: &str| got(&[("SLURM_TASKS_PER_NODE", "2(x3),1"), ("SLURM_NODEID", node)]);
    assert_eq!(slurm("0").unwrap().unwrap().count, 2);
    assert_eq!(slurm("2").unwrap().unwrap().count, 2);
    assert_eq!(slurm("3").unwrap().unwrap().count, 1);
    assert!(slurm("4").unwrap_err().contains("SLURM_TASKS_PER_NODE"));
    // Bad values are errors that name the variable, never a silent 1.
    let e = got(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "zero")]).unwrap_err();
    assert!(e.contains("OMPI_COMM_WORLD_LOCAL_SIZE"), "{e}");
    assert!(got(&[("MPI_LOCALNRANKS", "0")]).is_err());
    assert!(got(&[("SLURM_TASKS_PER_NODE", "2(x"), ("SLURM_NODEID", "0")]).is_err());
}

#[test]
fn the_state_dump_prints_the_rules_host_inputs() {
    let line = crate::dump::rule_inputs_line();
    let cpus = host_cpus();
    assert!(
        line.starts_with(&format!(
            "mode-rule cpus={} CPUs (affinity {}",
            cpus.usable, cpus.affinity
        )),
        "{line}"
    );
    assert!(line.contains(" processes="), "{line}");
}
