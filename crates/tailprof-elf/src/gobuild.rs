//! Go binaries: the build information the Go linker writes into `.go.buildinfo`
//! (issue 22 part 4). tailprof only needs to know that a binary is Go (its functions use
//! goroutine stacks the runtime moves, so a uretprobe must not be used, and the current
//! goroutine is in R14 on amd64) and, for messages, its Go version.
//!
//! Layout read (bounded: at most [`MAX_BUILDINFO_READ`] bytes of the section): 14 bytes of
//! magic `\xff Go buildinf:`, the pointer size, a flags byte; with flag bit 1 (Go 1.18+)
//! the version follows at offset 32 as a uvarint length and the bytes. Older layouts
//! (pointers to the version string) are still Go; their version is `None`.

use crate::{Elf, ReadAt, Result};

/// The section's magic.
pub const GO_BUILDINFO_MAGIC: &[u8; 14] = b"\xff Go buildinf:";
/// Bytes of `.go.buildinfo` read at most.
pub const MAX_BUILDINFO_READ: u64 = 32 + 10 + 64;
/// Longest version string accepted (`go1.26.8`, `devel go1.27-abcdef ...`).
const MAX_VERSION: usize = 64;

/// What a Go binary's build information says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoBuildInfo {
    /// Pointer size in bytes (4 or 8).
    pub ptr_size: u8,
    /// The toolchain version (`go1.26.8`) when the section holds it inline.
    pub version: Option<String>,
}

impl GoBuildInfo {
    /// Parse the start of a `.go.buildinfo` section; `None` when the magic is not there.
    pub fn parse(b: &[u8]) -> Option<GoBuildInfo> {
        if b.len() < 16 || &b[..14] != GO_BUILDINFO_MAGIC {
            return None;
        }
        let ptr_size = b[14];
        let flags = b[15];
        let version = (flags & 2 != 0)
            .then(|| {
                let rest = b.get(32..)?;
                let (len, used) = uvarint(rest)?;
                let len = usize::try_from(len).ok().filter(|&l| l > 0 && l <= MAX_VERSION)?;
                let s = rest.get(used..used.checked_add(len)?)?;
                std::str::from_utf8(s).ok().map(str::to_owned)
            })
            .flatten();
        Some(GoBuildInfo { ptr_size, version })
    }

    /// `(major, minor)` of a `goMAJOR.MINOR[.PATCH]` version.
    pub fn major_minor(&self) -> Option<(u32, u32)> {
        let v = self.version.as_deref()?;
        let v = v.split_whitespace().find_map(|w| w.strip_prefix("go"))?;
        let mut it = v.split(['.', '-', 'r', 'b']);
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    }
}

fn uvarint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &x) in b.iter().enumerate().take(10) {
        v |= u64::from(x & 0x7f) << (7 * i);
        if x & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

impl<R: ReadAt> Elf<R> {
    /// The Go build information when this is a Go binary (a `.go.buildinfo` section with
    /// the magic), `None` otherwise.
    pub fn go_build_info(&self) -> Result<Option<GoBuildInfo>> {
        let Some((_, s)) = self.section_by_name(b".go.buildinfo")? else {
            return Ok(None);
        };
        if !s.has_data() {
            return Ok(None);
        }
        let n = s.size.min(MAX_BUILDINFO_READ);
        let b = self.read_vec(s.offset, n, MAX_BUILDINFO_READ)?;
        Ok(GoBuildInfo::parse(&b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(flags: u8, version: &[u8]) -> Vec<u8> {
        let mut b = GO_BUILDINFO_MAGIC.to_vec();
        b.extend([8, flags]);
        b.resize(32, 0);
        b.push(version.len() as u8);
        b.extend(version);
        b
    }

    #[test]
    fn parses_inline_version() {
        let g = GoBuildInfo::parse(&section(2, b"go1.26.8")).unwrap();
        assert_eq!(g.ptr_size, 8);
        assert_eq!(g.version.as_deref(), Some("go1.26.8"));
        assert_eq!(g.major_minor(), Some((1, 26)));
        // Pre-1.18 layout: still Go, version unknown.
        let old = GoBuildInfo::parse(&section(0, b"")).unwrap();
        assert_eq!((old.major_minor(), old.version), (None, None));
        assert_eq!(GoBuildInfo::parse(&section(2, b"go1.16")).unwrap().major_minor(), Some((1, 16)));
    }

    #[test]
    fn rejects_other_bytes_and_damage() {
        assert_eq!(GoBuildInfo::parse(b"\xff Go buildinf"), None);
        assert_eq!(GoBuildInfo::parse(&[0u8; 64]), None);
        // Cut anywhere: never a panic; a cut version is None.
        let full = section(2, b"go1.26.8");
        for n in 0..full.len() {
            let _ = GoBuildInfo::parse(&full[..n]);
        }
        assert_eq!(GoBuildInfo::parse(&full[..36]).unwrap().version, None);
        // A length past any sane version.
        let mut long = section(2, b"");
        long[32] = 0xff;
        long.push(0x7f);
        assert_eq!(GoBuildInfo::parse(&long).unwrap().version, None);
    }
}
