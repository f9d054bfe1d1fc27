//! The streamed symbol tables (`symtab::write_elf_table`) against the whole-table way the
//! agent used before (`symtab::reference_table`, blazesym), on real binaries and on small
//! hand-built ELF files with the properties that broke blazesym (a symbol whose section
//! index is out of bounds, as in librustc_driver.so) or that it skipped (`SHN_XINDEX`).

use std::fs::File;
use std::path::Path;

use tailprof_agent::symtab::{reference_table, write_elf_table, ElfFunctions, SymtabError};

/// Writes `bin`'s table through the agent's streamed path and reads it back.
fn streamed(bin: &Path, out: &Path) -> (Vec<(u64, u64, String)>, u64) {
    let f = File::open(bin).unwrap();
    let t = write_elf_table(&f, "b1d", &bin.display().to_string(), out).unwrap();
    let rows = tailprof_store::read::read_symbols_file(out).unwrap();
    assert_eq!(rows.len() as u64, t.functions);
    assert!(rows.iter().all(|r| r.build_id == "b1d" && r.binary == bin.display().to_string()));
    (rows.into_iter().map(|r| (r.start, r.size, r.name)).collect(), t.skipped)
}

/// Real binaries: this test executable (Rust, full `.symtab`), C/C++ libraries with only
/// `.dynsym` and many aliases, and gcc's `cc1` (27k C++ functions: several row groups).
/// The streamed table equals blazesym's row for row.
#[test]
fn streamed_table_equals_the_blazesym_table_on_real_binaries() {
    let dir = tempfile::tempdir().unwrap();
    let mut bins = vec![std::env::current_exe().unwrap()];
    for p in ["/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/usr/bin/perf"] {
        if Path::new(p).exists() {
            bins.push(p.into());
        }
    }
    // gcc's compiler proper (CI installs gcc)
    let cc1 = std::process::Command::new("gcc").arg("-print-prog-name=cc1").output().ok();
    let cc1 = cc1.map(|o| std::path::PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())).filter(|p| p.is_file());
    bins.extend(cc1.clone());
    let mut multi_group = false;
    for (i, bin) in bins.iter().enumerate() {
        let want = reference_table(&bin.display().to_string()).unwrap();
        let (got, skipped) = streamed(bin, &dir.path().join(format!("{i}.parquet")));
        assert_eq!(skipped, 0, "{}", bin.display());
        assert!(!got.is_empty(), "{}", bin.display());
        if got != want {
            let d = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
            panic!(
                "{}: {} rows streamed, {} by blazesym; first difference at {d}: {:?} vs {:?}",
                bin.display(),
                got.len(),
                want.len(),
                got.get(d),
                want.get(d)
            );
        }
        eprintln!("{}: {} functions", bin.display(), got.len());
        multi_group |= got.len() > tailprof_store::write::SYMBOL_GROUP_ROWS;
    }
    if cc1.is_some() {
        assert!(multi_group, "no binary had more than one row group of functions");
    } else {
        eprintln!("no gcc cc1: row-group boundaries not exercised on a real binary here (tailprof-store's tests cover them)");
    }
}

// --- a small ELF file built by hand ------------------------------------------------

const STT_OBJECT: u8 = 1;
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;
const SHN_ABS: u16 = 0xfff1;
const SHN_XINDEX: u16 = 0xffff;

struct Sym {
    name: &'static str,
    typ: u8,
    shndx: u16,
    value: u64,
    size: u64,
    /// `.symtab_shndx` entry (for `SHN_XINDEX`).
    xindex: u32,
    /// name offset beyond the string table
    bad_name: bool,
}

fn sym(name: &'static str, typ: u8, shndx: u16, value: u64, size: u64) -> Sym {
    Sym { name, typ, shndx, value, size, xindex: 0, bad_name: false }
}

struct Out {
    b: Vec<u8>,
    is64: bool,
}

impl Out {
    fn put(&mut self, at: usize, v: u64, n: usize) {
        if self.b.len() < at + n {
            self.b.resize(at + n, 0);
        }
        let k = n.min(8);
        self.b[at..at + k].copy_from_slice(&v.to_le_bytes()[..k]);
    }
    /// An address-sized field.
    fn word(&mut self, at32: usize, at64: usize, v: u64) {
        if self.is64 {
            self.put(at64, v, 8)
        } else {
            self.put(at32, v, 4)
        }
    }
    fn append(&mut self, data: &[u8]) -> u64 {
        while self.b.len() % 8 != 0 {
            self.b.push(0);
        }
        let at = self.b.len();
        self.b.extend_from_slice(data);
        at as u64
    }
}

fn strtab(names: impl Iterator<Item = &'static str>) -> (Vec<u8>, Vec<u32>) {
    let mut t = vec![0u8];
    let mut offs = Vec::new();
    for n in names {
        offs.push(t.len() as u32);
        t.extend_from_slice(n.as_bytes());
        t.push(0);
    }
    (t, offs)
}

fn symbols(is64: bool, syms: &[Sym], names: &[u32], strsize: usize) -> Vec<u8> {
    let mut o = Out { b: vec![0u8; if is64 { 24 } else { 16 }], is64 };
    for (s, &name) in syms.iter().zip(names) {
        let at = o.b.len();
        let name = if s.bad_name { strsize as u64 + 100 } else { name as u64 };
        o.put(at, name, 4);
        let info = (1 << 4) | s.typ as u64; // STB_GLOBAL
        if is64 {
            o.put(at + 4, info, 1);
            o.put(at + 6, s.shndx as u64, 2);
            o.put(at + 8, s.value, 8);
            o.put(at + 16, s.size, 8);
        } else {
            o.put(at + 4, s.value, 4);
            o.put(at + 8, s.size, 4);
            o.put(at + 12, info, 1);
            o.put(at + 14, s.shndx as u64, 2);
        }
    }
    o.b
}

/// A little-endian shared object: `.text` (file offset 0x1000, address 0x401000), `.bss`,
/// `.symtab` with `.symtab_shndx`, `.dynsym`. With `bad`: a data symbol with section
/// index 48 (librustc_driver.so's `rust_metadata_*`), a function with section index 60,
/// a function through `SHN_XINDEX`, a `.dynsym` name beyond its strings.
fn build_elf(is64: bool, bad: bool) -> Vec<u8> {
    let text = 1u16;
    let mut st = vec![
        sym("b_alias", STT_FUNC, text, 0x401010, 0x10),
        sym("a_alias", STT_FUNC, text, 0x401010, 0x10),
        sym("big", STT_FUNC, text, 0x401040, 0x40),
        sym("small_same_start", STT_FUNC, text, 0x401040, 0x8),
        sym("in_bss", STT_FUNC, 2, 0x402000, 0x10),
        sym("abs_fn", STT_FUNC, SHN_ABS, 0x10, 0),
        sym("undef", STT_FUNC, 0, 0, 0),
        sym("_ZN2ns7computeEi", STT_GNU_IFUNC, text, 0x4010c0, 0x10),
        sym("data_obj", STT_OBJECT, text, 0x4010f0, 0x8),
    ];
    let mut dy = vec![
        sym("dyn_inside", STT_FUNC, text, 0x401050, 4),
        sym("dyn_only", STT_FUNC, text, 0x4010e0, 0x10),
        sym("big_dyn", STT_FUNC, text, 0x401040, 0x40),
    ];
    if bad {
        st.push(sym("rust_metadata_x", STT_OBJECT, 48, 0, 17044));
        st.push(Sym { xindex: 1, ..sym("xfn", STT_FUNC, SHN_XINDEX, 0x401080, 0x20) });
        st.push(sym("badfn", STT_FUNC, 60, 0x401000, 4));
        dy.push(Sym { bad_name: true, ..sym("lost", STT_FUNC, text, 0x4010a0, 4) });
    }
    let mut o = Out { b: vec![0u8; 0x1000], is64 };
    o.b.extend(std::iter::repeat_n(0xc3u8, 0x100)); // .text
    let (strs, st_names) = strtab(st.iter().map(|s| s.name));
    let (dstrs, dy_names) = strtab(dy.iter().map(|s| s.name));
    let symtab = symbols(is64, &st, &st_names, strs.len());
    let dynsym = symbols(is64, &dy, &dy_names, dstrs.len());
    let mut shndx = vec![0u8; 4];
    for s in &st {
        shndx.extend_from_slice(&s.xindex.to_le_bytes());
    }
    let secs = [".text", ".bss", ".symtab", ".strtab", ".symtab_shndx", ".dynsym", ".dynstr", ".shstrtab"];
    let (shstr, sec_names) = strtab(secs.into_iter());
    let symtab_off = o.append(&symtab);
    let strs_off = o.append(&strs);
    let shndx_off = o.append(&shndx);
    let dynsym_off = o.append(&dynsym);
    let dstrs_off = o.append(&dstrs);
    let shstr_off = o.append(&shstr);
    let entsize = if is64 { 24 } else { 16 };
    // (type, addr, offset, size, link, entsize)
    let shdrs: [(u32, u64, u64, u64, u32, u64); 8] = [
        (1, 0x401000, 0x1000, 0x100, 0, 0),
        (8, 0x402000, 0x1100, 0x100, 0, 0),
        (2, 0, symtab_off, symtab.len() as u64, 4, entsize),
        (3, 0, strs_off, strs.len() as u64, 0, 0),
        (18, 0, shndx_off, shndx.len() as u64, 3, 4),
        (11, 0, dynsym_off, dynsym.len() as u64, 7, entsize),
        (3, 0, dstrs_off, dstrs.len() as u64, 0, 0),
        (3, 0, shstr_off, shstr.len() as u64, 0, 0),
    ];
    let shoff = o.append(&[]) as usize;
    let shsz = if is64 { 64 } else { 40 };
    o.put(shoff, 0, shsz); // section 0
    for (i, &(typ, addr, off, size, link, es)) in shdrs.iter().enumerate() {
        let at = shoff + (i + 1) * shsz;
        o.put(at, sec_names[i] as u64, 4);
        o.put(at + 4, typ as u64, 4);
        o.word(at + 12, at + 16, addr);
        o.word(at + 16, at + 24, off);
        o.word(at + 20, at + 32, size);
        o.put(at + if is64 { 40 } else { 24 }, link as u64, 4);
        o.word(at + 32, at + 48, 8);
        o.word(at + 36, at + 56, es);
    }
    // ELF header
    o.b[..4].copy_from_slice(b"\x7fELF");
    o.b[4] = if is64 { 2 } else { 1 };
    o.b[5] = 1; // little-endian
    o.b[6] = 1;
    o.put(16, 3, 2); // ET_DYN
    o.put(18, if is64 { 62 } else { 3 }, 2);
    o.put(20, 1, 4);
    o.word(32, 40, shoff as u64);
    let h = if is64 { 52 } else { 40 };
    o.put(h, if is64 { 64 } else { 52 }, 2); // e_ehsize
    o.put(h + 6, shsz as u64, 2); // e_shentsize
    o.put(h + 8, 9, 2); // e_shnum
    o.put(h + 10, 8, 2); // e_shstrndx
    o.b
}

fn expected(bad: bool) -> Vec<(u64, u64, String)> {
    let mut v = vec![
        (0x1010, 0x10, "a_alias".to_string()),          // aliases: the smaller name
        (0x1040, 0x40, "big".to_string()),              // same start: the larger; .symtab before .dynsym
        (0x10c0, 0x10, "ns::compute(int)".to_string()), // IFUNC, demangled
        (0x10e0, 0x10, "dyn_only".to_string()),         // .dynsym only (dyn_inside is inside big)
    ];
    if bad {
        v.insert(2, (0x1080, 0x20, "xfn".to_string())); // through .symtab_shndx
    }
    v
}

#[test]
fn hand_built_elf_matches_blazesym_and_keeps_its_rules() {
    let dir = tempfile::tempdir().unwrap();
    for is64 in [true, false] {
        let p = dir.path().join(format!("good{is64}.so"));
        std::fs::write(&p, build_elf(is64, false)).unwrap();
        let want = reference_table(&p.display().to_string()).unwrap();
        assert_eq!(want, expected(false), "blazesym, 64-bit {is64}");
        let (got, skipped) = streamed(&p, &dir.path().join(format!("good{is64}.parquet")));
        assert_eq!(got, want, "64-bit {is64}");
        assert_eq!(skipped, 0);
    }
}

/// The property that made librustc_driver.so fail: a symbol (not even a function) whose
/// section index is beyond the section table. blazesym gives up on the whole binary; the
/// streamed reader skips it, counts the one function with such an index and the one
/// name beyond its string table, and follows `SHN_XINDEX`.
#[test]
fn symbol_with_section_index_out_of_bounds_does_not_lose_the_table() {
    let dir = tempfile::tempdir().unwrap();
    for is64 in [true, false] {
        let p = dir.path().join(format!("bad{is64}.so"));
        std::fs::write(&p, build_elf(is64, true)).unwrap();
        let e = reference_table(&p.display().to_string()).unwrap_err();
        assert!(e.to_string().contains("out of bounds"), "{e}");
        let (got, skipped) = streamed(&p, &dir.path().join(format!("bad{is64}.parquet")));
        assert_eq!(got, expected(true), "64-bit {is64}");
        assert_eq!(skipped, 2, "badfn (section 60) and lost (name out of bounds)");
    }
}

/// A file cut short (e.g. truncated by its owner while the agent reads it) is an error,
/// and no table file (nor temporary) is left.
#[test]
fn truncated_file_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let full = build_elf(true, false);
    for cut in [3usize, 40, 0x1000, full.len() - 10] {
        let p = dir.path().join("cut.so");
        std::fs::write(&p, &full[..cut]).unwrap();
        let out = dir.path().join("out").join("cut.parquet");
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let r = write_elf_table(&File::open(&p).unwrap(), "b", "cut.so", &out);
        // The file's fault (damaged ELF), not the store's: the caller can tell them apart.
        assert!(matches!(r, Err(SymtabError::Elf(_))), "cut at {cut}: {r:?}");
        assert_eq!(std::fs::read_dir(out.parent().unwrap()).unwrap().count(), 0, "cut at {cut}");
    }
}

/// librustc_driver.so, where blazesym fails ("ELF section index (48) of symbol at 0x0 out
/// of bounds"): the streamed reader indexes its functions. Runs when a rustup toolchain
/// is installed (skipped with a message otherwise).
#[test]
fn librustc_driver_is_indexed_when_present() {
    let home = std::env::var_os("RUSTUP_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".rustup")));
    let lib =
        home.and_then(|h| {
            std::fs::read_dir(h.join("toolchains")).ok()?.flatten().find_map(|t| {
                std::fs::read_dir(t.path().join("lib")).ok()?.flatten().map(|e| e.path()).find(|p| {
                    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("librustc_driver-") && n.ends_with(".so"))
                })
            })
        });
    let Some(lib) = lib else {
        tailprof_testkit::skip(tailprof_testkit::Need::Fact, "no librustc_driver-*.so under $RUSTUP_HOME/toolchains/*/lib");
        return;
    };
    let f = File::open(&lib).unwrap();
    let idx = ElfFunctions::read(&f).unwrap();
    assert!(idx.len() > 10_000, "{}: {} functions", lib.display(), idx.len());
}
