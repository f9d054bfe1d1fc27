//! JIT frames in the agent (issue 23): code a runtime generated (perf maps, jitdumps, as
//! the recorder copies them: `tailprof_collect::jit`) has no file and no build-id, so it
//! is named per process. The aggregator keeps each process's entries in the
//! address-space model's JIT ranges ([`JitTables`]), bounded per process and in all, and
//! counts what it refuses. A frame of a process with JIT names that falls outside every
//! file mapping is aggregated as (JIT, address); when its window ends the address is
//! named by the latest entry covering it, and the process's *used* entries become the
//! symbol table of a pseudo binary `nobuildid-…` (path [`JIT_PATH`]) in the store.
//!
//! A symbol table is written once and never changed (the store's rule, so caches of it
//! stay right): when a window uses entries the last table did not have, the process gets
//! its next generation, a new pseudo build-id whose table has every entry used so far
//! (an entry that replaced an overlapping one at a reused address replaces it there too;
//! earlier windows keep the earlier table). A process that exits keeps its entries until
//! the end of the window its samples are in.

use std::collections::{BTreeMap, HashMap};

use tailprof_format::addrspace::jit::JitTables;
use tailprof_format::JitEntry;
use tailprof_store::schema::NO_BUILD_ID_PREFIX;
use tailprof_store::write::SymbolFn;

/// Processes with JIT names kept at most; beyond, exited ones are let go first, else new
/// processes' entries are refused and counted.
pub const MAX_JIT_PROCS: usize = 1024;
/// Entries kept per process at most; beyond, refused and counted.
pub const MAX_JIT_ENTRIES_PER_PROC: usize = 65_536;
/// Bytes of names kept in all at most; beyond, refused and counted.
pub const MAX_JIT_BYTES: usize = 64 << 20;
/// Entries in one process's symbol table at most; frames of further functions are stored
/// unnamed and counted.
pub const MAX_JIT_SYMBOLS_PER_PROC: usize = 16_384;
/// The `binary` path stored for JIT frames.
pub const JIT_PATH: &str = "[jit]";

/// Counters of the JIT names, part of [`crate::aggregate::AggStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct JitStats {
    /// Entries the recorder handed over and the aggregator kept.
    pub jit_entries: u64,
    /// Entries refused at [`MAX_JIT_PROCS`], [`MAX_JIT_ENTRIES_PER_PROC`] or
    /// [`MAX_JIT_BYTES`] (or empty/wrapping ranges).
    pub jit_entries_dropped: u64,
    /// JIT symbol tables (process generations) sent to the store.
    pub jit_symbol_tables: u64,
    /// Frames (per aggregate row) of processes with JIT names left unnamed: no entry
    /// covered them, or the process's table was at [`MAX_JIT_SYMBOLS_PER_PROC`].
    pub jit_frames_unnamed: u64,
}

/// A JIT symbol table to write: the process generation's pseudo build-id and functions
/// (by start address).
#[derive(Debug)]
pub struct JitTable {
    pub build_id: String,
    pub path: String,
    pub funcs: Vec<SymbolFn>,
}

#[derive(Debug)]
struct Proc {
    table: JitTables,
    entries: usize,
    bytes: usize,
    seed: u64,
    generation: u32,
    /// Entries used by frames so far: start → (size, name); no two overlap.
    used: BTreeMap<u64, (u64, String)>,
    /// `used` changed since the last table.
    dirty: bool,
    /// Its EXIT record was seen (let go at the end of the window).
    exited: bool,
}

impl Proc {
    fn build_id(&self) -> String {
        format!("{NO_BUILD_ID_PREFIX}{:016x}{:08x}", self.seed, self.generation)
    }

    /// The used entry covering `ip`.
    fn used_at(&self, ip: u64) -> Option<u64> {
        let (&start, (size, _)) = self.used.range(..=ip).next_back()?;
        (ip - start < *size).then_some(start)
    }
}

/// Every process's JIT names; see the [module docs](self).
#[derive(Debug, Default)]
pub struct JitNames {
    procs: HashMap<u32, Proc>,
    bytes: usize,
    pub stats: JitStats,
}

fn fnv(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

impl JitNames {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether process `pid` has JIT names.
    #[inline]
    pub fn has(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// Processes held now.
    pub fn process_count(&self) -> usize {
        self.procs.len()
    }

    /// Keeps entry `e` within the bounds (see the constants).
    pub fn add(&mut self, e: &JitEntry) {
        let cost = e.name.len() + e.source.as_ref().map_or(0, String::len) + 64;
        if self.bytes + cost > MAX_JIT_BYTES || e.size == 0 || e.start.checked_add(e.size).is_none() {
            self.stats.jit_entries_dropped += 1;
            return;
        }
        if !self.procs.contains_key(&e.pid) {
            if self.procs.len() >= MAX_JIT_PROCS {
                self.let_go_exited();
            }
            if self.procs.len() >= MAX_JIT_PROCS {
                self.stats.jit_entries_dropped += 1;
                return;
            }
            // A pseudo build-id per process instance: pid, when it was first seen, and the
            // wall clock (a pid reused, another boot, another agent run differ).
            let mut seed = 0xcbf2_9ce4_8422_2325u64;
            fnv(&mut seed, b"jit");
            fnv(&mut seed, &e.pid.to_le_bytes());
            fnv(&mut seed, &tailprof_collect::session::monotonic_ns().to_le_bytes());
            fnv(&mut seed, &tailprof_store::time::now_us().to_le_bytes());
            let p = Proc {
                table: JitTables::new(),
                entries: 0,
                bytes: 0,
                seed,
                generation: 0,
                used: BTreeMap::new(),
                dirty: false,
                exited: false,
            };
            self.procs.insert(e.pid, p);
        }
        let Some(p) = self.procs.get_mut(&e.pid) else {
            return;
        };
        if p.entries >= MAX_JIT_ENTRIES_PER_PROC {
            self.stats.jit_entries_dropped += 1;
            return;
        }
        let before = p.table.dropped();
        p.table.add(e);
        if p.table.dropped() != before {
            self.stats.jit_entries_dropped += 1;
            return;
        }
        p.entries += 1;
        p.bytes += cost;
        self.bytes += cost;
        self.stats.jit_entries += 1;
    }

    /// Process `pid` exited: its names go at the end of the current window.
    pub fn exit(&mut self, pid: u32) {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.exited = true;
        }
    }

    fn let_go_exited(&mut self) {
        let bytes = &mut self.bytes;
        self.procs.retain(|_, p| {
            if p.exited {
                *bytes -= p.bytes;
            }
            !p.exited
        });
    }

    /// A frame of `pid` at `ip` in the window being ended: the latest entry covering it
    /// joins the process's used entries (replacing overlapping ones). Returns whether it
    /// is named.
    pub fn use_frame(&mut self, pid: u32, ip: u64) -> bool {
        let Some(p) = self.procs.get_mut(&pid) else {
            return false;
        };
        let Some(i) = p.table.lookup(pid, ip, u64::MAX) else {
            return false;
        };
        let e = p.table.entry(i);
        if let Some((size, name)) = p.used.get(&e.start) {
            if *size == e.size && *name == e.name {
                return true;
            }
        }
        // Overlapping entries used before (an address reused) make way.
        let end = e.start + e.size;
        let mut overlapping = Vec::new();
        for (&s, (sz, _)) in p.used.range(..end).rev() {
            if s.saturating_add(*sz) > e.start {
                overlapping.push(s);
            }
            if s <= e.start {
                break;
            }
        }
        if p.used.len() - overlapping.len() >= MAX_JIT_SYMBOLS_PER_PROC {
            return false;
        }
        for s in overlapping {
            p.used.remove(&s);
        }
        p.used.insert(e.start, (e.size, e.name.clone()));
        p.dirty = true;
        true
    }

    /// The tables of the processes whose used entries changed (each a new generation),
    /// to be written before the window that names frames with them.
    pub fn take_tables(&mut self) -> Vec<JitTable> {
        let mut out = Vec::new();
        for p in self.procs.values_mut().filter(|p| p.dirty) {
            p.generation = p.generation.wrapping_add(1);
            p.dirty = false;
            let funcs = p.used.iter().map(|(&start, (size, name))| SymbolFn { start, size: *size, name: name.clone() }).collect();
            out.push(JitTable { build_id: p.build_id(), path: JIT_PATH.into(), funcs });
        }
        self.stats.jit_symbol_tables += out.len() as u64;
        out
    }

    /// The pseudo build-id naming `ip` of `pid` (after [`Self::use_frame`] and
    /// [`Self::take_tables`]), or `None`: unnamed (counted).
    pub fn build_id_of(&mut self, pid: u32, ip: u64) -> Option<String> {
        let named = self.procs.get(&pid).filter(|p| p.used_at(ip).is_some()).map(Proc::build_id);
        if named.is_none() {
            self.stats.jit_frames_unnamed += 1;
        }
        named
    }

    /// The window ended: processes that exited are let go.
    pub fn end_window(&mut self) {
        self.let_go_exited();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailprof_format::JitOrigin;

    fn e(pid: u32, time: u64, start: u64, size: u64, name: &str) -> JitEntry {
        JitEntry { pid, time, start, size, origin: JitOrigin::PerfMap, name: name.into(), source: None, lines: Default::default() }
    }

    #[test]
    fn a_table_is_written_once_per_generation_and_reuse_starts_the_next() {
        let mut j = JitNames::new();
        j.add(&e(7, 0, 0x1000, 0x100, "hot"));
        j.add(&e(7, 0, 0x2000, 0x100, "cold"));
        assert!(j.use_frame(7, 0x1010));
        assert!(!j.use_frame(7, 0x5000), "no entry there");
        assert!(!j.use_frame(8, 0x1010), "no such process");
        let t = j.take_tables();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].funcs.len(), 1);
        assert_eq!(t[0].funcs[0].name, "hot");
        let g1 = j.build_id_of(7, 0x10ff).unwrap();
        assert_eq!(j.build_id_of(7, 0x2000), None);
        assert_eq!(j.stats.jit_frames_unnamed, 1);
        // the same function again: no new table
        assert!(j.use_frame(7, 0x1020));
        assert!(j.take_tables().is_empty());
        // the address reused by another function: a new generation without "hot"
        j.add(&e(7, 0, 0x1080, 0x100, "reused"));
        assert!(j.use_frame(7, 0x1090));
        assert!(j.use_frame(7, 0x2010));
        let t = j.take_tables();
        let names: Vec<&str> = t[0].funcs.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["reused", "cold"]);
        let g2 = j.build_id_of(7, 0x1090).unwrap();
        assert_ne!(g1, g2);
        assert!(tailprof_store::layout::valid_build_id(&g2), "{g2}");
    }

    #[test]
    fn exited_processes_stay_until_the_window_ends_and_bounds_count() {
        let mut j = JitNames::new();
        j.add(&e(1, 0, 0x1000, 0x10, "f"));
        j.exit(1);
        assert!(j.use_frame(1, 0x1008), "an exited process's frames of this window are named");
        assert_eq!(j.take_tables().len(), 1);
        j.end_window();
        assert!(!j.has(1));
        for pid in 0..MAX_JIT_PROCS as u32 + 3 {
            j.add(&e(100 + pid, 0, 0x1000, 0x10, "g"));
        }
        assert_eq!(j.process_count(), MAX_JIT_PROCS);
        assert_eq!(j.stats.jit_entries_dropped, 3);
        j.add(&e(100, 0, 0x1000, 0, "empty"));
        assert_eq!(j.stats.jit_entries_dropped, 4);
    }
}
