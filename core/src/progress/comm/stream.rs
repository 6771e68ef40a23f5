//! One stream's op-FIFO and its op pool: the three lists, the deferred-by-basic-block map, and
//! the pool blocks the ops live in (allocated whole, freed when the comm is destroyed).
//!
//! Seed: `ncclProxyState` (192 B), `ncclProxyPool` (0xB008), §4.

use super::*;

/// A block's filed ops and the FIFO entries they use (grouped by op).
#[derive(Debug, Default)]
pub struct BlockFiles {
    /// Ops filed under the block, in filing order (the deferred queue of the seed).
    pub ops: OpList,
    /// Source entries, grouped by op (a send op uses `entry_base .. entry_base + n_entries`).
    pub src: Vec<NetSrcAddr>,
    /// Destination entries, grouped by op.
    pub dst: Vec<NetDestAddr>,
}

impl BlockFiles {
    /// Empties the entry for reuse, keeping the capacity of its entry vectors. Its op list
    /// must already be empty (the ops went back to the pool).
    fn clear(&mut self) {
        debug_assert!(self.ops.is_empty(), "a cleared block has no ops");
        self.src.clear();
        self.dst.clear();
    }
}

/// The deferred-by-basic-block map (`basic_block_args_map`): the blocks filed on a stream,
/// sorted by block id, looked up by binary search.
///
/// Its storage is kept across `stop`: a cleared entry, with the capacity of its entry vectors,
/// goes to a spare list that the next new block takes first. So a stream that files the same
/// blocks execution after execution (start, progress, stop, start, ...) allocates nothing once
/// its first execution has sized it (docs/design.md §3, "allocation-free steady state").
#[derive(Debug, Default)]
pub struct BlockMap {
    /// Live entries, sorted by block id (ids unique).
    live: Vec<(u32, BlockFiles)>,
    /// Cleared entries, reused by [`BlockMap::entry_or_default`] before anything is allocated.
    spare: Vec<BlockFiles>,
}

impl BlockMap {
    fn position(&self, bb: u32) -> Result<usize, usize> {
        self.live.binary_search_by_key(&bb, |(b, _)| *b)
    }

    /// The entry of block `bb`.
    pub fn get(&self, bb: &u32) -> Option<&BlockFiles> {
        self.position(*bb).ok().map(|i| &self.live[i].1)
    }

    /// The entry of block `bb`, mutably.
    pub fn get_mut(&mut self, bb: &u32) -> Option<&mut BlockFiles> {
        match self.position(*bb) {
            Ok(i) => Some(&mut self.live[i].1),
            Err(_) => None,
        }
    }

    /// The entry of block `bb`, made (from a spare entry if there is one) when missing.
    /// Allocates only when neither the live list nor the spare list has room.
    pub fn entry_or_default(&mut self, bb: u32) -> &mut BlockFiles {
        let i = match self.position(bb) {
            Ok(i) => i,
            Err(i) => {
                let files = self.spare.pop().unwrap_or_default();
                self.live.insert(i, (bb, files));
                i
            }
        };
        &mut self.live[i].1
    }

    /// Blocks with an entry.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// `true` when no block has an entry.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// `(block id, entry)` in block-id order.
    pub fn iter(&self) -> impl Iterator<Item = (&u32, &BlockFiles)> {
        self.live.iter().map(|(b, f)| (b, f))
    }

    /// The entries in block-id order.
    pub fn values(&self) -> impl Iterator<Item = &BlockFiles> {
        self.live.iter().map(|(_, f)| f)
    }

    /// The entries in block-id order, mutably.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut BlockFiles> {
        self.live.iter_mut().map(|(_, f)| f)
    }

    /// Removes every entry, keeping the storage (entries go to the spare list). Every entry's
    /// op list must already be empty.
    pub(super) fn clear(&mut self) {
        // `Vec::drain` frees nothing; `spare` grows only to the most blocks ever filed at once.
        for (_, mut files) in self.live.drain(..) {
            files.clear();
            self.spare.push(files);
        }
    }
}

impl core::ops::Index<&u32> for BlockMap {
    type Output = BlockFiles;

    /// # Panics
    /// When `bb` has no entry (tests and inspection only).
    fn index(&self, bb: &u32) -> &BlockFiles {
        match self.get(bb) {
            Some(f) => f,
            None => panic!("block {bb} has no entry"),
        }
    }
}

/// One stream's op-FIFO: three lists plus the deferred-by-basic-block map.
///
/// Invariant: every op of the stream's pool blocks is on exactly one of `pool`, `next_ops`,
/// `active`, `closing_ops`, or one `blocks[bb].ops`; ops on `active` all have
/// `basic_block_id == current_bb`; `closing_ops` and `closing_reqs` are empty unless
/// `closing`.
///
/// Seed: `ncclProxyState` (192 B), §4.
#[derive(Debug)]
pub struct StreamState {
    /// Active ops (`ops`, +8), walked by `progress`.
    pub(super) active: OpList,
    /// Ops being built by a `start` call (`nextOps`, +16); empty between calls.
    pub(super) next_ops: OpList,
    /// Free ops (`pool`, +32).
    pub(super) pool: OpList,
    /// The pool blocks (`pools`, +40), freed when the comm is destroyed.
    pub(super) pool_blocks: Vec<NonNull<PoolBlock>>,
    /// The deferred-by-basic-block map (`basic_block_args_map`, +120).
    pub(super) blocks: BlockMap,
    /// Block whose ops are on `active`, or [`BB_NONE`].
    pub(super) current_bb: u32,
    /// Block to load when `active` drains, or [`BB_NONE`] (`pending_basic_block_id`, +176).
    pub(super) pending_bb: u32,
    /// The block the stream loaded last since its last `stop`, or [`BB_NONE`]: a load of
    /// another block is a block switch (the protocol counters).
    pub(super) last_bb: u32,
    /// `true` from the first call of a stepped teardown ([`Comm::stop_step`]) until its
    /// cancelled requests are confirmed (or orphaned at the drain limit): `start` and
    /// `progress` on the stream are refused meanwhile.
    pub(super) closing: bool,
    /// The cancelled requests of the teardown under way, not confirmed yet (kept, cleared,
    /// between teardowns).
    pub(super) closing_reqs: Vec<RequestId>,
    /// The ops those requests belonged to: out of the pool until the requests are confirmed.
    pub(super) closing_ops: OpList,
}

impl StreamState {
    pub(super) fn new() -> Self {
        Self {
            active: OpList::new(),
            next_ops: OpList::new(),
            pool: OpList::new(),
            pool_blocks: Vec::new(),
            blocks: BlockMap::default(),
            current_bb: BB_NONE,
            pending_bb: BB_NONE,
            last_bb: BB_NONE,
            closing: false,
            closing_reqs: Vec::new(),
            closing_ops: OpList::new(),
        }
    }

    /// `true` while a stepped teardown of the stream is under way ([`Comm::stop_step`]).
    pub fn closing(&self) -> bool {
        self.closing
    }

    /// Cancelled requests of the teardown under way that the transport has not confirmed.
    pub fn closing_requests(&self) -> usize {
        self.closing_reqs.len()
    }

    /// Ops held out of the pool until their cancelled requests are confirmed.
    pub fn closing_ops(&self) -> u32 {
        self.closing_ops.len()
    }

    /// Ops in the stream's pool blocks (128 per block).
    pub fn capacity(&self) -> u32 {
        (self.pool_blocks.len() * OPS_PER_POOL_BLOCK) as u32
    }

    /// Number of pool blocks allocated.
    pub fn pool_block_count(&self) -> usize {
        self.pool_blocks.len()
    }

    /// The active ops (walked by `progress`), first to last.
    pub fn active(&self) -> &OpList {
        &self.active
    }

    /// The free ops.
    pub fn pool(&self) -> &OpList {
        &self.pool
    }

    /// The filed ops and FIFO entries of block `bb`, if any were filed under it.
    pub fn block(&self, bb: u32) -> Option<&BlockFiles> {
        self.blocks.get(&bb)
    }

    /// `true` when no block has ops filed (active ones not counted).
    pub fn no_blocks_filed(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The block whose ops are on the active list, or [`BB_NONE`].
    pub fn current_bb(&self) -> u32 {
        self.current_bb
    }

    /// The block to load when the active list drains, or [`BB_NONE`].
    pub fn pending_bb(&self) -> u32 {
        self.pending_bb
    }

    /// Ops filed under `bb` (not counting active ones).
    pub fn filed(&self, bb: u32) -> u32 {
        self.blocks.get(&bb).map_or(0, |b| b.ops.len())
    }

    /// Allocates one more pool block and threads its 128 ops onto the free list.
    fn grow(&mut self) -> Result<(), NrtStatus> {
        let layout = Layout::new::<PoolBlock>();
        // SAFETY: the layout has non-zero size; an all-zero `PoolBlock` is valid (an all-zero
        // `ProxyOp` is a valid free op, see `ProxyOp::reset`).
        let raw = unsafe { alloc_zeroed(layout) } as *mut PoolBlock;
        let Some(block) = NonNull::new(raw) else {
            log::error!(
                "proxy op pool: cannot allocate a {}-byte pool block",
                layout.size()
            );
            return Err(NrtStatus::Resource);
        };
        self.pool_blocks.push(block);
        for i in 0..OPS_PER_POOL_BLOCK {
            // SAFETY: `block` is live and exclusively ours; the op is not on any list yet.
            unsafe {
                let op = ptr::addr_of_mut!((*block.as_ptr()).ops[i]);
                self.pool.push_back(op);
            }
        }
        Ok(())
    }

    /// Makes sure `n` ops are free, growing by whole blocks.
    pub(super) fn reserve(&mut self, n: u32) -> Result<(), NrtStatus> {
        while self.pool.len() < n {
            self.grow()?;
        }
        Ok(())
    }

    /// Returns every op of `list` to the pool, cleared, at the pool's head: the next `start`
    /// takes the ops freed last first, which kept their request trackers (`ProxyOp::reset`),
    /// so a stream stopped and filed again with as many ops allocates no tracker.
    pub(super) fn release_list(pool: &mut OpList, list: &mut OpList) {
        while let Some(op) = list.pop_front() {
            // SAFETY: ops on a stream's lists are live ops of its pool blocks, now unlinked.
            unsafe {
                (*op).reset();
                pool.push_front(op);
            }
        }
    }
}

impl Drop for StreamState {
    fn drop(&mut self) {
        // Every op back to the pool, every op's request tracker freed, then the blocks.
        let mut all = OpList::new();
        all.append(&mut self.active);
        all.append(&mut self.next_ops);
        all.append(&mut self.closing_ops);
        for b in self.blocks.values_mut() {
            all.append(&mut b.ops);
        }
        Self::release_list(&mut self.pool, &mut all);
        self.pool = OpList::new();
        for block in &self.pool_blocks {
            for i in 0..OPS_PER_POOL_BLOCK {
                // SAFETY: the block is live and ours; no list refers to its ops any more, so
                // this is the only access. Frees the tracker a free op keeps (`reset`).
                unsafe { (*ptr::addr_of_mut!((*block.as_ptr()).ops[i])).free_request() };
            }
        }
        for block in self.pool_blocks.drain(..) {
            // SAFETY: every block was allocated in `grow` with this layout and is freed once;
            // no list refers to its ops any more.
            unsafe { dealloc(block.as_ptr() as *mut u8, Layout::new::<PoolBlock>()) };
        }
    }
}

impl Comm {
    /// Requests left with the transport by a teardown that passed its drain limit (drained
    /// again, once, at destroy).
    pub fn orphan_count(&self) -> usize {
        self.orphans.len()
    }

    /// Gives the first active op of `stream` (else the first op filed under `bb`) the
    /// outstanding requests `ids`, as if it had posted them: a teardown then cancels them and
    /// waits for the transport to confirm each. Test scaffolding (`cfg(test)` or feature
    /// `testing`).
    ///
    /// # Errors
    /// `Invalid` when the stream is out of range or has no such op, or its tracker is full.
    #[cfg(any(test, feature = "testing"))]
    pub fn track_test_requests(
        &mut self,
        stream: u32,
        bb: u32,
        ids: &[RequestId],
    ) -> Result<(), NrtStatus> {
        let s = check_stream(stream)?;
        let st = &mut self.streams[s];
        let opp = match st.active.iter().next() {
            Some(op) => op,
            None => match st.blocks.get(&bb).and_then(|f| f.ops.iter().next()) {
                Some(op) => op,
                None => return Err(NrtStatus::Invalid),
            },
        };
        // SAFETY: ops on the stream's lists are live; `&mut self` makes this the only access.
        let op = unsafe { &mut *opp };
        if op.tracker().is_none() {
            op.alloc_request()?;
        }
        let t = op.tracker_mut().ok_or(NrtStatus::Invalid)?;
        for &id in ids {
            t.push(crate::progress::op::TrackedRequest {
                id,
                ..Default::default()
            })
            .map_err(|_| NrtStatus::Invalid)?;
        }
        Ok(())
    }
}
