//! Function names for the pushes (`--push`, `--otlp`), kept across windows.
//!
//! Both pushes name a window's frames from the store's symbol tables. Reading a table
//! is the expensive part (a 145 000-function kernel table takes about 0.2 s), and the
//! same binaries are hot window after window, so the writer thread keeps the tables it
//! read in a compact form: per function its start, end and name in one string arena
//! (20 bytes plus the name). Between windows the cache keeps at most
//! [`MAX_CACHED_BYTES`] of tables, least recently used ones go first; during a window
//! the tables that window needs are all kept (as naming without the cache would hold
//! them too). In front of the tables, every answer already given is remembered with the
//! range of offsets it holds for (a function, or a gap between functions), up to
//! [`MAX_KNOWN`] of them: a window whose functions were all seen before reads no table,
//! however large the tables. Tables are immutable once written (one per build-id), so
//! answers never go stale; a table not written yet is looked for again in the next
//! window.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;

use tailprof_store::schema::{SymbolRow, KERNEL_BUILD_ID};
use tailprof_store::{Store, StoreReader};

/// Bytes of tables kept between windows at most.
pub const MAX_CACHED_BYTES: usize = 16 << 20;
/// Answers (function or gap ranges) remembered at most; beyond, they are forgotten and
/// learned again.
pub const MAX_KNOWN: usize = 100_000;

/// One binary's functions, sorted by start.
pub struct Table {
    starts: Vec<u64>,
    ends: Vec<u64>,
    name_at: Vec<u32>,
    arena: String,
    /// The binary's path when it was symbolized.
    pub binary: String,
}

impl Table {
    fn from_rows(rows: &[SymbolRow]) -> Table {
        let mut t = Table {
            starts: Vec::with_capacity(rows.len()),
            ends: Vec::with_capacity(rows.len()),
            name_at: Vec::with_capacity(rows.len() + 1),
            arena: String::new(),
            binary: rows.first().map(|r| r.binary.clone()).unwrap_or_default(),
        };
        for (i, r) in rows.iter().enumerate() {
            // size 0: the function ends where the next one begins (as store_query::lookup)
            let end = if r.size > 0 { r.start.saturating_add(r.size) } else { rows.get(i + 1).map_or(u64::MAX, |n| n.start) };
            t.starts.push(r.start);
            t.ends.push(end);
            t.name_at.push(t.arena.len().min(u32::MAX as usize) as u32);
            t.arena.push_str(&r.name);
        }
        t.name_at.push(t.arena.len().min(u32::MAX as usize) as u32);
        t.arena.shrink_to_fit();
        t
    }

    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.starts.capacity() * 8 + self.ends.capacity() * 8 + self.name_at.capacity() * 4 + self.arena.capacity() + self.binary.capacity()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// [`Table::lookup`]'s answer at `offset` and the range `[lo, hi)` of offsets that
    /// get the same answer.
    fn entry(&self, offset: u64) -> (u64, u64, Option<&str>) {
        let next = self.starts.partition_point(|&s| s <= offset);
        let hi_start = self.starts.get(next).copied().unwrap_or(u64::MAX);
        let Some(i) = next.checked_sub(1) else { return (0, hi_start, None) };
        if offset < self.ends[i] {
            let name = self.arena.get(self.name_at[i] as usize..self.name_at[i + 1] as usize);
            (self.starts[i], self.ends[i].min(hi_start), name)
        } else {
            (self.ends[i], hi_start, None)
        }
    }

    /// The function containing `offset`.
    pub fn lookup(&self, offset: u64) -> Option<&str> {
        let i = self.starts.partition_point(|&s| s <= offset).checked_sub(1)?;
        if offset >= self.ends[i] {
            return None;
        }
        self.arena.get(self.name_at[i] as usize..self.name_at[i + 1] as usize)
    }
}

/// Answers of one binary: lo → (hi, function name or None for a gap).
type KnownRanges = BTreeMap<u64, (u64, Option<Rc<str>>)>;

/// The writer thread's table cache. See the [module docs](self).
pub struct NameCache {
    reader: StoreReader,
    tables: HashMap<String, (Rc<Table>, u64)>,
    bytes: usize,
    clock: u64,
    /// Build-ids without a table, this window.
    missing: HashSet<String>,
    /// Answers given: build-id → lo → (hi, function name, None in a gap).
    known: HashMap<String, KnownRanges>,
    known_len: usize,
    pub tables_read: u64,
}

impl NameCache {
    pub fn new(store: Store) -> Self {
        NameCache {
            reader: StoreReader::new(store),
            tables: HashMap::new(),
            bytes: 0,
            clock: 0,
            missing: HashSet::new(),
            known: HashMap::new(),
            known_len: 0,
            tables_read: 0,
        }
    }

    /// Starts a window: tables missing in the last one are looked for again, and the
    /// cache is trimmed to [`MAX_CACHED_BYTES`].
    pub fn begin_window(&mut self) {
        self.missing.clear();
        self.clock += 1;
        self.trim();
    }

    /// Evicts the least recently used tables not used in this window while over the bound.
    fn trim(&mut self) {
        while self.bytes > MAX_CACHED_BYTES {
            let now = self.clock;
            let Some(victim) = self.tables.iter().filter(|(_, v)| v.1 < now).min_by_key(|(k, v)| (v.1, k.as_str())).map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((v, _)) = self.tables.remove(&victim) {
                self.bytes -= v.bytes();
            }
        }
    }

    /// The table of `build_id`, read from the store once.
    pub fn table(&mut self, build_id: &str) -> Option<Rc<Table>> {
        if build_id.is_empty() || build_id == KERNEL_BUILD_ID || self.missing.contains(build_id) {
            return None;
        }
        if let Some((t, used)) = self.tables.get_mut(build_id) {
            *used = self.clock;
            return Some(t.clone());
        }
        let rows = self.reader.symbols(build_id).unwrap_or_default();
        self.tables_read += 1;
        if rows.is_empty() {
            if self.missing.len() < 1 << 16 {
                self.missing.insert(build_id.to_string());
            }
            return None;
        }
        let t = Rc::new(Table::from_rows(&rows));
        drop(rows);
        self.bytes += t.bytes();
        self.tables.insert(build_id.to_string(), (t.clone(), self.clock));
        self.trim();
        Some(t)
    }

    /// The name of the function at (`build_id`, `offset`), if the store's table has it.
    pub fn name(&mut self, build_id: &str, offset: u64) -> Option<String> {
        if let Some((_, (hi, name))) = self.known.get(build_id).and_then(|m| m.range(..=offset).next_back()) {
            if offset < *hi {
                return name.as_deref().map(str::to_string);
            }
        }
        let t = self.table(build_id)?;
        let (lo, hi, name) = t.entry(offset);
        let name: Option<Rc<str>> = name.map(Rc::from);
        if self.known_len >= MAX_KNOWN {
            self.known.clear();
            self.known_len = 0;
        }
        self.known.entry(build_id.to_string()).or_default().insert(lo, (hi, name.clone()));
        self.known_len += 1;
        name.as_deref().map(str::to_string)
    }

    /// Functions and bytes cached now.
    pub fn cached(&self) -> (usize, usize) {
        (self.tables.values().map(|t| t.0.len()).sum(), self.bytes)
    }
}

thread_local! {
    static CACHE: RefCell<Option<(PathBuf, NameCache)>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's cache for `store` (created on first use; replaced when
/// the store differs).
pub fn with_cache<R>(store: &Store, f: impl FnOnce(&mut NameCache) -> R) -> R {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.as_ref().is_none_or(|(root, _)| root.as_path() != store.root()) {
            *c = Some((store.root().to_path_buf(), NameCache::new(store.clone())));
        }
        let (_, cache) = c.as_mut().expect("set above");
        f(cache)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(bid: &str, n: u64) -> Vec<SymbolRow> {
        (0..n)
            .map(|i| SymbolRow {
                build_id: bid.into(),
                binary: format!("/b/{bid}"),
                start: 0x1000 + i * 0x10,
                size: if i % 2 == 0 { 0x10 } else { 0 },
                name: format!("f{i}"),
            })
            .collect()
    }

    #[test]
    fn lookup_matches_store_query_lookup() {
        let r = rows("a", 50);
        let t = Table::from_rows(&r);
        for off in (0xff0..0x1400).step_by(3) {
            assert_eq!(t.lookup(off), tailprof_analyze::store_query::lookup(&r, off).map(|x| x.name.as_str()), "0x{off:x}");
        }
    }

    /// Every offset inside an answer's range gets the same answer from the table.
    #[test]
    fn entry_ranges_agree_with_lookup() {
        let mut r = rows("a", 40);
        // nested and aliased functions
        r.push(SymbolRow { build_id: "a".into(), binary: "/b/a".into(), start: 0x1004, size: 0x2, name: "inner".into() });
        r.push(SymbolRow { build_id: "a".into(), binary: "/b/a".into(), start: 0x1100, size: 0x40, name: "alias".into() });
        r.sort_by_key(|x| x.start);
        let t = Table::from_rows(&r);
        for off in (0..0x1300).chain([u64::MAX - 1]) {
            let (lo, hi, name) = t.entry(off);
            assert!(lo <= off && off < hi, "0x{off:x}: [{lo:x}, {hi:x})");
            assert_eq!(name, t.lookup(off));
            for x in [lo, hi - 1, lo + (hi - lo) / 2] {
                assert_eq!(t.lookup(x), name, "0x{x:x} in the range of 0x{off:x}");
            }
        }
    }

    #[test]
    fn known_answers_need_no_table() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path()).unwrap();
        store.ensure_dir(&store.symbols_dir()).unwrap();
        tailprof_store::write_symbols(&store.symbols_file("aa").unwrap(), &rows("aa", 10)).unwrap();
        let per_row = Table::from_rows(&rows("x", 1000)).bytes() / 1000;
        tailprof_store::write_symbols(&store.symbols_file("bb").unwrap(), &rows("bb", (MAX_CACHED_BYTES / per_row) as u64 + 10)).unwrap();
        let mut c = NameCache::new(store);
        c.begin_window();
        let first: Vec<_> = [("aa", 0x1010), ("aa", 0x1015), ("bb", 0x1000), ("bb", 0x0fff)].iter().map(|&(b, o)| c.name(b, o)).collect();
        assert_eq!(c.tables_read, 2);
        // bb alone is over the bound: trimmed between windows, but its answers stay
        c.begin_window();
        c.begin_window();
        let again: Vec<_> = [("aa", 0x1010), ("aa", 0x1015), ("bb", 0x1000), ("bb", 0x0fff)].iter().map(|&(b, o)| c.name(b, o)).collect();
        assert_eq!(again, first);
        assert_eq!(c.tables_read, 2, "answered from the known ranges");
        assert_eq!(first, [Some("f1".to_string()), Some("f1".to_string()), Some("f0".to_string()), None]);
    }

    #[test]
    fn tables_are_read_once_missing_ones_again_next_window_and_the_cache_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path()).unwrap();
        store.ensure_dir(&store.symbols_dir()).unwrap();
        let mut c = NameCache::new(store.clone());
        c.begin_window();
        assert_eq!(c.name("aa", 0x1000), None);
        assert_eq!(c.name("aa", 0x1000), None);
        assert_eq!(c.tables_read, 1, "a missing table is not read twice in a window");
        tailprof_store::write_symbols(&store.symbols_file("aa").unwrap(), &rows("aa", 10)).unwrap();
        assert_eq!(c.name("aa", 0x1000), None, "still missing in this window");
        c.begin_window();
        assert_eq!(c.name("aa", 0x1010).as_deref(), Some("f1"));
        assert_eq!(c.name("aa", 0x1020).as_deref(), Some("f2"));
        assert_eq!(c.tables_read, 2);
        // the bound: two tables of 0.6 × the bound each are both kept while a window
        // uses them, and trimmed to one between windows
        let per_row = Table::from_rows(&rows("x", 1000)).bytes() / 1000;
        let big = (MAX_CACHED_BYTES * 6 / 10 / per_row) as u64;
        for b in ["bb", "cc"] {
            tailprof_store::write_symbols(&store.symbols_file(b).unwrap(), &rows(b, big)).unwrap();
        }
        c.begin_window();
        assert_eq!(c.name("aa", 0x1000).as_deref(), Some("f0"), "aa is cached");
        assert_eq!(c.tables_read, 2);
        assert_eq!(c.name("bb", 0x1000).as_deref(), Some("f0"));
        assert_eq!(c.name("cc", 0x1010).as_deref(), Some("f1"));
        assert!(c.cached().1 > MAX_CACHED_BYTES, "all kept while this window uses them");
        c.name("bb", 0x1020);
        assert_eq!(c.tables_read, 4, "no table read twice in a window");
        c.begin_window();
        assert!(c.cached().1 <= MAX_CACHED_BYTES, "trimmed between windows: {:?}", c.cached());
        let cached_before = c.tables.values().filter(|t| t.0.len() > 1000).count();
        // (offsets not asked before: known answers would need no table)
        c.name("bb", 0x1050);
        c.name("cc", 0x1060);
        // bb was evicted (least recently used, ties by build-id); reading it again pushes
        // cc (of the last window) out, which is read again too: a working set above the
        // bound costs reads
        assert_eq!(cached_before, 1, "only one big table left after the trim");
        assert_eq!(c.tables_read, 6);
        assert_eq!(c.tables.values().filter(|t| t.0.len() > 1000).count(), 2, "both kept while this window uses them");
    }
}
