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

use std::ffi::{c_char, CStr};

#[cfg(not(feature = "disable"))]
mod runtime;
#[cfg(not(feature = "disable"))]
pub use runtime::{tailprof_control, ControlBlock};

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
    runtime::mark(id, 0, 0);
    #[cfg(feature = "disable")]
    let _ = id;
}

/// The calling thread starts working on item `id` of class `class`.
#[inline(always)]
pub fn item_begin_class(id: u64, class: &'static ClassLabel) {
    #[cfg(not(feature = "disable"))]
    runtime::mark(id, class as *const ClassLabel as u64, 0);
    #[cfg(feature = "disable")]
    let _ = (id, class);
}

/// The calling thread is done with item `id`.
#[inline(always)]
pub fn item_end(id: u64) {
    #[cfg(not(feature = "disable"))]
    runtime::mark(id, 0, 1);
    #[cfg(feature = "disable")]
    let _ = id;
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
