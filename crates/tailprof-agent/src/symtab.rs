//! Symbolizing a binary once per build-id: every function of its ELF symbol tables
//! (`.symtab`, `.dynsym`) with its file offset and size, demangled, sorted by offset.
//! Queries resolve any offset of that build-id against this table later, whether or
//! not the binary still exists.

use std::ops::ControlFlow;

use blazesym::inspect::source::{Elf, Source};
use blazesym::inspect::Inspector;
use blazesym::SymType;
use tailprof_store::schema::SymbolRow;

/// Functions kept per binary at most (bounds memory for a hostile or huge file).
pub const MAX_SYMBOLS: usize = 2_000_000;

/// The function table of the ELF file at `path` (any path blazesym can open, e.g.
/// `/proc/self/fd/N`). `binary` is the name stored with it.
pub fn symbolize_file(path: &str, build_id: &str, binary: &str) -> Result<Vec<SymbolRow>, String> {
    let inspector = Inspector::new();
    let mut elf = Elf::new(path);
    elf.debug_syms = false;
    let src = Source::Elf(elf);
    let mut rows = Vec::new();
    inspector
        .for_each(&src, |s| {
            if s.sym_type == SymType::Function {
                if let Some(off) = s.file_offset {
                    rows.push(SymbolRow {
                        build_id: build_id.to_string(),
                        binary: binary.to_string(),
                        start: off,
                        size: s.size.unwrap_or(0) as u64,
                        name: tailprof_analyze::symbolize::demangle(&s.name).into_owned(),
                    });
                }
            }
            if rows.len() >= MAX_SYMBOLS {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .map_err(|e| e.to_string())?;
    rows.sort_by(|a, b| {
        (a.start, std::cmp::Reverse(a.size)).cmp(&(b.start, std::cmp::Reverse(b.size)))
    });
    rows.dedup_by(|b, a| a.start == b.start);
    Ok(rows)
}

/// Finds the function containing `offset` in a table sorted by start.
pub fn lookup(rows: &[SymbolRow], offset: u64) -> Option<&SymbolRow> {
    let i = rows.partition_point(|r| r.start <= offset);
    let r = rows.get(i.checked_sub(1)?)?;
    let end = if r.size > 0 {
        r.start.saturating_add(r.size)
    } else {
        rows.get(i).map_or(u64::MAX, |n| n.start)
    };
    (offset < end).then_some(r)
}
