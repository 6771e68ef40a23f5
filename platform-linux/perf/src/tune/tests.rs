//! The fit: exact samples give back their constants; noisy ones land near them; a constant
//! the data pull below zero is zero; and the tuner's choice follows the constants.

use super::*;

fn samples(m: &CostModel, ranks: u32, noise: impl Fn(usize) -> f64) -> Vec<Sample> {
    let mut out = Vec::new();
    for algorithm in ALGORITHMS {
        for (i, bytes) in [8u64, 1 << 10, 16 << 10, 128 << 10, 1 << 20]
            .into_iter()
            .enumerate()
        {
            let terms = tuner::terms(
                Collective::AllReduce,
                algorithm,
                bytes,
                ranks,
                512 << 10,
                false,
            )
            .unwrap();
            let t = terms.time_ns(m) as f64 * noise(out.len() + i);
            out.push(Sample {
                algorithm,
                bytes,
                chunk: 512 << 10,
                terms,
                time_ns: t,
                crowd: 0.0,
            });
        }
    }
    out
}

const M: CostModel = CostModel {
    step_ns: 3_000,
    entry_ns: 700,
    byte_ps: 80,
    reduce_ps: 25,
};

#[test]
fn exact_samples_give_back_their_constants() {
    for ranks in [4u32, 6, 8] {
        let s = samples(&M, ranks, |_| 1.0);
        let m = model_of(fit(&s).unwrap());
        assert_eq!(m, M, "{ranks} ranks");
        assert!(rms_relative_error(&s, &m) < 1e-3);
    }
}

#[test]
fn noisy_samples_land_near_and_nothing_is_negative() {
    // ±10 % alternating.
    let s = samples(&M, 4, |i| if i % 2 == 0 { 1.1 } else { 0.9 });
    let m = model_of(fit(&s).unwrap());
    // α and o trade against each other at one rank count (steps and entries grow together);
    // what the fit must get right is the time it predicts, and the bandwidth.
    let exact = samples(&M, 4, |_| 1.0);
    assert!(rms_relative_error(&exact, &m) < 0.1, "{m:?}");
    assert!(m.byte_ps.abs_diff(M.byte_ps) <= 10, "{m:?}");
    // No reduction cost at all in the data, and noise that would make it negative unclamped.
    let m0 = CostModel { reduce_ps: 0, ..M };
    let s = samples(&m0, 4, |i| 1.0 + 0.05 * ((i % 3) as f64 - 1.0));
    let x = fit(&s).unwrap();
    assert!(x.iter().all(|&v| v >= 0.0), "{x:?}");
}

/// On 2 ranks below the chunk size steps and entries move together: o is 0, α carries both,
/// and the model's times stay right.
#[test]
fn two_ranks_fold_o_into_alpha() {
    let s: Vec<Sample> = samples(&M, 2, |_| 1.0)
        .into_iter()
        .filter(|s| s.bytes <= 128 << 10)
        .collect();
    let x = fit(&s).unwrap();
    assert_eq!(x[1], 0.0, "{x:?}");
    let m = model_of(x);
    assert!(rms_relative_error(&s, &m) < 0.01, "{m:?}");
}

/// With the entries pass (direct and the ring at 64..512 KiB in 4 KiB chunks) the same 2-rank
/// samples give back every constant, o among them.
#[test]
fn the_entries_pass_tells_o_from_alpha_on_two_ranks() {
    let mut s: Vec<Sample> = samples(&M, 2, |_| 1.0)
        .into_iter()
        .filter(|s| s.bytes <= 128 << 10)
        .collect();
    let sweep = [8u64, 1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];
    let sizes = entry_pass_sizes(&sweep, 512 << 10, 4);
    assert_eq!(sizes, [64 << 10, 256 << 10]);
    // A sweep of small sizes only still gets the pass: 16 and 64 chunks of 4 KiB.
    assert_eq!(entry_pass_sizes(&sweep[..3], 512 << 10, 4), sizes);
    // At a chunk of 4 KiB or less: nothing when the sweep's own steps are many entries, else
    // 16 and 64 of its chunks (at least an element each: 2-byte elements in 1-byte chunks).
    assert!(entry_pass_sizes(&sweep, 1 << 10, 4).is_empty());
    assert_eq!(
        entry_pass_sizes(&sweep[..3], 1 << 10, 4),
        [16 << 10, 64 << 10]
    );
    assert_eq!(entry_pass_sizes(&sweep[..3], 1, 2), [32, 128]);
    for algorithm in [Algorithm::Direct, Algorithm::Ring] {
        for &bytes in &sizes {
            let terms = tuner::terms(
                Collective::AllReduce,
                algorithm,
                bytes,
                2,
                ENTRY_CHUNK,
                false,
            )
            .unwrap();
            s.push(Sample {
                algorithm,
                bytes,
                chunk: ENTRY_CHUNK,
                terms,
                time_ns: terms.time_ns(&M) as f64,
                crowd: 0.0,
            });
        }
    }
    assert_eq!(model_of(fit(&s).unwrap()), M);
}

/// On a crowded host (4 ranks on 2 CPUs) each time is the critical path times the crowding,
/// as the tuner costs it: the fit of such times gives the constants back (a fit that ignored
/// the crowding gave each constant twice over, and the tuner's crowding counted it again).
#[test]
fn a_crowded_hosts_times_give_back_their_constants() {
    let crowded: Vec<Sample> = samples(&M, 4, |_| 1.0)
        .into_iter()
        .map(|s| Sample {
            crowd: 2.0,
            time_ns: s.time_ns * 2.0,
            ..s
        })
        .collect();
    let got = model_of(fit(&crowded).unwrap());
    assert_eq!(got, M);
    assert!(rms_relative_error(&crowded, &got) < 1e-3);
    let uncrowded: Vec<Sample> = crowded
        .iter()
        .map(|s| Sample { crowd: 0.0, ..*s })
        .collect();
    let doubled = model_of(fit(&uncrowded).unwrap());
    assert_eq!(doubled.step_ns, 2 * M.step_ns);
    assert_eq!(doubled.entry_ns, 2 * M.entry_ns);
}

#[test]
fn no_samples_no_fit() {
    assert_eq!(fit(&[]), None);
}

#[test]
fn the_tuners_choice_follows_the_constants() {
    let pick = |m: CostModel, ranks: u32, bytes: u64| {
        let mut p = PlanParams::new(
            Collective::AllReduce,
            bytes / 4,
            proxy_collectives::planner::DataType::F32,
            0,
            ranks,
        );
        p.cost_model = m;
        tuner::pick(&p)
    };
    // Cheap steps, dear entries (a network of big messages): fewer messages in all wins.
    let d = tuner::DEFAULT_COST_MODEL;
    assert_eq!(pick(d, 8, 8), Algorithm::RecursiveDoubling);
    let dear_steps = CostModel {
        step_ns: 200_000,
        entry_ns: 100,
        ..d
    };
    assert_eq!(pick(dear_steps, 8, 8), Algorithm::Direct);
    // At 64 KiB with 8 ranks: recursive doubling by default, Rabenseifner when bytes cost more.
    let dear_bytes = CostModel {
        byte_ps: 2_000,
        reduce_ps: 2_000,
        ..d
    };
    assert_ne!(pick(d, 8, 64 << 10), pick(dear_bytes, 8, 64 << 10));
}

/// The bootstrap's host identities become a host map when each host's ranks are contiguous
/// and there are two hosts or more.
#[test]
fn host_maps_from_host_identities() {
    use crate::run::host_map_of;
    let id = |s: &str| s.as_bytes().to_vec();
    let m = host_map_of(&[id("a"), id("a"), id("b"), id("c"), id("c"), id("c")]).unwrap();
    assert_eq!(m.sizes(), [2, 1, 3]);
    assert_eq!(host_map_of(&[id("a"), id("a")]), None, "one host");
    assert_eq!(
        host_map_of(&[id("a"), id("b"), id("a")]),
        None,
        "not contiguous"
    );
    assert_eq!(host_map_of(&[]), None);
}

/// The in-host constants of the link fit's tests.
const LINK_TESTS_HOST: CostModel = CostModel {
    step_ns: 2_000,
    entry_ns: 900,
    byte_ps: 35,
    reduce_ps: 30,
};

/// Exchanges over a link of known α and β, timed exactly by the model (with the host's o):
/// the link fit gives them back; with ±5 % noise it lands near them; one size only cannot
/// tell α from β.
#[test]
fn the_link_fit_recovers_alpha_and_beta() {
    let host = LINK_TESTS_HOST;
    let link = CostModel {
        step_ns: 45_000,
        entry_ns: host.entry_ns,
        byte_ps: 8_000,
        reduce_ps: host.reduce_ps,
    };
    let exchanges = |noise: &dyn Fn(usize) -> f64| -> Vec<link::LinkSample> {
        (0..11)
            .map(|i| {
                let bytes = 8u64 << (2 * i); // 8 B .. 8 MiB
                let hosts = HostMap::new(&[2, 2]).unwrap();
                let shift = link::Exchange::Shift;
                let terms =
                    link::exchange_terms(shift, bytes, 4, &hosts, 512 << 10, false).unwrap();
                link::LinkSample {
                    exchange: link::Exchange::Shift,
                    bytes,
                    terms,
                    time_ns: terms.time_ns(&link) as f64 * noise(i),
                }
            })
            .collect()
    };
    let exact = exchanges(&|_| 1.0);
    // The terms are one step, one message each way (⌈b / chunk⌉ entries each).
    assert_eq!(exact[0].terms.steps, 1);
    assert_eq!(exact[10].terms.entries, 2 * 16);
    assert_eq!(exact[10].terms.sent, 8 << 20);
    let m = link::fit_link(&exact, &host).unwrap();
    assert_eq!(m, link);
    assert!(link::link_rms(&exact, &m) < 1e-3);

    let noisy = exchanges(&|i| if i % 2 == 0 { 1.05 } else { 0.95 });
    let m = link::fit_link(&noisy, &host).unwrap();
    assert!(m.step_ns.abs_diff(link.step_ns) <= 4_500, "{m:?}");
    assert!(m.byte_ps.abs_diff(link.byte_ps) <= 800, "{m:?}");
    assert_eq!((m.entry_ns, m.reduce_ps), (host.entry_ns, host.reduce_ps));

    assert_eq!(link::fit_link(&exact[3..4], &host), None);
    assert_eq!(link::fit_link(&[], &host), None);
}

/// A link faster per message than the host's entries would make α negative: it is zero, and
/// β is fitted alone.
#[test]
fn the_link_fit_clamps_alpha_at_zero() {
    let host = CostModel {
        entry_ns: 10_000,
        ..LINK_TESTS_HOST
    };
    let samples: Vec<link::LinkSample> = [8u64, 4 << 10, 256 << 10]
        .into_iter()
        .map(|bytes| {
            let hosts = HostMap::new(&[1, 1]).unwrap();
            let shift = link::Exchange::Shift;
            let terms = link::exchange_terms(shift, bytes, 2, &hosts, 512 << 10, false).unwrap();
            // 2 entries at 10 µs would be 20 µs; the link did it in 5 µs + 1 ns/B.
            link::LinkSample {
                exchange: link::Exchange::Shift,
                bytes,
                terms,
                time_ns: 5_000.0 + bytes as f64,
            }
        })
        .collect();
    let m = link::fit_link(&samples, &host).unwrap();
    assert_eq!(m.step_ns, 0, "{m:?}");
    assert!(m.byte_ps > 0, "{m:?}");
}

/// With the all-to-all's exchanges beside the shift's (four ranks on two hosts), the link fit
/// gives back a per-message cost of its own (the shift alone would leave the host's): α, o and
/// β of a link whose messages cost more than the host's entries, exactly; with two ranks no
/// all-to-all is timed, and o stays the host's. The all-to-all's bytes count the two ranks of
/// a host crossing at once (one block more each), as the tuner counts a flat all-reduce's.
#[test]
fn the_link_fit_tells_the_per_message_cost_from_the_all_to_all() {
    let host = LINK_TESTS_HOST;
    let link = CostModel {
        step_ns: 40_000,
        entry_ns: 12_000,
        byte_ps: 8_000,
        reduce_ps: host.reduce_ps,
    };
    let sample = |exchange, bytes| {
        let hosts = HostMap::new(&[2, 2]).unwrap();
        let terms = link::exchange_terms(exchange, bytes, 4, &hosts, 512 << 10, false).unwrap();
        link::LinkSample {
            exchange,
            bytes,
            terms,
            time_ns: terms.time_ns(&link) as f64,
        }
    };
    let mut samples: Vec<link::LinkSample> = (0..11)
        .map(|i| sample(link::Exchange::Shift, 8u64 << (2 * i)))
        .collect();
    // 8 B .. 8 MiB shifts, then 32 B .. 32 KiB all-to-alls (blocks of 8 B .. 8 KiB).
    samples.extend((0..6).map(|i| sample(link::Exchange::AllToAll, 32u64 << (2 * i))));
    let a2a = samples.last().unwrap().terms;
    // Three blocks of 8 KiB, two of them across, with the host's other rank's two.
    assert_eq!((a2a.steps, a2a.entries, a2a.sent), (1, 6, (3 + 2) * 8192));
    let m = link::fit_link(&samples, &host).unwrap();
    assert_eq!(m, link);
    assert!(link::link_rms(&samples, &m) < 1e-3);

    // The shift alone: the host's o, α absorbs what it cannot tell apart.
    let shift_only: Vec<link::LinkSample> = samples
        .iter()
        .filter(|s| s.exchange == link::Exchange::Shift)
        .copied()
        .collect();
    let m = link::fit_link(&shift_only, &host).unwrap();
    assert_eq!(m.entry_ns, host.entry_ns);
    assert!(m.step_ns > link.step_ns, "{m:?}");
}
