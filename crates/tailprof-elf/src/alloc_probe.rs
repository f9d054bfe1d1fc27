//! Tests only: a global allocator that records the largest allocation each thread makes
//! (tests run in parallel threads), for checking that a malformed file's claims are
//! never allocated. Used by the unit tests (`#[cfg(test)] mod alloc_probe`) and by
//! `tests/elf.rs` (`#[path]`); one test binary holds one global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Biggest;

thread_local! {
    static BIGGEST: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Biggest {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = BIGGEST.try_with(|b| b.set(b.get().max(l.size())));
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let _ = BIGGEST.try_with(|b| b.set(b.get().max(l.size())));
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let _ = BIGGEST.try_with(|b| b.set(b.get().max(new)));
        unsafe { System.realloc(p, l, new) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Biggest = Biggest;

/// Runs `f` and returns its result and the largest allocation it made on this thread.
pub fn biggest_alloc<T>(f: impl FnOnce() -> T) -> (T, usize) {
    BIGGEST.with(|b| b.set(0));
    let r = f();
    (r, BIGGEST.with(Cell::get))
}
