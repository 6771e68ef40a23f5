//! The calibration file: round trip, refusals naming the file and the fault, the variable.

use super::*;
use proxy_collectives::planner::tuner::LinkKind;

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("proxy-tune-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_file_round_trips() {
    let m = CostModel {
        step_ns: 2100,
        entry_ns: 950,
        byte_ps: 41,
        reduce_ps: 30,
    };
    let f = TuneFile::new(m, "test".into(), 40, 0.18);
    let p = dir().join("round.json");
    f.write(&p).unwrap();
    let back = TuneFile::read(&p).unwrap();
    assert_eq!(back, f);
    assert_eq!(back.model(), m);
    let t =
        Tuning::from_lookup(&|k| (k == TUNE_FILE_ENV).then(|| p.display().to_string())).unwrap();
    assert_eq!(t.model(LinkKind::Network), m);
    assert!(
        t.describe(LinkKind::Network)
            .starts_with(&format!("cost model from {}", p.display())),
        "{}",
        t.describe(LinkKind::Network)
    );
    assert!(!p.with_extension("json.tmp").exists());
    assert_eq!(
        t.inter_host_model(LinkKind::Network),
        m,
        "no inter-host model: the host's"
    );
    // With an inter-host model: read back, described, range-checked.
    let slow = CostModel {
        step_ns: 30_000,
        entry_ns: 2_000,
        byte_ps: 800,
        reduce_ps: 30,
    };
    let mut f2 = f.clone();
    f2.inter_host_cost_model = Some(slow.into());
    f2.write(&p).unwrap();
    let t = Tuning::from_lookup(&|_| Some(p.display().to_string())).unwrap();
    assert_eq!(
        (
            t.model(LinkKind::Network),
            t.inter_host_model(LinkKind::Network)
        ),
        (m, slow)
    );
    assert!(
        t.describe(LinkKind::Network)
            .contains("between hosts α 30000 ns/step"),
        "{}",
        t.describe(LinkKind::Network)
    );
    f2.inter_host_cost_model = Some(CostModelJson {
        step_ns: MAX_NS + 1,
        ..slow.into()
    });
    assert_eq!(
        f2.check().unwrap_err(),
        format!(
            "inter_host_cost_model.step_ns is {}, above {MAX_NS}",
            MAX_NS + 1
        )
    );
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn no_variable_is_the_default() {
    let t = Tuning::from_lookup(&|_| None).unwrap();
    assert_eq!(t, Tuning::Default);
    assert_eq!(
        Tuning::from_lookup(&|_| Some(" ".into())).unwrap(),
        Tuning::Default
    );
    // Without a file each kind of link has its own defaults, within and between hosts.
    for k in LinkKind::ALL {
        assert_eq!(t.model(k), k.default_cost_model());
        assert_eq!(t.inter_host_model(k), k.default_inter_host_model());
    }
    assert_ne!(t.model(LinkKind::Network), t.model(LinkKind::Memory));
    assert_eq!(
        t.describe(LinkKind::Network),
        "cost model default for network links (α 4300 ns/step, o 2400 ns/entry, β 310 ps/B \
         sent, γ 35 ps/B reduced; between hosts α 15000 ns/step, o 4700 ns/entry, β 800 ps/B \
         sent, γ 35 ps/B reduced; no NEURON_RT_PROXY_TUNE_FILE)"
    );
    assert!(t
        .describe(LinkKind::SharedMemory)
        .starts_with("cost model default for shared-memory links (α 1000 ns/step"));
    assert!(!t.describe(LinkKind::SharedMemory).contains("between hosts"));
}

#[test]
fn bad_files_are_refused_naming_the_file_and_the_fault() {
    let d = dir();
    let bad = |name: &str, text: &str| {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        let e = Tuning::from_lookup(&|_| Some(p.display().to_string())).unwrap_err();
        assert!(
            e.starts_with(&format!("{TUNE_FILE_ENV}={}: ", p.display())),
            "{e}"
        );
        std::fs::remove_file(&p).unwrap();
        e
    };
    let e = bad(
        "trunc.json",
        r#"{"version": 1, "cost_model": {"step_ns": 1"#,
    );
    assert!(e.contains("EOF") || e.contains("line"), "{e}");
    let e = bad(
        "missing.json",
        r#"{"version": 1, "cost_model": {"step_ns": 1, "entry_ns": 2, "byte_ps": 3}}"#,
    );
    assert!(e.contains("reduce_ps"), "{e}");
    let e = bad(
        "unknown.json",
        r#"{"version": 1, "cost_model": {"step_ns": 1, "entry_ns": 2, "byte_ps": 3, "reduce_ps": 4, "gamma": 5}}"#,
    );
    assert!(e.contains("gamma"), "{e}");
    let e = bad(
        "negative.json",
        r#"{"version": 1, "cost_model": {"step_ns": -1, "entry_ns": 2, "byte_ps": 3, "reduce_ps": 4}}"#,
    );
    assert!(e.contains("-1") || e.contains("invalid value"), "{e}");
    let e = bad(
        "version.json",
        r#"{"version": 2, "cost_model": {"step_ns": 1, "entry_ns": 2, "byte_ps": 3, "reduce_ps": 4}}"#,
    );
    assert!(e.ends_with("version 2 (this build reads 1)"), "{e}");
    let e = bad(
        "absurd.json",
        r#"{"version": 1, "cost_model": {"step_ns": 1, "entry_ns": 2, "byte_ps": 3000000000, "reduce_ps": 4}}"#,
    );
    assert!(
        e.ends_with("cost_model.byte_ps is 3000000000, above 1000000000"),
        "{e}"
    );
    let missing = d.join("absent.json");
    let e = Tuning::from_lookup(&|_| Some(missing.display().to_string())).unwrap_err();
    assert!(e.contains("No such file"), "{e}");
}

#[test]
fn a_failed_write_leaves_the_old_file_whole() {
    let d = dir();
    let p = d.join("keep.json");
    let good = TuneFile::new(LinkKind::Memory.default_cost_model(), "old".into(), 1, 0.0);
    good.write(&p).unwrap();
    // An absurd model is refused before anything is written.
    let mut bad = good.clone();
    bad.cost_model.step_ns = MAX_NS + 1;
    assert!(bad.write(&p).is_err());
    // A write whose rename fails (the target is a directory) leaves no temporary file.
    let dir_target = d.join("is-a-dir");
    std::fs::create_dir_all(&dir_target).unwrap();
    assert!(good.write(&dir_target).is_err());
    assert!(!d.join("is-a-dir.tmp").exists());
    assert_eq!(TuneFile::read(&p).unwrap(), good);
    std::fs::remove_file(&p).unwrap();
}

/// What `proxy-perf --tune` writes across hosts (the link's constants and its fit) reads back
/// field for field; one host's file holds no inter-host field at all.
#[test]
fn a_measured_link_round_trips_and_one_host_writes_none() {
    let host = CostModel {
        step_ns: 2_400,
        entry_ns: 900,
        byte_ps: 38,
        reduce_ps: 31,
    };
    let link = CostModel {
        step_ns: 41_000,
        entry_ns: 900,
        byte_ps: 8_300,
        reduce_ps: 31,
    };
    let p = dir().join("link.json");
    let one = TuneFile::new(host, "one host".into(), 44, 0.2);
    one.write(&p).unwrap();
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(!text.contains("inter_host"), "{text}");
    let back = TuneFile::read(&p).unwrap();
    assert_eq!(back, one);
    assert_eq!(back.inter_host_samples, None);
    assert_eq!(back.inter_host_model(), host);

    let two = one.clone().with_inter_host(link, 9, 0.0625);
    two.write(&p).unwrap();
    let back = TuneFile::read(&p).unwrap();
    assert_eq!(back, two);
    assert_eq!((back.model(), back.inter_host_model()), (host, link));
    assert_eq!(back.inter_host_samples, Some(9));
    assert_eq!(back.inter_host_rms_relative_error, Some(0.0625));
    let t = Tuning::File(p.clone(), back);
    assert!(
        t.describe(LinkKind::Network).contains(
            "between hosts α 41000 ns/step, o 900 ns/entry, β 8300 ps/B sent, γ 31 ps/B \
             reduced (fit of 9 exchanges, rms error 6 %)"
        ),
        "{}",
        t.describe(LinkKind::Network)
    );
    std::fs::remove_file(&p).unwrap();
}
