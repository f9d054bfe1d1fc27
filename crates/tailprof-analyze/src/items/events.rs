//! Events and spans inside items (`--item-event`, issue 22 item 2): the one shape of an
//! item's events in `items --json`, `items --explain` and the Perfetto export.
//!
//! The join hands each [`ItemEvent`] record to the item open on its thread at its time
//! (the innermost). An instant is kept as it is; a `SpanStart` opens a span of its name,
//! the next `SpanEnd` of that name on the item closes the most recent one (its duration
//! is end − start; the argument is the start's, else the end's). A span still open when
//! its item ends is closed at the item's end and flagged `unfinished`; an end without a
//! start is counted (`unmatched_span_ends`). Per item at most [`MAX_EVENTS_PER_ITEM`]
//! instants and spans and [`MAX_OPEN_SPANS`] open spans are kept, the rest counted in
//! `dropped` (a target can fire a probe without end).

use serde::Serialize;
use tailprof_format::{ItemEvent, ItemEventKind};

/// Instants plus spans kept per item.
pub const MAX_EVENTS_PER_ITEM: usize = 256;
/// Spans open at once per item.
pub const MAX_OPEN_SPANS: usize = 64;

/// One instant inside an item.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRow {
    pub name: String,
    pub time_ns: u64,
    /// The probe's (first) argument as text (a number or the string it pointed to).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arg: Option<String>,
    /// Every argument in the order asked for, when there are two or more.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
}

/// One span inside an item.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpanRow {
    pub name: String,
    pub begin_ns: u64,
    pub end_ns: u64,
    pub duration_ns: u64,
    /// The start's (first) argument, else the end's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arg: Option<String>,
    /// All the start's arguments (else the end's), when there are two or more.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Its end was not seen before the item ended (closed at the item's end).
    pub unfinished: bool,
}

/// Total time of the spans of one name in an item (the item's breakdown).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpanTotal {
    pub name: String,
    pub count: u64,
    pub total_ns: u64,
}

/// The events and spans of one item.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ItemEvents {
    /// Instants in time order.
    pub events: Vec<EventRow>,
    /// Spans by begin time.
    pub spans: Vec<SpanRow>,
    /// Span time per name, largest first.
    pub span_totals: Vec<SpanTotal>,
    /// Events over [`MAX_EVENTS_PER_ITEM`] or [`MAX_OPEN_SPANS`], not kept.
    pub dropped: u64,
    /// Span ends with no open span of their name.
    pub unmatched_span_ends: u64,
}

/// The text of an event's arguments: the first, and all of them when two or more.
type ArgTexts = (Option<String>, Vec<String>);

fn arg_texts(e: &ItemEvent) -> ArgTexts {
    let all: Vec<String> = e.args.iter().map(|a| a.to_string()).collect();
    let first = all.first().cloned();
    (first, if all.len() > 1 { all } else { Vec::new() })
}

/// An event's arguments as shown in `--explain`: `a`, or `a, b, c`.
pub fn args_text(arg: &Option<String>, args: &[String]) -> Option<String> {
    if args.len() > 1 {
        Some(args.join(", "))
    } else {
        arg.clone()
    }
}

impl ItemEvents {
    pub fn is_empty(&self) -> bool {
        self.events.is_empty() && self.spans.is_empty() && self.dropped == 0 && self.unmatched_span_ends == 0
    }
}

/// An item's events while it is open.
#[derive(Debug, Default)]
pub(crate) struct EventsAcc {
    done: ItemEvents,
    /// (name, begin, its arguments) of open spans, innermost last.
    open: Vec<(String, u64, ArgTexts)>,
}

impl EventsAcc {
    fn kept(&self) -> usize {
        self.done.events.len() + self.done.spans.len() + self.open.len()
    }

    pub(crate) fn add(&mut self, e: &ItemEvent) {
        let (arg, args) = arg_texts(e);
        match e.kind {
            ItemEventKind::Instant => {
                if self.kept() >= MAX_EVENTS_PER_ITEM {
                    self.done.dropped += 1;
                    return;
                }
                self.done.events.push(EventRow { name: e.name.clone(), time_ns: e.time, arg, args });
            }
            ItemEventKind::SpanStart => {
                if self.kept() >= MAX_EVENTS_PER_ITEM || self.open.len() >= MAX_OPEN_SPANS {
                    self.done.dropped += 1;
                    return;
                }
                self.open.push((e.name.clone(), e.time, (arg, args)));
            }
            ItemEventKind::SpanEnd => match self.open.iter().rposition(|(n, _, _)| *n == e.name) {
                Some(i) => {
                    let (name, begin, start) = self.open.remove(i);
                    let (arg, args) = if start.0.is_some() { start } else { (arg, args) };
                    self.done.spans.push(SpanRow {
                        name,
                        begin_ns: begin,
                        end_ns: e.time.max(begin),
                        duration_ns: e.time.saturating_sub(begin),
                        arg,
                        args,
                        unfinished: false,
                    });
                }
                None => self.done.unmatched_span_ends += 1,
            },
        }
    }

    /// The item ended at `end`: open spans close there; totals per name.
    pub(crate) fn finish(mut self, end: u64) -> ItemEvents {
        for (name, begin, (arg, args)) in self.open.drain(..) {
            self.done.spans.push(SpanRow {
                name,
                begin_ns: begin,
                end_ns: end.max(begin),
                duration_ns: end.saturating_sub(begin),
                arg,
                args,
                unfinished: true,
            });
        }
        let mut d = self.done;
        d.events.sort_by_key(|e| e.time_ns);
        d.spans.sort_by(|a, b| (a.begin_ns, &a.name).cmp(&(b.begin_ns, &b.name)));
        let mut totals: Vec<SpanTotal> = Vec::new();
        for s in &d.spans {
            match totals.iter_mut().find(|t| t.name == s.name) {
                Some(t) => {
                    t.count += 1;
                    t.total_ns += s.duration_ns;
                }
                None => totals.push(SpanTotal { name: s.name.clone(), count: 1, total_ns: s.duration_ns }),
            }
        }
        totals.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.name.cmp(&b.name)));
        d.span_totals = totals;
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailprof_format::EventArg;

    fn ev(time: u64, kind: ItemEventKind, name: &str, arg: Option<EventArg>) -> ItemEvent {
        ItemEvent { time, pid: 1, tid: 1, kind, name: name.into(), args: arg.into_iter().collect(), ..ItemEvent::default() }
    }

    #[test]
    fn spans_pair_by_name_and_are_bounded() {
        let mut a = EventsAcc::default();
        a.add(&ev(10, ItemEventKind::SpanStart, "lock__wait", Some(EventArg::U64(16384))));
        a.add(&ev(12, ItemEventKind::SpanStart, "lwlock__wait", Some(EventArg::Text("WALWrite".into()))));
        a.add(&ev(13, ItemEventKind::SpanEnd, "lwlock__wait", None));
        a.add(&ev(15, ItemEventKind::Instant, "tick", Some(EventArg::I64(-1))));
        a.add(&ev(20, ItemEventKind::SpanEnd, "lock__wait", None));
        a.add(&ev(21, ItemEventKind::SpanEnd, "lock__wait", None));
        a.add(&ev(22, ItemEventKind::SpanStart, "lock__wait", None));
        let d = a.finish(30);
        assert_eq!(d.spans.len(), 3);
        assert_eq!((d.spans[0].name.as_str(), d.spans[0].duration_ns, d.spans[0].arg.as_deref()), ("lock__wait", 10, Some("16384")));
        assert_eq!((d.spans[1].name.as_str(), d.spans[1].duration_ns, d.spans[1].arg.as_deref()), ("lwlock__wait", 1, Some("WALWrite")));
        assert!(d.spans[2].unfinished && d.spans[2].duration_ns == 8);
        assert_eq!(d.unmatched_span_ends, 1);
        assert_eq!(d.events, vec![EventRow { name: "tick".into(), time_ns: 15, arg: Some("-1".into()), args: Vec::new() }]);
        assert_eq!(d.span_totals[0], SpanTotal { name: "lock__wait".into(), count: 2, total_ns: 18 });
        let mut a = EventsAcc::default();
        for t in 0..(MAX_EVENTS_PER_ITEM as u64 + 10) {
            a.add(&ev(t, ItemEventKind::Instant, "x", None));
        }
        let d = a.finish(1000);
        assert_eq!((d.events.len(), d.dropped), (MAX_EVENTS_PER_ITEM, 10));
    }

    /// Several arguments (PostgreSQL's `lock__wait__start(field1..4, type, mode)`): the
    /// span keeps all of the start's, in order; the first stays `arg`.
    #[test]
    fn spans_keep_every_argument() {
        let mut a = EventsAcc::default();
        let mut start = ev(10, ItemEventKind::SpanStart, "lock__wait", None);
        start.args = vec![EventArg::U64(16384), EventArg::U64(0), EventArg::I64(-5)];
        a.add(&start);
        a.add(&ev(20, ItemEventKind::SpanEnd, "lock__wait", Some(EventArg::U64(1))));
        let d = a.finish(30);
        assert_eq!(d.spans[0].arg.as_deref(), Some("16384"));
        assert_eq!(d.spans[0].args, ["16384", "0", "-5"]);
        assert_eq!(args_text(&d.spans[0].arg, &d.spans[0].args).as_deref(), Some("16384, 0, -5"));
        // One argument: `args` stays empty (no key in the JSON: the shape of before).
        let mut a = EventsAcc::default();
        a.add(&ev(1, ItemEventKind::Instant, "tick", Some(EventArg::U64(7))));
        let e = &a.finish(2).events[0];
        assert_eq!((e.arg.as_deref(), e.args.len()), (Some("7"), 0));
    }
}
