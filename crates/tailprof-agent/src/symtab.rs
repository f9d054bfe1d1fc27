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
    // Collected compactly while blazesym's parse is alive; the store's rows (which
    // repeat the build-id and path per function) are built after the parse is dropped,
    // so the two never coexist at the peak.
    let mut funcs: Vec<(u64, u64, Box<str>)> = Vec::new();
    {
        let inspector = Inspector::new();
        let mut elf = Elf::new(path);
        elf.debug_syms = false;
        let src = Source::Elf(elf);
        inspector
            .for_each(&src, |s| {
                if s.sym_type == SymType::Function {
                    if let Some(off) = s.file_offset {
                        funcs.push((off, s.size.unwrap_or(0) as u64, Box::from(&*s.name)));
                    }
                }
                if funcs.len() >= MAX_SYMBOLS {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
            .map_err(|e| e.to_string())?;
    }
    funcs.sort_by_key(|a| (a.0, std::cmp::Reverse(a.1)));
    funcs.dedup_by(|b, a| a.0 == b.0);
    let mut rows = Vec::with_capacity(funcs.len());
    for (start, size, name) in funcs {
        rows.push(SymbolRow {
            build_id: build_id.to_string(),
            binary: binary.to_string(),
            start,
            size,
            name: tailprof_analyze::symbolize::demangle(&name).into_owned(),
        });
    }
    Ok(rows)
}

/// The kernel's text functions from a kallsyms file (`ADDR TYPE NAME [MODULE]`), as
/// offsets from `_text` (so they stay valid across KASLR), module symbols left out.
pub fn kallsyms_rows(f: std::fs::File, build_id: &str, binary: &str) -> Result<Vec<SymbolRow>, String> {
    use std::io::BufRead;
    let mut syms: Vec<(u64, String)> = Vec::new();
    let mut text = None;
    for line in std::io::BufReader::new(f).lines().take(10_000_000).map_while(Result::ok) {
        let mut it = line.split_whitespace();
        let (Some(a), Some(t), Some(name)) = (it.next(), it.next(), it.next()) else { continue };
        if it.next().is_some() || !matches!(t, "t" | "T" | "w" | "W") {
            continue; // a module symbol, or not code
        }
        let Ok(addr) = u64::from_str_radix(a, 16) else { continue };
        if name == "_text" {
            text = Some(addr);
        }
        if syms.len() < MAX_SYMBOLS {
            syms.push((addr, name.chars().take(256).collect()));
        }
    }
    let text = text.filter(|&t| t != 0).ok_or("kallsyms hides addresses (kptr_restrict) or has no _text")?;
    syms.retain(|s| s.0 >= text);
    syms.sort();
    syms.dedup_by(|b, a| a.0 == b.0);
    let mut rows = Vec::with_capacity(syms.len());
    for (i, (addr, name)) in syms.iter().enumerate() {
        let size = syms.get(i + 1).map_or(0, |n| n.0 - addr);
        rows.push(SymbolRow { build_id: build_id.to_string(), binary: binary.to_string(), start: addr - text, size, name: name.clone() });
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kallsyms_offsets_from_text() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kallsyms");
        std::fs::write(
            &p,
            "ffffffff81000000 T _text\nffffffff81000100 t foo\nffffffff81000180 D data\nffffffff81000200 T bar\nffffffffc0000000 t modfn\t[mod]\n",
        )
        .unwrap();
        let rows = kallsyms_rows(std::fs::File::open(&p).unwrap(), "ab", "[kernel.kallsyms]").unwrap();
        let got: Vec<(u64, u64, &str)> = rows.iter().map(|r| (r.start, r.size, r.name.as_str())).collect();
        assert_eq!(got, [(0, 0x100, "_text"), (0x100, 0x100, "foo"), (0x200, 0, "bar")]);
        assert_eq!(lookup(&rows, 0x150).unwrap().name, "foo");
        std::fs::write(&p, "0000000000000000 T _text\n").unwrap();
        assert!(kallsyms_rows(std::fs::File::open(&p).unwrap(), "ab", "k").is_err());
    }
}
