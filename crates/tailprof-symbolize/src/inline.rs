//! Inline frames: the functions an address is in, innermost first, including those the
//! compiler inlined (from DWARF inline records), for stack analyses.
//!
//! `static inline` helpers at -O2 leave no symbol of their own: the flat profile names
//! such an address by its containing function. [`Symbolizer::frames`] answers the whole
//! chain, e.g. `[clamp_add (inlined), work, ...]`, with the outermost frame the same
//! name the flat profile uses ([`Symbolizer::symbolize_binary_ids`]). The DWARF comes
//! from the binary itself or its separate debug file ([`super::debugdir`]); without
//! DWARF the answer is that one frame. Answers are cached per (binary, build-id,
//! offset), so a stack table that repeats an address asks once.

use std::sync::Arc;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized};
use rustc_hash::FxHashMap;

use super::{NameId, SymIdResult, Symbolizer, UnknownReason};
use crate::maps::{Binary, BinaryKind};

/// One frame of an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Function name, in the symbolizer's [`super::NameTable`].
    pub name: NameId,
    /// Inlined into the next (outer) frame, i.e. no call instruction of its own.
    pub inlined: bool,
}

/// The frames of one address, innermost first (never empty).
pub type Frames = Arc<[Frame]>;

type Key = (String, Option<Vec<u8>>);

/// The per-address cache of inline frames.
#[derive(Default)]
pub(crate) struct InlineState {
    cache: FxHashMap<Key, FxHashMap<u64, Result<Frames, UnknownReason>>>,
}

impl Symbolizer {
    /// The frames at file offsets `offsets` of `binary`, innermost first, inlined
    /// functions included (one result per offset, same order). Unknown addresses answer
    /// the same reason as [`Symbolizer::symbolize_binary_ids`].
    pub fn frames(&mut self, binary: &Binary, trace_build_id: Option<&[u8]>, offsets: &[u64]) -> Vec<Result<Frames, UnknownReason>> {
        let key: Key = (binary.path.clone(), trace_build_id.map(<[u8]>::to_vec));
        let mut missing: Vec<u64> = {
            let cached = self.inline.cache.get(&key);
            offsets.iter().copied().filter(|o| !cached.is_some_and(|c| c.contains_key(o))).collect()
        };
        if !missing.is_empty() {
            missing.sort_unstable();
            missing.dedup();
            let found = self.frames_uncached(binary, trace_build_id, &missing);
            let cache = self.inline.cache.entry(key.clone()).or_default();
            for (o, f) in missing.into_iter().zip(found) {
                cache.insert(o, f);
            }
        }
        let cache = &self.inline.cache[&key];
        offsets.iter().map(|o| cache[o].clone()).collect()
    }

    fn frames_uncached(&mut self, binary: &Binary, trace_build_id: Option<&[u8]>, offsets: &[u64]) -> Vec<Result<Frames, UnknownReason>> {
        let base = self.symbolize_binary_ids(binary, trace_build_id, offsets);
        let single = |r: &SymIdResult| r.clone().map(|name| Frames::from(vec![Frame { name, inlined: false }]));
        if binary.kind != BinaryKind::File || !self.options().debug_syms {
            return base.iter().map(single).collect();
        }
        // Where the DWARF is: the separate debug file (by virtual address) or the binary.
        let facts = self.facts(&binary.path, trace_build_id);
        let (path, input): (std::path::PathBuf, Vec<Option<u64>>) = match (&facts.debug_elf, &facts.elf) {
            (Some(d), Some(elf)) => (d.fd_path(), offsets.iter().map(|&o| elf.vaddr_of(o)).collect()),
            (None, Some(elf)) if facts.has_dwarf => (elf.fd_path(), offsets.iter().map(|&o| Some(o)).collect()),
            _ => return base.iter().map(single).collect(),
        };
        let by_vaddr = facts.debug_elf.is_some();
        let addrs: Vec<u64> = input.iter().flatten().copied().collect();
        // The names' instance (code info and inlined functions on): its DWARF of this
        // file is already loaded.
        let sym = &self.inner;
        let src = Source::Elf(Elf { debug_syms: true, ..Elf::new(&path) });
        let answers =
            if by_vaddr { sym.symbolize(&src, Input::VirtOffset(&addrs)) } else { sym.symbolize(&src, Input::FileOffset(&addrs)) };
        let Ok(answers) = answers else { return base.iter().map(single).collect() };
        let mut answers = answers.into_iter();
        let mut out = Vec::with_capacity(offsets.len());
        for (b, inp) in base.iter().zip(&input) {
            let a = if inp.is_some() { answers.next() } else { None };
            let frames = match a {
                Some(Symbolized::Sym(s)) if !s.inlined.is_empty() || b.is_err() => {
                    let outer = match b {
                        Ok(id) => *id,
                        Err(_) if !s.name.is_empty() => self.names.intern(&s.name),
                        Err(r) => {
                            out.push(Err(r.clone()));
                            continue;
                        }
                    };
                    let mut v: Vec<Frame> = s
                        .inlined
                        .iter()
                        .rev()
                        .filter(|f| !f.name.is_empty())
                        .map(|f| Frame { name: self.names.intern(&f.name), inlined: true })
                        .collect();
                    v.push(Frame { name: outer, inlined: false });
                    Ok(Frames::from(v))
                }
                _ => single(b),
            };
            out.push(frames);
        }
        out
    }
}
