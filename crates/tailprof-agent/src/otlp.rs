//! `--otlp URL`: each window as an OpenTelemetry profiles signal
//! (`opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest`),
//! sent as OTLP/HTTP binary protobuf: `POST URL/v1development/profiles` with
//! `Content-Type: application/x-protobuf` (the OpenTelemetry Collector's `otlp` receiver
//! path; a URL that already ends with that path is used as given). The messages are the
//! prost types of the OpenTelemetry project's `opentelemetry-proto` crate (feature
//! `profiles`; no gRPC). The transport is the plain HTTP/1.1 of [`crate::push`]: a push
//! that fails is counted by the writer, never retried, never fatal.
//!
//! Mapping of a window (docs/STORE.md, "OTLP profiles"):
//! - one `ResourceProfiles` per (pid, comm), with the resource attributes `host.name`,
//!   `process.pid` and `process.executable.name`; scope `tailprof` with the agent's version;
//! - per event, a profile of sample type `samples`/`count` (values: the stored counts)
//!   and, for the time events `cpu-clock` and `task-clock`, one of `cpu`/`nanoseconds`
//!   (values: the stored period sums), both with period type `cpu`/`nanoseconds` (else
//!   the event name/`count`) and the window's start and duration;
//! - one dictionary for the request: a mapping per binary (its path and, for a real GNU
//!   build-id, the attribute `process.executable.build_id.gnu`; `memory_start` 0 and
//!   `file_offset` 0, so a location's `address` is the file offset the store keeps), a
//!   location per (build-id, offset), a function per name found in the store's symbol
//!   table for that build-id (a location whose binary has no table yet has no line: the
//!   receiver sees the build-id and offset), a stack per distinct frame list (innermost
//!   first, as stored); a stack the unwinder cut short carries the sample attribute
//!   `tailprof.stack.truncated = true`.

use std::collections::HashMap;

use opentelemetry_proto::tonic::collector::profiles::v1development::{ExportProfilesServiceRequest, ExportProfilesServiceResponse};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::profiles::v1development::{
    Function, KeyValueAndUnit, Line, Location, Mapping, Profile, ProfilesDictionary, ResourceProfiles, Sample, ScopeProfiles, Stack,
    ValueType,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tailprof_store::schema::{SampleRow, KERNEL_BUILD_ID, NO_BUILD_ID_PREFIX};
use tailprof_store::Store;

use crate::names::NameCache;

use crate::writer::WindowBatch;

/// The OTLP/HTTP path of the profiles signal (OTLP 1.x, profiles in development).
pub const PROFILES_PATH: &str = "/v1development/profiles";
/// Sample attribute of a stack the unwinder cut short.
pub const TRUNCATED_ATTR: &str = "tailprof.stack.truncated";
/// Mapping attribute carrying a GNU build-id (OpenTelemetry semantic conventions).
pub const BUILD_ID_ATTR: &str = "process.executable.build_id.gnu";
/// Largest response body read back (an `ExportProfilesServiceResponse`).
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// Host:port and request path for an `--otlp` URL.
pub fn endpoint(url: &str) -> Result<(String, String), crate::push::PushError> {
    let (hostport, path) = crate::push::parse_url(url)?;
    let path = if path.ends_with(PROFILES_PATH) { path } else { format!("{path}{PROFILES_PATH}") };
    Ok((hostport, path))
}

/// Whether `event` counts time in nanoseconds (the sampled period is CPU time).
fn is_time_event(event: &str) -> bool {
    matches!(event, "cpu-clock" | "task-clock")
}

/// A GNU build-id as stored (lower-case hex, not a pseudo id or the kernel marker).
fn is_gnu_build_id(b: &str) -> bool {
    !b.is_empty() && !b.starts_with(NO_BUILD_ID_PREFIX) && b != KERNEL_BUILD_ID && b.bytes().all(|c| c.is_ascii_hexdigit())
}

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(v) }), ..Default::default() }
}

/// Builds the dictionary (every table starts with its zero value, as the proto requires).
struct Dict<'a> {
    d: ProfilesDictionary,
    strings: HashMap<String, i32>,
    mappings: HashMap<String, i32>,
    locations: HashMap<(i32, u64), i32>,
    functions: HashMap<i32, i32>,
    stacks: HashMap<Vec<i32>, i32>,
    attrs: HashMap<(i32, String), i32>,
    names: &'a mut NameCache,
    /// build-id → binary path seen in the window's rows (leaf frames).
    paths: HashMap<String, String>,
}

impl<'a> Dict<'a> {
    fn new(names: &'a mut NameCache) -> Self {
        let d = ProfilesDictionary {
            mapping_table: vec![Mapping::default()],
            location_table: vec![Location::default()],
            function_table: vec![Function::default()],
            link_table: vec![Default::default()],
            string_table: vec![String::new()],
            attribute_table: vec![KeyValueAndUnit::default()],
            stack_table: vec![Stack::default()],
        };
        Dict {
            d,
            strings: HashMap::from([(String::new(), 0)]),
            mappings: HashMap::new(),
            locations: HashMap::new(),
            functions: HashMap::new(),
            stacks: HashMap::new(),
            attrs: HashMap::new(),
            names,
            paths: HashMap::new(),
        }
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn attr(&mut self, key: &str, v: any_value::Value) -> i32 {
        let k = self.string(key);
        let id = (k, format!("{v:?}"));
        if let Some(&i) = self.attrs.get(&id) {
            return i;
        }
        let i = self.d.attribute_table.len() as i32;
        self.d.attribute_table.push(KeyValueAndUnit { key_strindex: k, value: Some(AnyValue { value: Some(v) }), unit_strindex: 0 });
        self.attrs.insert(id, i);
        i
    }

    fn value_type(&mut self, ty: &str, unit: &str) -> ValueType {
        ValueType { type_strindex: self.string(ty), unit_strindex: self.string(unit) }
    }

    fn mapping(&mut self, build_id: &str) -> i32 {
        if build_id.is_empty() {
            return 0; // unmapped: the null mapping, the address is the raw one
        }
        if let Some(&i) = self.mappings.get(build_id) {
            return i;
        }
        let path = match self.paths.get(build_id) {
            Some(p) => p.clone(),
            None if build_id == KERNEL_BUILD_ID => "[kernel]".into(),
            None => self.names.table(build_id).map(|t| t.binary.clone()).unwrap_or_default(),
        };
        let filename_strindex = self.string(&path);
        let attribute_indices = if is_gnu_build_id(build_id) {
            vec![self.attr(BUILD_ID_ATTR, any_value::Value::StringValue(build_id.into()))]
        } else {
            Vec::new()
        };
        let i = self.d.mapping_table.len() as i32;
        self.d.mapping_table.push(Mapping { memory_start: 0, memory_limit: 0, file_offset: 0, filename_strindex, attribute_indices });
        self.mappings.insert(build_id.to_string(), i);
        i
    }

    fn location(&mut self, build_id: &str, offset: u64) -> i32 {
        let mapping_index = self.mapping(build_id);
        if let Some(&i) = self.locations.get(&(mapping_index, offset)) {
            return i;
        }
        if mapping_index != 0 {
            let m = &mut self.d.mapping_table[mapping_index as usize];
            m.memory_limit = m.memory_limit.max(offset.saturating_add(1));
        }
        let name = self.names.name(build_id, offset);
        let lines = match name {
            Some(n) => {
                let s = self.string(&n);
                let f = match self.functions.get(&s) {
                    Some(&f) => f,
                    None => {
                        let f = self.d.function_table.len() as i32;
                        // system_name (the mangled name) is not in the store: left empty
                        self.d.function_table.push(Function {
                            name_strindex: s,
                            system_name_strindex: 0,
                            filename_strindex: 0,
                            start_line: 0,
                        });
                        self.functions.insert(s, f);
                        f
                    }
                };
                vec![Line { function_index: f, line: 0, column: 0 }]
            }
            None => Vec::new(),
        };
        let i = self.d.location_table.len() as i32;
        self.d.location_table.push(Location { mapping_index, address: offset, lines, attribute_indices: Vec::new() });
        self.locations.insert((mapping_index, offset), i);
        i
    }

    fn stack(&mut self, row: &SampleRow) -> i32 {
        let locs: Vec<i32> = row.frames.iter().map(|f| self.location(&f.build_id, f.offset)).collect();
        if let Some(&i) = self.stacks.get(&locs) {
            return i;
        }
        let i = self.d.stack_table.len() as i32;
        self.d.stack_table.push(Stack { location_indices: locs.clone() });
        self.stacks.insert(locs, i);
        i
    }
}

/// A profile id: 16 bytes from the window, host, pid, comm, event and sample type
/// (FNV-1a), never all zero.
fn profile_id(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    for seed in [0xcbf2_9ce4_8422_2325u64, 0x8422_2325_cbf2_9ce4] {
        let mut h = seed;
        for p in parts {
            for &b in p.iter().chain(&[0xffu8]) {
                h ^= b as u64;
                h = h.wrapping_mul(0x100_0000_01b3);
            }
        }
        out.extend_from_slice(&h.to_le_bytes());
    }
    if out.iter().all(|&b| b == 0) {
        out[0] = 1;
    }
    out
}

/// The OTLP request of one window. See the [module docs](self). Names come from this
/// thread's [`crate::names`] cache.
pub fn window_request(store: &Store, w: &WindowBatch) -> ExportProfilesServiceRequest {
    crate::names::with_cache(store, |names| {
        names.begin_window();
        request_with(names, w)
    })
}

fn request_with(names: &mut NameCache, w: &WindowBatch) -> ExportProfilesServiceRequest {
    let mut dict = Dict::new(names);
    for r in &w.rows {
        if let Some(f) = r.frames.first() {
            dict.paths.entry(f.build_id.clone()).or_insert_with(|| r.binary.clone());
        }
    }
    let time_unix_nano = (w.start_us.max(0) as u64).saturating_mul(1000);
    let duration_nano = (w.end_us.saturating_sub(w.start_us).max(0) as u64).saturating_mul(1000);
    // (pid, comm) → event → stack, truncated → (count, period)
    type PerEvent = HashMap<String, HashMap<(i32, bool), (u64, u64)>>;
    let mut by_proc: HashMap<(u32, &str), PerEvent> = HashMap::new();
    for r in &w.rows {
        let stack = dict.stack(r);
        let e = by_proc
            .entry((r.pid, r.comm.as_str()))
            .or_default()
            .entry(r.event.clone())
            .or_default()
            .entry((stack, r.truncated))
            .or_insert((0, 0));
        e.0 = e.0.saturating_add(r.count);
        e.1 = e.1.saturating_add(r.period);
    }
    let mut procs: Vec<_> = by_proc.into_iter().collect();
    procs.sort_by(|a, b| a.0.cmp(&b.0));
    // only when used: a dictionary should hold no orphaned entries
    let truncated_attr = if w.rows.iter().any(|r| r.truncated) { dict.attr(TRUNCATED_ATTR, any_value::Value::BoolValue(true)) } else { 0 };
    let mut resource_profiles = Vec::with_capacity(procs.len());
    for ((pid, comm), events) in procs {
        let mut events: Vec<_> = events.into_iter().collect();
        events.sort_by(|a, b| a.0.cmp(&b.0));
        let mut profiles = Vec::new();
        for (event, stacks) in events {
            let mut stacks: Vec<_> = stacks.into_iter().collect();
            stacks.sort_unstable();
            let (count, period): (u64, u64) = stacks.iter().fold((0, 0), |a, (_, v)| (a.0.saturating_add(v.0), a.1.saturating_add(v.1)));
            let period_type = if is_time_event(&event) { dict.value_type("cpu", "nanoseconds") } else { dict.value_type(&event, "count") };
            let mut kinds = vec![("samples", "count")];
            if is_time_event(&event) {
                kinds.push(("cpu", "nanoseconds"));
            }
            for (ty, unit) in kinds {
                let samples = stacks
                    .iter()
                    .map(|&((stack_index, truncated), (c, p))| Sample {
                        stack_index,
                        attribute_indices: if truncated { vec![truncated_attr] } else { Vec::new() },
                        link_index: 0,
                        values: vec![if ty == "samples" { c } else { p }.min(i64::MAX as u64) as i64],
                        timestamps_unix_nano: Vec::new(),
                    })
                    .collect();
                profiles.push(Profile {
                    sample_type: Some(dict.value_type(ty, unit)),
                    samples,
                    time_unix_nano,
                    duration_nano,
                    period_type: Some(period_type),
                    period: period.checked_div(count).unwrap_or(0).min(i64::MAX as u64) as i64,
                    profile_id: profile_id(&[
                        w.host.as_bytes(),
                        &w.start_us.to_le_bytes(),
                        &pid.to_le_bytes(),
                        comm.as_bytes(),
                        event.as_bytes(),
                        ty.as_bytes(),
                    ]),
                    ..Default::default()
                });
            }
        }
        let resource = Resource {
            attributes: vec![
                kv("host.name", any_value::Value::StringValue(w.host.clone())),
                kv("process.pid", any_value::Value::IntValue(pid as i64)),
                kv("process.executable.name", any_value::Value::StringValue(comm.to_string())),
            ],
            ..Default::default()
        };
        resource_profiles.push(ResourceProfiles {
            resource: Some(resource),
            scope_profiles: vec![ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "tailprof".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        });
    }
    ExportProfilesServiceRequest { resource_profiles, dictionary: Some(dict.d) }
}

/// Sends one window. Errors are counted by the writer, never fatal.
pub fn push_window(url: &str, store: &Store, w: &WindowBatch) -> Result<(), crate::push::PushError> {
    if w.rows.is_empty() {
        return Ok(());
    }
    let body = window_request(store, w).encode_to_vec();
    let (hostport, path) = endpoint(url)?;
    let (code, line, resp) = crate::push::http_post(&hostport, &path, "application/x-protobuf", &body, MAX_RESPONSE_BYTES)?;
    if !(200..300).contains(&code) {
        return Err(crate::push::PushError::Rejected(format!("endpoint answered {line:?}")));
    }
    // A partial success names the profiles the receiver dropped.
    if let Ok(r) = ExportProfilesServiceResponse::decode(resp.as_slice()) {
        if let Some(p) = r.partial_success.filter(|p| p.rejected_profiles > 0) {
            return Err(crate::push::PushError::Rejected(format!(
                "endpoint rejected {} profiles: {}",
                p.rejected_profiles, p.error_message
            )));
        }
    }
    Ok(())
}

/// The writer's hook: sends the window when `--otlp` is set and counts the outcome in
/// the writer's stats (`otlp_pushes`, `otlp_failures`, `last_error`).
pub fn send_counted(url: Option<&str>, store: &Store, w: &WindowBatch, stats: &std::sync::Mutex<crate::writer::WriterStats>) {
    let Some(url) = url else { return };
    if w.rows.is_empty() {
        // nothing is sent for an empty window, so nothing is counted as pushed
        return;
    }
    let r = push_window(url, store, w);
    let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
    match r {
        Ok(()) => s.otlp_pushes += 1,
        Err(e) => {
            s.otlp_failures += 1;
            s.last_error = Some(format!("OTLP to {url}: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailprof_store::schema::{StoreFrame, SymbolRow};

    fn row(pid: u32, comm: &str, frames: &[(&str, u64)], count: u64) -> SampleRow {
        let frames: Vec<StoreFrame> = frames.iter().map(|&(b, o)| StoreFrame { build_id: b.into(), offset: o }).collect();
        SampleRow {
            window_start_us: 1_000_000,
            window_end_us: 2_000_000,
            pid,
            comm: comm.into(),
            event: "cpu-clock".into(),
            binary: "/bin/app".into(),
            stack_id: tailprof_store::schema::stack_id(&frames),
            frames,
            truncated: false,
            count,
            period: count * 1_000_000,
        }
    }

    #[test]
    fn endpoint_appends_the_signal_path_once() {
        assert_eq!(endpoint("http://c:4318").unwrap(), ("c:4318".into(), PROFILES_PATH.into()));
        assert_eq!(endpoint("http://c:4318/otlp/").unwrap().1, format!("/otlp{PROFILES_PATH}"));
        assert_eq!(endpoint("http://c/v1development/profiles").unwrap(), ("c:80".into(), PROFILES_PATH.into()));
        assert!(endpoint("https://c").is_err());
    }

    #[test]
    fn a_window_maps_to_resources_stacks_and_names() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path()).unwrap();
        let bid = "abcdef0123";
        let syms = vec![
            SymbolRow { build_id: bid.into(), binary: "/bin/app".into(), start: 0x100, size: 0x100, name: "main".into() },
            SymbolRow { build_id: bid.into(), binary: "/bin/app".into(), start: 0x200, size: 0x100, name: "work".into() },
        ];
        store.ensure_dir(&store.symbols_dir()).unwrap();
        tailprof_store::write_symbols(&store.symbols_file(bid).unwrap(), &syms).unwrap();
        let mut rows = vec![
            row(10, "app", &[(bid, 0x210), (bid, 0x110)], 7),
            row(10, "app", &[(bid, 0x110)], 2),
            row(11, "other", &[("nobuildid-1", 0x40), (bid, 0x110)], 5),
        ];
        rows[2].truncated = true;
        let w = WindowBatch {
            host: "h1".into(),
            start_us: 1_000_000,
            end_us: 2_000_000,
            samples: 14,
            lost_samples: 0,
            losses: Default::default(),
            dropped_rows: 0,
            events: vec!["cpu-clock".into()],
            rows,
            items: Vec::new(),
            latency: Vec::new(),
        };
        let req = window_request(&store, &w);
        // round trip through the wire format
        let req = ExportProfilesServiceRequest::decode(req.encode_to_vec().as_slice()).unwrap();
        let d = req.dictionary.as_ref().unwrap();
        let s = |i: i32| d.string_table[i as usize].as_str();
        assert_eq!((s(0), d.mapping_table[0].clone(), d.stack_table[0].clone()), ("", Mapping::default(), Stack::default()));
        assert_eq!(req.resource_profiles.len(), 2);
        let rp = &req.resource_profiles[0];
        let attrs: Vec<(String, String)> = rp
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .map(|k| (k.key.clone(), format!("{:?}", k.value.as_ref().unwrap().value.as_ref().unwrap())))
            .collect();
        assert!(attrs.contains(&("process.pid".into(), "IntValue(10)".into())), "{attrs:?}");
        assert!(attrs.contains(&("process.executable.name".into(), "StringValue(\"app\")".into())));
        assert!(attrs.contains(&("host.name".into(), "StringValue(\"h1\")".into())));
        let profiles = &rp.scope_profiles[0].profiles;
        assert_eq!(profiles.len(), 2);
        let counts = &profiles[0];
        let st = counts.sample_type.unwrap();
        assert_eq!((s(st.type_strindex), s(st.unit_strindex)), ("samples", "count"));
        let pt = counts.period_type.unwrap();
        assert_eq!((s(pt.type_strindex), s(pt.unit_strindex), counts.period), ("cpu", "nanoseconds", 1_000_000));
        assert_eq!((counts.time_unix_nano, counts.duration_nano), (1_000_000_000, 1_000_000_000));
        let st = profiles[1].sample_type.unwrap();
        assert_eq!((s(st.type_strindex), s(st.unit_strindex)), ("cpu", "nanoseconds"));
        assert_eq!(profiles[1].samples.iter().map(|x| x.values[0]).sum::<i64>(), 9_000_000);
        // leaf function names and counts of pid 10
        let leaf = |smp: &Sample| {
            let loc = &d.location_table[d.stack_table[smp.stack_index as usize].location_indices[0] as usize];
            loc.lines.first().map(|l| s(d.function_table[l.function_index as usize].name_strindex).to_string())
        };
        let mut got: Vec<(Option<String>, i64)> = counts.samples.iter().map(|x| (leaf(x), x.values[0])).collect();
        got.sort();
        assert_eq!(got, [(Some("main".into()), 2), (Some("work".into()), 7)]);
        // the stack is innermost first and the outer frame is named too
        let deep = counts.samples.iter().find(|x| x.values[0] == 7).unwrap();
        let locs = &d.stack_table[deep.stack_index as usize].location_indices;
        assert_eq!(locs.len(), 2);
        let outer = &d.location_table[locs[1] as usize];
        assert_eq!((outer.address, s(d.function_table[outer.lines[0].function_index as usize].name_strindex)), (0x110, "main"));
        let m = &d.mapping_table[outer.mapping_index as usize];
        assert_eq!((s(m.filename_strindex), m.memory_start, m.file_offset), ("/bin/app", 0, 0));
        let a = &d.attribute_table[m.attribute_indices[0] as usize];
        assert_eq!(s(a.key_strindex), BUILD_ID_ATTR);
        // pid 11: unnamed leaf keeps its offset, no build-id attribute; truncated marked
        let p11 = &req.resource_profiles[1].scope_profiles[0].profiles[0];
        let smp = &p11.samples[0];
        assert_eq!(smp.values, [5]);
        let loc = &d.location_table[d.stack_table[smp.stack_index as usize].location_indices[0] as usize];
        assert!(loc.lines.is_empty());
        assert_eq!(loc.address, 0x40);
        assert!(d.mapping_table[loc.mapping_index as usize].attribute_indices.is_empty());
        let ta = &d.attribute_table[smp.attribute_indices[0] as usize];
        assert_eq!(s(ta.key_strindex), TRUNCATED_ATTR);
        assert_ne!(p11.profile_id, counts.profile_id);
    }
}
