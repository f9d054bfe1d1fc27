//! JIT code ranges (perf maps, jitdump) per process and time, the address-space model's
//! part for code no file maps: which function a runtime had at an address when a sample
//! was taken (docs/SYMBOLS.md, "Code that runtimes generate"). Used by the symbolizer
//! (re-exported as `tailprof_symbolize::jit`).
//!
//! Entries come from the trace's JIT chunks ([`crate::JitEntry`]). An address
//! resolves to the entry that covers it, valid at the sample's time (`entry.time <=
//! time`), with the latest time; among entries of equal time (every perf-map entry has
//! time 0) the one added last wins, as perf does for a reused perf-map address.

use std::collections::HashMap;

use crate::JitEntry;

/// Most entries kept per process (a bound against a hostile trace; the recorder bounds
/// what it copies per process well below this). Further entries are counted.
pub const MAX_ENTRIES_PER_PROCESS: usize = 1 << 20;
/// How many earlier-starting entries a lookup examines at most (entries overlap only
/// when a runtime reuses addresses).
const MAX_SCAN: usize = 256;

#[derive(Debug, Default)]
struct Table {
    /// Indexes into [`JitTables::entries`], sorted by start (then by insertion).
    order: Vec<u32>,
    sorted: bool,
    max_size: u64,
}

/// Every process's JIT entries; see the module docs.
#[derive(Debug, Default)]
pub struct JitTables {
    entries: Vec<JitEntry>,
    by_pid: HashMap<u32, Table>,
    dropped: u64,
}

impl JitTables {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an entry (empty ranges and ranges that wrap are ignored and counted).
    pub fn add(&mut self, e: &JitEntry) {
        let t = self.by_pid.entry(e.pid).or_default();
        if e.size == 0 || e.start.checked_add(e.size).is_none() || t.order.len() >= MAX_ENTRIES_PER_PROCESS {
            self.dropped += 1;
            return;
        }
        t.order.push(self.entries.len() as u32);
        t.sorted = false;
        t.max_size = t.max_size.max(e.size);
        self.entries.push(e.clone());
    }

    /// Entries refused by [`Self::add`].
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Whether process `pid` has any entry.
    #[inline]
    pub fn has(&self, pid: u32) -> bool {
        self.by_pid.contains_key(&pid)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entry number `i` (as answered by [`Self::lookup`]).
    pub fn entry(&self, i: u32) -> &JitEntry {
        &self.entries[i as usize]
    }

    /// The entry naming `ip` of process `pid` at `time` (see the module docs).
    pub fn lookup(&mut self, pid: u32, ip: u64, time: u64) -> Option<u32> {
        let entries = &self.entries;
        let t = self.by_pid.get_mut(&pid)?;
        if !t.sorted {
            // Stable: equal starts keep insertion order.
            t.order.sort_by_key(|&i| entries[i as usize].start);
            t.sorted = true;
        }
        let end = t.order.partition_point(|&i| entries[i as usize].start <= ip);
        let mut best: Option<(u64, u32)> = None;
        for &i in t.order[..end].iter().rev().take(MAX_SCAN) {
            let e = &entries[i as usize];
            if ip - e.start >= t.max_size {
                break;
            }
            if ip - e.start < e.size && e.time <= time && best.is_none_or(|(bt, bi)| (e.time, i) > (bt, bi)) {
                best = Some((e.time, i));
            }
        }
        best.map(|(_, i)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jit::runtime_advice;
    use crate::JitOrigin;

    fn e(pid: u32, time: u64, start: u64, size: u64, name: &str) -> JitEntry {
        JitEntry { pid, time, start, size, origin: JitOrigin::JitLoad, name: name.into(), source: None, lines: Default::default() }
    }

    #[test]
    fn a_reused_address_names_the_load_valid_at_the_time() {
        let mut t = JitTables::new();
        t.add(&e(1, 100, 0x1000, 0x100, "first"));
        t.add(&e(1, 500, 0x1000, 0x80, "second"));
        t.add(&e(2, 0, 0x1000, 0x100, "other process"));
        let name = |t: &mut JitTables, ip, time| t.lookup(1, ip, time).map(|i| t.entry(i).name.clone());
        assert_eq!(name(&mut t, 0x1010, 50), None, "before any load");
        assert_eq!(name(&mut t, 0x1010, 100).as_deref(), Some("first"));
        assert_eq!(name(&mut t, 0x1010, 499).as_deref(), Some("first"));
        assert_eq!(name(&mut t, 0x1010, 500).as_deref(), Some("second"));
        assert_eq!(name(&mut t, 0x10a0, 900).as_deref(), Some("first"), "past the second's end");
        assert_eq!(name(&mut t, 0x1100, 900), None);
        assert_eq!(t.lookup(3, 0x1010, 900), None);
    }

    #[test]
    fn runtimes_are_told_apart_by_executable_name() {
        assert_eq!(runtime_advice("/usr/bin/node").unwrap().0, "node");
        assert!(runtime_advice("node").unwrap().1.contains("--perf-basic-prof"));
        assert!(runtime_advice("java").unwrap().1.contains("-XX:+PreserveFramePointer"));
        assert!(runtime_advice("dotnet").unwrap().1.contains("DOTNET_PerfMapEnabled=1"));
        assert!(runtime_advice("python3.12").unwrap().1.contains("-X perf"));
        assert_eq!(runtime_advice("python3.11"), None);
        assert_eq!(runtime_advice("postgres"), None);
    }

    #[test]
    fn perf_map_entries_the_later_line_wins() {
        let mut t = JitTables::new();
        t.add(&e(1, 0, 0x2000, 0x10, "old"));
        t.add(&e(1, 0, 0x1ff0, 0x40, "new"));
        t.add(&e(1, 0, 0x5000, 0, "empty"));
        t.add(&e(1, 0, u64::MAX - 1, 0x10, "wraps"));
        let i = t.lookup(1, 0x2008, 0).unwrap();
        assert_eq!(t.entry(i).name, "new");
        assert_eq!(t.dropped(), 2);
    }
}
