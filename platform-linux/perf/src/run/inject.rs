//! `--inject`: which fault on which rank (`inject_target`), the transport wrapper that injects
//! it (`wrap_transport`), and the stalling transport of `stall-rank`.

use super::*;
use proxy_core::progress::net::Posted;

/// `--inject`'s fault and target rank (default: the last rank).
///
/// # Errors
/// A target that is not a rank.
pub(super) fn inject_target(args: &Args) -> Result<Option<(FaultArg, u32)>, String> {
    let Some(i) = args.inject else {
        return Ok(None);
    };
    let rank = i.rank.unwrap_or(args.ranks - 1);
    if rank >= args.ranks {
        return Err(format!(
            "--inject {}:{rank}: not a rank (ranks {})",
            i.fault.name(),
            args.ranks
        ));
    }
    Ok(Some((i.fault, rank)))
}

/// `stall-rank`'s switch, shared by the run and the stalling transport.
#[derive(Debug, Default)]
pub(super) struct StallSwitch {
    /// Set by the run when it ends: the stalled driving thread goes on.
    pub(super) release: AtomicBool,
    /// Set by the transport when its stall began.
    pub(super) fired: AtomicBool,
}

/// The run's error when `--inject stall-rank` targeted a rank of this process whose stall never
/// began (it posted fewer than 2 sends: a broadcast's last rank, which only receives, a run of
/// one execution), so that a run that planted nothing is not taken for a fault test.
pub(super) fn stall_missed(args: &Args, local: &[u32], stall: &StallSwitch) -> Option<String> {
    let rank = local_stall_target(args, local)?;
    (!stall.fired.load(Ordering::Acquire)).then(|| {
        format!(
            "--inject stall-rank: rank {rank} posted fewer than 2 sends, so its driving thread \
             never stalled (nothing was planted; more iterations, or another rank)"
        )
    })
}

/// The rank of this process whose driving thread `--inject stall-rank` stalled, once the
/// stall began; `None` for another fault, a rank of another process, or a stall not begun.
pub(super) fn stalled_rank(args: &Args, local: &[u32], stall: &StallSwitch) -> Option<u32> {
    local_stall_target(args, local).filter(|_| stall.fired.load(Ordering::Acquire))
}

/// The rank `--inject stall-rank` targets, when it is one of this process's ranks `local`.
fn local_stall_target(args: &Args, local: &[u32]) -> Option<u32> {
    let (fault, rank) = inject_target(args).ok()??;
    (fault == FaultArg::StallRank && local.contains(&rank)).then_some(rank)
}

/// How long a `stall-rank` stall lasts: three times the no-progress limit and a second (every
/// peer has timed out by then, and a producer waiting on the stalled worker has called it
/// stuck: no tick for the limit and a second, `engine::rank::Heartbeat`; the run also releases
/// it when it ends), [`STALL_LIMIT`] without a limit.
///
/// # Errors
/// A bad `NEURON_RT_EXEC_TIMEOUT`.
pub(super) fn stall_limit(_args: &Args) -> Result<Duration, String> {
    let cfg = Config::from_env().map_err(|e| e.to_string())?;
    Ok(cfg.exec_timeout.map_or(STALL_LIMIT, |t| {
        t.saturating_mul(3)
            .saturating_add(Duration::from_secs(1))
            .min(STALL_LIMIT)
    }))
}

/// Rank `r`'s transport with `--inject`'s transport fault when `r` is the target:
/// `error-completion` and `eagain-storm` through core's `FaultTransport` (after 16 posts, so the
/// run gets going; seed = the rank), `stall-rank` through [`StallTransport`].
pub(super) fn wrap_transport(
    target: Option<(FaultArg, u32)>,
    r: u32,
    t: Box<dyn Transport>,
    stall: &Arc<StallSwitch>,
    stall_for: Duration,
) -> Box<dyn Transport> {
    let Some((fault, _)) = target.filter(|&(_, rank)| rank == r) else {
        return t;
    };
    let t_name = t.name().to_owned();
    let plan = FaultPlan {
        seed: u64::from(r),
        after_posts: 16,
        ..FaultPlan::default()
    };
    match fault {
        FaultArg::ErrorCompletion => Box::new(FaultTransport::new(
            t,
            FaultPlan {
                error_completion: PPM,
                ..plan
            },
        )),
        FaultArg::EagainStorm => Box::new(FaultTransport::new(
            t,
            FaultPlan {
                eagain: 200_000,
                eagain_burst: 16,
                delay: 100_000,
                delay_polls: 8,
                ..plan
            },
        )),
        FaultArg::StallRank => Box::new(StallTransport {
            inner: t,
            sends: 0,
            after: 2,
            switch: stall.clone(),
            limit: stall_for,
            name: format!("stall({})", t_name),
        }),
        _ => t,
    }
}

impl proxy_core::progress::forward::TransportWrapper for StallTransport {
    fn inner(&self) -> &dyn Transport {
        &*self.inner
    }

    fn inner_mut(&mut self) -> &mut dyn Transport {
        &mut *self.inner
    }

    fn name(&self) -> &str {
        &self.name
    }

    unsafe fn isend(
        &mut self,
        peer: u32,
        buf: *const u8,
        size: u64,
        tag: u64,
    ) -> Result<Option<Posted>, NetError> {
        self.stall_if_due();
        // SAFETY: forwarded under this function's contract, which is the inner call's.
        unsafe { self.inner.isend(peer, buf, size, tag) }
    }
}

impl StallTransport {
    /// Counts a send post; the `after`-th blocks the driving thread until the run
    /// releases it or the limit passed.
    fn stall_if_due(&mut self) {
        self.sends += 1;
        if self.sends != self.after {
            return;
        }
        self.switch.fired.store(true, Ordering::Release);
        log::warn!("--inject stall-rank: the driving thread stops (blocked before a send)");
        let end = Instant::now() + self.limit;
        while !self.switch.release.load(Ordering::Acquire) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        log::warn!("--inject stall-rank: the driving thread goes on");
    }
}
