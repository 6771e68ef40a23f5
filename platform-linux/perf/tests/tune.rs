//! `--tune FILE`, `--hosts` and `--ranks-sweep` end to end (in process, small sizes, a fixed iteration count: a smoke test of
//! the calibration's plumbing, not of its numbers): it writes a file that reads back; the
//! header's `tuner:` line names the file when `NEURON_RT_PROXY_TUNE_FILE` gives it, and why the
//! algorithm was chosen; a bad file fails the run naming the file and the fault.

mod common;
use common::argv;
use std::process::Command;

use proxy_runtime::tune_file::TuneFile;

const BIN: &str = env!("CARGO_BIN_EXE_proxy-perf");

fn run(extra: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(extra)
        .env_remove("NEURON_RT_PROXY_ALGO_ALL_REDUCE")
        .envs(env.iter().copied())
        .output()
        .expect("run proxy-perf");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tuner_line(out: &str) -> &str {
    out.lines()
        .find(|l| l.starts_with("#  tuner: "))
        .unwrap_or_else(|| panic!("no tuner line:\n{out}"))
}

/// The sweep most runs here share (a command line for [`argv`]).
const SWEEP: &str = "all-reduce --ranks 3 -b 8 -e 4096 -n 3";

#[test]
fn tune_writes_a_file_the_header_then_names() {
    let dir = std::env::temp_dir();
    let file = dir.join(format!("proxy-perf-tune-{}.json", std::process::id()));
    let f = file.to_str().unwrap();
    let line = format!("{SWEEP} -f 8 -w 1 --tune");
    let mut a = argv(&line);
    a.push(f);
    let (code, out, err) = run(&a, &[("NEURON_RT_PROXY_TUNE_FILE", "")]);
    assert_eq!(code, 0, "{out}\n{err}");
    // 4 algorithms × 4 sizes (8, 64, 512, 4096), and the entries pass's direct and ring at
    // 64 and 256 KiB in 4 KiB chunks (the sweep has no size of many entries), each against the
    // fitted model.
    let rows = out
        .lines()
        .filter(|l| !l.starts_with('#') && l.trim_end().ends_with('%'))
        .count();
    assert_eq!(rows, 20, "{out}");
    let entry_rows = out
        .lines()
        .filter(|l| l.contains("(chunk 4096)") && l.trim_end().ends_with('%'))
        .count();
    assert_eq!(entry_rows, 4, "{out}");
    assert!(out.contains("# fitted: α "), "{out}");
    let t = TuneFile::read(&file).unwrap();
    assert_eq!(t.samples, 20);
    assert!(t.measured_on.contains("3 ranks"), "{t:?}");
    // One host: no inter-host constants, and the run says so.
    assert_eq!(t.inter_host_cost_model, None, "{t:?}");
    assert_eq!(t.inter_host_samples, None, "{t:?}");
    assert!(out.contains("# between hosts: not measured"), "{out}");

    let (code, out, err) = run(&argv(SWEEP), &[("NEURON_RT_PROXY_TUNE_FILE", f)]);
    assert_eq!(code, 0, "{err}");
    let line = tuner_line(&out);
    assert!(
        line.contains(&format!(
            "cost model from {f} (α {} ns/step",
            t.cost_model.step_ns
        )),
        "{line}"
    );
    let calibrated = t.model() != proxy_collectives::planner::tuner::DEFAULT_COST_MODEL;
    let why = if calibrated {
        "tuner-calibrated"
    } else {
        "tuner"
    };
    assert!(line.ends_with(&format!("why={why}")), "{line}");

    let (code, out, _) = run(&argv(SWEEP), &[("NEURON_RT_PROXY_TUNE_FILE", "")]);
    assert_eq!(code, 0);
    assert!(tuner_line(&out).contains("cost model default"), "{out}");
    let (code, out, _) = run(
        &argv(SWEEP),
        &[
            ("NEURON_RT_PROXY_TUNE_FILE", ""),
            ("NEURON_RT_PROXY_ALGO_ALL_REDUCE", "rabenseifner"),
        ],
    );
    assert_eq!(code, 0);
    assert!(
        tuner_line(&out).ends_with("rabenseifner from NEURON_RT_PROXY_ALGO_ALL_REDUCE, why=env"),
        "{out}"
    );

    std::fs::write(&file, "{\"version\": 1, \"cost_model\": {\"step_ns\": 1}}").unwrap();
    let (code, _, err) = run(&argv(SWEEP), &[("NEURON_RT_PROXY_TUNE_FILE", f)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "NEURON_RT_PROXY_TUNE_FILE={f}: missing field `entry_ns`"
        )),
        "{err}"
    );
    std::fs::remove_file(&file).unwrap();
}

/// `--hosts`: the hierarchical all-reduce over an uneven pretend host map, every value
/// checked, the header naming the map; a map that is not `--ranks` ranks is refused.
#[test]
fn hosts_run_the_hierarchical_all_reduce() {
    let (code, out, err) = run(
        &argv("all-reduce --ranks 6 --hosts 4,2 --algo hierarchical -b 8 -e 4096 -f 8 -n 3"),
        &[("NEURON_RT_PROXY_TUNE_FILE", "")],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        tuner_line(&out).ends_with("hosts 4,2 (ranks per host)"),
        "{out}"
    );
    assert!(
        out.contains("# Algorithm by size (B)  : hierarchical 8..4096"),
        "{out}"
    );
    let (code, _, err) = run(&argv("all-reduce --ranks 6 --hosts 4,1 -b 8 -e 8"), &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--hosts adds up to 5 ranks, --ranks is 6"),
        "{err}"
    );
}

/// `--ranks-sweep`: one row per rank count with the tuner's modelled time, every value
/// checked; `--plot` draws time against ranks with `--compare-ranks` lines; a bad compare
/// file is refused naming its line.
#[test]
fn ranks_sweep_table_and_plot() {
    let dir = std::env::temp_dir();
    let svg = dir.join(format!("proxy-perf-ranks-{}.svg", std::process::id()));
    let other = dir.join(format!("proxy-perf-ranks-{}-other.txt", std::process::id()));
    std::fs::write(&other, "# another run\n2 0.5\n3 1.5\n").unwrap();
    let mut a = argv("all-reduce --ranks-sweep 2,3 -b 8 -n 3 --plot");
    a.push(svg.to_str().unwrap());
    a.extend(["--compare-ranks", other.to_str().unwrap()]);
    let (code, out, err) = run(&a, &[("NEURON_RT_PROXY_TUNE_FILE", "")]);
    assert_eq!(code, 0, "{out}\n{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    for (r, n) in rows.iter().zip(["2", "3"]) {
        assert_eq!((r.len(), r[0], r[5]), (6, n, "0"), "{r:?}");
        assert!(r[4].parse::<f64>().unwrap() > 0.0, "modelled time: {r:?}");
    }
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("<svg") && text.contains("against ranks"),
        "{text}"
    );
    assert!(text.contains(&format!("proxy-perf-ranks-{}-other", std::process::id())));
    std::fs::write(&other, "2 fast\n").unwrap();
    let mut a = argv("all-reduce --ranks-sweep 2 --compare-ranks");
    a.push(other.to_str().unwrap());
    let (code, _, err) = run(&a, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(":1: want `ranks time_us`"), "{err}");
    for f in [svg, other] {
        std::fs::remove_file(f).unwrap();
    }
}

/// `--tune` with `--hosts` (pretend hosts in process): the exchanges between them are timed
/// and fitted too (the shift at every size, the all-to-all at the sizes of at least one
/// element per block), and the file holds the link's constants and their fit.
#[test]
fn tune_across_hosts_writes_the_links_constants() {
    let file =
        std::env::temp_dir().join(format!("proxy-perf-tune-hosts-{}.json", std::process::id()));
    let f = file.to_str().unwrap();
    let mut a = argv("all-reduce --ranks 4 --hosts 2,2 -b 8 -e 4096 -f 8 -n 3 -w 1 --tune");
    a.push(f);
    let (code, out, err) = run(&a, &[("NEURON_RT_PROXY_TUNE_FILE", "")]);
    assert_eq!(code, 0, "{out}\n{err}");
    let links = out
        .lines()
        .filter(|l| l.trim_start().starts_with("send-recv ") && l.trim_end().ends_with('%'))
        .count();
    assert_eq!(links, 4, "{out}");
    let all_to_all = out
        .lines()
        .filter(|l| l.trim_start().starts_with("all-to-all ") && l.trim_end().ends_with('%'))
        .count();
    // 64, 512 and 4096 B (8 B is less than one 4-byte element per rank's block).
    assert_eq!(all_to_all, 3, "{out}");
    assert!(out.contains("# fitted between hosts: α "), "{out}");
    assert!(out.contains("ns/entry (fitted)"), "{out}");
    assert!(out.contains("choice across hosts 2,2 at"), "{out}");
    let t = TuneFile::read(&file).unwrap();
    // In process the in-host fit runs on --ranks (4 algorithms × 4 sizes, and the entries
    // pass's 2 × 2).
    assert_eq!(t.samples, 20, "{t:?}");
    assert_eq!(t.inter_host_samples, Some(7), "{t:?}");
    let inter = t.inter_host_cost_model.expect("the link's constants");
    // γ of the link is the host's (o is the link's own, fitted).
    assert_eq!(inter.reduce_ps, t.cost_model.reduce_ps);
    assert!(
        t.measured_on.contains("send-recv and all-to-all, 4 ranks"),
        "{t:?}"
    );
    assert!(t.measured_on.contains("between hosts 2,2"), "{t:?}");
    std::fs::remove_file(&file).unwrap();
}

/// `--tune` with ranks as processes (the local launcher, one host): without `--hosts` the file
/// is the one-host file (no inter-host constants, the run says so); with `--hosts 1,1` the
/// processes time the exchanges between the two (pretend) hosts over libfabric and rank 0
/// writes the link's constants.
#[cfg(feature = "libfabric")]
#[test]
fn tune_with_ranks_as_processes() {
    let file = std::env::temp_dir().join(format!("proxy-perf-tune-lf-{}.json", std::process::id()));
    let f = file.to_str().unwrap();
    let mut base = argv(
        "all-reduce --transport libfabric --provider tcp --ranks 2 -b 8 -e 512 -f 8 -n 3 -w 1
         --tune",
    );
    base.push(f);
    let env = [("NEURON_RT_PROXY_TUNE_FILE", "")];
    let (code, out, err) = run(&base, &env);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("# between hosts: not measured"), "{out}");
    let t = TuneFile::read(&file).unwrap();
    assert_eq!(t.inter_host_cost_model, None, "{t:?}");
    // 4 algorithms × 3 sizes, and the entries pass's 2 × 2: on 2 ranks only that pass tells
    // the cost per entry from the cost per step (the constants themselves depend on this
    // debug build's timings on a loaded machine; the unit tests check the fit on exact samples).
    assert_eq!(t.samples, 16, "{t:?}");

    let (code, out, err) = run(&[&base[..], &["--hosts", "1,1"]].concat(), &env);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("libfabric (provider tcp"), "{out}");
    assert!(out.contains("# fitted between hosts: α "), "{out}");
    let t = TuneFile::read(&file).unwrap();
    assert_eq!(t.inter_host_samples, Some(3), "{t:?}");
    assert!(t.inter_host_cost_model.is_some(), "{t:?}");
    // Host 0 with 1 rank: its in-host fit ran in process on 2 ranks.
    assert!(t.measured_on.contains("transport mem, 2 ranks"), "{t:?}");

    // Two pretend hosts of 2: host 0's processes fit the in-host constants over a bootstrap
    // and comm of their own.
    let mut four = base.to_vec();
    four[6] = "4";
    let (code, out, err) = run(&[&four[..], &["--hosts", "2,2"]].concat(), &env);
    assert_eq!(code, 0, "{out}\n{err}");
    let t = TuneFile::read(&file).unwrap();
    assert!(
        t.measured_on
            .starts_with("proxy-perf --tune: all-reduce, transport libfabric"),
        "{t:?}"
    );
    assert!(t.measured_on.contains(", 2 ranks,"), "{t:?}");
    assert!(t.measured_on.contains("between hosts 2,2"), "{t:?}");
    // The shift at 8, 64 and 512 B, the all-to-all at 64 and 512 B.
    assert_eq!(t.inter_host_samples, Some(5), "{t:?}");
    std::fs::remove_file(&file).unwrap();
}
