use super::*;
use crate::progress::mem_transport::MemFabric;

#[test]
fn splitmix_is_deterministic_and_rates_hold() {
    let mut a = SplitMix64::new(7);
    let mut b = SplitMix64::new(7);
    assert_eq!(a.next_u64(), b.next_u64());
    assert_ne!(SplitMix64::new(8).next_u64(), SplitMix64::new(7).next_u64());
    // Fewer draws under Miri (slow interpreter); 10% of them, within a tenth.
    let draws = if cfg!(miri) { 10_000 } else { 100_000 };
    let mut r = SplitMix64::new(1);
    let hits = (0..draws).filter(|_| r.chance(100_000)).count();
    assert!(
        (draws * 9 / 100..draws * 11 / 100).contains(&hits),
        "10% of {draws} draws: {hits}"
    );
    assert!(!(0..1000).any(|_| r.chance(0)));
    assert!((0..1000).all(|_| r.chance(PPM)));
}

/// Two ranks over the in-memory fabric, rank 0's endpoint wrapped with `plan`.
fn pair(plan: FaultPlan) -> (FaultTransport, Box<dyn Transport>) {
    let f = MemFabric::new(2).unwrap();
    (
        FaultTransport::new(Box::new(f.endpoint(0).unwrap()), plan),
        Box::new(f.endpoint(1).unwrap()),
    )
}

fn poll_until(
    t: &mut dyn Transport,
    other: &mut dyn Transport,
    r: RequestId,
) -> Result<TestOutcome, NetError> {
    // A dropped message never arrives: the bound is what the test waits for (smaller under
    // Miri, which is slow).
    for _ in 0..if cfg!(miri) { 200 } else { 10_000 } {
        t.poll()?;
        other.poll()?;
        match t.test(r)? {
            TestOutcome::Pending => continue,
            done => return Ok(done),
        }
    }
    Ok(TestOutcome::Pending)
}

/// Posts `src` from `a` to `b` (retrying "try again" up to 100 times) and receives it;
/// returns both outcomes.
fn exchange(
    a: &mut FaultTransport,
    b: &mut dyn Transport,
    src: &[u8; 16],
    dst: &mut [u8; 16],
) -> (Result<TestOutcome, NetError>, Result<TestOutcome, NetError>) {
    let mut tries = 0;
    let s = loop {
        tries += 1;
        // SAFETY: `src` outlives the request (tested to its end below).
        if let Some(p) = unsafe { a.isend(1, src.as_ptr(), 16, 5) }.unwrap() {
            break p.request;
        }
        assert!(tries < 100, "100 posts answered try-again");
    };
    // SAFETY: `dst` outlives the request (tested to its end below).
    let r = unsafe { b.irecv(0, dst.as_mut_ptr(), 16, 5) }
        .unwrap()
        .unwrap();
    let sent = poll_until(a, b, s);
    let got = poll_until(b, a, r.request);
    (sent, got)
}

#[test]
fn a_try_again_storm_is_back_pressure_and_the_message_arrives_whole() {
    let (mut a, mut b) = pair(FaultPlan {
        seed: 3,
        eagain: 500_000,
        eagain_burst: 3,
        delay: 500_000,
        delay_polls: 4,
        ..FaultPlan::default()
    });
    // Fewer rounds under Miri (slow interpreter): still storms and delays at these rates.
    let rounds: u8 = if cfg!(miri) { 3 } else { 8 };
    for round in 0..rounds {
        let src = [round; 16];
        let mut dst = [0u8; 16];
        let (sent, got) = exchange(&mut a, &mut *b, &src, &mut dst);
        assert_eq!(sent, Ok(TestOutcome::Done { size: 16 }));
        assert_eq!(got, Ok(TestOutcome::Done { size: 16 }));
        assert_eq!(dst, src, "no byte wrong");
    }
    let c = a.counts();
    assert!(c.eagains >= 4 && c.delays > 0, "{c:?}");
    assert_eq!((c.errors, c.drops, c.truncations), (0, 0, 0));
}

#[test]
fn error_completions_truncations_and_drops_are_what_the_comm_sees() {
    let src = [9u8; 16];
    let mut dst = [0u8; 16];
    let (mut a, mut b) = pair(FaultPlan {
        seed: 1,
        error_completion: PPM,
        ..FaultPlan::default()
    });
    let (sent, _) = exchange(&mut a, &mut *b, &src, &mut dst);
    assert_eq!(sent.unwrap_err().message, "injected error completion");
    assert_eq!(a.counts().errors, 1);

    // Truncation: rank 1 receives through the wrapper.
    let f = MemFabric::new(2).unwrap();
    let mut tx: Box<dyn Transport> = Box::new(f.endpoint(0).unwrap());
    let mut rx = FaultTransport::new(
        Box::new(f.endpoint(1).unwrap()),
        FaultPlan {
            truncate: PPM,
            ..FaultPlan::default()
        },
    );
    // SAFETY: both buffers outlive their requests (tested to their end below).
    let s = unsafe { tx.isend(1, src.as_ptr(), 16, 5) }
        .unwrap()
        .unwrap();
    // SAFETY: as above.
    let r = unsafe { rx.irecv(0, dst.as_mut_ptr(), 16, 5) }
        .unwrap()
        .unwrap();
    assert_eq!(
        poll_until(&mut *tx, &mut rx, s.request),
        Ok(TestOutcome::Done { size: 16 })
    );
    assert_eq!(
        poll_until(&mut rx, &mut *tx, r.request),
        Ok(TestOutcome::Done { size: 15 })
    );
    assert_eq!(rx.counts().truncations, 1);

    // A dropped send completes for the sender; the receiver never gets it.
    let (mut a, mut b) = pair(FaultPlan {
        drop: PPM,
        ..FaultPlan::default()
    });
    let mut dst = [0u8; 16];
    let (sent, got) = exchange(&mut a, &mut *b, &src, &mut dst);
    assert_eq!(sent, Ok(TestOutcome::Done { size: 16 }));
    assert_eq!(got, Ok(TestOutcome::Pending), "the receiver waits");
    assert_eq!(dst, [0; 16]);
    assert_eq!(a.counts().drops, 1);
}
