//! What the unwinder derives from one process's mappings.

use std::sync::Arc;

use framehop::Unwinder as _;

use crate::jit::JitTable;
use crate::module::{module_for, Bytes, ModuleData};
use crate::regs::arch;
use crate::Mapping;

pub(crate) struct Loaded {
    pub(crate) mapping: Mapping,
    /// Where the file's entry point (`_start`) is mapped, when it is in this mapping.
    pub(crate) entry_avma: Option<u64>,
    /// `None` until the first unwind in this process that passes through it;
    /// `Some(false)` when the file could not be used (then code there has no unwind
    /// information).
    pub(crate) state: Option<bool>,
    /// The file's data once loaded (kept so a rebuilt process adds it again without a
    /// lookup).
    pub(crate) data: Option<Arc<ModuleData>>,
}

/// What the unwinder derives from one process's mappings: framehop's modules, built
/// lazily, valid for one generation of the process's address space.
pub(crate) struct Process {
    pub(crate) unwinder: arch::NativeUnwinder<Bytes>,
    pub(crate) cache: arch::NativeCache,
    pub(crate) maps: Vec<Loaded>,
    /// The address-space generation `maps` reflects.
    pub(crate) gen: u32,
    /// Some mapping is not loaded yet.
    pub(crate) dirty: bool,
    pub(crate) last_use: u64,
}

impl Process {
    pub(crate) fn new() -> Process {
        Process {
            unwinder: arch::NativeUnwinder::new(),
            cache: arch::NativeCache::new(),
            maps: Vec::new(),
            gen: 0,
            dirty: false,
            last_use: 0,
        }
    }

    /// Rebuild from the current mappings: what was loaded for the same mapping of the
    /// same file is added again, the rest loads lazily.
    pub(crate) fn rebuild(&mut self, maps: &[Mapping], gen: u32, jit: Option<&JitTable>) {
        let old = std::mem::take(&mut self.maps);
        self.unwinder = arch::NativeUnwinder::new();
        self.cache = arch::NativeCache::new();
        self.gen = gen;
        for m in maps {
            let prev = old.iter().find(|l| {
                l.state.is_some()
                    && l.mapping.start == m.start
                    && l.mapping.end == m.end
                    && l.mapping.pgoff == m.pgoff
                    && l.mapping.path == m.path
                    && l.mapping.file == m.file
                    && l.mapping.build_id == m.build_id
            });
            let mut l = Loaded { mapping: m.clone(), entry_avma: None, state: None, data: None };
            if let Some(p) = prev {
                l.state = p.state;
                l.data = p.data.clone();
                l.entry_avma = p.entry_avma;
                if let Some((module, _)) = l.data.as_ref().and_then(|d| module_for(m, d)) {
                    self.unwinder.add_module(module);
                }
            }
            self.maps.push(l);
        }
        for (&start, m) in jit.iter().flat_map(|t| t.by_start.iter()) {
            self.unwinder.add_module(m.module(start));
        }
        self.dirty = self.maps.iter().any(|l| l.state.is_none());
    }
}

/// Whether `addr` (a lookup address) lies in the first bytes of a file's entry point, i.e.
/// in `_start`'s call of the loader's or libc's start routine.
pub(crate) fn at_entry(maps: &[Loaded], addr: u64) -> bool {
    maps.iter().any(|l| l.entry_avma.is_some_and(|e| (e..e.saturating_add(ENTRY_CALL_WINDOW)).contains(&addr)))
}

/// Bytes after an entry point within which its first call lies (`_start` calls at once).
const ENTRY_CALL_WINDOW: u64 = 48;
