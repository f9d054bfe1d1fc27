//! `tracing` spans as items (feature `tracing`): [`TailprofLayer`], a
//! `tracing_subscriber::Layer` that makes server spans tailprof items (docs/MARKERS.md,
//! "Rust `tracing` spans as items").
//!
//! Which spans: by default root spans (no parent, explicit or contextual) and spans with
//! a field `otel.kind = "server"` (the field `tracing-opentelemetry` reads), plus any span
//! with a `tailprof.item_id` field; [`TailprofLayer::roots`], [`TailprofLayer::server`]
//! and [`TailprofLayer::select`] change that. Class = span name. Item id: the
//! `tailprof.item_id` field (u64), else the span's `span_id` field, else a process-wide
//! counter from 2^63 (so it does not collide with small hand-chosen ids).
//!
//! The item follows the span: the first `on_enter` begins the item (the span's trace
//! context, when its `trace_id`/`span_id` fields carry one, is written right after), every
//! later `on_enter` is a switch to it and every `on_exit` a switch back to the item span
//! entered before on this thread (or to none), and `on_close` ends it. An instrumented
//! future (`fut.instrument(span)`) enters its span at every poll, so a Tokio task that
//! moves between workers stays one item, as with `fut.in_item(..)`.
//!
//! Cost with no recorder: every hook starts with the marker runtime's state check (one
//! load and a not-taken branch) and returns.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::ClassLabel;

/// Class labels are interned by span name; at most this many (the recorder keeps 4096
/// classes per process), later names are items without a class.
const MAX_CLASSES: usize = 4096;
/// Item spans entered at once on one thread that `on_exit` can switch back to; deeper
/// nesting replaces the innermost one remembered.
const MAX_ENTERED: usize = 32;

/// Makes server spans tailprof items; see the module documentation.
/// `tracing_subscriber::registry().with(TailprofLayer::new())`.
#[derive(Clone, Debug)]
pub struct TailprofLayer {
    roots: bool,
    server: bool,
    select: Option<fn(&Metadata<'static>) -> bool>,
}

impl Default for TailprofLayer {
    fn default() -> Self {
        TailprofLayer::new()
    }
}

impl TailprofLayer {
    /// Root spans and `otel.kind = "server"` spans are items.
    pub fn new() -> TailprofLayer {
        TailprofLayer { roots: true, server: true, select: None }
    }

    /// Whether root spans (no parent) are items (default true).
    pub fn roots(mut self, on: bool) -> TailprofLayer {
        self.roots = on;
        self
    }

    /// Whether spans with `otel.kind = "server"` are items (default true).
    pub fn server(mut self, on: bool) -> TailprofLayer {
        self.server = on;
        self
    }

    /// Also make the spans whose metadata `f` accepts items (e.g. by name or target).
    pub fn select(mut self, f: fn(&Metadata<'static>) -> bool) -> TailprofLayer {
        self.select = Some(f);
        self
    }
}

/// Stored in an item span's extensions.
struct SpanItem {
    id: u64,
    class: Option<&'static ClassLabel>,
    trace: Option<([u8; 16], [u8; 8])>,
    begun: AtomicBool,
}

/// The fields the layer reads.
#[derive(Default)]
struct Fields {
    item_id: Option<u64>,
    server: bool,
    trace_id: Option<[u8; 16]>,
    span_id: Option<[u8; 8]>,
}

fn hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let s = s.trim();
    if s.len() != 2 * N || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    // All zero is the W3C "invalid" id.
    out.iter().any(|&b| b != 0).then_some(out)
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "tailprof.item_id" => self.item_id = Some(value),
            "span_id" if value != 0 => self.span_id = Some(value.to_be_bytes()),
            _ => {}
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if value >= 0 {
            self.record_u64(field, value as u64);
        }
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        if field.name() == "trace_id" && value != 0 {
            self.trace_id = Some(value.to_be_bytes());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "otel.kind" => self.server = value.eq_ignore_ascii_case("server"),
            "trace_id" => self.trace_id = hex::<16>(value).or(self.trace_id),
            "span_id" => self.span_id = hex::<8>(value).or(self.span_id),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // `otel.kind = ?SpanKind::Server`, `trace_id = %id` and the like arrive here.
        match field.name() {
            "otel.kind" | "trace_id" | "span_id" => {
                let s = format!("{value:?}");
                self.record_str(field, s.trim_matches('"'));
            }
            _ => {}
        }
    }
}

/// The interned class label of span name `name`.
fn class_of(name: &'static str) -> Option<&'static ClassLabel> {
    static CLASSES: Mutex<Option<HashMap<&'static str, &'static ClassLabel>>> = Mutex::new(None);
    let mut g = CLASSES.lock().unwrap_or_else(|e| e.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    if let Some(c) = map.get(name) {
        return Some(c);
    }
    if map.len() >= MAX_CLASSES {
        return None;
    }
    let cname = CString::new(name.replace('\0', "?")).ok()?;
    // Leaked on purpose: the recorder reads the label by address, once, at any time.
    let label: &'static ClassLabel = Box::leak(Box::new(ClassLabel::new(Box::leak(cname.into_boxed_c_str()))));
    map.insert(name, label);
    Some(label)
}

/// Ids for item spans without `tailprof.item_id` or `span_id`.
static NEXT_ID: AtomicU64 = AtomicU64::new(1 << 63);

/// Item ids of the item spans entered on this thread, innermost last, for the region
/// generation they were entered in: entries of an older recording (a span entered before
/// the recorder finished and exited after) are forgotten, never switched to.
struct Entered {
    gen: u64,
    ids: [u64; MAX_ENTERED],
    n: usize,
}

impl Entered {
    fn current(&mut self) -> &mut Entered {
        let gen = crate::generation();
        if self.gen != gen {
            self.gen = gen;
            self.n = 0;
        }
        self
    }

    fn push(&mut self, id: u64) {
        let e = self.current();
        if e.n < MAX_ENTERED {
            e.ids[e.n] = id;
            e.n += 1;
        } else {
            e.ids[MAX_ENTERED - 1] = id;
        }
    }

    /// Removes the innermost entry of `id` (spans may exit out of order) and returns the
    /// item entered before, if any.
    fn pop(&mut self, id: u64) -> Option<u64> {
        let e = self.current();
        let n = e.n;
        if let Some(i) = e.ids[..n].iter().rposition(|&x| x == id) {
            e.ids.copy_within(i + 1..n, i);
            e.n = n - 1;
        }
        e.n.checked_sub(1).map(|top| e.ids[top])
    }
}

thread_local! {
    static ENTERED: std::cell::RefCell<Entered> =
        const { std::cell::RefCell::new(Entered { gen: 0, ids: [0; MAX_ENTERED], n: 0 }) };
}

impl<S> Layer<S> for TailprofLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if !crate::enabled() {
            return;
        }
        let Some(span) = ctx.span(id) else { return };
        let mut f = Fields::default();
        attrs.record(&mut f);
        let meta = attrs.metadata();
        let item = f.item_id.is_some()
            || (self.roots && span.parent().is_none())
            || (self.server && f.server)
            || self.select.is_some_and(|s| s(meta));
        if !item {
            return;
        }
        let item_id = f.item_id.or(f.span_id.map(u64::from_be_bytes)).unwrap_or_else(|| NEXT_ID.fetch_add(1, Ordering::Relaxed));
        let trace = f.trace_id.zip(f.span_id);
        span.extensions_mut().insert(SpanItem { id: item_id, class: class_of(meta.name()), trace, begun: AtomicBool::new(false) });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if !crate::enabled() {
            return;
        }
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        let Some(item) = ext.get_mut::<SpanItem>() else {
            return;
        };
        if item.trace.is_some() {
            return;
        }
        let mut f = Fields::default();
        values.record(&mut f);
        // Trace ids recorded later (`tracing::field::Empty`, then `span.record`): kept,
        // and written now when the item has begun (the join finds it while it is open).
        if let Some(t) = f.trace_id.zip(f.span_id) {
            item.trace = Some(t);
            if item.begun.load(Ordering::Relaxed) {
                crate::item_trace(item.id, t.0, t.1);
            }
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if !crate::enabled() {
            return;
        }
        let Some(span) = ctx.span(id) else { return };
        let ext = span.extensions();
        let Some(item) = ext.get::<SpanItem>() else {
            return;
        };
        if item.begun.swap(true, Ordering::Relaxed) {
            crate::item_switch(item.id);
        } else {
            match item.class {
                Some(c) => crate::item_begin_class(item.id, c),
                None => crate::item_begin(item.id),
            }
            if let Some((t, s)) = item.trace {
                crate::item_trace(item.id, t, s);
            }
        }
        // The first marker of a process may have found no recorder and turned it off.
        if crate::enabled() {
            let _ = ENTERED.try_with(|e| e.borrow_mut().push(item.id));
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if !crate::enabled() {
            return;
        }
        let Some(span) = ctx.span(id) else { return };
        let ext = span.extensions();
        let Some(item) = ext.get::<SpanItem>() else {
            return;
        };
        let back = ENTERED.try_with(|e| e.borrow_mut().pop(item.id)).ok().flatten();
        match back {
            Some(outer) => crate::item_switch(outer),
            None => crate::item_switch_none(),
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if !crate::enabled() {
            return;
        }
        let Some(span) = ctx.span(&id) else { return };
        let ext = span.extensions();
        if let Some(item) = ext.get::<SpanItem>() {
            if item.begun.load(Ordering::Relaxed) {
                crate::item_end(item.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_ids_parse_like_w3c() {
        assert_eq!(hex::<8>("00f067aa0ba902b7"), Some([0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]));
        assert_eq!(hex::<8>("00F067AA0BA902B7"), Some([0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]));
        assert_eq!(hex::<8>("0000000000000000"), None, "all zero is invalid");
        assert_eq!(hex::<8>("00f067aa0ba902b"), None, "too short");
        assert_eq!(hex::<8>("00f067aa0ba902bx"), None);
        assert_eq!(hex::<8>("+0f067aa0ba902b7"), None, "from_str_radix would take a sign");
        assert!(hex::<16>("4bf92f3577b34da6a3ce929d0e0e4736").is_some());
    }

    #[test]
    fn class_labels_are_interned_by_name() {
        let a = class_of("request").unwrap();
        let b = class_of("request").unwrap();
        assert!(std::ptr::eq(a, b));
        assert_eq!(a.name(), "request");
        assert_eq!(class_of("nul\0name").unwrap().name(), "nul?name");
    }
}
