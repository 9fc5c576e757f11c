//! What the disk tier holds: entry sizes and recency, bounded by bytes. Pure: it decides
//! which entries to drop and never touches a file; the tier deletes what it names.

use std::collections::{BTreeMap, HashMap};

use super::format::Digest;

#[derive(Debug, Clone, Copy)]
struct Slot {
    bytes: u64,
    tick: u64,
}

/// Entries by digest, least recently used first out.
#[derive(Debug, Default)]
pub struct Index {
    slots: HashMap<Digest, Slot>,
    by_age: BTreeMap<u64, Digest>,
    total: u64,
    capacity: u64,
    tick: u64,
}

impl Index {
    /// An empty index of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Self {
            capacity,
            ..Default::default()
        }
    }

    /// Bytes held.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether `digest` is held; marks it used now.
    pub fn touch(&mut self, digest: &Digest) -> bool {
        let Some(slot) = self.slots.get_mut(digest) else {
            return false;
        };
        self.by_age.remove(&slot.tick);
        self.tick += 1;
        slot.tick = self.tick;
        self.by_age.insert(self.tick, *digest);
        true
    }

    /// Records `digest` of `bytes` as the newest entry and returns the entries to delete
    /// to stay within capacity (oldest first; never `digest` itself unless it alone is
    /// larger than the capacity).
    pub fn insert(&mut self, digest: Digest, bytes: u64) -> Vec<Digest> {
        self.remove(&digest);
        self.tick += 1;
        self.slots.insert(digest, Slot { bytes, tick: self.tick });
        self.by_age.insert(self.tick, digest);
        self.total += bytes;
        let mut out = Vec::new();
        while self.total > self.capacity {
            let Some((_, oldest)) = self.by_age.first_key_value() else {
                break;
            };
            let oldest = *oldest;
            self.remove(&oldest);
            out.push(oldest);
        }
        out
    }

    /// Forgets `digest`; its size, if it was held.
    pub fn remove(&mut self, digest: &Digest) -> Option<u64> {
        let slot = self.slots.remove(digest)?;
        self.by_age.remove(&slot.tick);
        self.total -= slot.bytes;
        Some(slot.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(n: u8) -> Digest {
        [n; 32]
    }

    #[test]
    fn drops_the_least_recently_used_first() {
        let mut index = Index::new(300);
        for n in 0..3 {
            assert!(index.insert(d(n), 100).is_empty());
        }
        assert!(index.touch(&d(0)));
        assert_eq!(index.insert(d(3), 100), vec![d(1)]);
        assert_eq!(index.insert(d(4), 150), vec![d(2), d(0)]);
        assert_eq!(index.total(), 250);
        assert!(!index.touch(&d(1)));
    }

    #[test]
    fn reinserting_replaces_and_oversized_entries_do_not_stay() {
        let mut index = Index::new(100);
        index.insert(d(1), 60);
        index.insert(d(1), 70);
        assert_eq!((index.len(), index.total()), (1, 70));
        assert_eq!(index.insert(d(2), 500), vec![d(1), d(2)]);
        assert!(index.is_empty());
        assert_eq!(index.total(), 0);
        assert_eq!(index.remove(&d(9)), None);
    }
}
