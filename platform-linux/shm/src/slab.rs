//! The request slab: ids are `generation << 32 | index`, so an id released and reused is
//! never mistaken for the old one.

/// One slot.
struct Entry<T> {
    /// Bumped at every release (never 0).
    generation: u32,
    value: Option<T>,
}

/// Requests by id.
pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
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
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Stores `value`; returns its id.
    pub(crate) fn insert(&mut self, value: T) -> u64 {
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
        (u64::from(e.generation) << 32) | u64::from(index)
    }

    /// The index inside an id (no check).
    pub(crate) fn index_of(id: u64) -> u32 {
        id as u32
    }

    /// The index of live id `id`, `None` for an unknown or released one.
    pub(crate) fn lookup(&self, id: u64) -> Option<u32> {
        let index = id as u32;
        let e = self.entries.get(index as usize)?;
        (u64::from(e.generation) == id >> 32 && e.value.is_some()).then_some(index)
    }

    pub(crate) fn get_mut(&mut self, index: u32) -> Option<&mut T> {
        self.entries.get_mut(index as usize)?.value.as_mut()
    }

    /// Releases entry `index`; returns what it held.
    pub(crate) fn remove(&mut self, index: u32) -> Option<T> {
        let e = self.entries.get_mut(index as usize)?;
        let v = e.value.take();
        if v.is_some() {
            e.generation = e.generation.wrapping_add(1).max(1);
            self.free.push(index);
            self.live -= 1;
        }
        v
    }

    /// Every live value.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().filter_map(|e| e.value.as_ref())
    }
}
