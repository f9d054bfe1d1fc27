//! Sample address → function, resolved once per unique key.
//!
//! [`Resolver`] owns the part every per-function analysis shares (the flat profile in
//! [`crate::profile`], the per-item join in [`crate::items`]):
//!
//! - while reading: it follows the side-band records ([`AddressSpaces`]) and maps each
//!   sample to a dense [`LocId`] with one FxHashMap lookup on `(pid, ip)`. The slot
//!   remembers the address-space generation it was resolved under; only when the pid's
//!   mappings changed since (exec, fork, mmap) is the IP resolved again. Kernel samples
//!   use [`KERNEL_PID`] (all processes share kernel addresses), guest samples their own
//!   key. A [`LocId`] stands for a unique [`Location`] (binary, file offset).
//! - after reading: [`Resolver::functions`] symbolizes every location once, in one
//!   batch per binary, and folds locations into function rows ([`FunctionTable`]):
//!   (name, binary path) pairs, unknown addresses named `[unknown] bin+0x..` with their
//!   reason. Names come back as ids of the symbolizer's name table, each distinct raw
//!   name demangled once, so folding is keyed on integers, not strings.
//!
//! Callers keep their own counters indexed by [`LocId`] (or by anything keyed on it) and
//! fold them through [`FunctionTable::of_loc`] at the end.

use rustc_hash::FxHashMap;
use tailprof_format::{BuildIdEntry, Comm, CpuMode, Mmap, Sample, Sink, Task, TraceHeader};

use crate::maps::{short_name, AddressSpaces, BinaryId, BinaryKind, Location, KERNEL_PID};
use crate::symbolize::{KernelOrigin, NameId, SymIdResult, Symbolizer, UnknownReason};

/// Dense id of a unique [`Location`], in order of first sight.
pub type LocId = u32;

/// Pid key for guest/hypervisor samples (their addresses mean nothing to us).
const GUEST_PID: u32 = u32::MAX - 1;
/// "Never resolved" generation for a fresh slot.
const NO_GEN: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Slot {
    gen: u32,
    loc: LocId,
}

/// Maps samples to locations while a trace is read; see the module docs.
#[derive(Debug)]
pub struct Resolver {
    header: TraceHeader,
    spaces: AddressSpaces,
    build_ids: FxHashMap<String, Vec<u8>>,
    keys: FxHashMap<(u32, u64), Slot>,
    locs: FxHashMap<Location, LocId>,
    loc_list: Vec<Location>,
    /// One-entry cache of (pid, generation); cleared by every side-band record.
    last_gen: Option<(u32, u32)>,
}

/// One function row: a name within a binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionInfo {
    pub name: String,
    /// Full path of the binary.
    pub binary: String,
    /// Why the name is not a symbol, when it is not.
    pub unknown_reason: Option<String>,
}

/// Locations folded into functions by [`Resolver::functions`].
#[derive(Debug, Clone, Default)]
pub struct FunctionTable {
    /// Function row of each [`LocId`].
    pub of_loc: Vec<u32>,
    /// Function rows, in order of first location.
    pub rows: Vec<FunctionInfo>,
    /// Kernel symbol source, or why kernel addresses are not named (only when some
    /// location is in the kernel).
    pub kernel_note: Option<String>,
}

impl Resolver {
    pub fn new(header: &TraceHeader) -> Self {
        Resolver {
            header: header.clone(),
            spaces: AddressSpaces::new(),
            build_ids: FxHashMap::default(),
            keys: FxHashMap::default(),
            locs: FxHashMap::default(),
            loc_list: Vec::new(),
            last_gen: None,
        }
    }

    /// Build-ids the trace records per path (used when MMAP records carry none).
    pub fn add_build_ids(&mut self, entries: &[BuildIdEntry]) {
        for e in entries {
            self.build_ids.insert(e.path.clone(), e.build_id.clone());
        }
    }

    /// The address-space state as of the last record.
    pub fn spaces(&self) -> &AddressSpaces {
        &self.spaces
    }

    /// Every location seen so far, indexed by [`LocId`].
    pub fn locations(&self) -> &[Location] {
        &self.loc_list
    }

    /// Unique `(pid, ip)` keys seen so far.
    pub fn unique_keys(&self) -> usize {
        self.keys.len()
    }

    #[inline]
    fn generation(&mut self, pid: u32) -> u32 {
        match self.last_gen {
            Some((p, g)) if p == pid => g,
            _ => {
                let g = self.spaces.generation(pid);
                self.last_gen = Some((pid, g));
                g
            }
        }
    }

    fn intern_loc(&mut self, loc: Location) -> LocId {
        if let Some(&i) = self.locs.get(&loc) {
            return i;
        }
        let i = self.loc_list.len() as LocId;
        self.loc_list.push(loc);
        self.locs.insert(loc, i);
        i
    }

    /// The location of a sample's IP as of now (the sample's time, since records
    /// arrive in time order).
    #[inline]
    pub fn loc(&mut self, s: &Sample) -> LocId {
        let pid = match s.cpumode {
            CpuMode::GuestKernel | CpuMode::GuestUser | CpuMode::Hypervisor => GUEST_PID,
            m if AddressSpaces::is_kernel_sample(m, s.ip) => KERNEL_PID,
            _ => s.pid,
        };
        let gen = self.generation(pid);
        let slot = self.keys.entry((pid, s.ip)).or_insert(Slot { gen: NO_GEN, loc: 0 });
        if slot.gen == gen {
            return slot.loc;
        }
        // First sample of this key, or the pid's mappings changed since.
        let l = self.spaces.resolve(pid, s.ip, s.cpumode);
        let loc = self.intern_loc(l);
        self.keys.insert((pid, s.ip), Slot { gen, loc });
        loc
    }

    pub fn handle_mmap(&mut self, m: &Mmap) {
        self.last_gen = None;
        self.spaces.handle_mmap(m);
    }
    pub fn handle_comm(&mut self, c: &Comm) {
        self.last_gen = None;
        self.spaces.handle_comm(c);
    }
    pub fn handle_fork(&mut self, t: &Task) {
        self.last_gen = None;
        self.spaces.handle_fork(t);
    }
    pub fn handle_exit(&mut self, t: &Task) {
        self.spaces.handle_exit(t);
    }

    /// Symbolize every location (one batch per binary) and fold them into function
    /// rows keyed by (name, binary path).
    pub fn functions(&self, symbolizer: &mut Symbolizer) -> FunctionTable {
        let (names, kernel_note) = self.symbolize_locations(symbolizer);
        // Rows by (display-name id, path) for symbols, by (name, path) for unknowns.
        let mut known: FxHashMap<(NameId, &str), u32> = FxHashMap::default();
        let mut unknown: FxHashMap<(String, &str), u32> = FxHashMap::default();
        let mut rows = Vec::new();
        let mut of_loc = Vec::with_capacity(self.loc_list.len());
        for (loc, r) in self.loc_list.iter().zip(&names) {
            let b = self.spaces.binary(loc.binary);
            let path = b.path.as_str();
            let next = rows.len() as u32;
            let id = match r {
                Ok(name) => *known.entry((*name, path)).or_insert_with(|| {
                    rows.push(FunctionInfo {
                        name: symbolizer.name(*name).to_owned(),
                        binary: path.to_owned(),
                        unknown_reason: None,
                    });
                    next
                }),
                Err(reason) => {
                    let name = unknown_name(b.kind, path, loc.offset);
                    *unknown.entry((name, path)).or_insert_with_key(|(name, _)| {
                        rows.push(FunctionInfo {
                            name: name.clone(),
                            binary: path.to_owned(),
                            unknown_reason: Some(reason.to_string()),
                        });
                        next
                    })
                }
            };
            of_loc.push(id);
        }
        FunctionTable { of_loc, rows, kernel_note }
    }

    /// One result per location, plus the kernel-symbols note.
    fn symbolize_locations(&self, symbolizer: &mut Symbolizer) -> (Vec<SymIdResult>, Option<String>) {
        symbolizer.set_origin(KernelOrigin::new(&self.header, self.spaces.kernel_text()));
        let mut out: Vec<Option<SymIdResult>> = vec![None; self.loc_list.len()];
        let mut per_binary: FxHashMap<BinaryId, Vec<u32>> = FxHashMap::default();
        let mut kernel: Vec<u32> = Vec::new();
        for (i, loc) in self.loc_list.iter().enumerate() {
            match self.spaces.binary(loc.binary).kind {
                BinaryKind::Kernel | BinaryKind::KernelModule => kernel.push(i as u32),
                _ => per_binary.entry(loc.binary).or_default().push(i as u32),
            }
        }
        let mut ids: Vec<BinaryId> = per_binary.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let mut idx = per_binary.remove(&id).unwrap_or_default();
            idx.sort_unstable_by_key(|&i| self.loc_list[i as usize].offset);
            let offsets: Vec<u64> = idx.iter().map(|&i| self.loc_list[i as usize].offset).collect();
            let b = self.spaces.binary(id);
            let trace_bid = b.build_id.as_deref().or_else(|| self.build_ids.get(&b.path).map(Vec::as_slice));
            for (i, r) in idx.iter().zip(symbolizer.symbolize_binary_ids(b, trace_bid, &offsets)) {
                out[*i as usize] = Some(r);
            }
        }
        let mut note = None;
        if !kernel.is_empty() {
            kernel.sort_unstable_by_key(|&i| self.loc_list[i as usize].offset);
            let addrs: Vec<u64> = kernel.iter().map(|&i| self.loc_list[i as usize].offset).collect();
            note = Some(match symbolizer.kernel_symbols_status() {
                Ok(p) => format!("kernel symbols from {}", p.display()),
                Err(why) => format!("kernel addresses not named: {why}"),
            });
            for (i, r) in kernel.iter().zip(symbolizer.symbolize_kernel_ids(&addrs)) {
                out[*i as usize] = Some(r);
            }
        }
        let results = out
            .into_iter()
            .map(|r| r.unwrap_or(Err(UnknownReason::Other { why: "not symbolized".into() })))
            .collect();
        (results, note)
    }
}

/// Name shown for an address that has no symbol.
pub fn unknown_name(kind: BinaryKind, path: &str, offset: u64) -> String {
    match kind {
        BinaryKind::Kernel | BinaryKind::KernelModule => "[kernel]".to_owned(),
        BinaryKind::File | BinaryKind::Vdso => format!("[unknown] {}+{offset:#x}", short_name(path)),
        _ => format!("[unknown] {offset:#x}"),
    }
}
