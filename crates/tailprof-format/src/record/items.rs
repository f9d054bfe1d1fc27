//! Data items: markers (item boundaries), item events and the trace's item classes.

use super::*;

/// Which boundary of a data item (a request, query, packet) a marker records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
#[derive(Default)]
pub enum MarkerKind {
    /// The thread starts working on the item.
    #[default]
    Begin = 0,
    /// The thread is done with the item.
    End = 1,
    /// Labels an item of this thread with `class` (version 2; `--item-class-from`): the
    /// innermost open item if it has no class yet, else, when none is open, the next
    /// item the thread begins. `item` is [`Marker::UNKNOWN_ITEM`].
    Label = 2,
    /// Switch marker (version 5): the thread now works on the already begun item `item`
    /// of its process (an event loop dispatching to it, a task resuming, possibly on
    /// another thread than its begin): samples of the thread go to it until the next
    /// switch, begin or its end.
    Switch = 3,
    /// Switch marker (version 5): the thread now works on no item (back in its event
    /// loop). `item` is the item it leaves, or 0 (informational).
    SwitchNone = 4,
}

/// Where a marker came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[repr(u8)]
pub enum MarkerSource {
    /// The marker API (C header, Rust crate, Python module) through its shared rings.
    #[default]
    Api = 0,
    /// A uprobe on an unmodified binary (`--item-begin` / `--item-end`).
    Uprobe = 1,
}

/// An item boundary on one thread, on the trace clock.
///
/// The join attributes each sample to the item open on its thread at the sample's time.
/// `item` identifies the item; when the end boundary cannot know the id (a uprobe on a
/// function's return), `item` is [`Marker::UNKNOWN_ITEM`] and the end closes the item
/// most recently begun on that thread.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Marker {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub kind: MarkerKind,
    pub item: u64,
    /// Class label id (see [`ItemClass`]), 0 for none.
    pub class: u32,
    pub source: MarkerSource,
}

impl Marker {
    /// `item` value of an end marker that does not know its item's id.
    pub const UNKNOWN_ITEM: u64 = u64::MAX;
}

/// What an [`ItemEvent`] is (`--item-event`, issue 22).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[repr(u8)]
pub enum ItemEventKind {
    /// A point in time.
    #[default]
    Instant = 0,
    /// A span begins (`NAME__start`, or the first probe of `--item-span`).
    SpanStart = 1,
    /// The span of the same name most recently begun on the thread ends.
    SpanEnd = 2,
}

/// A fetched probe argument of an [`ItemEvent`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventArg {
    U64(u64),
    I64(i64),
    /// A string the argument pointed to, cut at [`ItemEvent::MAX_ARG_TEXT`] bytes.
    Text(String),
}

impl std::fmt::Display for EventArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EventArg::U64(v) => write!(f, "{v}"),
            EventArg::I64(v) => write!(f, "{v}"),
            EventArg::Text(t) => f.write_str(t),
        }
    }
}

/// Where an [`ItemEvent`]'s probe sits relative to the item boundaries (FORMAT.md
/// side-band kind 11, an optional trailing field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[repr(u8)]
pub enum EventAt {
    /// Anywhere: the event belongs to the item open on its thread at its time.
    #[default]
    Free = 0,
    /// At a site of the item-begin probe: it belongs to the item that hit begins.
    Begin = 1,
    /// At a site of the item-end probe: it belongs to the item that hit ends.
    End = 2,
}

/// A timestamped event on one thread inside (or outside) an item: a probe hit of
/// `--item-event` (FORMAT.md side-band kind 11). The analysis puts it in the item open
/// on its thread at its time; a `SpanStart`/`SpanEnd` pair of one name becomes a span.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ItemEvent {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub kind: ItemEventKind,
    /// The event's name (a span's name without `__start`/`__done`).
    pub name: String,
    /// The fetched arguments in the order asked for (at most [`ItemEvent::MAX_ARGS`]).
    pub args: Vec<EventArg>,
    /// Whether the probe is also the item's begin or end probe.
    pub at: EventAt,
}

impl ItemEvent {
    /// Longest event name stored, in bytes.
    pub const MAX_NAME: usize = 256;
    /// Longest string argument stored, in bytes.
    pub const MAX_ARG_TEXT: usize = 256;
    /// Most arguments per event.
    pub const MAX_ARGS: usize = 6;
}

/// Declares the name of a class label used by markers of process `pid`
/// (e.g. a query type). Written before the first marker that uses `id`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ItemClass {
    pub time: u64,
    pub pid: u32,
    pub id: u32,
    pub name: String,
}

/// The trace context of an item (OpenTelemetry / W3C trace context): written after the
/// item's begin by the marker runtimes' `item_trace` (docs/MARKERS.md). `item` is the
/// item's id on thread `tid` of `pid` (a begin before it names the same id).
/// Side-band kind 12 (FORMAT.md): readers that do not know it skip it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ItemTrace {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub item: u64,
    /// The 16-byte trace id, in W3C byte order.
    pub trace_id: [u8; 16],
    /// The 8-byte span id, in W3C byte order.
    pub span_id: [u8; 8],
}
