//! Inflated copies of separate debug files whose DWARF sections are compressed.
//!
//! Distribution debug files (`libc6-dbg`, `*-dbgsym`) carry zlib-compressed DWARF
//! (`SHF_COMPRESSED`). blazesym inflates every DWARF section of such a file when it
//! first looks an address up in it — libc's is 3.8 MB compressed, 10 MB inflated, ≈ 30
//! ms and 270 M instructions, paid by every `report` of a trace with one libc frame.
//! Instead, the first use writes a copy to the cache directory ([`super::cache`],
//! `debug/BUILDID-IDENTITY.debug`) in which those sections are stored inflated, and
//! blazesym maps that copy: later runs inflate nothing.
//!
//! The copy is the original file unchanged, followed by the inflated sections and a new
//! section header table (the ELF header points at it; compressed sections now point at
//! their inflated bytes). `.debug_loc`/`.debug_loclists` (variable locations) are left
//! out (size 0): names, lines and inline frames do not use them.
//!
//! IDENTITY hashes the original's device, inode, size, mtime and ctime, so a copy only
//! ever stands in for the very file it was made from (not for another file claiming the
//! same build-id). A copy is used only if it is a trusted cache file (ours, 0600, not a
//! symlink) with the expected build-id note; anything else is rebuilt or, failing that,
//! the original is used as before. Copies over [`MAX_COPY`] (512 MiB) are not made; a
//! new copy replaces those of earlier files with its build-id; the directory is kept
//! under [`MAX_DIR`] (1 GiB in all, oldest copies removed first).

use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tailprof_elf::{Elf, SHT_NOBITS};

use super::build_id_hex;
use super::elf::ElfFile;

/// Largest copy made (bytes, original plus inflated sections): libc6-dbg's is 12.7 MB,
/// the largest distro debug files (a browser's, LLVM's) are beyond this and are not copied.
const MAX_COPY: u64 = 512 << 20;
/// Largest total size of the copies kept (a profiler's cache on a production host).
const MAX_DIR: u64 = 1 << 30;
const SHF_COMPRESSED: u64 = 0x800;
const ELFCOMPRESS_ZLIB: u32 = 1;

/// The inflated copy of debug file `dbg` (open, checked) in cache directory `dir`, made
/// now if needed; `None` if `dbg` has no compressed DWARF or anything fails.
pub(crate) fn inflated_copy(dir: &Path, dbg: &ElfFile) -> Option<ElfFile> {
    let build_id = dbg.build_id()?;
    let src = dbg.fd_path();
    let md = fs::metadata(&src).ok()?;
    if !md.is_file() || md.len() > MAX_COPY {
        return None;
    }
    let ident = format!("{}:{}:{}:{}.{}:{}.{}", md.dev(), md.ino(), md.len(), md.mtime(), md.mtime_nsec(), md.ctime(), md.ctime_nsec());
    let name = format!("{}-{:016x}.debug", build_id_hex(&build_id), super::cache::fnv64(ident.as_bytes()));
    let sub = dir.join("debug");
    let path = sub.join(&name);
    if let Some(e) = open_copy(&path, &build_id) {
        return Some(e);
    }
    // Bounded: the file may have grown since its metadata was read.
    let mut bytes = Vec::with_capacity(md.len() as usize);
    fs::File::open(&src).ok()?.take(MAX_COPY + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 != md.len() {
        return None;
    }
    let parts = inflate(&bytes)?;
    super::cache::write(&sub, &name, &[&parts.0, &bytes[64..], &parts.1]).ok()?;
    // Copies of earlier files with this build-id (reinstalled: another identity) go.
    let prefix = format!("{}-", build_id_hex(&build_id));
    if let Ok(rd) = fs::read_dir(&sub) {
        for e in rd.flatten() {
            let n = e.file_name();
            let n = n.to_string_lossy();
            if n.starts_with(&prefix) && n != name.as_str() {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    evict(&sub, &path, MAX_DIR);
    open_copy(&path, &build_id)
}

/// The copy at `path` if it is a trusted cache file with build-id `build_id`.
fn open_copy(path: &Path, build_id: &[u8]) -> Option<ElfFile> {
    let dir_ok = path.parent().and_then(|d| fs::symlink_metadata(d).ok()).is_some_and(|m| {
        // SAFETY: geteuid has no preconditions.
        m.is_dir() && m.uid() == unsafe { libc::geteuid() } && m.mode() & 0o022 == 0
    });
    if !dir_ok {
        return None;
    }
    // ElfFile::open: O_NOFOLLOW, regular files only; then the open file's own metadata.
    let e = ElfFile::open(path).ok()?;
    let md = fs::metadata(e.fd_path()).ok()?;
    (super::cache::trusted_file(&md) && e.build_id().as_deref() == Some(build_id)).then_some(e)
}

/// (new ELF header, tail: inflated sections then section headers) for ELF64 LE file
/// `f`, or `None` if it has no zlib-compressed `.debug_*` section or is not understood.
/// Headers, section names and section bytes are read through [`tailprof_elf`]; only the
/// new section header table is written here (ELF64 LE layout: flags at 8, offset at 24,
/// size at 32, alignment at 48).
fn inflate(f: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let elf = Elf::parse(f).ok()?;
    let (h, c) = (*elf.header(), elf.class());
    if !c.is64 || c.big_endian || h.shentsize != 64 || elf.sections().is_empty() {
        return None;
    }
    let table_len = u64::try_from(elf.sections().len()).ok()?.checked_mul(64)?;
    let mut new_shdrs = elf.read_vec(h.shoff, table_len, table_len).ok()?;
    let mut names = elf.section_names();
    let mut tail: Vec<u8> = Vec::new();
    let base = f.len();
    let mut any = false;
    for (i, s) in elf.sections().iter().enumerate() {
        if s.kind == SHT_NOBITS || s.flags & SHF_COMPRESSED == 0 {
            continue;
        }
        let name = names.get(s.name.into()).ok()??;
        if !name.starts_with(b".debug_") {
            continue;
        }
        let out = &mut new_shdrs[i * 64..i * 64 + 64];
        out[8..16].copy_from_slice(&(s.flags & !SHF_COMPRESSED).to_le_bytes());
        if name == b".debug_loc" || name == b".debug_loclists" {
            out[32..40].copy_from_slice(&0u64.to_le_bytes());
            continue;
        }
        let data = elf.section_data(s, MAX_COPY).ok()?;
        // Elf64_Chdr: type, reserved, size, addralign.
        if data.len() < 24 {
            return None;
        }
        let (ctype, size, align) = (c.u32(&data, 0), c.u64(&data, 8), c.u64(&data, 16).clamp(1, 4096));
        if ctype != ELFCOMPRESS_ZLIB || ((base + tail.len()) as u64).saturating_add(size) > MAX_COPY {
            return None;
        }
        while (base + tail.len()) as u64 % align != 0 {
            tail.push(0);
        }
        let at = base + tail.len();
        let start = tail.len();
        tail.resize(start + size as usize, 0);
        let mut z = flate2::Decompress::new(true);
        let st = z.decompress(&data[24..], &mut tail[start..], flate2::FlushDecompress::Finish).ok()?;
        if st != flate2::Status::StreamEnd || z.total_out() != size {
            return None;
        }
        out[24..32].copy_from_slice(&(at as u64).to_le_bytes());
        out[32..40].copy_from_slice(&size.to_le_bytes());
        out[48..56].copy_from_slice(&align.to_le_bytes());
        any = true;
    }
    if !any {
        return None;
    }
    while (base + tail.len()) % 8 != 0 {
        tail.push(0);
    }
    let new_shoff = (base + tail.len()) as u64;
    tail.extend_from_slice(&new_shdrs);
    let mut head = f.get(..64)?.to_vec();
    head[0x28..0x30].copy_from_slice(&new_shoff.to_le_bytes());
    Some((head, tail))
}

/// Keep `dir` under `max` bytes ([`MAX_DIR`]): remove the oldest copies but `keep`.
fn evict(dir: &Path, keep: &Path, max: u64) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    let mut files: Vec<(i64, u64, std::path::PathBuf)> = rd
        .flatten()
        .filter_map(|e| {
            let md = e.metadata().ok()?;
            md.is_file().then(|| (md.mtime(), md.len(), e.path()))
        })
        .collect();
    let mut total: u64 = files.iter().map(|f| f.1).fold(0, u64::saturating_add);
    files.sort();
    for (_, len, p) in files {
        if total <= max {
            break;
        }
        if p != keep && fs::remove_file(&p).is_ok() {
            total = total.saturating_sub(len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF with a zlib-compressed `.debug_info`, made by the toolchain when present.
    fn compressed_elf(dir: &Path) -> Option<std::path::PathBuf> {
        let src = dir.join("t.c");
        fs::write(&src, "static int helper(int x) { return x * 3; }\nint main(int c, char **v) { return helper(c); }\n").ok()?;
        let out = dir.join("t");
        let ok = std::process::Command::new("gcc")
            .args(["-g", "-O1", "-gz=zlib", "-Wl,--build-id", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .ok()?
            .success();
        ok.then_some(out)
    }

    #[test]
    fn copy_has_inflated_sections_and_is_reused_and_checked() {
        let d = tempfile::tempdir().unwrap();
        let Some(bin) = compressed_elf(d.path()) else {
            tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, "gcc -gz=zlib cannot build the test program");
            return;
        };
        let orig = ElfFile::open(&bin).unwrap();
        let cache = d.path().join("cache");
        let copy = inflated_copy(&cache, &orig).expect("a copy");
        assert_eq!(copy.build_id(), orig.build_id());
        // The copy's .debug_info is plain DWARF now (readelf agrees when installed).
        let cp = copy.fd_path();
        let bytes = fs::read(&cp).unwrap();
        let (head, tail) = inflate(&fs::read(&bin).unwrap()).unwrap();
        assert_eq!(bytes.len(), head.len() + fs::metadata(&bin).unwrap().len() as usize - 64 + tail.len());
        assert!(inflate(&bytes).is_none(), "nothing compressed is left");
        let files: Vec<_> = fs::read_dir(cache.join("debug")).unwrap().flatten().map(|e| e.path()).collect();
        assert_eq!(files.len(), 1);
        let mtime = fs::metadata(&files[0]).unwrap().modified().unwrap();
        // Second use: the same file, not rewritten.
        let again = inflated_copy(&cache, &orig).unwrap();
        assert_eq!(again.build_id(), orig.build_id());
        assert_eq!(fs::metadata(&files[0]).unwrap().modified().unwrap(), mtime);
        // A corrupted copy (wrong build-id, or not ELF) is replaced, a symlink is not
        // followed.
        fs::write(&files[0], b"garbage").unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&files[0], fs::Permissions::from_mode(0o600)).unwrap();
        assert!(inflated_copy(&cache, &orig).is_some());
        assert!(fs::read(&files[0]).unwrap().starts_with(b"\x7fELF"));
        fs::remove_file(&files[0]).unwrap();
        std::os::unix::fs::symlink(&bin, &files[0]).unwrap();
        let c = inflated_copy(&cache, &orig).unwrap();
        assert!(!fs::symlink_metadata(&files[0]).unwrap().file_type().is_symlink(), "replaced by a file");
        assert_eq!(c.build_id(), orig.build_id());
        // Nothing compressed: no copy.
        assert!(inflated_copy(&cache, &c).is_none());
        // The original replaced (another identity, same build-id): a new copy, the old
        // one removed.
        let tmp = d.path().join("t.new");
        fs::copy(&bin, &tmp).unwrap();
        fs::rename(&tmp, &bin).unwrap();
        let orig2 = ElfFile::open(&bin).unwrap();
        assert!(inflated_copy(&cache, &orig2).is_some());
        let now: Vec<_> = fs::read_dir(cache.join("debug")).unwrap().flatten().map(|e| e.path()).collect();
        assert_eq!(now.len(), 1);
        assert_ne!(now[0], files[0]);
    }

    #[test]
    fn eviction_removes_the_oldest_copies_but_the_new_one() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let now = std::time::SystemTime::now();
        for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
            let p = dir.join(name);
            fs::write(&p, vec![0u8; 1000]).unwrap();
            let t = now - std::time::Duration::from_secs(1000 - 100 * i as u64);
            fs::File::options().write(true).open(&p).unwrap().set_modified(t).unwrap();
        }
        // "a" is the oldest but the one just made: kept; then the oldest others go.
        evict(dir, &dir.join("a"), 2500);
        let mut left: Vec<_> = fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["a", "d"]);
        const { assert!(MAX_COPY <= 512 << 20 && MAX_DIR <= 1 << 30 && MAX_COPY < MAX_DIR) };
    }

    #[test]
    fn malformed_files_are_not_copied_and_never_panic() {
        let d = tempfile::tempdir().unwrap();
        let Some(bin) = compressed_elf(d.path()) else {
            tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, "gcc -gz=zlib cannot build the test program");
            return;
        };
        let orig = fs::read(&bin).unwrap();
        assert!(inflate(&orig).is_some());
        for n in [0, 4, 6, 63, 64, orig.len() / 2, orig.len() - 1] {
            let _ = inflate(&orig[..n]);
        }
        // Every header byte and a sample of the section table set to extreme values.
        let shoff = Elf::parse(orig.as_slice()).unwrap().header().shoff as usize;
        let spots = (0..64).chain((shoff..orig.len()).step_by(5));
        for at in spots {
            for v in [0u8, 0x7f, 0xff] {
                let mut m = orig.clone();
                m[at] = v;
                let _ = inflate(&m);
            }
        }
        // Big-endian or 32-bit: not understood, no copy.
        let mut m = orig.clone();
        m[5] = 2;
        assert!(inflate(&m).is_none());
    }

    /// Inline frames from a separate debug file with compressed DWARF are the same
    /// through the inflated copy (made, then reused) as through blazesym's own inflation.
    #[test]
    fn frames_through_the_copy_equal_frames_without_it() {
        use crate::maps::{Binary, BinaryKind};
        use crate::{Symbolizer, SymbolizerOptions};
        use std::process::Command;
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("p.c");
        fs::write(
            &src,
            "volatile int sink;\n\
             static inline __attribute__((always_inline)) int clamp_add(int a, int b) { int s = a + b; if (s > 1000) s = 1000; sink = s; return s; }\n\
             __attribute__((noinline)) int work(int n) { int t = 0; for (int i = 0; i < n; i++) t = clamp_add(t, i * sink); return t; }\n\
             int main(int c, char **v) { return work(c * 100); }\n",
        )
        .unwrap();
        let bin = d.path().join("p");
        let run = |c: &mut Command| c.status().map(|s| s.success()).unwrap_or(false);
        if !run(Command::new("gcc").args(["-g", "-O2", "-Wl,--build-id", "-o"]).arg(&bin).arg(&src)) {
            tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, "gcc cannot build the test program");
            return;
        }
        let id = ElfFile::open(&bin).unwrap().build_id().unwrap();
        let dd = d.path().join("dbg");
        let dbg = crate::debugdir::build_id_paths(&dd, &id).remove(0);
        fs::create_dir_all(dbg.parent().unwrap()).unwrap();
        let ok = run(Command::new("objcopy").args(["--only-keep-debug", "--compress-debug-sections=zlib"]).arg(&bin).arg(&dbg))
            && run(Command::new("strip").arg("-g").arg(&bin));
        if !ok {
            tailprof_testkit::skip(tailprof_testkit::Need::Binutils, "objcopy --compress-debug-sections or strip failed");
            return;
        }
        // work's file offsets (non-PIE or PIE: symbol value = offset in the first segment).
        let nm = Command::new("nm").arg("-S").arg(&dbg).output().unwrap();
        let text = String::from_utf8_lossy(&nm.stdout).into_owned();
        let Some((start, size)) = text.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && f[3] == "work").then(|| (u64::from_str_radix(f[0], 16).unwrap(), u64::from_str_radix(f[1], 16).unwrap()))
        }) else {
            return;
        };
        let offsets: Vec<u64> = (start..start + size).collect();
        let b = Binary { path: bin.to_str().unwrap().into(), build_id: None, kind: BinaryKind::File };
        let cache = d.path().join("cache");
        let frames = |cache_dir: Option<std::path::PathBuf>| {
            let mut s = Symbolizer::new(SymbolizerOptions { debug_dirs: Some(vec![dd.clone()]), cache_dir, ..Default::default() });
            let f = s.frames(&b, None, &offsets);
            f.into_iter()
                .map(|r| r.map(|v| v.iter().map(|f| (s.name(f.name).to_owned(), f.inlined)).collect::<Vec<_>>()))
                .collect::<Vec<_>>()
        };
        let plain = frames(None);
        assert!(plain.iter().flatten().any(|v| v.len() == 2 && v[0] == ("clamp_add".to_owned(), true) && v[1].0 == "work"), "{plain:?}");
        assert_eq!(frames(Some(cache.clone())), plain, "copy made");
        assert_eq!(fs::read_dir(cache.join("debug")).unwrap().count(), 1);
        assert_eq!(frames(Some(cache.clone())), plain, "copy reused");
    }
}
