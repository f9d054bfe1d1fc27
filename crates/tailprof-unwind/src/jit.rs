//! Unwind information for code that runtimes generate (jitdump UNWINDING_INFO).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use framehop::{ExplicitModuleSectionInfo, Module, Unwinder as _};

use crate::module::Bytes;
use crate::unwinder::Unwinder;

/// Unwind information a runtime published for code it generated: a jitdump's
/// UNWINDING_INFO record (docs/SYMBOLS.md "Code that runtimes generate"), which applies to
/// the CODE_LOAD after it. The runtime encodes the `.eh_frame` (and its `.eh_frame_hdr`)
/// for a layout in which the `.eh_frame` follows the code at `code.start +
/// align8(code length)` and the `.eh_frame_hdr` follows the `.eh_frame` (the layout of
/// `perf inject --jit`'s ELF files); the unwinder places them there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JitUnwind {
    /// The code's address range.
    pub code: Range<u64>,
    /// `.eh_frame` bytes (CIEs and FDEs); empty: the code has no unwind information.
    pub eh_frame: Vec<u8>,
    /// `.eh_frame_hdr` bytes (the binary-search table); may be empty (framehop then
    /// indexes the `.eh_frame` itself).
    pub eh_frame_hdr: Vec<u8>,
}

/// Largest JIT code range given unwind information (framehop's relative addresses are
/// 32-bit).
pub const MAX_JIT_CODE: u64 = 1 << 30;

/// One JIT code range with unwind information, as kept per process.
#[derive(Debug)]
pub(crate) struct JitModule {
    pub(crate) end: u64,
    pub(crate) eh_frame: Bytes,
    pub(crate) eh_frame_hdr: Option<Bytes>,
}

impl JitModule {
    pub(crate) fn bytes(&self) -> usize {
        self.eh_frame.len() + self.eh_frame_hdr.as_ref().map_or(0, |h| h.len())
    }

    /// The framehop module for the code at `start..self.end`: svma = avma, the sections
    /// where the runtime's layout puts them ([`JitUnwind`]).
    pub(crate) fn module(&self, start: u64) -> Module<Bytes> {
        let eh_at = start.wrapping_add((self.end - start).next_multiple_of(8));
        let eh_end = eh_at.wrapping_add(self.eh_frame.len() as u64);
        let hdr_end = eh_end.wrapping_add(self.eh_frame_hdr.as_ref().map_or(0, |h| h.len() as u64));
        let sections = ExplicitModuleSectionInfo {
            base_svma: start,
            text_svma: Some(start..self.end),
            eh_frame_svma: Some(eh_at..eh_end),
            eh_frame: Some(self.eh_frame.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|_| eh_end..hdr_end),
            eh_frame_hdr: self.eh_frame_hdr.clone(),
            ..Default::default()
        };
        Module::new("[jit]".to_owned(), start..self.end, start, sections)
    }
}

/// The JIT code ranges of one process that have unwind information, by start.
#[derive(Debug, Default)]
pub(crate) struct JitTable {
    pub(crate) by_start: BTreeMap<u64, JitModule>,
    pub(crate) bytes: usize,
}

impl JitTable {
    /// Whether `a` is in a range with unwind information.
    pub(crate) fn covers(&self, a: u64) -> bool {
        self.by_start.range(..=a).next_back().is_some_and(|(_, m)| a < m.end)
    }

    /// Removes the ranges overlapping `r`; returns their starts and their bytes.
    pub(crate) fn remove_overlapping(&mut self, r: &Range<u64>) -> (Vec<u64>, usize) {
        let mut gone = Vec::new();
        if let Some((&s, m)) = self.by_start.range(..r.start).next_back() {
            if m.end > r.start {
                gone.push(s);
            }
        }
        gone.extend(self.by_start.range(r.start..r.end).map(|(&s, _)| s));
        let mut bytes = 0;
        for s in &gone {
            if let Some(m) = self.by_start.remove(s) {
                bytes += m.bytes();
            }
        }
        self.bytes -= bytes;
        (gone, bytes)
    }
}
impl Unwinder {
    pub(crate) fn forget_jit(&mut self, pid: u32) {
        if let Some(t) = self.jit.remove(&pid) {
            self.jit_bytes -= t.bytes;
        }
    }

    /// JIT code of `pid` was loaded at `info.code` (a jitdump CODE_LOAD), with the unwind
    /// information of the UNWINDING_INFO record before it, or none (`info.eh_frame`
    /// empty). Unwind information of earlier code that the range overlaps (a reused
    /// address) is dropped either way, so code without its own unwind information is
    /// walked with the frame-pointer fallback, never with another function's rules.
    /// Returns whether the information was kept; refusals over the bounds ([`Limits`](crate::Limits))
    /// are counted (`jit_unwind_refused`). Ignored for a process whose address space is
    /// not known (gone).
    pub fn add_jit(&mut self, pid: u32, info: JitUnwind) -> bool {
        if !self.spaces.knows(pid) || info.code.start >= info.code.end {
            return false;
        }
        let (gone, freed) = self.jit.get_mut(&pid).map(|t| t.remove_overlapping(&info.code)).unwrap_or_default();
        self.jit_bytes -= freed;
        if let Some(p) = self.procs.get_mut(&pid) {
            for s in &gone {
                p.unwinder.remove_module(*s);
            }
        }
        if info.eh_frame.is_empty() {
            return false;
        }
        let m = JitModule {
            end: info.code.end,
            eh_frame: Bytes(Arc::new(info.eh_frame)),
            eh_frame_hdr: (!info.eh_frame_hdr.is_empty()).then(|| Bytes(Arc::new(info.eh_frame_hdr))),
        };
        let t = self.jit.entry(pid).or_default();
        if info.code.end - info.code.start > MAX_JIT_CODE
            || t.by_start.len() >= self.limits.max_jit_modules
            || t.bytes + m.bytes() > self.limits.max_jit_bytes
            || self.jit_bytes + m.bytes() > self.limits.max_jit_total_bytes
        {
            self.stats.jit_unwind_refused += 1;
            return false;
        }
        t.bytes += m.bytes();
        self.jit_bytes += m.bytes();
        if let Some(p) = self.procs.get_mut(&pid) {
            p.unwinder.add_module(m.module(info.code.start));
        }
        t.by_start.insert(info.code.start, m);
        self.stats.jit_unwind_added += 1;
        true
    }

    /// JIT code of `pid` moved from `from` to `to` (a jitdump CODE_MOVE; `size` bytes):
    /// its unwind information (position-independent, laid out after the code) moves with
    /// it. Whatever the new range overlaps is dropped.
    pub fn move_jit(&mut self, pid: u32, from: u64, to: u64, size: u64) {
        let Some(t) = self.jit.get_mut(&pid) else { return };
        let m = match t.by_start.get(&from) {
            Some(m) if m.end.wrapping_sub(from) == size => t.by_start.remove(&from),
            _ => None,
        };
        if let Some(m) = &m {
            t.bytes -= m.bytes();
            self.jit_bytes -= m.bytes();
            if let Some(p) = self.procs.get_mut(&pid) {
                p.unwinder.remove_module(from);
            }
        }
        let Some(end) = to.checked_add(size) else { return };
        let info = match m {
            Some(m) => JitUnwind {
                code: to..end,
                eh_frame: m.eh_frame.to_vec(),
                eh_frame_hdr: m.eh_frame_hdr.map(|h| h.to_vec()).unwrap_or_default(),
            },
            None => JitUnwind { code: to..end, ..Default::default() },
        };
        self.add_jit(pid, info);
    }

    /// Bytes of JIT unwind information kept (all processes).
    pub fn jit_bytes(&self) -> usize {
        self.jit_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{jit_eh_frame, mmap};
    use crate::{open_host_file, Limits, UserRegs};

    /// Issue 23: JIT code with a jitdump UNWINDING_INFO is walked with its CFI (it reaches
    /// the caller the frame pointer would skip); without it (never given, dropped by a
    /// load at the same address, or refused over the bound) the frame-pointer fallback
    /// is used and counted; a move carries the information along; garbage never panics.
    #[test]
    fn jit_unwind_info_reaches_the_caller_and_the_fallback_is_counted() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let (code, other, caller, fp_caller) = (0x10000u64, 0x50000u64, 0x20010u64, 0x30010u64);
        let sp = 0x7000_0000u64;
        let fp = sp + 0x100;
        let mut stack = vec![0u8; 0x200];
        stack[24..32].copy_from_slice(&caller.to_le_bytes()); // [CFA - 8]: return address
        stack[0x108..0x110].copy_from_slice(&fp_caller.to_le_bytes()); // [rbp + 8]
        let walk = |u: &mut Unwinder, ip: u64| {
            let mut out = Vec::new();
            u.unwind(9, &UserRegs { ip, sp, fp, lr: 0 }, &stack, &mut out);
            out.iter().map(|f| f.ip).collect::<Vec<_>>()
        };
        let mut u = Unwinder::new(Box::new(open_host_file), Limits::default());
        u.observe(&mmap(9, code, 0x100000, 0, "//anon", None), None);
        let code_len = 28;
        let info = JitUnwind { code: code..code + code_len, eh_frame: jit_eh_frame(code_len), eh_frame_hdr: Vec::new() };
        assert_eq!(walk(&mut u, code + 17), [code + 17, fp_caller], "no unwind information yet: frame pointers");
        assert_eq!(u.stats().fallback_frames, 2);
        assert!(u.add_jit(9, info.clone()));
        assert_eq!(walk(&mut u, code + 17), [code + 17, caller], "the JIT function's CFI");
        assert_eq!((u.stats().jit_cfi_frames, u.stats().fallback_frames), (1, 3));
        // Moved: the information follows the code.
        u.move_jit(9, code, other, code_len);
        assert_eq!(walk(&mut u, other + 17), [other + 17, caller]);
        assert_eq!(walk(&mut u, code + 17), [code + 17, fp_caller]);
        // A load without information at an overlapping address drops it.
        u.add_jit(9, JitUnwind { code: other + 8..other + 64, ..Default::default() });
        assert_eq!(walk(&mut u, other + 17), [other + 17, fp_caller]);
        assert_eq!(u.jit_bytes(), 0);
        // Garbage as .eh_frame / .eh_frame_hdr: no panic, the fallback.
        for (eh, hdr) in [(vec![0xff; 64], vec![]), (jit_eh_frame(code_len), vec![1, 0x1b, 3, 0x3b, 0xff, 0xff, 0xff, 0x7f, 9, 0, 0, 0])] {
            u.add_jit(9, JitUnwind { code: code..code + code_len, eh_frame: eh, eh_frame_hdr: hdr });
            let frames = walk(&mut u, code + 17);
            assert_eq!(frames[0], code + 17);
        }
        // Bounded: over the per-process bytes, refused and counted.
        let mut u = Unwinder::new(Box::new(open_host_file), Limits { max_jit_bytes: 100, ..Limits::default() });
        u.observe(&mmap(9, code, 0x100000, 0, "//anon", None), None);
        assert!(!u.add_jit(9, JitUnwind { eh_frame: vec![0; 101], ..info.clone() }));
        assert_eq!(u.stats().jit_unwind_refused, 1);
        assert_eq!(walk(&mut u, code + 17), [code + 17, fp_caller]);
        // A process not known (gone): nothing kept.
        assert!(!u.add_jit(10, info));
    }
}
