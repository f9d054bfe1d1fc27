//! Per-item markers for tailprof, in Rust: mark where a thread starts and stops working on
//! a data item (a request, query, packet) so `tailprof items` can say why *this* one was
//! slow.
//!
//! Same protocol as `include/tailprof.h` (docs/MARKERS.md): with no recorder attached a
//! call is one relaxed load and a not-taken branch; enabled, it reads `CLOCK_MONOTONIC`
//! (vDSO) and appends a 32-byte record to this thread's single-producer ring in the
//! recorder's shared-memory region; a full ring is counted, never blocks. The crate
//! exports `#[no_mangle] static tailprof_control`, so `tailprof record -p PID` can enable
//! a server that was started without the recorder. With the `disable` feature every call
//! compiles to nothing and no symbol is exported.
//!
//! ```
//! use tailprof_markers::{item_begin_class, item_end, ClassLabel};
//! static QUERY: ClassLabel = ClassLabel::new(c"query");
//! fn handle(id: u64) {
//!     item_begin_class(id, &QUERY);
//!     // ... work ...
//!     item_end(id);
//! }
//! handle(7);
//! let _g = tailprof_markers::ItemGuard::new(8); // begin now, end on drop
//! ```
//!
//! Async code, where one thread interleaves many items, wraps a request's future with
//! [`InItem::in_item`]: it begins the item at the first poll, marks the item current
//! (a switch marker) at every later poll and the thread free again after every poll, and
//! ends the item when the future completes or is dropped, so a task is one item across
//! awaits and across the threads of any executor:
//!
//! ```
//! use tailprof_markers::{ClassLabel, InItem};
//! static REQUEST: ClassLabel = ClassLabel::new(c"request");
//! async fn serve(id: u64) -> u64 { id * 2 }
//! let fut = serve(7).in_item(7, &REQUEST); // hand `fut` to any executor
//! # drop(fut);
//! ```
//!
//! With the feature `tracing`, [`TailprofLayer`] makes `tracing` spans items (by default
//! root spans and spans with `otel.kind = "server"`), following each span across awaits
//! and threads the same way: `tracing_subscriber::registry().with(TailprofLayer::new())`.

use std::ffi::{c_char, CStr};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

#[cfg(not(feature = "disable"))]
use tailprof_markers_protocol::record::{KIND_BEGIN, KIND_END, KIND_SWITCH, KIND_SWITCH_NONE};

#[cfg(not(feature = "disable"))]
mod runtime;
#[cfg(not(feature = "disable"))]
pub use runtime::{tailprof_control, ControlBlock};

#[cfg(feature = "tracing")]
mod tracing_layer;
#[cfg(feature = "tracing")]
pub use tracing_layer::TailprofLayer;

/// False once the runtime knows that no recorder collects markers (one relaxed load):
/// lets integrations skip their own bookkeeping. True before the first marker decided.
#[cfg(all(feature = "tracing", not(feature = "disable")))]
#[inline(always)]
pub(crate) fn enabled() -> bool {
    runtime::active()
}
#[cfg(all(feature = "tracing", feature = "disable"))]
#[inline(always)]
pub(crate) fn enabled() -> bool {
    false
}
/// The generation of the region markers go to (changes with every attach).
#[cfg(all(feature = "tracing", not(feature = "disable")))]
pub(crate) fn generation() -> u64 {
    runtime::generation()
}
#[cfg(all(feature = "tracing", feature = "disable"))]
pub(crate) fn generation() -> u64 {
    0
}

/// A class label (e.g. a query type) for grouping items that should behave alike. Put it
/// in a `static`: records carry its address and the recorder reads the name once.
#[repr(C, align(8))]
pub struct ClassLabel {
    name: *const c_char,
    file: *const c_char,
    line: u32,
    flags: u32,
}

// SAFETY: the pointers refer to 'static, immutable C strings.
unsafe impl Sync for ClassLabel {}

impl ClassLabel {
    pub const fn new(name: &'static CStr) -> ClassLabel {
        ClassLabel { name: name.as_ptr(), file: std::ptr::null(), line: 0, flags: 0 }
    }

    pub fn name(&self) -> &'static str {
        // SAFETY: built from a &'static CStr in `new`.
        unsafe { CStr::from_ptr(self.name) }.to_str().unwrap_or("?")
    }
}

/// The calling thread starts working on item `id`.
#[inline(always)]
pub fn item_begin(id: u64) {
    #[cfg(not(feature = "disable"))]
    runtime::mark(id, 0, KIND_BEGIN);
    #[cfg(feature = "disable")]
    let _ = id;
}

/// The calling thread starts working on item `id` of class `class`.
#[inline(always)]
pub fn item_begin_class(id: u64, class: &'static ClassLabel) {
    #[cfg(not(feature = "disable"))]
    runtime::mark(id, class as *const ClassLabel as u64, KIND_BEGIN);
    #[cfg(feature = "disable")]
    let _ = (id, class);
}

/// The calling thread is done with item `id`.
#[inline(always)]
pub fn item_end(id: u64) {
    #[cfg(not(feature = "disable"))]
    runtime::mark(id, 0, KIND_END);
    #[cfg(feature = "disable")]
    let _ = id;
}

/// Switch marker: the calling thread now works on item `id`, begun before on any thread
/// (an event loop dispatching to it, a coroutine resuming). One marker.
#[inline(always)]
pub fn item_switch(id: u64) {
    #[cfg(not(feature = "disable"))]
    runtime::mark(id, 0, KIND_SWITCH);
    #[cfg(feature = "disable")]
    let _ = id;
}

/// Switch marker: the calling thread now works on no item (back in its event loop).
#[inline(always)]
pub fn item_switch_none() {
    #[cfg(not(feature = "disable"))]
    runtime::mark(0, 0, KIND_SWITCH_NONE);
}

/// Trace context of item `id`, begun before on this thread: its OpenTelemetry (W3C)
/// trace id and span id, so `tailprof items --trace-id` finds the item. Written only
/// when the recorder reads trace context (docs/MARKERS.md).
#[inline]
pub fn item_trace(id: u64, trace_id: [u8; 16], span_id: [u8; 8]) {
    #[cfg(not(feature = "disable"))]
    runtime::mark_trace(id, trace_id, span_id);
    #[cfg(feature = "disable")]
    let _ = (id, trace_id, span_id);
}

/// Marks an item for its lifetime: begin in `new`, end on drop (on this thread).
#[must_use = "the item ends when the guard is dropped"]
pub struct ItemGuard {
    id: u64,
}

impl ItemGuard {
    #[inline(always)]
    pub fn new(id: u64) -> ItemGuard {
        item_begin(id);
        ItemGuard { id }
    }

    #[inline(always)]
    pub fn with_class(id: u64, class: &'static ClassLabel) -> ItemGuard {
        item_begin_class(id, class);
        ItemGuard { id }
    }
}

impl Drop for ItemGuard {
    #[inline(always)]
    fn drop(&mut self) {
        item_end(self.id);
    }
}

/// A future that is one item: see [`InItem::in_item`].
#[must_use = "futures do nothing unless polled"]
pub struct ItemFuture<F> {
    inner: F,
    id: u64,
    class: Option<&'static ClassLabel>,
    /// 0 not polled yet, 1 begun, 2 ended.
    state: u8,
}

/// Wrap a future so that it is one item: [`InItem::in_item`].
pub trait InItem: Future + Sized {
    /// The returned future begins item `id` of `class` at its first poll, marks it
    /// current ([`item_switch`]) at every later poll and the thread free
    /// ([`item_switch_none`]) when each poll returns, and ends it when the inner future
    /// completes (or is dropped unfinished). Works with any executor, on any thread.
    fn in_item(self, id: u64, class: &'static ClassLabel) -> ItemFuture<Self> {
        ItemFuture { inner: self, id, class: Some(class), state: 0 }
    }

    /// [`InItem::in_item`] without a class.
    fn in_item_unclassed(self, id: u64) -> ItemFuture<Self> {
        ItemFuture { inner: self, id, class: None, state: 0 }
    }
}

impl<F: Future> InItem for F {}

impl<F: Future> Future for ItemFuture<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `inner` is structurally pinned: it is never moved out of `self`; the
        // other fields are plain data.
        let this = unsafe { self.get_unchecked_mut() };
        match this.state {
            0 => {
                match this.class {
                    Some(c) => item_begin_class(this.id, c),
                    None => item_begin(this.id),
                }
                this.state = 1;
            }
            1 => item_switch(this.id),
            _ => {}
        }
        // SAFETY: see above.
        let r = unsafe { Pin::new_unchecked(&mut this.inner) }.poll(cx);
        if this.state == 1 {
            if r.is_ready() {
                item_end(this.id);
                this.state = 2;
            } else {
                item_switch_none();
            }
        }
        r
    }
}

impl<F> Drop for ItemFuture<F> {
    fn drop(&mut self) {
        if self.state == 1 {
            // Cancelled between polls: the item ends here, on the dropping thread.
            item_end(self.id);
        }
    }
}
