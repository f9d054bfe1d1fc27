//! The store's tables: row types and their Parquet schemas (version [`SCHEMA_VERSION`]).
//! `docs/STORE.md` documents every column; change both together and bump the version.

use serde::{Deserialize, Serialize};

/// Version of the table schemas below, stored in every file's key-value metadata
/// (`tailprof.schema_version`). Readers refuse files with a larger major version.
pub const SCHEMA_VERSION: u32 = 1;

/// Key-value metadata keys.
pub const KV_VERSION: &str = "tailprof.schema_version";
pub const KV_META: &str = "tailprof.window";

/// One frame of a stored stack: the ELF's build-id (hex) and the file offset of the
/// address in it. Kernel frames use build-id `kernel` and the absolute address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StoreFrame {
    pub build_id: String,
    pub offset: u64,
}

/// Build-id used for kernel frames (offset = address).
pub const KERNEL_BUILD_ID: &str = "kernel";
/// Prefix of the pseudo build-id of a file that has none: `path:` + FNV hash of path,
/// size and mtime, so two versions of it stay apart.
pub const NO_BUILD_ID_PREFIX: &str = "nobuildid-";

/// `samples` table: one row per (window, pid, comm, event, stack) with its count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleRow {
    pub window_start_us: i64,
    pub window_end_us: i64,
    pub pid: u32,
    pub comm: String,
    pub event: String,
    /// Path of the leaf frame's binary as mapped (`[kernel]`, `[unknown]` when unmapped).
    pub binary: String,
    /// Stable 64-bit hash of the frames (equal stacks share it across files and hosts).
    pub stack_id: u64,
    /// Innermost first; `frames[0]` is the sampled instruction.
    pub frames: Vec<StoreFrame>,
    /// Whether the stack stopped before the outermost frame (unwinding failed or depth cap).
    pub truncated: bool,
    pub count: u64,
    /// Sum of the samples' periods (nanoseconds for cpu-clock).
    pub period: u64,
}

/// Parquet schema of the `samples` table.
pub const SAMPLES_SCHEMA: &str = "message tailprof_samples {
  required int64 window_start (TIMESTAMP(MICROS,true));
  required int64 window_end (TIMESTAMP(MICROS,true));
  required int32 pid;
  required binary comm (STRING);
  required binary event (STRING);
  required binary binary_path (STRING);
  required binary build_id (STRING);
  required int64 leaf_offset;
  required int64 stack_id;
  required group stack_build_ids (LIST) { repeated group list { required binary element (STRING); } }
  required group stack_offsets (LIST) { repeated group list { required int64 element; } }
  required boolean truncated;
  required int64 count;
  required int64 period;
}";

/// `symbols` table: the functions of one binary, by file offset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SymbolRow {
    pub build_id: String,
    pub binary: String,
    /// File offset of the function's first byte.
    pub start: u64,
    /// Bytes (0 = unknown: the function ends where the next begins).
    pub size: u64,
    /// Demangled name.
    pub name: String,
}

pub const SYMBOLS_SCHEMA: &str = "message tailprof_symbols {
  required binary build_id (STRING);
  required binary binary_path (STRING);
  required int64 start_offset;
  required int64 size;
  required binary name (STRING);
}";

/// `latency` table: per-window, per-class request latency histogram (log2 buckets).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyRow {
    pub window_start_us: i64,
    pub window_end_us: i64,
    pub class: String,
    /// Upper bound (inclusive) of the bucket in nanoseconds: 2^k.
    pub le_ns: u64,
    pub count: u64,
}

pub const LATENCY_SCHEMA: &str = "message tailprof_latency {
  required int64 window_start (TIMESTAMP(MICROS,true));
  required int64 window_end (TIMESTAMP(MICROS,true));
  required binary class (STRING);
  required int64 le_ns;
  required int64 count;
}";

/// `items` table: one retained slow request with its explanation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemRow {
    /// Wall-clock time of the request's begin.
    pub begin_us: i64,
    pub duration_ns: u64,
    pub class: String,
    pub item_id: u64,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// Why it was kept: `p99` (slower than the class's recent p99) or `threshold`.
    pub reason: String,
    /// The latency it was compared with, ns.
    pub limit_ns: u64,
    /// On-CPU samples inside the request.
    pub samples: u64,
    /// Time not covered by samples (duration - samples × period), ns: off-CPU estimate.
    pub off_cpu_ns: u64,
    /// JSON: [`ItemExplanation`].
    pub explanation: String,
    /// OpenTelemetry (W3C) trace id of the request, 32 lowercase hex digits, when its
    /// runtime wrote its trace context (docs/MARKERS.md); empty otherwise, and in files
    /// written before the column existed.
    #[serde(default)]
    pub trace_id: String,
    /// Its span id, 16 lowercase hex digits (empty: none).
    #[serde(default)]
    pub span_id: String,
}

pub const ITEMS_SCHEMA: &str = "message tailprof_items {
  required int64 begin (TIMESTAMP(MICROS,true));
  required int64 duration_ns;
  required binary class (STRING);
  required int64 item_id;
  required int32 pid;
  required int32 tid;
  required binary comm (STRING);
  required binary reason (STRING);
  required int64 limit_ns;
  required int64 samples;
  required int64 off_cpu_ns;
  required binary explanation (STRING);
  required binary trace_id (STRING);
  required binary span_id (STRING);
}";

/// Per-file facts, stored as JSON in the key-value metadata (`tailprof.window`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowMeta {
    pub schema_version: u32,
    pub host: String,
    pub window_start_us: i64,
    pub window_end_us: i64,
    /// Samples aggregated in this window.
    pub samples: u64,
    /// Samples the kernel dropped in this window (PERF_RECORD_LOST_SAMPLES).
    pub lost_samples: u64,
    /// The other losses, each by its kind (issue 19, finding 10).
    #[serde(flatten, default)]
    pub losses: Losses,
    /// Windows dropped since the previous file (disk full, write errors).
    pub dropped_windows: u64,
    /// Rows cut because the window's aggregate table was full.
    pub dropped_rows: u64,
    /// Events and their sampling setup, e.g. `cpu-clock F=49`.
    pub events: Vec<String>,
    pub agent_version: String,
}

/// Losses of a window other than samples, each by its true kind (files written before
/// these existed read as 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Losses {
    /// Records of any kind (samples and side-band: mmap, comm, fork, exit) the kernel
    /// dropped because a ring was full (PERF_RECORD_LOST).
    #[serde(default)]
    pub lost_records: u64,
    /// Item markers lost (a marker ring was full) or rejected (invalid, over a bound).
    #[serde(default)]
    pub lost_markers: u64,
    /// Records that could not be decoded and were skipped.
    #[serde(default)]
    pub malformed_records: u64,
    /// Item-class labels or references dropped (over the per-process bound, invalid).
    #[serde(default)]
    pub dropped_item_classes: u64,
}

impl Losses {
    /// Adds `o`'s counts.
    pub fn add(&mut self, o: &Losses) {
        self.lost_records = self.lost_records.saturating_add(o.lost_records);
        self.lost_markers = self.lost_markers.saturating_add(o.lost_markers);
        self.malformed_records = self.malformed_records.saturating_add(o.malformed_records);
        self.dropped_item_classes = self.dropped_item_classes.saturating_add(o.dropped_item_classes);
    }

    /// Counts one LOST record of `kind` with `count` (samples are counted apart).
    pub fn count(&mut self, kind: tailprof_format::LossKind, count: u64) {
        use tailprof_format::LossKind as K;
        let c = match kind {
            K::RingFull => &mut self.lost_records,
            K::Markers | K::MarkersRejected => &mut self.lost_markers,
            K::Malformed => &mut self.malformed_records,
            K::ItemClasses => &mut self.dropped_item_classes,
            K::Samples => return,
            // The agent reads no perf maps or jitdumps (collect::jit is off for it).
            K::JitNames | K::JitLines => return,
        };
        *c = c.saturating_add(count);
    }

    pub fn any(&self) -> bool {
        *self != Losses::default()
    }
}

/// FNV-1a over the frames: the `stack_id` column.
pub fn stack_id(frames: &[StoreFrame]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: &[u8]| {
        for &x in b {
            h ^= x as u64;
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    };
    for f in frames {
        eat(f.build_id.as_bytes());
        eat(&[0]);
        eat(&f.offset.to_le_bytes());
    }
    h
}

/// An `items.explanation` (docs/STORE.md, "items"), typed: what the agent writes and
/// readers parse. Frames are `[build_id, offset]` pairs, innermost first.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ItemExplanation {
    /// The request's samples by stack, most first.
    #[serde(default)]
    pub stacks: Vec<StoredStack>,
    /// Who ended its blocked time (issue 21; `causes = true`), largest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub woken_by: Vec<StoredWaker>,
    /// Who ran on its CPU while it was runnable, largest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preempted_by: Vec<StoredPreempter>,
    /// Switch markers drove the request (issue 24): when it was current.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switching: Option<StoredSwitching>,
}

/// Samples of a retained request on one stack.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StoredStack {
    pub samples: u64,
    #[serde(with = "frame_pairs")]
    pub frames: Vec<StoreFrame>,
}

/// A waker of a retained request, from its explanation's `woken_by` (issue 21).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StoredWaker {
    pub ns: u64,
    pub pid: u32,
    pub tid: u32,
    #[serde(default)]
    pub comm: String,
    /// The request the waker was inside.
    #[serde(default)]
    pub item: Option<u64>,
    /// That request's class (absent: none, no longer known to the agent, or a file
    /// written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// The waker's stack at its largest wakeup, innermost first.
    #[serde(default, with = "frame_pairs")]
    pub frames: Vec<StoreFrame>,
    /// The critical path: what the waker did while the request waited, largest first
    /// (absent in files written before it existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub during: Vec<StoredDuring>,
}

/// One part of a waker's critical path.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StoredDuring {
    pub state: StoredState,
    pub ns: u64,
    /// The stack (on CPU: its samples' stack), innermost first; empty when none says.
    #[serde(default, with = "frame_pairs")]
    pub frames: Vec<StoreFrame>,
}

/// A critical path part's state (`cpu`, `blocked`, `runnable`, as in `items --json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredState {
    #[default]
    Cpu,
    Blocked,
    Runnable,
}

/// A thread that ran on a retained request's CPU while it was runnable (`preempted_by`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StoredPreempter {
    pub ns: u64,
    pub pid: u32,
    pub tid: u32,
    #[serde(default)]
    pub comm: String,
    /// The request the preempting thread was in when it first ran there (absent: none,
    /// or a file written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<u64>,
}

/// A request driven by switch markers: its time current on some thread (its samples
/// are those), the rest of its wall time waiting in its event loop, how often it
/// became current and on how many threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StoredSwitching {
    pub current_ns: u64,
    pub waiting_in_loop_ns: u64,
    pub resumes: u64,
    pub threads: u32,
}

/// Frames as `[build_id, offset]` pairs.
mod frame_pairs {
    use super::StoreFrame;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &[StoreFrame], s: S) -> Result<S::Ok, S::Error> {
        let pairs: Vec<(&str, u64)> = v.iter().map(|f| (f.build_id.as_str(), f.offset)).collect();
        pairs.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<StoreFrame>, D::Error> {
        let pairs: Vec<(String, u64)> = Vec::deserialize(d)?;
        Ok(pairs.into_iter().map(|(build_id, offset)| StoreFrame { build_id, offset }).collect())
    }
}

/// At most this many stacks, wakers, preempters and critical-path parts are read from
/// one explanation (names of 64 characters, build-ids of 80).
pub const MAX_EXPLANATION_STACKS: usize = 1000;
pub const MAX_EXPLANATION_CAUSES: usize = 64;

impl ItemExplanation {
    /// The JSON stored in the `explanation` column.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }

    /// Parses a stored explanation, bounded (see [`MAX_EXPLANATION_STACKS`]): the file is
    /// not trusted. Anything malformed yields an empty explanation, never an error.
    pub fn parse(s: &str) -> ItemExplanation {
        let mut x: ItemExplanation = serde_json::from_str(s).unwrap_or_default();
        let frames = |f: &mut Vec<StoreFrame>| {
            f.truncate(crate::MAX_FRAMES);
            for fr in f.iter_mut() {
                if fr.build_id.len() > 80 {
                    fr.build_id = fr.build_id.chars().take(80).collect();
                }
            }
        };
        let name = |c: &mut String| {
            if c.len() > 64 {
                *c = c.chars().take(64).collect();
            }
        };
        x.stacks.truncate(MAX_EXPLANATION_STACKS);
        x.stacks.iter_mut().for_each(|st| frames(&mut st.frames));
        x.woken_by.truncate(MAX_EXPLANATION_CAUSES);
        for w in &mut x.woken_by {
            name(&mut w.comm);
            if let Some(c) = w.class.as_mut().filter(|c| c.len() > 128) {
                *c = c.chars().take(128).collect();
            }
            frames(&mut w.frames);
            w.during.truncate(MAX_EXPLANATION_CAUSES);
            w.during.iter_mut().for_each(|d| frames(&mut d.frames));
        }
        x.preempted_by.truncate(MAX_EXPLANATION_CAUSES);
        x.preempted_by.iter_mut().for_each(|p| name(&mut p.comm));
        x
    }
}
