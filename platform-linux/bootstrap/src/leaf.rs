//! Every rank but 0, a leaf: connects to the root, says hello, waits for the welcome, and
//! afterwards exchanges all-gather and barrier frames with the root.

use std::io;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use proxy_core::net::MAX_COMM_ID;
use proxy_core::NrtStatus;

use crate::conn::{Conn, Waiter};
use crate::wire::{Frame, Preface, VERSION as PROTOCOL_VERSION};
use crate::*;

impl Bootstrap {
    pub(crate) fn init_leaf(cfg: &BootstrapConfig) -> Result<Self, BootstrapError> {
        let (rank, n) = (cfg.rank, cfg.nranks);
        let mut waiter = Waiter::new(cfg.timeout, cfg.warn_interval);
        let mut last_err: Option<io::Error> = None;
        let stream = loop {
            let left = waiter.deadline().saturating_duration_since(Instant::now());
            if !left.is_zero() {
                match TcpStream::connect_timeout(&cfg.root, left.min(Duration::from_secs(1))) {
                    Ok(s) => break s,
                    Err(e) => last_err = Some(e),
                }
            }
            let err_text = || {
                last_err
                    .as_ref()
                    .map_or_else(|| "none".to_owned(), ToString::to_string)
            };
            if let Err(waited) = waiter.tick(rank, n, || {
                format!(
                    "the root (rank 0) to accept at {} (last error: {})",
                    cfg.root,
                    err_text()
                )
            }) {
                let e = BootstrapError::Timeout {
                    rank,
                    what: format!(
                        "the root (rank 0) at {} ({ROOT_COMM_ID_ENV}) to accept a connection; \
                         last error: {}",
                        cfg.root,
                        err_text()
                    ),
                    waited,
                };
                log::error!("{e}");
                return Err(e);
            }
            // Connection refused comes back at once: do not hammer the root address.
            std::thread::sleep(Duration::from_millis(20));
        };
        let addr = stream.peer_addr().unwrap_or(cfg.root);
        let mut conn = Conn::new(stream, addr).map_err(|e| {
            BootstrapError::io(rank, format!("configuring the connection to {addr}"), &e)
        })?;
        conn.queue(&Frame::Hello {
            rank,
            nranks: n,
            pid: std::process::id(),
            host: host_identity(),
        });
        let fail = |conn: &mut Conn, e: BootstrapError| {
            if !matches!(
                e,
                BootstrapError::Aborted { .. } | BootstrapError::PeerLost { .. }
            ) {
                conn.send_last(&Frame::Abort {
                    origin: rank,
                    status: e.status().code(),
                    reason: e.to_string(),
                });
            }
            log::error!("{e}");
            e
        };
        let lost = |what: String| BootstrapError::PeerLost {
            rank,
            peer: 0,
            message: what,
        };
        loop {
            let io_res = conn.flush().and_then(|()| conn.fill());
            if let Err(e) = io_res {
                return Err(fail(
                    &mut conn,
                    lost(format!("connection to the root at {addr}: {e}")),
                ));
            }
            if !conn.preface_seen {
                match conn.take_preface() {
                    Preface::WrongMagic => {
                        return Err(fail(
                            &mut conn,
                            BootstrapError::Protocol {
                                rank,
                                message: format!(
                                    "the root address {addr} does not speak the bootstrap \
                                     protocol (wrong magic)"
                                ),
                            },
                        ))
                    }
                    Preface::Version(v) if v != PROTOCOL_VERSION => {
                        return Err(fail(
                            &mut conn,
                            BootstrapError::Misconfigured {
                                rank,
                                message: format!(
                                    "the root at {addr} speaks bootstrap protocol version {v}, \
                                     this rank speaks {PROTOCOL_VERSION}"
                                ),
                            },
                        ))
                    }
                    _ => {}
                }
            }
            if conn.preface_seen {
                match conn.next_frame() {
                    Ok(Some(Frame::Welcome { comm_id, hosts })) => {
                        if hosts.len() != n as usize || comm_id >= MAX_COMM_ID {
                            return Err(fail(
                                &mut conn,
                                BootstrapError::Protocol {
                                    rank,
                                    message: format!(
                                        "bad welcome from the root: {} hosts for {n} ranks, comm \
                                         id {comm_id}",
                                        hosts.len()
                                    ),
                                },
                            ));
                        }
                        let role = Role::Leaf {
                            conn,
                            root_left: false,
                            gathered: None,
                        };
                        return Ok(Self::with_role(cfg, role, comm_id, hosts));
                    }
                    Ok(Some(Frame::Reject { reason, .. })) => {
                        return Err(fail(
                            &mut conn,
                            BootstrapError::Misconfigured {
                                rank,
                                message: format!("rejected by the root: {reason}"),
                            },
                        ));
                    }
                    Ok(Some(Frame::Abort {
                        origin,
                        status,
                        reason,
                    })) => {
                        return Err(fail(
                            &mut conn,
                            BootstrapError::Aborted {
                                rank,
                                origin,
                                status: NrtStatus::from_code(status).unwrap_or(NrtStatus::Failure),
                                reason,
                            },
                        ))
                    }
                    Ok(Some(f)) => {
                        return Err(fail(
                            &mut conn,
                            BootstrapError::Protocol {
                                rank,
                                message: format!(
                                    "unexpected {} from the root before Welcome",
                                    f.name()
                                ),
                            },
                        ))
                    }
                    Ok(None) => {}
                    Err(e) => {
                        return Err(fail(
                            &mut conn,
                            BootstrapError::Protocol {
                                rank,
                                message: format!("malformed frame from the root: {e}"),
                            },
                        ))
                    }
                }
            }
            if conn.eof {
                return Err(fail(
                    &mut conn,
                    lost(format!(
                        "the root at {addr} closed the connection before every rank had joined"
                    )),
                ));
            }
            if let Err(waited) = waiter.tick(rank, n, || {
                format!("the root at {addr} to report that every rank has joined")
            }) {
                let e = BootstrapError::Timeout {
                    rank,
                    what: format!(
                        "the root at {addr} to report that every rank has joined (connected, \
                         no welcome yet)"
                    ),
                    waited,
                };
                return Err(fail(&mut conn, e));
            }
        }
    }

    pub(crate) fn pump_leaf(&mut self) -> Result<(), BootstrapError> {
        let me = self.rank;
        let n = self.nranks as usize;
        let next_gather = self.gather_seq.wrapping_add(1);
        let next_release = self.released.wrapping_add(1);
        let Role::Leaf {
            conn,
            root_left,
            gathered,
        } = &mut self.role
        else {
            unreachable!()
        };
        let lost = |what: String| BootstrapError::PeerLost {
            rank: me,
            peer: 0,
            message: what,
        };
        if *root_left {
            return Ok(());
        }
        let io_res = conn.flush().and_then(|()| conn.fill());
        if let Err(e) = io_res {
            return Err(lost(format!("connection to the root: {e}")));
        }
        loop {
            let f = match conn.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    return Err(BootstrapError::Protocol {
                        rank: me,
                        message: format!("malformed frame from the root: {e}"),
                    })
                }
            };
            match f {
                Frame::Release { gen }
                    if gen == next_release && self.released != self.barrier_gen =>
                {
                    self.released = gen;
                }
                Frame::Gathered { seq, blobs }
                    if seq == next_gather && blobs.len() == n && gathered.is_none() =>
                {
                    *gathered = Some((seq, blobs));
                }
                Frame::Bye => {
                    *root_left = true;
                    log::debug!("bootstrap rank {me}: the root closed its side");
                    return Ok(());
                }
                Frame::Abort {
                    origin,
                    status,
                    reason,
                } => {
                    return Err(BootstrapError::Aborted {
                        rank: me,
                        origin,
                        status: NrtStatus::from_code(status).unwrap_or(NrtStatus::Failure),
                        reason,
                    })
                }
                f => {
                    return Err(BootstrapError::Protocol {
                        rank: me,
                        message: format!("unexpected {f:?} from the root"),
                    })
                }
            }
        }
        if conn.eof {
            return Err(lost(
                "the root (rank 0) closed its bootstrap connection without Bye (process exited \
                 or was killed?)"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    pub(crate) fn root_left(&self) -> bool {
        matches!(
            self.role,
            Role::Leaf {
                root_left: true,
                ..
            }
        )
    }
}
