//! Small maps per item, dense by item index (issue 21: the stack pass keeps per-item
//! counters for a million items; a hash map per item, or one keyed by `(item, ...)`,
//! cost more in allocation and hashing than the pass itself).
//!
//! [`ItemMaps`] keeps every item's entries in one arena as a linked list per item (an
//! item has few distinct keys: its stacks, its wakers), found by a linear walk. The walk
//! is bounded: past [`LIST_MAX`] entries an item's further keys go to a hash map of its
//! own, so an item with thousands of distinct stacks (untrusted input) costs at most
//! `LIST_MAX` comparisons and one hash lookup per update.

use std::hash::Hash;

use rustc_hash::FxHashMap;

/// Entries kept in an item's list before its further keys go to its hash map.
pub(crate) const LIST_MAX: u32 = 32;
const END: u32 = u32::MAX;

#[derive(Debug)]
struct Node<K, V> {
    key: K,
    value: V,
    next: u32,
}

/// Per item index, a map from `K` to `V`; see the module docs.
#[derive(Debug)]
pub(crate) struct ItemMaps<K, V> {
    /// Per item: (first node, nodes in its list).
    heads: Vec<(u32, u32)>,
    nodes: Vec<Node<K, V>>,
    /// Items whose list is full: their further keys.
    spill: FxHashMap<u32, FxHashMap<K, V>>,
}

impl<K, V> Default for ItemMaps<K, V> {
    fn default() -> Self {
        ItemMaps { heads: Vec::new(), nodes: Vec::new(), spill: FxHashMap::default() }
    }
}

impl<K: Copy + Eq + Hash, V: Default> ItemMaps<K, V> {
    /// Maps for items `0..n` (more grow on demand).
    pub fn with_items(n: usize) -> Self {
        ItemMaps { heads: vec![(END, 0); n], ..Default::default() }
    }

    /// The value of `key` in item `item`'s map, inserted as `V::default()` if absent.
    #[inline]
    pub fn entry(&mut self, item: u32, key: K) -> &mut V {
        let i = item as usize;
        if i >= self.heads.len() {
            self.heads.resize(i + 1, (END, 0));
        }
        let (head, len) = self.heads[i];
        let mut n = head;
        while n != END {
            if self.nodes[n as usize].key == key {
                return &mut self.nodes[n as usize].value;
            }
            n = self.nodes[n as usize].next;
        }
        if len >= LIST_MAX || self.nodes.len() >= END as usize {
            return self.spill.entry(item).or_default().entry(key).or_default();
        }
        let at = self.nodes.len() as u32;
        self.nodes.push(Node { key, value: V::default(), next: head });
        self.heads[i] = (at, len + 1);
        &mut self.nodes[at as usize].value
    }

    /// Every entry of item `item` (no order).
    pub fn get(&self, item: u32) -> impl Iterator<Item = (&K, &V)> {
        let mut n = self.heads.get(item as usize).map_or(END, |h| h.0);
        let list = std::iter::from_fn(move || {
            let node = self.nodes.get(n as usize)?;
            n = node.next;
            Some((&node.key, &node.value))
        });
        list.chain(self.spill.get(&item).into_iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_per_item_and_the_spill_past_the_list_bound() {
        let mut m: ItemMaps<u32, u64> = ItemMaps::default();
        *m.entry(3, 7) += 1;
        *m.entry(3, 7) += 2;
        *m.entry(3, 8) += 5;
        *m.entry(0, 7) += 10;
        let mut v: Vec<(u32, u64)> = m.get(3).map(|(k, v)| (*k, *v)).collect();
        v.sort_unstable();
        assert_eq!(v, [(7, 3), (8, 5)]);
        assert_eq!(m.get(0).count(), 1);
        assert_eq!((m.get(1).count(), m.get(99).count()), (0, 0));
        // An item with many keys: the first LIST_MAX in its list, the rest spilled; every
        // key still found once.
        for k in 0..200u32 {
            *m.entry(5, k) += k as u64;
            *m.entry(5, k) += 1;
        }
        assert_eq!(m.spill.get(&5).map(|s| s.len()), Some(200 - LIST_MAX as usize));
        let mut v: Vec<(u32, u64)> = m.get(5).map(|(k, v)| (*k, *v)).collect();
        v.sort_unstable();
        assert_eq!(v, (0..200u32).map(|k| (k, k as u64 + 1)).collect::<Vec<_>>());
    }
}
