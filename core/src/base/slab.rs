//! A slab of in-flight requests whose ids carry a generation: the transports' request tables
//! (the in-memory transport's, `proxy-shm`'s).
//!
//! An id is `generation << 32 | index`. Releasing an entry bumps its generation (never 0), so
//! an id released and then reused for another request is recognised as stale: [`Slab::lookup`]
//! answers `None` for it instead of the new request.
//!
//! Seed: the request handles `ncclNet->isend` / `irecv` return and `test` takes (§1, §4).

use alloc::vec::Vec;

/// One slot.
struct Entry<T> {
    /// Bumped each time the slot is released (never 0).
    generation: u32,
    value: Option<T>,
}

/// Requests by id (see the module doc). Indices are `u32`: at most `u32::MAX` entries.
pub struct Slab<T> {
    entries: Vec<Entry<T>>,
    /// Indices of free entries.
    free: Vec<u32>,
    /// Occupied entries.
    live: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            free: Vec::new(),
            live: 0,
        }
    }
}

impl<T> Slab<T> {
    /// Occupied entries.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Stores `value`; returns its (index, id). The caller bounds the number of live entries
    /// (below `u32::MAX`).
    pub fn insert(&mut self, value: T) -> (u32, u64) {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.entries.push(Entry {
                    generation: 1,
                    value: None,
                });
                (self.entries.len() - 1) as u32
            }
        };
        let e = &mut self.entries[index as usize];
        e.value = Some(value);
        self.live += 1;
        (index, (u64::from(e.generation) << 32) | u64::from(index))
    }

    /// The index of live request `id`, or `None` for an unknown or released one.
    pub fn lookup(&self, id: u64) -> Option<u32> {
        let index = id as u32;
        let e = self.entries.get(index as usize)?;
        (u64::from(e.generation) == id >> 32 && e.value.is_some()).then_some(index)
    }

    /// The request at `index`, if live.
    pub fn get_mut(&mut self, index: u32) -> Option<&mut T> {
        self.entries.get_mut(index as usize)?.value.as_mut()
    }

    /// Releases entry `index` (a later id for it has another generation); returns what it
    /// held, `None` when it was free or out of range.
    pub fn remove(&mut self, index: u32) -> Option<T> {
        let e = self.entries.get_mut(index as usize)?;
        let v = e.value.take();
        if v.is_some() {
            e.generation = e.generation.wrapping_add(1).max(1);
            self.free.push(index);
            self.live -= 1;
        }
        v
    }

    /// Every live request.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().filter_map(|e| e.value.as_ref())
    }

    /// Every live request, with its index.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> {
        self.entries
            .iter_mut()
            .enumerate()
            .filter_map(|(i, e)| e.value.as_mut().map(|v| (i as u32, v)))
    }
}
