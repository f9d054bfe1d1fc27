//! Opening the `--item-class-from` probes and turning their hits into records
//! ([`ClassProbes`]).

use std::io;

use tailprof_format::{EventArg, EventAt, ItemClass, ItemEvent, LossKind, Lost, Marker, MarkerKind, MarkerSource, Record, Sample};

use super::{ClassId, ClassSpec, ClassTable, TracefsUprobe};
use crate::attr::{ClockChoice, PerfEventAttr, ATTR_SIZE};
use crate::items::events::EventSpec;
use crate::items::{classprobe, uprobe};
use crate::parse::Layout;
use crate::sys::{self, CollectError};

/// `--item-class-from` probes: tracefs uprobe events with a fetch-argument, opened
/// through perf as tracepoints (period 1, `PERF_SAMPLE_RAW`) next to the sampling events
/// and redirected into the same rings. Each hit becomes a `Label` marker for the
/// thread's open item (or the next one it begins), preceded by an `ItemClass`
/// declaration the first time a process shows a label.
///
/// `--item-event` probes are opened and drained the same way, after the class probes:
/// each hit becomes an [`ItemEvent`] record (with the fetched argument when asked for).
///
/// Owned by the emitter, which the recorder drops after its perf fds: the tracefs
/// events are removed only once no perf event uses them.
#[derive(Debug)]
pub(crate) struct ClassProbes {
    /// One tracefs event per site of every spec, in decoder order from `base`: what a
    /// hit means, the definition (header), the event.
    events: Vec<(ProbeUse, String, TracefsUprobe)>,
    /// Decoder index of the first class event.
    pub base: u16,
    table: ClassTable,
    /// `table.dropped` already stored as `Lost { kind: ItemClasses }`.
    dropped_stored: u64,
    /// Hits whose raw record did not hold the argument.
    pub undecoded: u64,
    /// Said once, as a note: tracefs was mounted by us.
    mounted: Option<std::path::PathBuf>,
}

/// What a hit of one of [`ClassProbes`]' events is turned into.
#[derive(Debug)]
enum ProbeUse {
    Class,
    Event(Box<EventSpec>),
}

/// sample_type of a class probe: the uprobe fields plus the tracepoint's raw record.
pub(crate) const CLASS_SAMPLE_TYPE: u64 = uprobe::UPROBE_SAMPLE_TYPE | perf_event_open_sys::bindings::PERF_SAMPLE_RAW as u64;

impl ClassProbes {
    /// Resolve every spec (classes, then events) and create their tracefs events
    /// (mounting tracefs when absent). `base` is the decoder index the first event gets.
    /// `None` without specs.
    /// `boundaries`: the sites of the item-begin and item-end probes, so that an event at
    /// one of them is marked [`EventAt::Begin`]/[`EventAt::End`].
    pub fn prepare(
        specs: &[ClassSpec],
        event_specs: &[EventSpec],
        boundaries: Option<(&[uprobe::ResolvedProbe], &[uprobe::ResolvedProbe])>,
        base: usize,
    ) -> Result<Option<ClassProbes>, crate::session::RecordError> {
        if specs.is_empty() && event_specs.is_empty() {
            return Ok(None);
        }
        let base = u16::try_from(base).map_err(|_| crate::session::RecordError::Options("too many events".into()))?;
        let mut events = Vec::with_capacity(specs.len());
        let mut mounted = None;
        for spec in specs {
            // One event per site (a USDT probe inlined at several places has several).
            for resolved in uprobe::resolve_sites(&spec.probe)? {
                let fetch = spec.fetch_arg_at(&resolved)?;
                let root = tracefs_root("--item-class-from", &mut mounted)?;
                let ev = TracefsUprobe::create(&root, &resolved, spec).map_err(|e| create_error(e, &root))?;
                let desc = format!("{}:{fetch}", resolved.describe());
                events.push((ProbeUse::Class, desc, ev));
            }
        }
        let mut event_defs = Vec::new();
        for spec in event_specs {
            for resolved in uprobe::resolve_sites(&spec.probe)? {
                let mut fetch = String::new();
                for (i, a) in spec.args.iter().enumerate() {
                    fetch.push(if i == 0 { ':' } else { ',' });
                    fetch.push_str(&a.fetch_arg_at(&resolved)?);
                }
                let root = tracefs_root("--item-event", &mut mounted)?;
                let ev = TracefsUprobe::create_event(&root, &resolved, spec).map_err(|e| create_error(e, &root))?;
                // The item it belongs to, when its site is also a boundary probe's.
                let same = |sites: &[uprobe::ResolvedProbe]| sites.iter().any(|b| b.path == resolved.path && b.offset == resolved.offset);
                let mut spec = spec.clone();
                spec.at = match boundaries {
                    Some((begin, _)) if same(begin) => EventAt::Begin,
                    Some((_, end)) if same(end) => EventAt::End,
                    _ => EventAt::Free,
                };
                let at = match spec.at {
                    EventAt::Begin => " at_begin",
                    EventAt::End => " at_end",
                    EventAt::Free => "",
                };
                event_defs.push(format!("{}{fetch}{at}", resolved.describe()));
                events.push((ProbeUse::Event(Box::new(spec)), String::new(), ev));
            }
        }
        // The header's `item_events` entry names each event: `NAME KIND DEFINITION`.
        let mut defs = event_defs.into_iter();
        for (u, desc, _) in events.iter_mut() {
            if let ProbeUse::Event(spec) = u {
                let kind = match spec.kind {
                    tailprof_format::ItemEventKind::Instant => "instant",
                    tailprof_format::ItemEventKind::SpanStart => "span_start",
                    tailprof_format::ItemEventKind::SpanEnd => "span_end",
                };
                *desc = format!("{} {kind} {}", spec.name, defs.next().unwrap_or_default());
            }
        }
        Ok(Some(ClassProbes { events, base, table: ClassTable::default(), dropped_stored: 0, undecoded: 0, mounted }))
    }

    /// Number of class events, one per site (opened per CPU or task like the sampling
    /// events).
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether decoder event `event` is a class probe.
    pub fn owns(&self, event: u16) -> bool {
        event >= self.base && ((event - self.base) as usize) < self.events.len()
    }

    /// The attr of class event `i`.
    pub fn attr(&self, i: usize, clock: ClockChoice, inherit: bool, enable_on_exec: bool) -> PerfEventAttr {
        let mut a = PerfEventAttr {
            type_: perf_event_open_sys::bindings::PERF_TYPE_TRACEPOINT,
            size: ATTR_SIZE,
            config: self.events.get(i).map_or(0, |e| e.2.id),
            sample_type: CLASS_SAMPLE_TYPE,
            ..PerfEventAttr::default()
        };
        a.sample_period = 1;
        a.set_disabled(1);
        a.set_inherit(inherit as u64);
        a.set_enable_on_exec(enable_on_exec as u64);
        a.set_sample_id_all(1);
        if clock == ClockChoice::Monotonic {
            a.set_use_clockid(1);
            a.clockid = libc::CLOCK_MONOTONIC;
        }
        a.set_watermark(1);
        a.wakeup_watermark = 0;
        a
    }

    /// Open class event `i` for `pid` (a task or -1) on `cpu`.
    pub fn open(&self, i: usize, pid: i32, cpu: i32, attr: &PerfEventAttr) -> Result<std::os::fd::OwnedFd, CollectError> {
        sys::perf_event_open(attr, pid, cpu, -1, sys::PERF_FLAG_FD_CLOEXEC).map_err(|e| {
            let spec = self.events.get(i).map_or(String::new(), |e| e.1.clone());
            let event = format!("--item-class-from/--item-event probe {spec}");
            let source = io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0));
            match e.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EPERM) => CollectError::Permission {
                    event,
                    paranoid: std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").ok().and_then(|s| s.trim().parse().ok()),
                    hint: "tracepoint uprobes need root (CAP_SYS_ADMIN, or CAP_PERFMON with tracefs access)".into(),
                    source,
                },
                _ => CollectError::Open { event, hint: "perf_event_open of the tracefs uprobe event failed".into(), source },
            }
        })
    }

    /// Decoder layouts of the class events.
    pub fn layouts(&self) -> Vec<Layout> {
        (0..self.events.len())
            .map(|_| Layout { sample_type: CLASS_SAMPLE_TYPE, sample_id_all: true, default_period: 1, ..Layout::default() })
            .collect()
    }

    /// `TraceHeader.extra` entries: the class definitions (`item_class_from`) and the
    /// events (`item_events`: `NAME KIND DEFINITION`), one per line.
    pub fn header_extra(&self) -> Vec<(String, String)> {
        let of = |class: bool| {
            let defs: Vec<&str> = self.events.iter().filter(|e| matches!(e.0, ProbeUse::Class) == class).map(|e| e.1.as_str()).collect();
            defs.join("\n")
        };
        let mut out = Vec::new();
        for (key, class) in [("item_class_from", true), ("item_events", false)] {
            let v = of(class);
            if !v.is_empty() {
                out.push((key.to_string(), v));
            }
        }
        out
    }

    /// One-line notes for the user (tracefs mounted by us).
    pub fn notes(&self) -> Vec<String> {
        self.mounted
            .iter()
            .map(|r| format!("tracefs was not mounted: mounted it at {} (for --item-class-from/--item-event)", r.display()))
            .collect()
    }

    /// Records for one hit (`rec` is the raw ring record, `s` its decoded sample): an
    /// `ItemClass` declaration when the label is new for the process, then the `Label`
    /// marker; a `Lost { ItemClasses }` when the process is over its bound.
    pub fn convert(&mut self, rec: &[u8], s: &Sample, out: &mut Vec<Record>) {
        let Some(idx) = s.event.checked_sub(self.base).map(usize::from) else {
            return;
        };
        let Some((using, _, ev)) = self.events.get(idx) else {
            return;
        };
        let sl = perf_layout();
        let raw_value = || {
            rec.get(tailprof_perf_abi::HEADER_LEN..)
                .and_then(|body| sl.decode(body, tailprof_perf_abi::Endian::NATIVE).ok())
                .and_then(|v| v.raw())
                .and_then(|raw| classprobe::decode_raw(&ev.layout, raw))
        };
        if let ProbeUse::Event(spec) = using {
            let body = rec.get(tailprof_perf_abi::HEADER_LEN..).and_then(|body| sl.decode(body, tailprof_perf_abi::Endian::NATIVE).ok());
            let raw = body.as_ref().and_then(|v| v.raw());
            let mut args = Vec::with_capacity(spec.args.len());
            for (a, layout) in spec.args.iter().zip(&ev.layouts) {
                match raw.and_then(|raw| classprobe::decode_raw(layout, raw)) {
                    Some(classprobe::ArgValue::Text(t)) => args.push(EventArg::Text(crate::items::events::cut_text(t))),
                    Some(classprobe::ArgValue::Int(i)) => args.push(match a.ty {
                        classprobe::ArgType::S64 => EventArg::I64(i as i64),
                        _ => EventArg::U64(i as u64),
                    }),
                    None => {
                        // The event is kept with the arguments before this one; the
                        // record is counted as malformed.
                        self.undecoded = self.undecoded.saturating_add(1);
                        out.push(Record::Lost(Lost { time: s.time, cpu: s.cpu, event: None, kind: LossKind::Malformed, count: 1 }));
                        break;
                    }
                }
            }
            out.push(Record::ItemEvent(ItemEvent {
                time: s.time,
                pid: s.pid,
                tid: s.tid,
                kind: spec.kind,
                name: spec.name.clone(),
                args,
                at: spec.at,
            }));
            return;
        }
        let value = raw_value();
        let Some(value) = value else {
            // Stored as a malformed record: counted and shown like every loss.
            self.undecoded = self.undecoded.saturating_add(1);
            out.push(Record::Lost(Lost { time: s.time, cpu: s.cpu, event: None, kind: LossKind::Malformed, count: 1 }));
            return;
        };
        let label = classprobe::label_of(&value);
        let class = match self.table.id(s.pid, &label) {
            ClassId::Known(id) => id,
            ClassId::New(id) => {
                out.push(Record::ItemClass(ItemClass { time: s.time, pid: s.pid, id, name: label }));
                id
            }
            ClassId::Dropped => {
                let new = self.table.dropped.saturating_sub(self.dropped_stored);
                self.dropped_stored = self.table.dropped;
                out.push(Record::Lost(Lost { time: s.time, cpu: s.cpu, event: None, kind: LossKind::ItemClasses, count: new }));
                return;
            }
        };
        out.push(Record::Marker(Marker {
            time: s.time,
            pid: s.pid,
            tid: s.tid,
            kind: MarkerKind::Label,
            item: Marker::UNKNOWN_ITEM,
            class,
            source: MarkerSource::Uprobe,
        }));
    }
}

/// The ABI layout every class event's records have.
fn perf_layout() -> tailprof_perf_abi::SampleLayout {
    tailprof_perf_abi::SampleLayout::new(CLASS_SAMPLE_TYPE).with_sample_id_all(true)
}

/// A tracefs event that could not be created, with the fix.
fn create_error(e: crate::items::uprobe::UprobeError, root: &std::path::Path) -> crate::session::RecordError {
    let crate::items::uprobe::UprobeError::Read { path, source } = e else {
        return e.into();
    };
    let fix = match source.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => format!("run as root: writing {}/uprobe_events needs it", root.display()),
        Some(libc::ENOENT) => "does this kernel have uprobe events (CONFIG_UPROBE_EVENTS)?".to_string(),
        _ => "is the function's entry inside an executable segment of the binary?".to_string(),
    };
    crate::session::RecordError::Io { what: format!("--item-class-from: cannot create the tracefs uprobe event ({fix}; {path})"), source }
}

/// tracefs's root for `flag`'s probes, mounted when absent (then remembered in `mounted`,
/// so the caller can say so and unmount it).
fn tracefs_root(flag: &str, mounted: &mut Option<std::path::PathBuf>) -> Result<std::path::PathBuf, crate::session::RecordError> {
    let (root, we_mounted) = crate::tracefs::ensure_mounted()
        .map_err(|source| crate::session::RecordError::Io { what: format!("{flag} needs tracefs"), source })?;
    if we_mounted {
        *mounted = Some(root.clone());
    }
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailprof_format::{Marker, MarkerKind};

    /// A class-probe hit as the kernel writes it: header, IDENTIFIER, IP, TID, TIME, CPU,
    /// then RAW (u32 size + the tracepoint record, padded to 8 bytes).
    fn class_hit(layout: &classprobe::ArgLayout, sql: &[u8]) -> Vec<u8> {
        let mut raw = vec![0u8; layout.offset + layout.size];
        let loc = ((sql.len() as u32) << 16) | raw.len() as u32;
        raw[layout.offset..layout.offset + 4].copy_from_slice(&loc.to_ne_bytes());
        raw.extend_from_slice(sql);
        let mut body = Vec::new();
        for w in [7u64, 0x401000, (11u64 << 32) | 10, 1234, 1] {
            body.extend_from_slice(&w.to_ne_bytes());
        }
        let mut field = (raw.len() as u32).to_ne_bytes().to_vec();
        field.extend_from_slice(&raw);
        while !field.len().is_multiple_of(8) {
            field.push(0);
        }
        body.extend_from_slice(&field);
        let mut rec = Vec::new();
        rec.extend_from_slice(&tailprof_perf_abi::record_type::SAMPLE.to_ne_bytes());
        rec.extend_from_slice(&0u16.to_ne_bytes());
        rec.extend_from_slice(&((body.len() + 8) as u16).to_ne_bytes());
        rec.extend_from_slice(&body);
        rec
    }

    /// Hits → `ItemClass` (first time) + `Label`; a record without the argument → a
    /// malformed-record loss. Creates a real tracefs event (root only).
    #[test]
    fn class_hits_become_declarations_and_labels() {
        // SAFETY: plain getter.
        if unsafe { libc::geteuid() } != 0 {
            tailprof_testkit::skip(tailprof_testkit::Need::Root, "needs root for tracefs");
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let spec = ClassSpec::parse(&format!("{}:main:rdi", exe.display())).unwrap();
        let mut c = ClassProbes::prepare(&[spec], &[], None, 5).unwrap().unwrap();
        assert!(c.owns(5) && !c.owns(4) && !c.owns(6));
        assert!(c.header_extra()[0].1.contains(":main@0x"));
        let layout = c.events[0].2.layout;
        let s = Sample { event: 5, pid: 10, tid: 11, time: 1234, cpu: 1, ..Sample::default() };
        let mut out = Vec::new();
        c.convert(&class_hit(&layout, b"SELECT 1 FROM t WHERE a = 5\0"), &s, &mut out);
        c.convert(&class_hit(&layout, b"select 2 from t where a = 77\0"), &s, &mut out);
        c.convert(&class_hit(&layout, b"x")[..20], &s, &mut out);
        let id = match &out[0] {
            Record::ItemClass(ic) => {
                assert_eq!((ic.pid, ic.name.as_str()), (10, "select ? from t where a = ?"));
                ic.id
            }
            r => panic!("{r:?}"),
        };
        for r in [&out[1], &out[2]] {
            match r {
                Record::Marker(m) => {
                    assert_eq!(
                        (m.kind, m.class, m.item, m.tid, m.source),
                        (MarkerKind::Label, id, Marker::UNKNOWN_ITEM, 11, MarkerSource::Uprobe)
                    )
                }
                r => panic!("{r:?}"),
            }
        }
        assert!(matches!(&out[3], Record::Lost(l) if l.kind == LossKind::Malformed && l.count == 1), "{:?}", out.get(3));
        assert_eq!(out.len(), 4);
    }
}
