//! pprof export: a gzipped `profile.proto` (github.com/google/pprof/proto/profile.proto)
//! that `go tool pprof` reads.
//!
//! The few messages are written here with `prost` derive attributes (field numbers as
//! in profile.proto) instead of generating them with protoc at build time. Frames are
//! already symbolized, so each function is one `Location` (address 0, one `Line`) in a
//! mapping with `has_functions` set; a function's file name is its binary.
//!
//! Sample values: `samples/count` (the default shown), the event's summed period
//! (`cpu-clock`/`task-clock`: `cpu/nanoseconds`), and, when the trace has context
//! switches, `off_cpu/nanoseconds` from off-CPU stacks, whose root frame is the state
//! (`[blocked]` / `[runnable]`) and whose sample carries a `state` label.

use std::io::Write as _;

use prost::Message;
use tailprof_analyze::stacks::StackProfile;

/// `perftools.profiles.Profile`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `ValueType`: indices into the string table.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `Sample`: locations leaf first, one value per sample type.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// Options of [`pprof_profile`].
#[derive(Debug, Clone, Default)]
pub struct PprofOptions {
    /// Add the off-CPU stacks (a third sample type).
    pub off_cpu: bool,
    /// Trace start, ns since the Unix epoch (0: unknown).
    pub time_nanos: i64,
    pub duration_nanos: i64,
    /// The sampling period in the event's unit (0: unknown).
    pub period: i64,
}

struct Strings {
    table: Vec<String>,
    at: std::collections::HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        // Index 0 must be the empty string.
        Strings { table: vec![String::new()], at: std::collections::HashMap::from([(String::new(), 0)]) }
    }
    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.at.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.at.insert(s.to_owned(), i);
        i
    }
}

fn time_event(event: &str) -> bool {
    matches!(event, "cpu-clock" | "task-clock")
}

/// The profile message of a stack profile (the filter already applied).
pub fn pprof_profile(p: &StackProfile, opts: &PprofOptions) -> Profile {
    let mut st = Strings::new();
    let with_off = opts.off_cpu && p.switches > 0;
    let (ev_type, ev_unit) = if time_event(&p.event) { ("cpu", "nanoseconds") } else { (p.event.as_str(), "events") };
    let samples_name = st.id("samples");
    let mut sample_type =
        vec![ValueType { r#type: samples_name, unit: st.id("count") }, ValueType { r#type: st.id(ev_type), unit: st.id(ev_unit) }];
    if with_off {
        sample_type.push(ValueType { r#type: st.id("off_cpu"), unit: st.id("nanoseconds") });
    }
    let mapping = Mapping { id: 1, memory_limit: u64::MAX, has_functions: true, ..Default::default() };
    // One location per function row, whose line is the row's (its function's first
    // line; with `--lines` the row's own line). One function per (name, binary): rows
    // of one function at several lines share it, its start line the function's first.
    let mut by_name: std::collections::HashMap<(&str, &str), u64> = std::collections::HashMap::new();
    let mut function: Vec<Function> = Vec::new();
    let mut location: Vec<Location> = Vec::with_capacity(p.functions.len() + 2);
    for (i, f) in p.functions.iter().enumerate() {
        // A function with a source location (DWARF or jitdump) names its file and line;
        // others their binary.
        let row_line = f.source_file_line();
        let next = function.len() as u64 + 1;
        let function_id = *by_name.entry((f.name.as_str(), f.binary.as_str())).or_insert_with(|| {
            let name = st.id(&f.name);
            let first = f.first_line.as_deref().and_then(tailprof_analyze::resolve::split_source).or(row_line);
            let (filename, start_line) = match first {
                Some((file, line)) => (st.id(file), i64::from(line)),
                None => (st.id(&f.binary), 0),
            };
            function.push(Function { id: next, name, system_name: name, filename, start_line });
            next
        });
        let line = row_line.map_or(0, |(_, l)| i64::from(l));
        location.push(Location { id: i as u64 + 1, mapping_id: 1, address: 0, line: vec![Line { function_id, line }], is_folded: false });
    }
    // Pseudo functions for the off-CPU states.
    let mut state_loc = [0u64; 2];
    if with_off {
        for (k, s) in ["[runnable]", "[blocked]"].into_iter().enumerate() {
            let name = st.id(s);
            let fid = function.len() as u64 + 1;
            function.push(Function { id: fid, name, system_name: name, ..Default::default() });
            let lid = location.len() as u64 + 1;
            location.push(Location {
                id: lid,
                mapping_id: 1,
                address: 0,
                line: vec![Line { function_id: fid, line: 0 }],
                is_folded: false,
            });
            state_loc[k] = lid;
        }
    }
    let locs_leaf_first =
        |path: u32| -> Vec<u64> { p.paths.get(path as usize).map(|v| v.iter().rev().map(|&f| f as u64 + 1).collect()).unwrap_or_default() };
    let nvals = sample_type.len();
    let mut sample: Vec<Sample> = Vec::with_capacity(p.stacks.len() + p.off_cpu.len());
    for r in &p.stacks {
        let mut value = vec![0i64; nvals];
        value[0] = r.samples.min(i64::MAX as u64) as i64;
        value[1] = r.period.min(i64::MAX as u64) as i64;
        sample.push(Sample { location_id: locs_leaf_first(r.path), value, label: Vec::new() });
    }
    if with_off {
        let key = st.id("state");
        for r in &p.off_cpu {
            let mut value = vec![0i64; nvals];
            value[2] = r.ns.min(i64::MAX as u64) as i64;
            let k = r.state as usize;
            let mut location_id = locs_leaf_first(r.path);
            location_id.push(state_loc[k.min(1)]);
            let label = vec![Label { key, str: st.id(r.state.name()), ..Default::default() }];
            sample.push(Sample { location_id, value, label });
        }
    }
    let mut comment = Vec::new();
    if let Some(f) = p.filter.describe() {
        comment.push(st.id(&format!("tailprof: only {f}")));
    }
    let period_type = Some(ValueType { r#type: st.id(ev_type), unit: st.id(ev_unit) });
    Profile {
        sample_type,
        sample,
        mapping: vec![mapping],
        location,
        function,
        string_table: st.table,
        time_nanos: opts.time_nanos,
        duration_nanos: opts.duration_nanos,
        period_type,
        period: opts.period,
        comment,
        default_sample_type: samples_name, // a string-table index
    }
}

/// The gzipped profile.proto bytes (what `go tool pprof` reads).
pub fn pprof_gzip(p: &StackProfile, opts: &PprofOptions) -> std::io::Result<Vec<u8>> {
    let raw = pprof_profile(p, opts).encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(Vec::with_capacity(raw.len() / 4 + 64), flate2::Compression::default());
    gz.write_all(&raw)?;
    gz.finish()
}
