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

/// One stream's op-FIFO: three lists plus the deferred-by-basic-block map.
///
/// Invariant: every op of the stream's pool blocks is on exactly one of `pool`, `next_ops`,
/// `active`, or one `blocks[bb].ops`; ops on `active` all have `basic_block_id == current_bb`.
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
    pub(super) blocks: BTreeMap<u32, BlockFiles>,
    /// Block whose ops are on `active`, or [`BB_NONE`].
    pub(super) current_bb: u32,
    /// Block to load when `active` drains, or [`BB_NONE`] (`pending_basic_block_id`, +176).
    pub(super) pending_bb: u32,
}

impl StreamState {
    pub(super) fn new() -> Self {
        Self {
            active: OpList::new(),
            next_ops: OpList::new(),
            pool: OpList::new(),
            pool_blocks: Vec::new(),
            blocks: BTreeMap::new(),
            current_bb: BB_NONE,
            pending_bb: BB_NONE,
        }
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

    /// Returns every op of `list` to the pool, cleared.
    pub(super) fn release_list(pool: &mut OpList, list: &mut OpList) {
        while let Some(op) = list.pop_front() {
            // SAFETY: ops on a stream's lists are live ops of its pool blocks, now unlinked.
            unsafe {
                (*op).reset();
                pool.push_back(op);
            }
        }
    }
}

impl Drop for StreamState {
    fn drop(&mut self) {
        // Free the request trackers still held by ops on any list, then the blocks.
        let mut all = OpList::new();
        all.append(&mut self.active);
        all.append(&mut self.next_ops);
        for b in self.blocks.values_mut() {
            all.append(&mut b.ops);
        }
        Self::release_list(&mut self.pool, &mut all);
        self.pool = OpList::new();
        for block in self.pool_blocks.drain(..) {
            // SAFETY: every block was allocated in `grow` with this layout and is freed once;
            // no list refers to its ops any more.
            unsafe { dealloc(block.as_ptr() as *mut u8, Layout::new::<PoolBlock>()) };
        }
    }
}
