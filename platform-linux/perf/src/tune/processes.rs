//! `--tune` with ranks as processes (`--transport libfabric` or `shm`): the link between hosts,
//! then the in-host fit among host 0's processes; see the parent module's "Ranks as processes, and
//! between hosts".

use super::{link, measure_in_host, report, InHost, PASSES};
use crate::args::Args;
use crate::args::TransportArg;
use crate::run::World;

/// `--tune` with ranks as processes: see [`run`].
///
/// # Errors
/// `--transport libfabric` from a build without the `libfabric` feature
/// ([`crate::libfabric_built`]); a set-up or measurement failure on any rank.
pub(super) fn across_processes(args: &Args, file: &std::path::Path) -> Result<i32, String> {
    crate::libfabric_built(args)?;
    use proxy_bootstrap::{Bootstrap, BootstrapConfig, LAUNCHER_VARS};
    if !LAUNCHER_VARS
        .iter()
        .any(|(rank_var, _)| std::env::var_os(rank_var).is_some())
    {
        return crate::launch::run(args);
    }
    let cfg = BootstrapConfig::from_env(None, None, None).map_err(|e| e.to_string())?;
    if cfg.nranks != args.ranks {
        return Err(format!(
            "the launcher runs {} processes but --ranks is {}",
            cfg.nranks, args.ranks
        ));
    }
    let mut boot = Bootstrap::init(&cfg).map_err(|e| e.to_string())?;
    let provider = args.provider.map(|p| p.fi_name().to_owned());
    let hosts = args
        .hosts
        .map(|h| h.0)
        .or_else(|| crate::run::host_map_of(boot.hosts()));
    let printer = boot.rank() == 0;
    let Some(hosts) = hosts.filter(|h| h.sizes().len() >= 2) else {
        // One host: the in-host fit over the processes' own comm.
        let mut world = World::join(args, boot, provider)?;
        // The world's arguments: the set-up knows the provider's kind of link.
        let args = &world.args().clone();
        let samples = match measure_in_host(&mut world, args) {
            Ok(s) => s,
            Err(e) => {
                world.abort_peers(&e);
                return Err(e);
            }
        };
        let in_host = InHost::of(world, samples);
        if !printer {
            return Ok(0);
        }
        return report(args, args, file, in_host, None);
    };
    // The root of host 0's own bootstrap for its in-host fit: a free loopback port of rank 0's,
    // told to every process now (the big comm's bootstrap is the World's from here).
    let mine = if printer {
        proxy_bootstrap::launch::free_loopback_root()
            .map_err(|e| format!("a port for host 0's bootstrap: {e}"))?
            .port()
    } else {
        0
    };
    let ports = boot
        .all_gather(&mine.to_le_bytes())
        .map_err(|e| e.to_string())?;
    let port = ports
        .first()
        .and_then(|p| <[u8; 2]>::try_from(p.as_slice()).ok())
        .map(u16::from_le_bytes)
        .ok_or("rank 0 sent no port for host 0's bootstrap")?;
    let rank = boot.rank();
    let a = link::exchange_args(args)?;
    let mut world = World::join(&a, boot, provider.clone())?;
    let wargs = world.args().clone();
    let link = match link::measure(&mut world, &wargs, &hosts, PASSES) {
        Ok(samples) => link::Link {
            hosts,
            transport: world.transport_name().to_owned(),
            samples,
        },
        Err(e) => {
            world.abort_peers(&e);
            return Err(e);
        }
    };
    drop(world);
    // The in-host fit: among host 0's processes over the same transport (the path a host's
    // ranks take in this run), the other hosts' processes are done; in process when host 0
    // has one rank.
    let local = hosts.sizes()[0];
    // The kind of link the comm's provider takes (the old constants the report compares with).
    let mut args = args.clone();
    args.link = wargs.link;
    let args = &args;
    let mut host_args = args.clone();
    host_args.hosts = None;
    if local < 2 {
        if !printer {
            return Ok(0);
        }
        host_args.transport = TransportArg::Mem;
        host_args.provider = None;
        host_args.ranks = 2;
        let mut world = World::new(&host_args)?;
        let samples = measure_in_host(&mut world, &host_args)?;
        let in_host = InHost::of(world, samples);
        return report(args, &host_args, file, in_host, Some(link));
    }
    if rank >= local {
        return Ok(0);
    }
    host_args.ranks = local;
    let mut hc = BootstrapConfig::new(
        rank,
        local,
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
    );
    hc.timeout = cfg.timeout;
    hc.warn_interval = cfg.warn_interval;
    hc.close_linger = cfg.close_linger;
    let hboot = Bootstrap::init(&hc).map_err(|e| format!("host 0's bootstrap: {e}"))?;
    let mut world = World::join(&host_args, hboot, provider)?;
    let samples = match measure_in_host(&mut world, &host_args) {
        Ok(s) => s,
        Err(e) => {
            world.abort_peers(&e);
            return Err(e);
        }
    };
    let in_host = InHost::of(world, samples);
    if !printer {
        return Ok(0);
    }
    report(args, &host_args, file, in_host, Some(link))
}
