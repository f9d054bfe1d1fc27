//! Side-band records (everything but samples) inside a records chunk.
//!
//! Owns the row encoding of `Mmap`, `Comm`, `Fork`, `Exit`, `Lost`, `Throttle`,
//! `Marker`, `ItemClass`, `Switch`, `Wakeup`, `ItemEvent` and `ItemTrace`
//! (FORMAT.md §5.4). Side-band records are rare next to samples, so they are stored
//! row-wise, each one tagged with its position among the chunk's samples; that position
//! is what puts them back in their exact original order. Each row is length-prefixed so
//! a reader can skip kinds it does not know.

use crate::record::*;
use crate::varint::{put_bytes, put_uleb, unzigzag, zigzag, ByteReader};

/// Side-band kind tags.
pub const SB_MMAP: u8 = 1;
pub const SB_COMM: u8 = 2;
pub const SB_FORK: u8 = 3;
pub const SB_EXIT: u8 = 4;
pub const SB_LOST: u8 = 5;
pub const SB_THROTTLE: u8 = 6;
pub const SB_MARKER: u8 = 7;
pub const SB_ITEM_CLASS: u8 = 8;
/// Version 2.
pub const SB_SWITCH: u8 = 9;
/// Version 3.
pub const SB_WAKEUP: u8 = 10;
/// `--item-event` hits (written by version-4 recorders since issue 22; older readers skip
/// the unknown kind).
pub const SB_ITEM_EVENT: u8 = 11;
/// Added in version 5 without a version change: older readers skip the row (an unknown
/// kind) and lose only the trace context.
pub const SB_ITEM_TRACE: u8 = 12;

fn put_opt_u16(out: &mut Vec<u8>, v: Option<u16>) {
    put_uleb(out, v.map_or(0, |e| e as u64 + 1));
}

fn get_opt_u16(r: &mut ByteReader<'_>) -> Option<Option<u16>> {
    match r.uleb()? {
        0 => Some(None),
        v => Some(Some(u16::try_from(v - 1).ok()?)),
    }
}

fn put_event_arg(s: &mut Vec<u8>, a: &EventArg) {
    match a {
        EventArg::U64(v) => {
            s.push(1);
            put_uleb(s, *v);
        }
        EventArg::I64(v) => {
            s.push(2);
            put_uleb(s, zigzag(*v));
        }
        EventArg::Text(t) => {
            s.push(3);
            put_bytes(s, t.as_bytes());
        }
    }
}

/// One event argument after its tag `tag` (1 u64, 2 i64, 3 text); `None`: damage.
fn get_event_arg(f: &mut ByteReader<'_>, tag: u8) -> Option<EventArg> {
    Some(match tag {
        1 => EventArg::U64(f.uleb()?),
        2 => EventArg::I64(unzigzag(f.uleb()?)),
        3 => EventArg::Text(f.string()?),
        _ => return None,
    })
}

/// The fields of an `ItemEvent` row after its name: the first argument, then the
/// optional trailing ones (further arguments, the position at an item boundary).
fn get_event_args(f: &mut ByteReader<'_>) -> Option<(Vec<EventArg>, EventAt)> {
    let mut args = Vec::new();
    match f.u8()? {
        0 => {}
        t => args.push(get_event_arg(f, t)?),
    }
    let mut at = EventAt::Free;
    if f.remaining() > 0 {
        let more = f.uleb()?;
        if more as usize + args.len() > ItemEvent::MAX_ARGS || (more > 0 && args.is_empty()) {
            return None;
        }
        for _ in 0..more {
            let t = f.u8()?;
            args.push(get_event_arg(f, t)?);
        }
        at = match f.u8()? {
            0 => EventAt::Free,
            1 => EventAt::Begin,
            2 => EventAt::End,
            _ => return None,
        };
    }
    Some((args, at))
}

fn put_task(out: &mut Vec<u8>, t: &Task) {
    for v in [t.pid, t.ppid, t.tid, t.ptid] {
        put_uleb(out, v as u64);
    }
}

fn get_task(r: &mut ByteReader<'_>, time: u64) -> Option<Task> {
    Some(Task { time, pid: r.uleb_u32()?, ppid: r.uleb_u32()?, tid: r.uleb_u32()?, ptid: r.uleb_u32()? })
}

/// Appends one side-band row: kind, position delta, time delta, length-prefixed fields.
/// `prev_time` is the time of the previous side-band row in the chunk (or the chunk's
/// base time) and is updated. `scratch` is reused between calls.
///
/// `stack_ref` is the chunk's reference to a `Switch`'s or `Wakeup`'s stack (0 = none, k = entry k-1 of
/// the chunk's stack list, FORMAT.md §5.5); ignored for other kinds.
///
/// Returns `false` for `Record::Sample`, which does not belong here.
pub fn put_sideband(out: &mut Vec<u8>, scratch: &mut Vec<u8>, pos_delta: u32, prev_time: &mut u64, r: &Record, stack_ref: u64) -> bool {
    scratch.clear();
    let s = scratch;
    let kind = match r {
        Record::Sample(_) => return false,
        Record::Mmap(m) => {
            for v in [m.pid as u64, m.tid as u64, m.start, m.len, m.pgoff, m.prot as u64] {
                put_uleb(s, v);
            }
            s.push(m.cpumode as u8);
            put_bytes(s, m.path.as_bytes());
            match &m.build_id {
                None => put_uleb(s, 0),
                Some(b) => {
                    put_uleb(s, b.len() as u64 + 1);
                    s.extend_from_slice(b);
                }
            }
            SB_MMAP
        }
        Record::Comm(c) => {
            put_uleb(s, c.pid as u64);
            put_uleb(s, c.tid as u64);
            s.push(c.exec as u8);
            put_bytes(s, c.comm.as_bytes());
            SB_COMM
        }
        Record::Fork(t) => {
            put_task(s, t);
            SB_FORK
        }
        Record::Exit(t) => {
            put_task(s, t);
            SB_EXIT
        }
        Record::Lost(l) => {
            put_uleb(s, l.cpu as u64);
            put_opt_u16(s, l.event);
            s.push(l.kind as u8);
            put_uleb(s, l.count);
            SB_LOST
        }
        Record::Throttle(t) => {
            put_uleb(s, t.cpu as u64);
            put_opt_u16(s, t.event);
            s.push(t.throttled as u8);
            SB_THROTTLE
        }
        Record::Marker(m) => {
            put_uleb(s, m.pid as u64);
            put_uleb(s, m.tid as u64);
            s.push(m.kind as u8);
            s.push(m.source as u8);
            put_uleb(s, m.item);
            put_uleb(s, m.class as u64);
            SB_MARKER
        }
        Record::ItemClass(c) => {
            put_uleb(s, c.pid as u64);
            put_uleb(s, c.id as u64);
            put_bytes(s, c.name.as_bytes());
            SB_ITEM_CLASS
        }
        Record::Switch(w) => {
            put_uleb(s, w.pid as u64);
            put_uleb(s, w.tid as u64);
            put_uleb(s, w.cpu as u64);
            s.push(w.kind as u8);
            put_uleb(s, stack_ref);
            s.push(w.stack_status as u8);
            // Version 3: the other task of a CPU-wide switch (0 = unknown, else pid + 1).
            match w.next_prev {
                Some((p, t)) => {
                    put_uleb(s, p as u64 + 1);
                    put_uleb(s, t as u64);
                }
                None if w.item_key.is_some() => put_uleb(s, 0),
                None => {}
            }
            // Optional trailing field (readers that stop after `next_prev` ignore it): the
            // item-key register at a switch-out.
            if let Some(k) = w.item_key {
                put_uleb(s, k);
            }
            SB_SWITCH
        }
        Record::Wakeup(w) => {
            for v in [w.pid, w.tid, w.cpu, w.wakee_tid] {
                put_uleb(s, v as u64);
            }
            put_uleb(s, stack_ref);
            s.push(w.stack_status as u8);
            SB_WAKEUP
        }
        Record::ItemEvent(e) => {
            put_uleb(s, e.pid as u64);
            put_uleb(s, e.tid as u64);
            s.push(e.kind as u8);
            put_bytes(s, e.name.as_bytes());
            match e.args.first() {
                None => s.push(0),
                Some(a) => put_event_arg(s, a),
            }
            // Optional trailing fields (readers of the one-argument row ignore them):
            // only written when there is something past the first argument.
            if e.args.len() > 1 || e.at != EventAt::Free {
                let more = e.args.get(1..).unwrap_or(&[]);
                put_uleb(s, more.len() as u64);
                for a in more {
                    put_event_arg(s, a);
                }
                s.push(e.at as u8);
            }
            SB_ITEM_EVENT
        }
        Record::ItemTrace(t) => {
            put_uleb(s, t.pid as u64);
            put_uleb(s, t.tid as u64);
            put_uleb(s, t.item);
            s.extend_from_slice(&t.trace_id);
            s.extend_from_slice(&t.span_id);
            SB_ITEM_TRACE
        }
    };
    let time = r.time();
    out.push(kind);
    put_uleb(out, pos_delta as u64);
    put_uleb(out, zigzag(time.wrapping_sub(*prev_time) as i64));
    *prev_time = time;
    put_bytes(out, s);
    true
}

/// Reads one side-band row. Returns `(pos_delta, Some(record))`, or `(pos_delta, None)`
/// for a kind this build does not know (the row is skipped). `None` means damage.
///
/// A `Switch`'s or `Wakeup`'s `stack` comes back as the chunk-local stack reference (`StackId(k)`),
/// which the caller checks against `max_stack_ref` and maps to a stack id. Rows of kinds
/// newer than the trace's format `version` are damage.
pub fn get_sideband(r: &mut ByteReader<'_>, prev_time: &mut u64, version: u16, max_stack_ref: u64) -> Option<(u32, Option<Record>)> {
    let kind = r.u8()?;
    let pos_delta = r.uleb_u32()?;
    let time = prev_time.wrapping_add(unzigzag(r.uleb()?) as u64);
    *prev_time = time;
    let fields = r.bytes()?;
    let f = &mut ByteReader::new(fields);
    let rec = match kind {
        SB_MMAP => Record::Mmap(Mmap {
            time,
            pid: f.uleb_u32()?,
            tid: f.uleb_u32()?,
            start: f.uleb()?,
            len: f.uleb()?,
            pgoff: f.uleb()?,
            prot: f.uleb_u32()?,
            cpumode: CpuMode::from_u8(f.u8()?),
            path: f.string()?,
            build_id: match f.len_at_most(f.remaining() + 1)? {
                0 => None,
                n => Some(f.take(n - 1)?.to_vec()),
            },
        }),
        SB_COMM => Record::Comm(Comm { time, pid: f.uleb_u32()?, tid: f.uleb_u32()?, exec: f.u8()? != 0, comm: f.string()? }),
        SB_FORK => Record::Fork(get_task(f, time)?),
        SB_EXIT => Record::Exit(get_task(f, time)?),
        SB_LOST => {
            Record::Lost(Lost { time, cpu: f.uleb_u32()?, event: get_opt_u16(f)?, kind: LossKind::from_u8(f.u8()?)?, count: f.uleb()? })
        }
        SB_THROTTLE => Record::Throttle(Throttle { time, cpu: f.uleb_u32()?, event: get_opt_u16(f)?, throttled: f.u8()? != 0 }),
        SB_MARKER => Record::Marker(Marker {
            time,
            pid: f.uleb_u32()?,
            tid: f.uleb_u32()?,
            kind: match f.u8()? {
                0 => MarkerKind::Begin,
                1 => MarkerKind::End,
                2 => MarkerKind::Label,
                3 if version >= 5 => MarkerKind::Switch,
                4 if version >= 5 => MarkerKind::SwitchNone,
                _ => return None,
            },
            source: match f.u8()? {
                0 => MarkerSource::Api,
                1 => MarkerSource::Uprobe,
                _ => return None,
            },
            item: f.uleb()?,
            class: f.uleb_u32()?,
        }),
        SB_ITEM_CLASS => Record::ItemClass(ItemClass { time, pid: f.uleb_u32()?, id: f.uleb_u32()?, name: f.string()? }),
        SB_SWITCH if version >= 2 => Record::Switch(Switch {
            time,
            pid: f.uleb_u32()?,
            tid: f.uleb_u32()?,
            cpu: f.uleb_u32()?,
            kind: SwitchKind::from_u8(f.u8()?)?,
            stack: {
                let k = f.uleb()?;
                if k > max_stack_ref {
                    return None;
                }
                StackId(k as u32)
            },
            stack_status: StackStatus::from_u8(f.u8()?),
            next_prev: match f.remaining() {
                0 => None,
                _ if version < 3 => None,
                _ => match f.uleb()? {
                    0 => None,
                    p => Some((u32::try_from(p - 1).ok()?, f.uleb_u32()?)),
                },
            },
            item_key: match f.remaining() {
                0 => None,
                _ if version < 5 => None,
                _ => Some(f.uleb()?),
            },
        }),
        SB_ITEM_EVENT if version >= 4 => {
            let (pid, tid) = (f.uleb_u32()?, f.uleb_u32()?);
            let kind = match f.u8()? {
                0 => ItemEventKind::Instant,
                1 => ItemEventKind::SpanStart,
                2 => ItemEventKind::SpanEnd,
                _ => return None,
            };
            let name = f.string()?;
            let (args, at) = get_event_args(f)?;
            Record::ItemEvent(ItemEvent { time, pid, tid, kind, name, args, at })
        }
        SB_WAKEUP if version >= 3 => Record::Wakeup(Wakeup {
            time,
            pid: f.uleb_u32()?,
            tid: f.uleb_u32()?,
            cpu: f.uleb_u32()?,
            wakee_tid: f.uleb_u32()?,
            stack: {
                let k = f.uleb()?;
                if k > max_stack_ref {
                    return None;
                }
                StackId(k as u32)
            },
            stack_status: StackStatus::from_u8(f.u8()?),
        }),
        SB_ITEM_TRACE => Record::ItemTrace(ItemTrace {
            time,
            pid: f.uleb_u32()?,
            tid: f.uleb_u32()?,
            item: f.uleb()?,
            trace_id: f.take(16)?.try_into().ok()?,
            span_id: f.take(8)?.try_into().ok()?,
        }),
        _ => return Some((pos_delta, None)),
    };
    Some((pos_delta, Some(rec)))
}

/// Upper bound of the bytes [`put_sideband`] appends for `r` (for chunk sizing).
pub fn sideband_size_hint(r: &Record) -> usize {
    40 + match r {
        Record::Mmap(m) => 60 + m.path.len() + m.build_id.as_ref().map_or(0, Vec::len),
        Record::Comm(c) => 20 + c.comm.len(),
        Record::ItemClass(c) => 20 + c.name.len(),
        Record::ItemEvent(e) => {
            20 + e.name.len() + 4 + e.args.iter().map(|a| 12 + if let EventArg::Text(t) = a { t.len() } else { 0 }).sum::<usize>()
        }
        _ => 40,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that does not know side-band kind 12 (one from before trace context)
    /// skips the whole row and reads on: old readers lose only the trace context.
    #[test]
    fn item_trace_row_is_skippable_by_kind() {
        let r = Record::ItemTrace(ItemTrace { time: 5, pid: 1, tid: 2, item: 3, trace_id: [7; 16], span_id: [9; 8] });
        let (mut out, mut scratch, mut prev) = (Vec::new(), Vec::new(), 0u64);
        assert!(put_sideband(&mut out, &mut scratch, 0, &mut prev, &r, 0));
        let after = out.len();
        out.extend_from_slice(&[SB_THROTTLE, 0, 0, 3, 0, 0, 1]);
        let mut p = 0;
        let mut rd = ByteReader::new(&out);
        assert_eq!(get_sideband(&mut rd, &mut p, 5, 0), Some((0, Some(r))));
        // The same row under a kind this build does not know: skipped, then the next row.
        out[0] = 200;
        let mut p = 0;
        let mut rd = ByteReader::new(&out);
        assert_eq!(get_sideband(&mut rd, &mut p, 5, 0), Some((0, None)));
        assert_eq!(out.len() - rd.remaining(), after);
        assert!(matches!(get_sideband(&mut rd, &mut p, 5, 0), Some((0, Some(Record::Throttle(_))))));
    }

    /// The item key of a switch-out (the goroutine, issue 22) is an optional trailing
    /// field: a row without it is the row written before, byte for byte; with it, and with
    /// or without `next_prev`, it reads back whole; a reader that stops after `next_prev`
    /// (the version-3/4 reader) sees the same `next_prev`.
    #[test]
    fn switch_item_key_is_an_optional_trailing_field() {
        let plain = Switch { time: 7, pid: 1, tid: 2, cpu: 1, kind: SwitchKind::OutBlocked, ..Default::default() };
        let bytes = row(&Record::Switch(plain.clone()));
        // kind, pos, time, len; pid, tid, cpu, kind, stack, status: nothing after.
        assert_eq!(bytes.len(), 4 + 6, "{bytes:?}");
        for next_prev in [None, Some((5, 6))] {
            let w = Switch { item_key: Some(0xc000_1000), next_prev, ..plain.clone() };
            let bytes = row(&Record::Switch(w.clone()));
            assert_eq!(read(&bytes), Some((0, Some(Record::Switch(w.clone())))));
            // The version-4 reader: the same record without the key.
            let old = get_sideband(&mut ByteReader::new(&bytes), &mut 0, 4, 0);
            assert_eq!(old, Some((0, Some(Record::Switch(Switch { item_key: None, ..w })))));
        }
        let zero = Switch { item_key: Some(0), ..plain };
        assert_eq!(read(&row(&Record::Switch(zero.clone()))), Some((0, Some(Record::Switch(zero)))));
    }

    fn event(args: Vec<EventArg>, at: EventAt) -> Record {
        Record::ItemEvent(ItemEvent { time: 9, pid: 1, tid: 2, kind: ItemEventKind::SpanStart, name: "lock__wait".into(), args, at })
    }

    fn row(r: &Record) -> Vec<u8> {
        let (mut out, mut scratch, mut prev) = (Vec::new(), Vec::new(), 0u64);
        assert!(put_sideband(&mut out, &mut scratch, 0, &mut prev, r, 0));
        out
    }

    fn read(bytes: &[u8]) -> Option<(u32, Option<Record>)> {
        get_sideband(&mut ByteReader::new(bytes), &mut 0, 5, 0)
    }

    /// Several arguments and the boundary position are trailing fields: an event with at
    /// most one argument and no position is the row version-4 readers wrote, byte for
    /// byte; a row with them reads back whole; an old reader (which stops after the first
    /// argument) still gets the first one.
    #[test]
    fn item_event_arguments_are_trailing_fields() {
        let one = event(vec![EventArg::U64(16384)], EventAt::Free);
        let bytes = row(&one);
        // kind, pos, time, len; pid, tid, kind; name (len + 10); tag, value (3 bytes).
        assert_eq!(bytes.len(), 4 + 3 + 11 + 4, "no trailing bytes: {bytes:?}");
        assert_eq!(read(&bytes), Some((0, Some(one))));
        let many = event(
            vec![EventArg::U64(1663), EventArg::U64(16384), EventArg::I64(-1), EventArg::Text("AccessShareLock".into())],
            EventAt::Begin,
        );
        let bytes = row(&many);
        assert_eq!(read(&bytes), Some((0, Some(many.clone()))));
        // What a reader of the one-argument row sees: the same bytes up to the first
        // argument, the rest ignored.
        let first = row(&event(vec![EventArg::U64(1663)], EventAt::Free));
        assert_eq!(bytes[4..first.len()], first[4..], "the first argument is where it was");
        let no_args_at_end = event(Vec::new(), EventAt::End);
        assert_eq!(read(&row(&no_args_at_end)), Some((0, Some(no_args_at_end))));
        // Damage: more arguments than the bound, an unknown position.
        let mut bad = row(&many);
        let at = bad.len() - 1;
        bad[at] = 7;
        assert_eq!(read(&bad), None);
        let too_many = event(vec![EventArg::U64(1); ItemEvent::MAX_ARGS + 1], EventAt::Free);
        assert_eq!(read(&row(&too_many)), None);
    }
}
