//! Source lines of native code from DWARF line tables (blazesym's code info, asked by
//! the same lookups that name the addresses: [`Symbolizer::symbolize_binary_sources`]).
//!
//! Each address gets two lines ([`AddrSource`]):
//! - `line`: the line of the address in its function's own code (the line table's row
//!   for it; for code inlined into the function, the line of the inlined call, so the
//!   line belongs to the function the flat profile names);
//! - `function`: the function's first line, i.e. the line of its symbol's start address,
//!   found with one more lookup per distinct function (not per address).
//!
//! Binaries without DWARF (and names from `.eh_frame` ranges, the vDSO, the kernel) have
//! no lines. JIT code's lines come from the trace's jitdump line tables instead
//! ([`crate::jit`]); both end up as `file:line` in `tailprof_analyze::resolve`.

use std::ffi::OsStr;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use blazesym::symbolize::source::Source;
use blazesym::symbolize::{CodeInfo, Input, Symbolized};
use rustc_hash::FxHashMap;

/// A file and line of source code.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SourceLine {
    /// The file as the DWARF names it (its directory joined when recorded, `.` and `..`
    /// folded lexically: [`tidy_path`]); shared by the lines of one file.
    pub file: Arc<str>,
    pub line: u32,
}

impl fmt::Display for SourceLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// The source lines of one address (see the module docs); `None` where unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddrSource {
    /// The address's own line.
    pub line: Option<SourceLine>,
    /// The first line of the function holding the address.
    pub function: Option<SourceLine>,
}

/// File names of one batch, made once per (directory, file) of the DWARF.
#[derive(Default)]
struct Files<'a> {
    by_name: FxHashMap<(Option<&'a Path>, &'a OsStr), Arc<str>>,
}

impl<'a> Files<'a> {
    fn line(&mut self, c: &'a CodeInfo<'_>) -> Option<SourceLine> {
        let line = c.line.filter(|&l| l > 0)?;
        let file = self
            .by_name
            .entry((c.dir.as_deref(), c.file.as_ref()))
            .or_insert_with(|| tidy_path(&c.to_path()).to_string_lossy().into())
            .clone();
        Some(SourceLine { file, line })
    }
}

/// `path` with `.` components left out and each `..` folding the name before it
/// (`/src/app/build/../main.c` → `/src/app/main.c`), lexically, for display: compilers
/// record a file as the build saw it (`-I../..`, `cc ../../x.c`), which makes long, hard to
/// read names. A `..` with no name before it stays (a relative path's leading `..`, or
/// none after the root).
pub fn tidy_path(path: &Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out: Vec<Component<'_>> = Vec::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.last() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir) | Some(Component::Prefix(_)) => {}
                _ => out.push(c),
            },
            _ => out.push(c),
        }
    }
    if out.is_empty() {
        return std::path::PathBuf::from(".");
    }
    out.iter().collect()
}

/// Fill `out[i]` for the answers `syms` of the addresses at `idx` (same order), then the
/// functions' first lines with one lookup of the distinct start addresses on `src`.
pub(crate) fn fill_sources(
    inner: &blazesym::symbolize::Symbolizer,
    src: &Source<'_>,
    syms: &[Symbolized<'_>],
    idx: impl Iterator<Item = usize>,
    out: &mut [AddrSource],
) {
    let mut files = Files::default();
    let mut starts: Vec<u64> = Vec::new();
    let mut at: Vec<(usize, u64)> = Vec::new();
    for (i, s) in idx.zip(syms) {
        let Symbolized::Sym(sym) = s else { continue };
        let Some(line) = sym.code_info.as_deref().and_then(|c| files.line(c)) else { continue };
        out[i].line = Some(line);
        at.push((i, sym.addr));
        starts.push(sym.addr);
    }
    if starts.is_empty() {
        return;
    }
    starts.sort_unstable();
    starts.dedup();
    let Ok(answers) = inner.symbolize(src, Input::VirtOffset(&starts)) else { return };
    let mut files = Files::default();
    let first: FxHashMap<u64, SourceLine> = starts
        .iter()
        .zip(&answers)
        .filter_map(|(&a, s)| match s {
            Symbolized::Sym(sym) => sym.code_info.as_deref().and_then(|c| files.line(c)).map(|l| (a, l)),
            Symbolized::Unknown(_) => None,
        })
        .collect();
    for (i, a) in at {
        out[i].function = first.get(&a).cloned();
    }
}

#[cfg(test)]
mod tests {
    use super::tidy_path;
    use std::path::Path;

    #[test]
    fn tidy_path_folds_dot_and_dot_dot_lexically() {
        let t = |p: &str| tidy_path(Path::new(p)).to_string_lossy().into_owned();
        assert_eq!(t("/work/main/crates/tailprof-cli/../../examples/queries.c"), "/work/main/examples/queries.c");
        assert_eq!(t("/src/./a/./b.c"), "/src/a/b.c");
        assert_eq!(t("/../x.c"), "/x.c");
        assert_eq!(t("../../lib/x.c"), "../../lib/x.c");
        assert_eq!(t("a/../../x.c"), "../x.c");
        assert_eq!(t("main.c"), "main.c");
        assert_eq!(t("./"), ".");
    }
}
