//! [`StackTable`]: the interner of call stacks, a parent-pointer tree of frames.
//!
//! Owns the in-memory form of stacks shared by producers and consumers. A stack is a
//! node: one [`Frame`] plus the id of the node of its caller, so stacks that share
//! callers share nodes, and a stack id is one `u32` however deep the stack. Nodes are
//! hash-consed: the same `(parent, frame)` always gives the same [`StackId`]. Ids are
//! dense, `1..=len()` in creation order, so a parent's id is always smaller than its
//! child's (what makes the on-disk node table and [`StackTable::handle_def`] simple).
//!
//! - Producers: [`crate::TraceWriter::intern_stack`] (the writer owns a table).
//! - Consumers: the reader delivers [`StackDef`]s through [`crate::Sink::handle_stack`];
//!   feed them to [`StackTable::handle_def`] to resolve ids to frames.
//!
//! ```
//! use tailprof_format::*;
//! let mut t = StackTable::new();
//! let a = t.intern_leaf_first(&[Frame::user(0x30), Frame::user(0x20), Frame::user(0x10)]);
//! let b = t.intern_leaf_first(&[Frame::user(0x31), Frame::user(0x20), Frame::user(0x10)]);
//! assert_eq!(t.len(), 4); // 0x10 <- 0x20 shared
//! assert_eq!(t.parent(a), t.parent(b));
//! let frames: Vec<u64> = t.frames_leaf_first(a).map(|f| f.ip).collect();
//! assert_eq!(frames, [0x30, 0x20, 0x10]);
//! assert_eq!(t.intern_root_first(&[Frame::user(0x10), Frame::user(0x20), Frame::user(0x30)]), a);
//! ```

use crate::record::{Frame, StackDef, StackId};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FxHash-style hasher for small integer keys (not attacker-facing: keys come from one
/// trace, and a bad distribution costs time, never correctness).
#[derive(Default, Clone, Copy)]
struct NodeHasher(u64);

impl Hasher for NodeHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64);
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

type NodeMap<K, V> = HashMap<K, V, BuildHasherDefault<NodeHasher>>;

/// Interned call stacks. See the [module docs](self).
#[derive(Debug, Clone, Default)]
pub struct StackTable {
    /// Node `id` is `nodes[id - 1]`: (parent, frame).
    nodes: Vec<(StackId, Frame)>,
    map: NodeMap<(StackId, Frame), StackId>,
    /// Stack cache for [`Self::intern_leaf_first`]: hash of a stack's frames (every
    /// caller part of an interned stack too) → id. Verified by walking the parents, so a
    /// collision costs time, never correctness.
    whole: NodeMap<u64, StackId>,
    /// Scratch of [`Self::intern_leaf_first`].
    suffix: Vec<u64>,
}

impl StackTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of nodes (the largest id).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Forgets every node.
    pub fn clear(&mut self) {
        self.nodes.clear();
        self.map.clear();
        self.whole.clear();
    }

    /// Whether `id` is a node of this table (`NONE` is not).
    #[inline]
    pub fn contains(&self, id: StackId) -> bool {
        id.0 != 0 && (id.0 as usize) <= self.nodes.len()
    }

    /// `(parent, frame)` of node `id`; `None` for `NONE` and unknown ids.
    #[inline]
    pub fn get(&self, id: StackId) -> Option<(StackId, Frame)> {
        self.nodes.get((id.0 as usize).wrapping_sub(1)).copied()
    }

    /// The caller's node of `id` (`NONE` for an outermost frame or an unknown id).
    pub fn parent(&self, id: StackId) -> StackId {
        self.get(id).map_or(StackId::NONE, |(p, _)| p)
    }

    /// The frame of node `id` (its leaf frame).
    pub fn frame(&self, id: StackId) -> Option<Frame> {
        self.get(id).map(|(_, f)| f)
    }

    /// The node for `frame` called from `parent`, created if new. A `parent` that is not
    /// a node of this table is treated as `NONE` (an outermost frame).
    pub fn intern(&mut self, parent: StackId, frame: Frame) -> StackId {
        let parent = if self.contains(parent) { parent } else { StackId::NONE };
        let next = StackId(self.nodes.len() as u32 + 1);
        let id = *self.map.entry((parent, frame)).or_insert(next);
        if id == next {
            self.nodes.push((parent, frame));
        }
        id
    }

    /// Interns a stack given innermost frame first (the order of perf callchains and
    /// unwinders). Returns the leaf's node; `NONE` for an empty slice.
    ///
    /// Every interned stack and every caller part of it is cached by a hash of its frames
    /// (verified by walking the parents, so a collision costs time, never correctness).
    /// A new stack therefore costs one node lookup per frame *not* shared with a stack
    /// seen before: usually only the leaf (samples of one caller chain at different
    /// instructions), not the whole depth.
    pub fn intern_leaf_first(&mut self, frames: &[Frame]) -> StackId {
        let n = frames.len();
        if n == 0 {
            return StackId::NONE;
        }
        // suffix[k] = hash of the outermost k + 1 frames (frames[n - 1 - k..]).
        let mut suffix = std::mem::take(&mut self.suffix);
        suffix.clear();
        let mut h = 0x243f_6a88_85a3_08d3u64;
        for f in frames.iter().rev() {
            h = (h.rotate_left(5) ^ f.ip ^ (f.kind as u64).rotate_right(1)).wrapping_mul(0x517c_c1b7_2722_0a95);
            suffix.push(h);
        }
        // The longest part already known, outermost frames first...
        let mut id = StackId::NONE;
        let mut known = 0;
        for len in (1..=n).rev() {
            if let Some(&c) = self.whole.get(&suffix[len - 1]) {
                if self.frames_leaf_first(c).eq(frames[n - len..].iter().copied()) {
                    (id, known) = (c, len);
                    break;
                }
            }
        }
        // ...then the rest, each new part cached.
        for len in known + 1..=n {
            id = self.intern(id, frames[n - len]);
            self.whole.insert(suffix[len - 1], id);
        }
        self.suffix = suffix;
        id
    }

    /// Interns a stack given outermost frame first. Returns the leaf's node; `NONE` for
    /// an empty slice.
    pub fn intern_root_first(&mut self, frames: &[Frame]) -> StackId {
        frames.iter().fold(StackId::NONE, |id, &f| self.intern(id, f))
    }

    /// The frames of stack `id`, innermost first (empty for `NONE` or an unknown id).
    pub fn frames_leaf_first(&self, id: StackId) -> FramesLeafFirst<'_> {
        FramesLeafFirst { table: self, next: id }
    }

    /// The frames of stack `id`, outermost first.
    pub fn frames_root_first(&self, id: StackId) -> Vec<Frame> {
        let mut v: Vec<Frame> = self.frames_leaf_first(id).collect();
        v.reverse();
        v
    }

    /// Number of frames of stack `id`.
    pub fn depth(&self, id: StackId) -> usize {
        self.frames_leaf_first(id).count()
    }

    /// Adds a node delivered by a reader ([`crate::Sink::handle_stack`]). Readers
    /// deliver ids `1, 2, 3...` in order with parents defined first; a definition that
    /// does not continue the table that way (or repeats an existing `(parent, frame)`) is
    /// refused and `false` returned.
    pub fn handle_def(&mut self, d: &StackDef) -> bool {
        let next = self.nodes.len() as u32 + 1;
        if d.id.0 != next || !(d.parent.is_none() || d.parent.0 < next) {
            return false;
        }
        if self.map.contains_key(&(d.parent, d.frame)) {
            return false;
        }
        self.map.insert((d.parent, d.frame), d.id);
        self.nodes.push((d.parent, d.frame));
        true
    }

    /// The nodes added since the table had `len` nodes, as [`StackDef`]s in id order (what
    /// a producer hands its sink before the record that uses them). O(new nodes).
    pub fn defs_since(&self, len: usize) -> impl Iterator<Item = StackDef> + '_ {
        let new = self.nodes.get(len..).unwrap_or(&[]);
        new.iter().enumerate().map(move |(i, &(parent, frame))| StackDef { id: StackId((len + i) as u32 + 1), parent, frame })
    }

    /// Every node as a [`StackDef`], in id order (parents first).
    pub fn defs(&self) -> impl Iterator<Item = StackDef> + '_ {
        self.nodes.iter().enumerate().map(|(i, &(parent, frame))| StackDef { id: StackId(i as u32 + 1), parent, frame })
    }
}

/// Iterator over a stack's frames, innermost first: see [`StackTable::frames_leaf_first`].
/// Terminates on any table (parents always have smaller ids).
pub struct FramesLeafFirst<'a> {
    table: &'a StackTable,
    next: StackId,
}

impl Iterator for FramesLeafFirst<'_> {
    type Item = Frame;
    #[inline]
    fn next(&mut self) -> Option<Frame> {
        let (parent, frame) = self.table.get(self.next)?;
        self.next = parent;
        Some(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_hash_consed_and_shares_prefixes() {
        let mut t = StackTable::new();
        let s1 = [Frame::user(3), Frame::user(2), Frame::kernel(1)];
        let a = t.intern_leaf_first(&s1);
        assert_eq!(t.len(), 3);
        assert_eq!(t.intern_leaf_first(&s1), a);
        assert_eq!(t.intern_root_first(&[Frame::kernel(1), Frame::user(2), Frame::user(3)]), a);
        // Same ip, different kind: a different frame.
        let b = t.intern_leaf_first(&[Frame::user(3), Frame::user(2), Frame::user(1)]);
        assert_ne!(a, b);
        assert_eq!(t.len(), 6);
        // A suffix of an interned stack is its ancestor.
        let c = t.intern_leaf_first(&s1[1..]);
        assert_eq!(t.parent(a), c);
        assert_eq!(t.depth(a), 3);
        assert_eq!(t.frames_root_first(a), vec![Frame::kernel(1), Frame::user(2), Frame::user(3)]);
        assert_eq!(t.intern_leaf_first(&[]), StackId::NONE);
        assert_eq!(t.frames_leaf_first(StackId(999)).count(), 0);
        // Parents always precede children.
        for d in t.defs() {
            assert!(d.parent.0 < d.id.0);
        }
    }

    #[test]
    fn handle_def_rebuilds_a_table_and_refuses_out_of_order() {
        let mut t = StackTable::new();
        t.intern_leaf_first(&[Frame::user(3), Frame::user(2), Frame::user(1)]);
        t.intern_leaf_first(&[Frame::user(4), Frame::user(1)]);
        let mut u = StackTable::new();
        for d in t.defs() {
            assert!(u.handle_def(&d));
        }
        assert_eq!(u.defs().collect::<Vec<_>>(), t.defs().collect::<Vec<_>>());
        let d = StackDef { id: StackId(9), parent: StackId::NONE, frame: Frame::user(1) };
        assert!(!u.handle_def(&d));
        let d = StackDef { id: StackId(5), parent: StackId(5), frame: Frame::user(7) };
        assert!(!u.handle_def(&d));
        let d = StackDef { id: StackId(5), parent: StackId(1), frame: Frame::user(2) }; // duplicate
        assert!(!u.handle_def(&d));
        assert_eq!(u.len(), 4);
    }

    #[test]
    fn whole_stack_cache_survives_collisions() {
        let mut t = StackTable::new();
        let mut ids = Vec::new();
        for i in 0..2000u64 {
            let f: Vec<Frame> = (0..(i % 13 + 1)).map(|k| Frame::user(i * 7 + k)).collect();
            ids.push((t.intern_leaf_first(&f), f));
        }
        for (id, f) in &ids {
            assert_eq!(t.intern_leaf_first(f), *id);
            assert!(t.frames_leaf_first(*id).eq(f.iter().copied()));
        }
    }
}
