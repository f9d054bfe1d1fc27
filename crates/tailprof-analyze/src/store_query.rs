//! Queries over the continuous-profiling store (`tailprof-store`): `top` (by function,
//! binary or stack), `diff` of two time ranges, and folded stacks for exports.
//!
//! Frames are (build-id, file offset); names come from the store's symbol table of each
//! build-id, read once per query ([`StoreSymbols`]). A frame whose build-id has no
//! table (symbolization failed, stripped binary) is named `[binary+0xOFFSET]`, a kernel
//! frame `[kernel]`, an unmapped one `[unknown]`. The DuckDB SQL in
//! `examples/store-duckdb.sql` computes the same numbers (tests compare them).

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use tailprof_store::schema::{SampleRow, StoreFrame, SymbolRow, KERNEL_BUILD_ID};
use tailprof_store::{ReadStats, SampleBatch, SampleQuery, StoreReader};

/// What `top` groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupBy {
    /// The sampled function (self) and every function on the stack (total).
    Function,
    /// The sampled function's binary.
    Binary,
    /// The whole stack (folded, root first).
    Stack,
}

/// Names frames from the store's symbol tables, loading each build-id's table once.
/// Names are interned: [`StoreSymbols::name_id`] answers a small integer (the hot path
/// of `top` and `diff` allocates nothing for a named frame), [`StoreSymbols::name_of`]
/// the text.
pub struct StoreSymbols<'a> {
    reader: &'a StoreReader,
    /// Per loaded build-id: its rows (sorted by start) and each row's name id.
    tables: Vec<FnIndex>,
    table_of: HashMap<String, usize>,
    last: Option<(String, usize)>,
    names: Vec<String>,
    name_ids: HashMap<String, u32>,
    /// build-id → binary path seen in samples (for unnamed frames).
    binaries: HashMap<String, String>,
    pub missing_tables: u64,
    /// Interned `[kernel]` and `[unknown]`.
    kernel_id: Option<u32>,
    unknown_id: Option<u32>,
    buf: String,
}

/// A build-id resolved once per batch: what its frames are named from.
#[derive(Debug, Clone, Copy)]
pub enum FrameTable {
    Kernel,
    Unknown,
    /// Index of the build-id's symbol table (possibly empty) in [`StoreSymbols`].
    Table(usize),
}

impl<'a> StoreSymbols<'a> {
    pub fn new(reader: &'a StoreReader) -> Self {
        StoreSymbols {
            reader,
            tables: Vec::new(),
            table_of: HashMap::new(),
            last: None,
            names: Vec::new(),
            name_ids: HashMap::new(),
            binaries: HashMap::new(),
            missing_tables: 0,
            kernel_id: None,
            unknown_id: None,
            buf: String::new(),
        }
    }

    /// [`StoreSymbols::learn_binaries`] for a column batch.
    pub fn learn_binaries_batch(&mut self, b: &SampleBatch) {
        let mut seen = vec![false; b.build_ids.len()];
        for i in 0..b.len() {
            let fr = b.frames(i);
            if fr.is_empty() {
                continue;
            }
            let k = b.frame_build_id[fr.start] as usize;
            if !seen[k] {
                seen[k] = true;
                let bid = &b.build_ids[k];
                if !self.binaries.contains_key(bid) {
                    self.binaries.insert(bid.clone(), b.str(b.binary[i]).to_string());
                }
            }
        }
    }

    /// Resolves a build-id to its symbol table (loaded on first use).
    pub fn frame_table(&mut self, build_id: &str) -> FrameTable {
        if build_id == KERNEL_BUILD_ID {
            FrameTable::Kernel
        } else if build_id.is_empty() {
            FrameTable::Unknown
        } else {
            FrameTable::Table(self.table(build_id))
        }
    }

    /// [`StoreSymbols::name_id`] of a frame whose build-id was resolved by
    /// [`StoreSymbols::frame_table`].
    #[inline]
    pub fn name_id_in(&mut self, t: FrameTable, build_id: &str, offset: u64) -> u32 {
        match t {
            FrameTable::Kernel => match self.kernel_id {
                Some(id) => id,
                None => {
                    let id = self.intern("[kernel]");
                    self.kernel_id = Some(id);
                    id
                }
            },
            FrameTable::Unknown => match self.unknown_id {
                Some(id) => id,
                None => {
                    let id = self.intern("[unknown]");
                    self.unknown_id = Some(id);
                    id
                }
            },
            FrameTable::Table(t) => {
                if let Some(id) = self.tables[t].lookup(offset) {
                    return id;
                }
                self.unnamed_id(build_id, offset)
            }
        }
    }

    /// `[binary+0xOFFSET]` of a frame its build-id's table does not cover.
    fn unnamed_id(&mut self, build_id: &str, offset: u64) -> u32 {
        use std::fmt::Write;
        if !self.binaries.contains_key(build_id) {
            self.table(build_id);
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let bin = self.binaries.get(build_id).map_or(build_id, |s| s.as_str());
        let short = bin.rsplit('/').next().unwrap_or(bin);
        let _ = write!(buf, "[{short}+0x{offset:x}]");
        let id = self.intern(&buf);
        self.buf = buf;
        id
    }

    /// Remembers the leaf binary path of each build-id in `rows`.
    pub fn learn_binaries(&mut self, rows: &[SampleRow]) {
        for r in rows {
            if let Some(f) = r.frames.first() {
                if !self.binaries.contains_key(&f.build_id) {
                    self.binaries.insert(f.build_id.clone(), r.binary.clone());
                }
            }
        }
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.name_ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.name_ids.insert(name.to_string(), id);
        id
    }

    fn table(&mut self, build_id: &str) -> usize {
        if let Some((b, t)) = &self.last {
            if b == build_id {
                return *t;
            }
        }
        let t = match self.table_of.get(build_id) {
            Some(&t) => t,
            None => {
                let rows = match self.reader.symbols(build_id) {
                    Ok(t) if !t.is_empty() => t,
                    _ => {
                        self.missing_tables += 1;
                        Vec::new()
                    }
                };
                if let Some(first) = rows.first() {
                    self.binaries.entry(build_id.to_string()).or_insert_with(|| first.binary.clone());
                }
                let ids: Vec<u32> = rows.iter().map(|r| self.intern(&r.name)).collect();
                self.tables.push(FnIndex::new(&rows, ids));
                self.table_of.insert(build_id.to_string(), self.tables.len() - 1);
                self.tables.len() - 1
            }
        };
        self.last = Some((build_id.to_string(), t));
        t
    }

    /// The binary path of a build-id (as last mapped), or the build-id.
    pub fn binary(&mut self, build_id: &str) -> String {
        if build_id == KERNEL_BUILD_ID {
            return "[kernel]".into();
        }
        if build_id.is_empty() {
            return "[unknown]".into();
        }
        if let Some(b) = self.binaries.get(build_id) {
            return b.clone();
        }
        self.table(build_id);
        self.binaries.get(build_id).cloned().unwrap_or_else(|| build_id.to_string())
    }

    /// The interned name of a frame's function.
    pub fn name_id(&mut self, f: &StoreFrame) -> u32 {
        if f.build_id == KERNEL_BUILD_ID {
            return self.intern("[kernel]");
        }
        if f.build_id.is_empty() {
            return self.intern("[unknown]");
        }
        let t = self.table(&f.build_id);
        if let Some(id) = self.tables[t].lookup(f.offset) {
            return id;
        }
        let bin = self.binary(&f.build_id);
        let short = bin.rsplit('/').next().unwrap_or(&bin).to_string();
        self.intern(&format!("[{short}+0x{:x}]", f.offset))
    }

    pub fn name_of(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    /// The function name of a frame.
    pub fn name(&mut self, f: &StoreFrame) -> String {
        let id = self.name_id(f);
        self.names[id as usize].clone()
    }
}

/// A symbol table reduced to what naming a frame needs: each function's `[start, end)`
/// (`end` = the next start when the size is unknown, as in [`lookup`]) and its interned
/// name, in flat arrays (the rows themselves, names and paths, are dropped).
struct FnIndex {
    starts: Vec<u64>,
    ends: Vec<u64>,
    ids: Vec<u32>,
}

impl FnIndex {
    fn new(rows: &[SymbolRow], ids: Vec<u32>) -> Self {
        let starts: Vec<u64> = rows.iter().map(|r| r.start).collect();
        let ends = rows
            .iter()
            .enumerate()
            .map(|(i, r)| if r.size > 0 { r.start.saturating_add(r.size) } else { rows.get(i + 1).map_or(u64::MAX, |n| n.start) })
            .collect();
        FnIndex { starts, ends, ids }
    }

    /// The name id of the function containing `offset` (what [`lookup`] finds).
    #[inline]
    fn lookup(&self, offset: u64) -> Option<u32> {
        let i = self.starts.partition_point(|&s| s <= offset).checked_sub(1)?;
        (offset < self.ends[i]).then(|| self.ids[i])
    }
}

/// The function of a symbol table (sorted by start) containing `offset`.
pub fn lookup(rows: &[SymbolRow], offset: u64) -> Option<&SymbolRow> {
    let i = rows.partition_point(|r| r.start <= offset);
    let r = rows.get(i.checked_sub(1)?)?;
    let end = if r.size > 0 { r.start.saturating_add(r.size) } else { rows.get(i).map_or(u64::MAX, |n| n.start) };
    (offset < end).then_some(r)
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TopRow {
    pub name: String,
    /// Samples whose leaf is this function/binary/stack.
    pub self_samples: u64,
    pub self_pct: f64,
    /// Samples with this function anywhere on the stack (`--by function` only).
    pub total_samples: u64,
    pub total_pct: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopReport {
    pub by: GroupBy,
    pub from_us: i64,
    pub to_us: i64,
    pub samples: u64,
    pub rows: Vec<TopRow>,
    pub read: ReadStats,
    /// Build-ids without a symbol table in the store.
    pub missing_symbol_tables: u64,
}

fn pct(n: u64, d: u64) -> f64 {
    if d == 0 {
        0.0
    } else {
        100.0 * n as f64 / d as f64
    }
}

/// Folded stack of a row, root first, `;`-separated (flame-graph input), with the
/// process name as the root frame.
pub fn folded_stack(sym: &mut StoreSymbols<'_>, r: &SampleRow) -> String {
    let mut parts: Vec<String> = Vec::with_capacity(r.frames.len() + 1);
    parts.push(if r.comm.is_empty() { format!("pid {}", r.pid) } else { r.comm.clone() });
    if r.truncated {
        parts.push("[truncated]".into());
    }
    for f in r.frames.iter().rev() {
        parts.push(sym.name(f).replace(';', ":"));
    }
    parts.join(";")
}

/// Counts per function / binary / stack, fed one file's rows at a time.
struct Grouper {
    by: GroupBy,
    m: HashMap<String, (u64, u64)>,
    by_id: Vec<(u64, u64)>,
    ids: Vec<u32>,
    total: u64,
}

impl Grouper {
    fn new(by: GroupBy) -> Self {
        Grouper { by, m: HashMap::new(), by_id: Vec::new(), ids: Vec::with_capacity(64), total: 0 }
    }

    fn add(&mut self, sym: &mut StoreSymbols<'_>, rows: &[SampleRow]) {
        let (m, by_id, ids) = (&mut self.m, &mut self.by_id, &mut self.ids);
        for r in rows {
            self.total += r.count;
            match self.by {
                GroupBy::Function => {
                    ids.clear();
                    ids.extend(r.frames.iter().map(|f| sym.name_id(f)));
                    match ids.first() {
                        Some(&leaf) => {
                            if by_id.len() <= leaf as usize {
                                by_id.resize(leaf as usize + 1, (0, 0));
                            }
                            by_id[leaf as usize].0 += r.count;
                        }
                        None => m.entry("[no frames]".into()).or_default().0 += r.count,
                    }
                    ids.sort_unstable();
                    ids.dedup();
                    for &id in ids.iter() {
                        if by_id.len() <= id as usize {
                            by_id.resize(id as usize + 1, (0, 0));
                        }
                        by_id[id as usize].1 += r.count;
                    }
                }
                GroupBy::Binary => {
                    let e = m.entry(r.binary.clone()).or_default();
                    e.0 += r.count;
                    e.1 += r.count;
                }
                GroupBy::Stack => {
                    let e = m.entry(folded_stack(sym, r)).or_default();
                    e.0 += r.count;
                    e.1 += r.count;
                }
            }
        }
    }

    /// [`Grouper::add`] over a column batch: the same counts, without building rows.
    fn add_batch(&mut self, sym: &mut StoreSymbols<'_>, b: &SampleBatch) {
        // `--by binary` names no frame: no symbol table is loaded (as on the row path).
        let tabs: Vec<FrameTable> = match self.by {
            GroupBy::Binary => Vec::new(),
            _ => b.build_ids.iter().map(|id| sym.frame_table(id)).collect(),
        };
        let (m, by_id, ids) = (&mut self.m, &mut self.by_id, &mut self.ids);
        match self.by {
            GroupBy::Function => {
                for i in 0..b.len() {
                    let count = b.count[i];
                    self.total += count;
                    ids.clear();
                    for k in b.frames(i) {
                        let t = b.frame_build_id[k] as usize;
                        ids.push(sym.name_id_in(tabs[t], &b.build_ids[t], b.frame_offset[k]));
                    }
                    match ids.first() {
                        Some(&leaf) => {
                            if by_id.len() <= leaf as usize {
                                by_id.resize(leaf as usize + 1, (0, 0));
                            }
                            by_id[leaf as usize].0 += count;
                        }
                        None => m.entry("[no frames]".into()).or_default().0 += count,
                    }
                    ids.sort_unstable();
                    ids.dedup();
                    for &id in ids.iter() {
                        if by_id.len() <= id as usize {
                            by_id.resize(id as usize + 1, (0, 0));
                        }
                        by_id[id as usize].1 += count;
                    }
                }
            }
            GroupBy::Binary => {
                let mut per: Vec<Option<u64>> = vec![None; b.strings.len()];
                for i in 0..b.len() {
                    self.total += b.count[i];
                    *per[b.binary[i] as usize].get_or_insert(0) += b.count[i];
                }
                for (k, n) in per.iter().enumerate() {
                    if let Some(n) = *n {
                        let e = m.entry(b.strings[k].clone()).or_default();
                        e.0 += n;
                        e.1 += n;
                    }
                }
            }
            GroupBy::Stack => {
                let mut key = String::new();
                for i in 0..b.len() {
                    let count = b.count[i];
                    self.total += count;
                    key.clear();
                    let comm = b.str(b.comm[i]);
                    if comm.is_empty() {
                        key.push_str(&format!("pid {}", b.pid[i]));
                    } else {
                        key.push_str(comm);
                    }
                    if b.truncated[i] {
                        key.push_str(";[truncated]");
                    }
                    for k in b.frames(i).rev() {
                        let t = b.frame_build_id[k] as usize;
                        let id = sym.name_id_in(tabs[t], &b.build_ids[t], b.frame_offset[k]);
                        key.push(';');
                        for c in sym.name_of(id).chars() {
                            key.push(if c == ';' { ':' } else { c });
                        }
                    }
                    match m.get_mut(key.as_str()) {
                        Some(e) => {
                            e.0 += count;
                            e.1 += count;
                        }
                        None => {
                            m.insert(key.clone(), (count, count));
                        }
                    }
                }
            }
        }
    }

    fn finish(mut self, sym: &StoreSymbols<'_>) -> (HashMap<String, (u64, u64)>, u64) {
        for (id, &(a, b)) in self.by_id.iter().enumerate() {
            if a + b > 0 {
                let e = self.m.entry(sym.name_of(id as u32).to_string()).or_default();
                e.0 += a;
                e.1 += b;
            }
        }
        (self.m, self.total)
    }
}

fn group_range(
    reader: &StoreReader,
    sym: &mut StoreSymbols<'_>,
    q: &SampleQuery,
    by: GroupBy,
) -> (HashMap<String, (u64, u64)>, u64, ReadStats) {
    let mut g = Grouper::new(by);
    let read = reader.sample_batches(q, &mut |_, b| {
        sym.learn_binaries_batch(b);
        g.add_batch(sym, b);
    });
    let (m, total) = g.finish(sym);
    (m, total, read)
}

/// `top` over rows already read, one `Vec` per file in file order (the row path, as
/// before the column reader): the reference the tests compare [`top`] with, fed from
/// the parquet record API (`tailprof_store::read::read_samples_file_records`).
#[doc(hidden)]
pub fn top_of_rows(reader: &StoreReader, files: &[Vec<SampleRow>], q: &SampleQuery, by: GroupBy, limit: usize) -> TopReport {
    let mut sym = StoreSymbols::new(reader);
    let mut g = Grouper::new(by);
    for rows in files {
        sym.learn_binaries(rows);
        g.add(&mut sym, rows);
    }
    let (m, total) = g.finish(&sym);
    top_report(m, total, ReadStats::default(), q, by, limit, sym.missing_tables)
}

/// `tailprof top`.
pub fn top(reader: &StoreReader, q: &SampleQuery, by: GroupBy, limit: usize) -> TopReport {
    let mut sym = StoreSymbols::new(reader);
    let (m, total, read) = group_range(reader, &mut sym, q, by);
    top_report(m, total, read, q, by, limit, sym.missing_tables)
}

fn top_report(
    m: HashMap<String, (u64, u64)>,
    total: u64,
    read: ReadStats,
    q: &SampleQuery,
    by: GroupBy,
    limit: usize,
    missing: u64,
) -> TopReport {
    let mut out: Vec<TopRow> = m
        .into_iter()
        .map(|(name, (s, t))| TopRow { name, self_samples: s, self_pct: pct(s, total), total_samples: t, total_pct: pct(t, total) })
        .collect();
    out.sort_by(|a, b| b.self_samples.cmp(&a.self_samples).then(b.total_samples.cmp(&a.total_samples)).then(a.name.cmp(&b.name)));
    if limit > 0 {
        out.truncate(limit);
    }
    TopReport { by, from_us: q.from_us, to_us: q.to_us, samples: total, rows: out, read, missing_symbol_tables: missing }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DiffRow {
    pub name: String,
    pub a_samples: u64,
    pub b_samples: u64,
    pub a_pct: f64,
    pub b_pct: f64,
    /// `b_pct - a_pct`: positive = grew.
    pub delta_pct: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    pub by: GroupBy,
    pub a: (i64, i64),
    pub b: (i64, i64),
    pub a_samples: u64,
    pub b_samples: u64,
    pub rows: Vec<DiffRow>,
    pub read_a: ReadStats,
    pub read_b: ReadStats,
}

/// `tailprof diff`: share of samples (self) per function/binary/stack in B minus in A,
/// largest growth first.
pub fn diff(reader: &StoreReader, qa: &SampleQuery, qb: &SampleQuery, by: GroupBy, limit: usize) -> DiffReport {
    let mut sym = StoreSymbols::new(reader);
    let (ma, ta, read_a) = group_range(reader, &mut sym, qa, by);
    let (mb, tb, read_b) = group_range(reader, &mut sym, qb, by);
    let names: HashSet<&String> = ma.keys().chain(mb.keys()).collect();
    let mut rows: Vec<DiffRow> = names
        .into_iter()
        .map(|n| {
            let a = ma.get(n).map_or(0, |v| v.0);
            let b = mb.get(n).map_or(0, |v| v.0);
            DiffRow {
                name: n.clone(),
                a_samples: a,
                b_samples: b,
                a_pct: pct(a, ta),
                b_pct: pct(b, tb),
                delta_pct: pct(b, tb) - pct(a, ta),
            }
        })
        .filter(|r| r.a_samples + r.b_samples > 0)
        .collect();
    rows.sort_by(|x, y| y.delta_pct.total_cmp(&x.delta_pct).then(x.name.cmp(&y.name)));
    if limit > 0 && rows.len() > limit {
        // Keep the largest growths and the largest shrinks.
        let half = limit.div_ceil(2);
        let tail: Vec<DiffRow> = rows.split_off(rows.len() - (limit - half).min(rows.len() - half));
        rows.truncate(half);
        rows.extend(tail);
    }
    DiffReport { by, a: (qa.from_us, qa.to_us), b: (qb.from_us, qb.to_us), a_samples: ta, b_samples: tb, rows, read_a, read_b }
}

/// One exported stack: folded names root first, with binaries, and its counts.
#[derive(Debug, Clone, Serialize)]
pub struct ExportStack {
    /// Root first; `frames[0]` is the process name.
    pub frames: Vec<String>,
    /// Binary of each frame (same length as `frames`; the process-name frame has "").
    pub binaries: Vec<String>,
    pub count: u64,
    pub period: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct StackExport {
    pub from_us: i64,
    pub to_us: i64,
    pub event: String,
    pub samples: u64,
    pub stacks: Vec<ExportStack>,
    pub read: ReadStats,
}

/// All stacks of a range, merged, for folded / pprof / flame-graph exports.
pub fn export_stacks(reader: &StoreReader, q: &SampleQuery) -> StackExport {
    let (rows, read) = reader.samples(q);
    stacks_of_rows(reader, &rows, q.from_us, q.to_us, read)
}

/// [`export_stacks`] over rows already read.
pub fn stacks_of_rows(reader: &StoreReader, rows: &[SampleRow], from_us: i64, to_us: i64, read: ReadStats) -> StackExport {
    let mut sym = StoreSymbols::new(reader);
    sym.learn_binaries(rows);
    let mut export = group_stacks(rows, |f| (sym.name(f), sym.binary(&f.build_id)));
    (export.from_us, export.to_us, export.read) = (from_us, to_us, read);
    export
}

/// Rows merged into one stack each (root first, the process name on top), frames named
/// by `name(frame) -> (function, binary)`: the one grouping behind [`stacks_of_rows`] and
/// the agent's pushes, which name frames from their own table cache. The range and read
/// statistics are left for the caller.
pub fn group_stacks(rows: &[SampleRow], mut name: impl FnMut(&tailprof_store::schema::StoreFrame) -> (String, String)) -> StackExport {
    let mut m: HashMap<Vec<String>, (Vec<String>, u64, u64)> = HashMap::new();
    let mut total = 0;
    let mut event = String::new();
    for r in rows {
        total += r.count;
        if event.is_empty() {
            event = r.event.clone();
        }
        let mut frames = vec![if r.comm.is_empty() { format!("pid {}", r.pid) } else { r.comm.clone() }];
        let mut bins = vec![String::new()];
        for f in r.frames.iter().rev() {
            let (n, b) = name(f);
            frames.push(n);
            bins.push(b);
        }
        let e = m.entry(frames).or_insert_with(|| (bins, 0, 0));
        e.1 += r.count;
        e.2 = e.2.saturating_add(r.period);
    }
    let mut stacks: Vec<ExportStack> =
        m.into_iter().map(|(frames, (binaries, count, period))| ExportStack { frames, binaries, count, period }).collect();
    stacks.sort_by(|a, b| b.count.cmp(&a.count).then(a.frames.cmp(&b.frames)));
    StackExport { from_us: 0, to_us: 0, event, samples: total, stacks, read: ReadStats::default() }
}

/// One retained slow request, its frames named.
#[derive(Debug, Clone, Serialize)]
pub struct StoredItem {
    pub begin_us: i64,
    pub duration_ns: u64,
    pub class: String,
    pub item_id: u64,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub reason: String,
    pub limit_ns: u64,
    pub samples: u64,
    pub off_cpu_ns: u64,
    /// Samples per function (innermost frame), most first.
    pub functions: Vec<(String, u64)>,
    /// Stacks, innermost first, with their samples, most first.
    pub stacks: Vec<(Vec<String>, u64)>,
    /// Who woke it (with the critical path, `during`) and who ran while it waited for a
    /// CPU (issue 21; the agent's `causes`), as in `items --json` without the classes.
    pub woken_by: Vec<crate::causes::WokenBy>,
    pub preempted_by: Vec<crate::causes::PreemptedBy>,
    /// Switch markers drove it (issue 24): its current and event-loop time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub switching: Option<tailprof_store::schema::StoredSwitching>,
    /// OpenTelemetry trace and span id (lowercase hex), when its runtime wrote them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
}

/// Latency of a class over the range, from the stored histograms.
#[derive(Debug, Clone, Serialize)]
pub struct ClassLatency {
    pub class: String,
    pub requests: u64,
    /// Upper bounds of the log2 buckets holding the median and the 99th percentile.
    pub p50_le_ns: u64,
    pub p99_le_ns: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct StoredItems {
    pub from_us: i64,
    pub to_us: i64,
    pub items: Vec<StoredItem>,
    pub classes: Vec<ClassLatency>,
    pub read: ReadStats,
}

/// `tailprof items --store`: the retained slow requests of a range (slowest first) and
/// the per-class latency of all requests from the histograms.
///
/// `trace_id`: only the requests of that OpenTelemetry trace.
pub fn stored_items(reader: &StoreReader, host: Option<&str>, from_us: i64, to_us: i64, class: Option<&str>) -> StoredItems {
    stored_items_of(reader, host, from_us, to_us, class, None)
}

/// [`stored_items`], only the requests of trace `trace_id` (lowercase hex, 32 digits) when
/// given.
pub fn stored_items_of(
    reader: &StoreReader,
    host: Option<&str>,
    from_us: i64,
    to_us: i64,
    class: Option<&str>,
    trace_id: Option<&str>,
) -> StoredItems {
    let (rows, read) = reader.items(host, from_us, to_us);
    let mut sym = StoreSymbols::new(reader);
    let mut items = Vec::new();
    for r in rows.into_iter().filter(|r| class.is_none_or(|c| c == r.class)).filter(|r| trace_id.is_none_or(|t| t == r.trace_id)) {
        let mut functions: HashMap<String, u64> = HashMap::new();
        let mut stacks = Vec::new();
        let doc = tailprof_store::schema::ItemExplanation::parse(&r.explanation);
        for st in &doc.stacks {
            let (n, fr) = (st.samples, &st.frames);
            let frames: Vec<String> = fr.iter().map(|f| sym.name(f)).collect();
            if let Some(leaf) = frames.first() {
                *functions.entry(leaf.clone()).or_default() += n;
            }
            stacks.push((frames, n));
        }
        let mut functions: Vec<(String, u64)> = functions.into_iter().collect();
        functions.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let woken_by = doc
            .woken_by
            .into_iter()
            .map(|w| {
                let frames: Vec<String> = w.frames.iter().rev().map(|f| sym.name(f)).collect();
                let names: Vec<&str> = frames.iter().map(String::as_str).collect();
                let irq = crate::causes::irq_kind(&names, w.tid == 0);
                // As in a trace: an interrupt woke it, the interrupted task did not make
                // it wait; stacks root first.
                let during = w
                    .during
                    .iter()
                    .filter(|_| irq.is_none())
                    .map(|d| crate::causes::During {
                        state: match d.state {
                            tailprof_store::schema::StoredState::Cpu => crate::causes::PathState::Cpu,
                            tailprof_store::schema::StoredState::Blocked => crate::causes::PathState::Blocked,
                            tailprof_store::schema::StoredState::Runnable => crate::causes::PathState::Runnable,
                        },
                        ns: d.ns,
                        frames: d.frames.iter().rev().map(|f| sym.name(f)).collect(),
                    })
                    .collect();
                crate::causes::WokenBy {
                    ns: w.ns,
                    at_ns: 0,
                    pid: w.pid,
                    tid: w.tid,
                    comm: w.comm,
                    item: w.item,
                    class: w.class,
                    irq,
                    frames,
                    during,
                }
            })
            .collect();
        let preempted_by = doc
            .preempted_by
            .into_iter()
            .map(|p| crate::causes::PreemptedBy { ns: p.ns, pid: p.pid, tid: p.tid, comm: p.comm, item: p.item })
            .collect();
        let id = |s: String| (!s.is_empty()).then(|| s.chars().take(32).collect());
        items.push(StoredItem {
            woken_by,
            preempted_by,
            switching: doc.switching,
            trace_id: id(r.trace_id),
            span_id: id(r.span_id),
            begin_us: r.begin_us,
            duration_ns: r.duration_ns,
            class: r.class,
            item_id: r.item_id,
            pid: r.pid,
            tid: r.tid,
            comm: r.comm,
            reason: r.reason,
            limit_ns: r.limit_ns,
            samples: r.samples,
            off_cpu_ns: r.off_cpu_ns,
            functions,
            stacks,
        });
    }
    items.sort_by_key(|i| std::cmp::Reverse(i.duration_ns));
    let (lat, _) = reader.latency(host, from_us, to_us);
    let mut per: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
    for l in lat.into_iter().filter(|l| class.is_none_or(|c| c == l.class)) {
        per.entry(l.class).or_default().push((l.le_ns, l.count));
    }
    let mut classes: Vec<ClassLatency> = per
        .into_iter()
        .map(|(class, mut b)| {
            b.sort();
            let total: u64 = b.iter().map(|x| x.1).sum();
            let q = |p: f64| {
                let want = ((total as f64) * p).ceil().max(1.0) as u64;
                let mut acc = 0;
                for &(le, n) in &b {
                    acc += n;
                    if acc >= want {
                        return le;
                    }
                }
                b.last().map_or(0, |x| x.0)
            };
            ClassLatency { class, requests: total, p50_le_ns: q(0.5), p99_le_ns: q(0.99) }
        })
        .collect();
    classes.sort_by(|a, b| a.class.cmp(&b.class));
    StoredItems { from_us, to_us, items, classes, read }
}
