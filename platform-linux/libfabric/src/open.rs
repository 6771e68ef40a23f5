//! Opening a [`LibfabricTransport`]: the provider chosen and checked (`open`, `open_with`), the
//! fabric, domain, endpoint, completion queue and address vector opened in order, and the
//! peers' addresses inserted (`local_name`, `connect`).

use crate::*;

impl LibfabricTransport {
    /// Opens an endpoint for `rank` of `nranks` on `provider` (or the automatic choice, see
    /// [`Options::provider`]) with default options. Next: [`LibfabricTransport::local_name`],
    /// then [`LibfabricTransport::connect`].
    ///
    /// # Errors
    /// As [`LibfabricTransport::open_with`].
    pub fn open(provider: Option<&str>, rank: u32, nranks: u32) -> Result<Self, NetError> {
        let opts = Options {
            provider: provider.map(str::to_owned),
            ..Options::default()
        };
        Self::open_with(rank, nranks, &opts)
    }

    /// Opens an endpoint with explicit [`Options`].
    ///
    /// # Errors
    /// [`NetError::invalid`] for `rank >= nranks`, `nranks` over the tag's 16-bit rank field, or
    /// a provider that is not offered (the message names it and lists what is offered);
    /// [`NetError::failure`] when a libfabric call fails (the message names the call).
    pub fn open_with(rank: u32, nranks: u32, opts: &Options) -> Result<Self, NetError> {
        if nranks == 0 || rank >= nranks || nranks > proxy_core::progress::net::MAX_NRANKS {
            return Err(NetError::invalid(
                None,
                format!(
                    "libfabric: rank {rank} of {nranks} ranks (need rank < nranks <= {})",
                    proxy_core::progress::net::MAX_NRANKS
                ),
            ));
        }
        let request = Request::from(
            opts.provider.as_deref(),
            opts.all_ranks_local || nranks == 1,
        );
        let sizes = HintSizes {
            tx_size: opts.tx_size,
            rx_size: opts.rx_size,
        };
        // Before the first fi_getinfo: detect CMA, set shm's SAR threshold (shm_cma.rs).
        let shm_path = shm_cma::prepare_provider_env();
        let with_rma = InfoList::query(true, sizes)?;
        let plain = InfoList::query(false, sizes)?;
        let entry = info::choose(
            &request,
            with_rma.as_ref(),
            plain.as_ref(),
            !opts.spans_hosts,
        )?;

        // SAFETY: the attribute pointers of a returned entry are valid.
        let attrs = unsafe {
            let i = entry.info;
            let tag_format = (*i.ep_attr).mem_tag_format;
            ProviderAttrs {
                provider: entry.prov_name(),
                domain: entry.domain_name(),
                caps: i.caps,
                mr_mode: (*i.domain_attr).mr_mode,
                max_msg_size: (*i.ep_attr).max_msg_size as u64,
                tx_size: (*i.tx_attr).size,
                rx_size: (*i.rx_attr).size,
                inject_size: (*i.tx_attr).inject_size,
                tag_bits: if tag_format == 0 {
                    64
                } else {
                    64 - tag_format.leading_zeros()
                },
                addr_format: i.addr_format,
                data_progress: (*i.domain_attr).data_progress,
                control_progress: (*i.domain_attr).control_progress,
                threading: (*i.domain_attr).threading,
                shm_large_messages: None,
            }
        };
        let mut attrs = attrs;
        if info::name_matches("shm", &attrs.provider) {
            log::info!(
                "libfabric/shm: rank {rank}/{nranks}: sends over the inject size move by {}; \
                 FI_SHM_SAR_THRESHOLD={}",
                shm_path.describe(),
                shm_path
                    .sar_threshold
                    .map_or_else(|| "unset".to_owned(), |t| t.to_string())
            );
            attrs.shm_large_messages = Some(shm_path.describe());
        }
        if attrs.data_progress != fi::FI_PROGRESS_MANUAL {
            // Polling still moves such a provider; but it also moves on its own threads, which
            // the transport's single-threaded use of the domain does not expect.
            log::warn!(
                "libfabric/{}: asked for manual data progress, granted {} (control {})",
                attrs.provider,
                progress_name(attrs.data_progress),
                progress_name(attrs.control_progress)
            );
        }
        let mr_limits = match opts.mr_cache {
            Some(l) => l,
            None => MrCacheLimits::from_env()?,
        };
        let asks_registration = attrs.mr_mode
            & (fi::FI_MR_LOCAL | fi::FI_MR_VIRT_ADDR | fi::FI_MR_ALLOCATED | fi::FI_MR_PROV_KEY)
            != 0;
        let register = match opts.register_memory {
            None => asks_registration,
            Some(false) if attrs.mr_mode & fi::FI_MR_LOCAL != 0 => {
                return Err(NetError::invalid(
                    None,
                    format!(
                        "libfabric provider {} requires local memory registration \
                         (FI_MR_LOCAL); register_memory = false cannot be honoured",
                        attrs.provider
                    ),
                ))
            }
            Some(r) => r,
        };
        let mut access = fi::FI_SEND | fi::FI_RECV;
        if attrs.caps & fi::FI_RMA != 0 {
            access |= fi::FI_READ | fi::FI_WRITE | fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE;
        }
        let max_msg = opts
            .max_msg_size
            .map_or(attrs.max_msg_size, |m| m.min(attrs.max_msg_size));
        let tag_mask = if attrs.tag_bits >= 64 {
            u64::MAX
        } else {
            (1u64 << attrs.tag_bits) - 1
        };
        let inject_max = opts
            .max_inject_size
            .map_or(attrs.inject_size, |m| m.min(attrs.inject_size));
        let generation_tags = attrs.tag_bits >= 64;
        // shm is never pooled: a send it leaves stuck keeps the head of the endpoint's own
        // response queue busy forever, so no later send above the inject size on that endpoint
        // would complete (docs/design.md §5, "Why shm is not pooled"); without 64 tag bits a
        // later lease could not be told apart on the wire.
        let pool_key =
            (generation_tags && !info::name_matches("shm", &attrs.provider)).then(|| PoolKey {
                provider: attrs.provider.clone(),
                domain: attrs.domain.clone(),
                caps: attrs.caps,
                mr_mode: attrs.mr_mode,
                tx_size: attrs.tx_size,
                rx_size: attrs.rx_size,
                tag_bits: attrs.tag_bits,
                cq_wait_fd: opts.cq_wait_fd,
            });
        let mut t = Self {
            name: format!("libfabric/{}", attrs.provider),
            rank,
            nranks,
            max_msg,
            inject_max,
            injected: 0,
            cq_reads: 0,
            idle_polls: 0,
            tag_mask,
            register,
            mr_cfg: MrConfig {
                mr_mode: attrs.mr_mode,
                access,
            },
            enomem_is_backpressure: info::name_matches("shm", &attrs.provider),
            close_drain: opts.close_drain,
            obj: Objects::none(),
            local_name: Vec::new(),
            peers: Vec::new(),
            generation: pool::next_generation(),
            peer_generations: Vec::new(),
            stuck: None,
            generation_tags,
            pool_key: None,
            av_names: std::collections::HashMap::new(),
            tainted: false,
            leases: 1,
            stale_completions: 0,
            pool_endpoints: opts.pool_endpoints,
            reqs: Requests::default(),
            pressure: vec![PostPressure::default(); nranks as usize],
            spaced: 0,
            mrs: MrCache::new(mr_limits),
            closed: false,
            watch: None,
            watch_failed: None,
            cq_wait_fd: opts.cq_wait_fd,
            idle: None,
            attrs,
        };
        match pool_key.as_ref().and_then(pool::take) {
            Some(lease) => {
                log::info!(
                    "{}: rank {rank}/{nranks}: reusing a pooled endpoint (lease {} of it, \
                     generation {:#06x}; an earlier comm left requests on it)",
                    t.name,
                    lease.leases,
                    t.generation
                );
                t.obj = lease.obj;
                t.local_name = lease.ep_name;
                t.av_names = lease.addrs;
                t.tainted = lease.tainted;
                t.leases = lease.leases;
            }
            // On failure `t` is dropped, which closes whatever was opened.
            None => t.open_objects(entry.info as *const fi::fi_info as *mut fi::fi_info)?,
        }
        t.pool_key = pool_key;
        drop((with_rma, plain));
        log::info!(
            "{}: rank {rank}/{nranks} opened domain {} ({:?}), mr_mode {:#x} (register: {}), \
             max_msg_size {}, inject up to {} B, tx/rx {}/{}, {} tag bits, progress data {} / \
             control {}, threading {}, libfabric {} (built against {})",
            t.name,
            t.attrs.domain,
            request,
            t.attrs.mr_mode,
            t.register,
            t.max_msg,
            t.inject_max,
            t.attrs.tx_size,
            t.attrs.rx_size,
            t.attrs.tag_bits,
            progress_name(t.attrs.data_progress),
            progress_name(t.attrs.control_progress),
            t.attrs.threading,
            {
                // SAFETY: fi_version takes no arguments.
                let v = unsafe { fi::fi_version() };
                format!("{}.{}", fi::fi_major(v), fi::fi_minor(v))
            },
            fi::PKG_VERSION,
        );
        Ok(t)
    }

    /// This endpoint's address (`fi_getname`) followed by this lease's generation (2 bytes,
    /// little-endian; `pool.rs`) and this process's id (4 bytes, little-endian; over shm the
    /// peers watch it, `exits.rs`): what the bootstrap all-gathers and
    /// [`LibfabricTransport::connect`] takes.
    pub fn local_name(&self) -> Vec<u8> {
        if self.enomem_is_backpressure {
            // shm: the peers' check before a send looks at this process's live mark first.
            exits::mark::mark_this_process();
        }
        let mut n = Vec::with_capacity(self.local_name.len() + NAME_TRAILER_BYTES);
        n.extend_from_slice(&self.local_name);
        n.extend_from_slice(&self.generation.to_le_bytes());
        n.extend_from_slice(&std::process::id().to_le_bytes());
        n
    }

    /// Inserts every rank's name (index = rank, this rank's own included) into the address
    /// vector; posts are accepted afterwards. Called once.
    ///
    /// # Errors
    /// [`NetError::invalid`] for a wrong count, a second call, or `peer_names[rank]` that is not
    /// [`LibfabricTransport::local_name`] (a mis-ordered all-gather);
    /// [`NetError::failure`] when `fi_av_insert` rejects a name (the peer is named).
    pub fn connect(&mut self, peer_names: &[Vec<u8>]) -> Result<(), NetError> {
        self.check_open()?;
        if !self.peers.is_empty() {
            return Err(NetError::invalid(
                None,
                format!("{}: connect called twice", self.name),
            ));
        }
        if peer_names.len() != self.nranks as usize {
            return Err(NetError::invalid(
                None,
                format!(
                    "{}: connect got {} names for {} ranks",
                    self.name,
                    peer_names.len(),
                    self.nranks
                ),
            ));
        }
        if peer_names[self.rank as usize] != self.local_name() {
            return Err(NetError::invalid(
                Some(self.rank),
                format!(
                    "{}: peer_names[{}] is not this endpoint's own name (names must be in rank \
                     order)",
                    self.name, self.rank
                ),
            ));
        }
        let mut addrs = Vec::with_capacity(peer_names.len());
        let mut generations = Vec::with_capacity(peer_names.len());
        let mut pids = Vec::with_capacity(peer_names.len());
        for (peer, name) in peer_names.iter().enumerate() {
            let peer = peer as u32;
            if name.len() <= NAME_TRAILER_BYTES {
                return Err(NetError::invalid(
                    Some(peer),
                    format!(
                        "{}: empty name for rank {peer} ({} B: an address, {GENERATION_BYTES} B \
                         of lease generation and {PID_BYTES} B of process id expected)",
                        self.name,
                        name.len()
                    ),
                ));
            }
            let (name, trailer) = name.split_at(name.len() - NAME_TRAILER_BYTES);
            let (generation, pid) = trailer.split_at(GENERATION_BYTES);
            generations.push(u16::from_le_bytes([generation[0], generation[1]]));
            pids.push(u32::from_le_bytes([pid[0], pid[1], pid[2], pid[3]]));
            // Each address is inserted into a set's AV once, whichever lease meets it first.
            if let Some(&addr) = self.av_names.get(name) {
                addrs.push(addr);
                continue;
            }
            let mut addr: fi::fi_addr_t = fi::FI_ADDR_NOTAVAIL;
            // SAFETY: the AV is open; `name` holds one address in the provider's format (as
            // fi_getname wrote it on the peer); `addr` receives one fi_addr_t.
            let ret = unsafe {
                fi::fi_av_insert(
                    self.obj.av,
                    name.as_ptr().cast(),
                    1,
                    &mut addr,
                    0,
                    ptr::null_mut(),
                )
            };
            if ret != 1 || addr == fi::FI_ADDR_NOTAVAIL {
                return Err(NetError::failure(
                    Some(peer),
                    format!(
                        "{}: fi_av_insert of rank {peer}'s name ({} B) failed: {} ({ret})",
                        self.name,
                        name.len(),
                        if ret < 0 {
                            fi_error_text(ret as isize)
                        } else {
                            "not inserted".into()
                        }
                    ),
                ));
            }
            self.av_names.insert(name.to_vec(), addr);
            addrs.push(addr);
        }
        self.peers = addrs;
        self.peer_generations = generations;
        if self.enomem_is_backpressure {
            // shm: watch every other rank's process before sending to it (`exits.rs`).
            let me = self.rank as usize;
            let exits: Vec<Option<exits::PeerExit>> = pids
                .iter()
                .enumerate()
                .map(|(r, &pid)| (r != me).then(|| exits::PeerExit::open(pid)).flatten())
                .collect();
            let unwatched: Vec<usize> = exits
                .iter()
                .enumerate()
                .filter(|(r, w)| *r != me && w.is_none())
                .map(|(r, _)| r)
                .collect();
            if !unwatched.is_empty() {
                log::info!(
                    "{}: rank {me}: no pidfd for ranks {unwatched:?}: sends to them are posted \
                     without checking that their process still runs",
                    self.name
                );
            }
            self.stuck = Some(exits::Stuck::new(format!("{} rank {me}", self.name), exits));
            self.give_watchdog_last_words();
        }
        Ok(())
    }
}
