//! The bounded ELF reader on real binaries (a small C program built with gcc when gcc is
//! installed, this test executable), on hand-built files of every class and byte order,
//! and on malformed files: each malformed one is an `Err` (or a `None` name), never a
//! panic and never a large allocation (a counting allocator records this thread's
//! largest allocation).

use std::path::PathBuf;

use tailprof_elf::*;

// --- the largest allocation of this thread (the crate's test allocator) ---------------

#[path = "../src/alloc_probe.rs"]
mod alloc_probe;
use alloc_probe::biggest_alloc;

// --- helpers --------------------------------------------------------------------------

/// Everything a user could ask of a file, with every error swallowed: headers, names,
/// program headers, both symbol tables (at most `max_syms` symbols each) with names.
fn walk<R: ReadAt>(elf: &Elf<R>, max_syms: usize) -> usize {
    let mut n = 0;
    let _ = elf.section_by_name(b".text");
    let mut names = elf.section_names();
    for s in elf.sections() {
        n += names.get(s.name.into()).ok().flatten().map_or(0, |v| v.len());
        let _ = elf.section_data(s, 1 << 16);
    }
    if let Ok(ph) = elf.program_headers() {
        n += ph.take(1000).filter(|p| p.is_ok()).count();
    }
    for kind in [SHT_SYMTAB, SHT_DYNSYM] {
        let Ok(Some(t)) = elf.symbol_table(kind) else { continue };
        let mut strs = elf.strings(&t);
        for s in elf.symbols(&t).take(max_syms) {
            let Ok(s) = s else { break };
            let _ = s.section();
            n += strs.get(s.name.into()).ok().flatten().map_or(0, |v| v.len());
        }
        let _ = elf.symbol(&t, t.len() / 2);
        let _ = elf.symbol(&t, t.len());
    }
    n
}

/// Symbol names of the first table of `kind` with their symbols.
fn symbols<R: ReadAt>(elf: &Elf<R>, kind: u32) -> Vec<(String, Symbol)> {
    let Some(t) = elf.symbol_table(kind).unwrap() else { return Vec::new() };
    let mut strs = elf.strings(&t);
    let mut out = Vec::new();
    for s in elf.symbols(&t) {
        let s = s.unwrap();
        let name = strs.get(s.name.into()).unwrap().map(|n| String::from_utf8_lossy(n).into_owned()).unwrap_or_default();
        out.push((name, s));
    }
    assert_eq!(out.len() as u64, t.len());
    out
}

/// A small C program built with gcc (None without gcc).
fn c_program(dir: &std::path::Path) -> Option<PathBuf> {
    let src = dir.join("probe.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n__attribute__((noinline)) int tailprof_elf_probe(int x) { return x * 3 + 1; }\n\
         int main(int c, char **v) { printf(\"%d\\n\", tailprof_elf_probe(c)); return 0; }\n",
    )
    .unwrap();
    let out = dir.join("probe");
    let ok = std::process::Command::new("gcc").args(["-O1", "-g0", "-o"]).arg(&out).arg(&src).status().is_ok_and(|s| s.success());
    ok.then_some(out)
}

// --- real binaries ---------------------------------------------------------------------

#[test]
fn real_c_program_sections_symbols_and_segments() {
    let dir = tempfile::tempdir().unwrap();
    let Some(bin) = c_program(dir.path()) else {
        tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, "no gcc (the test executable is still read by the next test)");
        return;
    };
    let f = std::fs::File::open(&bin).unwrap();
    let elf = Elf::parse(&f).unwrap();
    assert!(elf.class().is64 == cfg!(target_pointer_width = "64"));
    assert_eq!(elf.class().big_endian, cfg!(target_endian = "big"));
    let (text_idx, text) = elf.section_by_name(b".text").unwrap().expect(".text");
    assert!(text.has_data());
    assert!(elf.section_by_name(b".no_such_section").unwrap().is_none());
    let syms = symbols(&elf, SHT_SYMTAB);
    let (_, probe) = syms.iter().find(|(n, _)| n == "tailprof_elf_probe").expect("the probe function in .symtab");
    assert_eq!(probe.kind(), STT_FUNC);
    assert_eq!(probe.section(), SymbolSection::Index(text_idx as u32));
    assert!(probe.value >= text.addr && probe.value < text.addr + text.size);
    // .dynsym: printf is imported (undefined)
    let dynsyms = symbols(&elf, SHT_DYNSYM);
    let printf = dynsyms.iter().find(|(n, _)| n == "printf" || n == "__printf_chk").expect("printf in .dynsym");
    assert_eq!(printf.1.section(), SymbolSection::Undefined);
    // random access agrees with the stream
    let t = elf.symbol_table(SHT_SYMTAB).unwrap().unwrap();
    assert_eq!(elf.symbol(&t, probe.index).unwrap(), *probe);
    // the probe's code lies in a PT_LOAD segment, and its bytes are where it says
    let loads: Vec<ProgramHeader> = elf.program_headers().unwrap().map(Result::unwrap).filter(|p| p.kind == PT_LOAD).collect();
    let seg = loads.iter().find(|p| probe.value >= p.vaddr && probe.value < p.vaddr + p.filesz).expect("segment");
    let off = probe.value - seg.vaddr + seg.offset;
    let code = elf.read_vec(off, 4, 16).unwrap();
    let text_bytes = elf.section_data(&text, 1 << 24).unwrap();
    let at = (probe.value - text.addr) as usize;
    assert_eq!(code, text_bytes[at..at + 4]);
    // nm agrees on the function's address
    if let Ok(o) = std::process::Command::new("nm").arg(&bin).output() {
        let out = String::from_utf8_lossy(&o.stdout);
        if let Some(l) = out.lines().find(|l| l.ends_with(" tailprof_elf_probe")) {
            assert_eq!(u64::from_str_radix(l.split(' ').next().unwrap(), 16).unwrap(), probe.value, "{l}");
        }
    }
}

#[test]
fn this_test_executable_streams_in_fixed_memory() {
    let exe = std::env::current_exe().unwrap();
    let f = std::fs::File::open(&exe).unwrap();
    let (n, biggest) = biggest_alloc(|| {
        let elf = Elf::parse(&f).unwrap();
        let t = elf.symbol_table(SHT_SYMTAB).unwrap().expect(".symtab");
        let mut strs = elf.strings(&t);
        let mut named = 0u64;
        for s in elf.symbols(&t) {
            let s = s.unwrap();
            if strs.get(s.name.into()).unwrap().is_some_and(|n| !n.is_empty()) {
                named += 1;
            }
        }
        assert!(named > 1000, "{named} named symbols");
        t.len()
    });
    let len = f.metadata().unwrap().len();
    assert!(n > 1000);
    // the symbol table is much larger than anything allocated while streaming it
    assert!(biggest <= 256 << 10, "largest allocation {biggest} bytes (file {len} bytes)");
}

// --- hand-built files -------------------------------------------------------------------

/// A minimal relocatable-like ELF: sections null, .text, .symtab, .strtab, .shstrtab and
/// two function symbols (`alpha` at 0x10, `beta` at 0x20, in .text).
fn tiny(is64: bool, be: bool) -> Vec<u8> {
    let c = Class { is64, big_endian: be };
    let put = |b: &mut Vec<u8>, at: usize, v: u64, n: usize| {
        if b.len() < at + n {
            b.resize(at + n, 0);
        }
        let bytes = if be { v.to_be_bytes()[8 - n..].to_vec() } else { v.to_le_bytes()[..n].to_vec() };
        b[at..at + n].copy_from_slice(&bytes);
    };
    let w = if is64 { 8 } else { 4 };
    let mut b = vec![0u8; if is64 { 64 } else { 52 }];
    b.resize(0x40, 0);
    let text_off = 0x40;
    b.extend(std::iter::repeat_n(0x90u8, 0x40));
    let strtab = b"\0alpha\0beta\0".to_vec();
    let shstr = b"\0.text\0.symtab\0.strtab\0.shstrtab\0".to_vec();
    let symtab_off = b.len();
    let ssz = c.symbol_size();
    let mut syms = vec![0u8; ssz * 3];
    for (i, (name, value)) in [(1u64, 0x10u64), (7, 0x20)].into_iter().enumerate() {
        let at = (i + 1) * ssz;
        put(&mut syms, at, name, 4);
        if is64 {
            syms[at + 4] = 0x12; // GLOBAL FUNC
            put(&mut syms, at + 6, 1, 2);
            put(&mut syms, at + 8, value, 8);
            put(&mut syms, at + 16, 8, 8);
        } else {
            put(&mut syms, at + 4, value, 4);
            put(&mut syms, at + 8, 8, 4);
            syms[at + 12] = 0x12;
            put(&mut syms, at + 14, 1, 2);
        }
    }
    b.extend(&syms);
    let strtab_off = b.len();
    b.extend(&strtab);
    let shstr_off = b.len();
    b.extend(&shstr);
    while b.len() % 8 != 0 {
        b.push(0);
    }
    let shoff = b.len();
    let shsz = c.section_header_size();
    // (name, type, offset, size, link, entsize)
    let secs: [(u64, u32, usize, usize, u32, usize); 5] = [
        (0, 0, 0, 0, 0, 0),
        (1, SHT_PROGBITS, text_off, 0x40, 0, 0),
        (7, SHT_SYMTAB, symtab_off, syms.len(), 3, ssz),
        (15, SHT_STRTAB, strtab_off, strtab.len(), 0, 0),
        (23, SHT_STRTAB, shstr_off, shstr.len(), 0, 0),
    ];
    for (i, &(name, kind, off, size, link, es)) in secs.iter().enumerate() {
        let at = shoff + i * shsz;
        put(&mut b, at, name, 4);
        put(&mut b, at + 4, u64::from(kind), 4);
        let (addr_at, off_at, size_at, link_at, es_at) = if is64 { (16, 24, 32, 40, 56) } else { (12, 16, 20, 24, 36) };
        put(&mut b, at + addr_at, 0, w);
        put(&mut b, at + off_at, off as u64, w);
        put(&mut b, at + size_at, size as u64, w);
        put(&mut b, at + link_at, u64::from(link), 4);
        put(&mut b, at + es_at, es as u64, w);
    }
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = if is64 { 2 } else { 1 };
    b[5] = if be { 2 } else { 1 };
    b[6] = 1;
    put(&mut b, 16, 1, 2); // ET_REL
    put(&mut b, if is64 { 40 } else { 32 }, shoff as u64, w);
    let h = if is64 { 52 } else { 40 };
    put(&mut b, h, if is64 { 64 } else { 52 }, 2);
    put(&mut b, h + 6, shsz as u64, 2);
    put(&mut b, h + 8, secs.len() as u64, 2);
    put(&mut b, h + 10, 4, 2);
    b
}

/// Offset of the e_shoff/e_shnum/... fields for a class.
fn field(is64: bool, name: &str) -> (usize, usize) {
    let h = if is64 { 52 } else { 40 };
    match name {
        "shoff" => (if is64 { 40 } else { 32 }, if is64 { 8 } else { 4 }),
        "shentsize" => (h + 6, 2),
        "shnum" => (h + 8, 2),
        "shstrndx" => (h + 10, 2),
        _ => unreachable!(),
    }
}

fn set(b: &mut [u8], be: bool, (at, n): (usize, usize), v: u64) {
    let bytes = if be { v.to_be_bytes()[8 - n..].to_vec() } else { v.to_le_bytes()[..n].to_vec() };
    b[at..at + n].copy_from_slice(&bytes);
}

fn section_header_at(b: &[u8], is64: bool, be: bool, i: usize) -> usize {
    let c = Class { is64, big_endian: be };
    let (at, _) = field(is64, "shoff");
    let shoff = c.word(b, at, at) as usize;
    shoff + i * c.section_header_size()
}

#[test]
fn every_class_and_byte_order() {
    for is64 in [false, true] {
        for be in [false, true] {
            let b = tiny(is64, be);
            let elf = Elf::parse(b.clone()).unwrap();
            assert_eq!(elf.class(), Class { is64, big_endian: be });
            assert_eq!(elf.sections().len(), 5);
            let (i, text) = elf.section_by_name(b".text").unwrap().unwrap();
            assert_eq!((i, text.offset, text.size), (1, 0x40, 0x40));
            let got: Vec<(String, u64, u64, SymbolSection)> =
                symbols(&elf, SHT_SYMTAB).into_iter().skip(1).map(|(n, s)| (n, s.value, s.size, s.section())).collect();
            assert_eq!(
                got,
                [("alpha".into(), 0x10, 8, SymbolSection::Index(1)), ("beta".into(), 0x20, 8, SymbolSection::Index(1))],
                "64 {is64} be {be}"
            );
            assert!(elf.symbol_table(SHT_DYNSYM).unwrap().is_none());
            assert_eq!(elf.program_headers().unwrap().count(), 0);
            assert_eq!(elf.section_data(&text, 1 << 10).unwrap(), vec![0x90; 0x40]);
        }
    }
}

// --- malformed files ----------------------------------------------------------------------

fn expect_err<T: std::fmt::Debug>(what: &str, r: Result<T>) -> Error {
    match r {
        Ok(v) => panic!("{what}: no error: {v:?}"),
        Err(e) => e,
    }
}

#[test]
fn truncated_headers_are_errors() {
    for is64 in [false, true] {
        let b = tiny(is64, false);
        for cut in [0, 3, 4, 6, 51, if is64 { 60 } else { 51 }] {
            expect_err(&format!("cut at {cut}"), Elf::parse(b[..cut].to_vec()));
        }
        // the section table cut off
        let shoff = section_header_at(&b, is64, false, 0);
        let e = expect_err("section table cut", Elf::parse(b[..shoff + 10].to_vec()));
        assert!(e.to_string().contains("past the end"), "{e}");
        // the file cut short after it was parsed (truncated by its owner while read)
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, &b).unwrap();
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
        let elf = Elf::parse(&f).unwrap();
        let t = elf.symbol_table(SHT_SYMTAB).unwrap().unwrap();
        f.set_len(0x60).unwrap();
        let r: Result<Vec<Symbol>> = elf.symbols(&t).collect();
        assert!(matches!(r, Err(Error::Truncated { .. }) | Err(Error::PastEnd { .. })), "{r:?}");
        assert!(elf.strings(&t).get(1).is_err());
    }
    assert!(matches!(Elf::parse(b"\x7fELF\x03\x01".repeat(16)), Err(Error::Unsupported { class: 3, .. })));
    assert!(matches!(Elf::parse(vec![0u8; 64]), Err(Error::NotElf)));
}

#[test]
fn section_count_and_offset_overflow_are_errors() {
    for is64 in [false, true] {
        for be in [false, true] {
            let orig = tiny(is64, be);
            let mut b = orig.clone();
            set(&mut b, be, field(is64, "shnum"), 0xfffe);
            let (e, biggest) = biggest_alloc(|| expect_err("shnum 0xfffe", Elf::parse(b)));
            assert!(e.to_string().contains("past the end"), "{e}");
            assert!(biggest < 4096, "{biggest}");
            // shoff near u64::MAX (or u32::MAX): offset + size overflows
            let mut b = orig.clone();
            set(&mut b, be, field(is64, "shoff"), if is64 { u64::MAX - 8 } else { u64::from(u32::MAX) - 8 });
            expect_err("shoff overflow", Elf::parse(b));
            // e_shnum 0: the count from section 0's sh_size, huge
            let mut b = orig.clone();
            set(&mut b, be, field(is64, "shnum"), 0);
            let s0 = section_header_at(&b, is64, be, 0);
            set(&mut b, be, (s0 + if is64 { 32 } else { 20 }, if is64 { 8 } else { 4 }), u64::from(u32::MAX));
            let (e, biggest) = biggest_alloc(|| expect_err("extended count", Elf::parse(b)));
            assert!(e.to_string().contains("sections, more than"), "{e}");
            assert!(biggest < 4096, "{biggest}");
            // ... and a small extended count works
            let mut b = orig.clone();
            set(&mut b, be, field(is64, "shnum"), 0);
            set(&mut b, be, (s0 + if is64 { 32 } else { 20 }, if is64 { 8 } else { 4 }), 5);
            assert_eq!(Elf::parse(b).unwrap().sections().len(), 5);
            // a section header size smaller than the class's
            let mut b = orig.clone();
            set(&mut b, be, field(is64, "shentsize"), 12);
            expect_err("shentsize", Elf::parse(b));
            // more sections than the caller's limit
            expect_err("limit", Elf::parse_limited(orig.clone(), 4));
        }
    }
}

#[test]
fn string_table_index_out_of_range() {
    for is64 in [false, true] {
        // e_shstrndx beyond the table: no names, no error
        let mut b = tiny(is64, false);
        set(&mut b, false, field(is64, "shstrndx"), 4000);
        let elf = Elf::parse(b).unwrap();
        assert!(elf.section_by_name(b".text").unwrap().is_none());
        // the symbol table's sh_link beyond the table (or to a non-string section)
        for link in [4000u64, 1, 0] {
            let mut b = tiny(is64, false);
            let s = section_header_at(&b, is64, false, 2);
            set(&mut b, false, (s + if is64 { 40 } else { 24 }, 4), link);
            let elf = Elf::parse(b).unwrap();
            let e = expect_err("sh_link", elf.symbol_table(SHT_SYMTAB));
            assert!(e.to_string().contains("not a string table"), "{e}");
        }
        // a symbol's name offset beyond its strings: None
        let mut b = tiny(is64, false);
        let sym1 = 0x80 + Class { is64, big_endian: false }.symbol_size();
        set(&mut b, false, (sym1, 4), 0xffff_fff0);
        let elf = Elf::parse(b).unwrap();
        let t = elf.symbol_table(SHT_SYMTAB).unwrap().unwrap();
        let s = elf.symbol(&t, 1).unwrap();
        assert_eq!(elf.strings(&t).get(s.name.into()).unwrap(), None);
    }
}

#[test]
fn unterminated_names_are_none_and_overlong_ones_cut_visibly() {
    let data = b"\0short\0a_long_name_without_end".to_vec();
    let n = data.len() as u64;
    let mut t = StringTable::new(&data, 0, n).with_limits(4, 64);
    assert_eq!(t.get(1).unwrap(), Some(&b"short"[..]));
    assert_eq!(t.get(7).unwrap(), None, "unterminated at the table's end");
    assert_eq!(t.get(n).unwrap(), None);
    assert_eq!(t.get(u64::MAX).unwrap(), None);
    let long = [b"\0".as_slice(), &[b'x'; 100], b"\0"].concat();
    let mut t = StringTable::new(&long, 0, long.len() as u64).with_limits(4, 8);
    let cut = [&[b'x'; 8][..], TRUNCATED_MARK.as_bytes()].concat();
    assert_eq!(t.get(1).unwrap(), Some(&cut[..]), "longer than the longest allowed: cut, marked");
    assert_eq!(t.get(2).unwrap(), Some(&cut[..]), "the cut window is not reused wrongly");
    // a table said to extend past the data: an error when read there
    let mut t = StringTable::new(&data, 0, 1 << 40);
    assert!(t.get(10).is_err());
}

#[test]
fn huge_section_sizes_are_errors_without_allocating() {
    for is64 in [false, true] {
        for be in [false, true] {
            let orig = tiny(is64, be);
            let huge = if is64 { u64::MAX - 0x10 } else { u64::from(u32::MAX) };
            let size_at = |b: &[u8], i| section_header_at(b, is64, be, i) + if is64 { 32 } else { 20 };
            let w = if is64 { 8 } else { 4 };
            // .symtab and .strtab sizes
            for sec in [2, 3] {
                let mut b = orig.clone();
                let at = size_at(&b, sec);
                set(&mut b, be, (at, w), huge);
                let elf = Elf::parse(b).unwrap();
                let (e, biggest) = biggest_alloc(|| expect_err("huge table", elf.symbol_table(SHT_SYMTAB)));
                assert!(e.to_string().contains("past the end"), "{e}");
                assert!(biggest < 4096, "{biggest}");
            }
            // .text's size: section_data refuses before allocating
            let mut b = orig.clone();
            let at = size_at(&b, 1);
            set(&mut b, be, (at, w), huge);
            let elf = Elf::parse(b).unwrap();
            let text = elf.sections()[1];
            let (r, biggest) = biggest_alloc(|| elf.section_data(&text, u64::MAX));
            expect_err("huge section data", r);
            assert!(biggest < 4096, "{biggest}");
            // within the file but beyond the caller's cap
            let text = orig.clone();
            let elf = Elf::parse(text).unwrap();
            assert!(matches!(elf.section_data(&elf.sections()[1], 0x10), Err(Error::TooLarge { .. })));
            // a symbol entry size too small, and implausibly large
            for es in [3u64, 1 << 20] {
                let mut b = orig.clone();
                let at = section_header_at(&b, is64, be, 2) + if is64 { 56 } else { 36 };
                set(&mut b, be, (at, w), es);
                let elf = Elf::parse(b).unwrap();
                expect_err("entsize", elf.symbol_table(SHT_SYMTAB));
            }
        }
    }
}

/// Deterministic random byte changes in the header region of a real ELF file (the ELF
/// header, program headers, section headers) and in its symbol table: every read must be
/// an `Ok` or an `Err`, never a panic, and nothing allocated may be large.
#[test]
fn random_byte_flips_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let bin = c_program(dir.path())
        .or_else(|| Some(PathBuf::from("/bin/true")).filter(|p| p.is_file()))
        .unwrap_or_else(|| std::env::current_exe().unwrap());
    let orig = std::fs::read(&bin).unwrap();
    let elf = Elf::parse(orig.clone()).unwrap();
    let h = *elf.header();
    let shsz = elf.class().section_header_size() as u64;
    let mut regions: Vec<(u64, u64)> =
        vec![(0, 64), (h.phoff, u64::from(h.phnum) * u64::from(h.phentsize)), (h.shoff, elf.sections().len() as u64 * shsz)];
    if let Some(t) = elf.symbol_table(SHT_SYMTAB).unwrap() {
        regions.push((t.header.offset, t.header.size.min(4096)));
    }
    let regions: Vec<(usize, usize)> = regions.into_iter().filter(|r| r.1 > 0).map(|(o, n)| (o as usize, n as usize)).collect();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15; // xorshift64, fixed seed
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut parsed = 0;
    let mut biggest_seen = 0;
    for _ in 0..3000 {
        let mut m = orig.clone();
        for _ in 0..1 + rnd() % 4 {
            let (o, n) = regions[(rnd() % regions.len() as u64) as usize];
            let at = o + (rnd() % n as u64) as usize;
            let v = match rnd() % 4 {
                0 => 0,
                1 => 0xff,
                2 => m[at] ^ (1 << (rnd() % 8)),
                _ => rnd() as u8,
            };
            m[at] = v;
        }
        let (ok, biggest) = biggest_alloc(|| match Elf::parse(&m) {
            Ok(e) => {
                walk(&e, 5000);
                true
            }
            Err(_) => false,
        });
        parsed += usize::from(ok);
        biggest_seen = biggest_seen.max(biggest);
    }
    eprintln!("{}: {parsed} of 3000 mutants parsed, largest allocation {biggest_seen} bytes", bin.display());
    assert!(parsed > 100, "only {parsed} of 3000 mutants parsed: the mutations are too blunt");
    // a section table of at most the file's size, chunks of 256 KiB, 64 KiB section reads
    assert!(biggest_seen <= (orig.len() * 2).max(512 << 10), "largest allocation {biggest_seen}");
}

/// `StringTable::find`: every place of a name, also as the tail of a longer one and across
/// the 64 KiB pieces the table is read in; too many places is an error.
#[test]
fn find_every_place_of_a_name() {
    let mut t = vec![0u8];
    let mut want = Vec::new();
    let mut k = 0;
    while t.len() < 300_000 {
        k += 1;
        if k % 997 == 0 {
            let tail = k % 2 == 0; // "xmalloc": "malloc" one byte in
            if tail {
                t.push(b'x');
            }
            want.push(t.len() as u64);
            t.extend_from_slice(b"malloc\0");
        } else {
            t.extend_from_slice(format!("name_{k}_malloc_not\0").as_bytes());
        }
        // a name that ends exactly at a piece boundary
        if t.len() < 65536 && t.len() + 16 > 65536 && !want.contains(&(65536 - 7)) {
            t.resize(65536 - 8, b'y');
            t.push(0);
            want.push(t.len() as u64);
            t.extend_from_slice(b"malloc\0");
        }
    }
    assert!(want.contains(&(65536 - 7)));
    let tab = StringTable::new(&t, 0, t.len() as u64);
    let got = tab.find(b"malloc", 1000).unwrap();
    assert_eq!(got, want);
    for &at in &got {
        assert_eq!(&t[at as usize..at as usize + 7], b"malloc\0");
    }
    assert!(tab.find(b"no_such_name", 10).unwrap().is_empty());
    assert!(matches!(tab.find(b"malloc", 3), Err(Error::TooLarge { .. })));
    // a table said to be longer than the data
    assert!(StringTable::new(&t, 0, 1 << 40).find(b"malloc", 1000).is_err());
}

// --- notes, alignments, header-only parsing ---------------------------------------------

fn note(be: bool, align: usize, name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
    let u = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
    let mut v = Vec::new();
    v.extend(u(name.len() as u32));
    v.extend(u(desc.len() as u32));
    v.extend(u(kind));
    v.extend(name);
    v.resize(v.len().next_multiple_of(align), 0);
    v.extend(desc);
    v.resize(v.len().next_multiple_of(align), 0);
    v
}

#[test]
fn notes_in_order_for_both_alignments_and_byte_orders() {
    for be in [false, true] {
        for align in [4usize, 8] {
            let mut area = note(be, align, b"GNU\0", 5, &[1, 2, 3, 4, 5, 6, 7, 8]);
            area.extend(note(be, align, b"Xen\0", 3, &[9; 3]));
            area.extend(note(be, align, b"GNU\0", NT_GNU_BUILD_ID, &[0xab; 20]));
            let got: Vec<Note> = notes(&area, be, align as u64).map(|n| n.unwrap()).collect();
            assert_eq!(got.len(), 3, "be {be} align {align}");
            assert_eq!((got[1].name, got[1].kind, got[1].desc), (&b"Xen\0"[..], 3, &[9u8; 3][..]));
            assert_eq!((got[2].name, got[2].kind, got[2].desc), (&b"GNU\0"[..], NT_GNU_BUILD_ID, &[0xab; 20][..]));
            // Every prefix: whole notes, then at most one error; never a panic.
            for i in 0..area.len() {
                let items: Vec<_> = notes(&area[..i], be, align as u64).collect();
                assert!(items.iter().rev().skip(1).all(|n| n.is_ok()));
            }
        }
    }
    // Any alignment other than 8 is 4.
    let area = note(false, 4, b"A\0", 1, &[7; 5]);
    assert_eq!(notes(&area, false, 0).next().unwrap().unwrap().desc, &[7; 5]);
    assert_eq!(notes(&area, false, 16).next().unwrap().unwrap().desc, &[7; 5]);
}

#[test]
fn malformed_notes_are_one_error_then_the_end() {
    for (namesz, descsz) in [(u32::MAX, 0), (0, u32::MAX), (u32::MAX - 2, u32::MAX - 2), (100, 0), (4, 13)] {
        let mut area = note(false, 4, b"GNU\0", 1, &[1; 4]);
        let bad = area.len();
        area.extend(note(false, 4, b"GNU\0", 3, &[2; 12]));
        area[bad..bad + 4].copy_from_slice(&namesz.to_le_bytes());
        area[bad + 4..bad + 8].copy_from_slice(&descsz.to_le_bytes());
        let (items, biggest) = biggest_alloc(|| notes(&area, false, 4).map(|n| n.is_ok()).collect::<Vec<_>>());
        assert_eq!(items, [true, false], "namesz {namesz} descsz {descsz}");
        assert!(biggest < 4096);
    }
}

#[test]
fn build_id_note_by_section_and_by_segment_with_alignments() {
    let exe = std::env::current_exe().unwrap();
    let f = std::fs::File::open(&exe).unwrap();
    let elf = Elf::parse(&f).unwrap();
    let be = elf.class().big_endian;
    let Some((_, sec)) = elf.section_by_name(b".note.gnu.build-id").unwrap() else {
        tailprof_testkit::skip(tailprof_testkit::Need::Fact, "the test executable has no build-id");
        return;
    };
    assert_eq!(sec.kind, SHT_NOTE);
    assert_eq!(sec.addralign, 4);
    let data = elf.section_data(&sec, 1 << 12).unwrap();
    let id = notes(&data, be, sec.addralign)
        .map(|n| n.unwrap())
        .find(|n| n.kind == NT_GNU_BUILD_ID && n.name == b"GNU\0")
        .unwrap()
        .desc
        .to_vec();
    assert!(id.len() >= 8);
    // The same note through the program headers: a PT_NOTE segment covering the section.
    let seg = elf
        .program_headers()
        .unwrap()
        .map(|p| p.unwrap())
        .find(|p| p.kind == PT_NOTE && p.offset <= sec.offset && sec.offset < p.offset + p.filesz)
        .expect("a PT_NOTE segment");
    assert!(seg.align == 4 || seg.align == 8);
    let bytes = elf.read_vec(seg.offset, seg.filesz, 1 << 16).unwrap();
    assert!(notes(&bytes, be, seg.align).any(|n| n.is_ok_and(|n| n.kind == NT_GNU_BUILD_ID && n.desc == id.as_slice())));
    // Every note segment (.note.gnu.property is 8-aligned on x86-64) parses to its end.
    for p in elf.program_headers().unwrap().map(|p| p.unwrap()).filter(|p| p.kind == PT_NOTE) {
        let bytes = elf.read_vec(p.offset, p.filesz, 1 << 16).unwrap();
        assert!(notes(&bytes, be, p.align).all(|n| n.is_ok_and(|n| n.name.last() == Some(&0))), "{p:?}");
    }
    // Every PT_LOAD is aligned to a power of two (the field is read from the right place).
    for p in elf.program_headers().unwrap().map(|p| p.unwrap()).filter(|p| p.kind == PT_LOAD) {
        assert!(p.align.is_power_of_two() && p.align >= 4096, "{p:?}");
    }
}

#[test]
fn section_alignment_of_every_class_and_byte_order() {
    for is64 in [false, true] {
        for be in [false, true] {
            let mut b = tiny(is64, be);
            let at = section_header_at(&b, is64, be, 1) + if is64 { 48 } else { 32 };
            set(&mut b, be, (at, if is64 { 8 } else { 4 }), 16);
            let elf = Elf::parse(b).unwrap();
            assert_eq!(elf.sections()[1].addralign, 16, "64 {is64} be {be}");
            assert_eq!(elf.sections()[2].addralign, 0);
        }
    }
}

#[test]
fn header_only_parse_survives_a_broken_section_table() {
    for is64 in [false, true] {
        for be in [false, true] {
            let mut b = tiny(is64, be);
            let len = b.len() as u64;
            set(&mut b, be, field(is64, "shoff"), len - 8);
            expect_err("section table past the end", Elf::parse(b.clone()));
            let elf = Elf::parse_header(b.clone()).unwrap();
            assert!(elf.sections().is_empty());
            assert_eq!(elf.header().shoff, len - 8);
            assert_eq!(elf.program_headers().unwrap().count(), 0);
            assert!(matches!(Elf::parse_header(b[..40].to_vec()), Err(Error::NotElf)));
        }
    }
}

/// `tiny(true, false)` written to a file whose section `sec` is declared `size` bytes,
/// the file extended sparsely (holes) so the table lies within it.
fn sparse_elf(dir: &std::path::Path, sec: usize, size: u64) -> std::fs::File {
    let mut b = tiny(true, false);
    let at = section_header_at(&b, true, false, sec);
    set(&mut b, false, (at + 32, 8), size);
    let p = dir.join(format!("sparse-{sec}-{size}"));
    std::fs::write(&p, &b).unwrap();
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
    f.set_len(b.len() as u64 + size).unwrap(); // holes: a few KB on disk
    f
}

/// Issue 19, findings 3 and 5: an ELF whose `.strtab` is declared 16 GiB, or whose
/// `.symtab` is declared 256 GiB, in a sparse file of a few KB. Before, the marker
/// follower scanned the 16 GiB for 173 s in the drain loop and the symbolizer spent a
/// core on the 256 GiB. Every table is now checked against the fixed cap
/// (`MAX_TABLE_BYTES`) and the bytes the file really stores before anything is read.
#[test]
fn finding_3_and_5_sparse_huge_tables_are_refused_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    for (sec, size) in [(3usize, 16u64 << 30), (2, 256 << 30), (3, 100 << 20), (2, 64 << 20)] {
        let f = sparse_elf(dir.path(), sec, size);
        let elf = Elf::parse(&f).unwrap();
        assert!(elf.file_len() > size, "the table lies within the (sparse) file");
        let (r, biggest) = biggest_alloc(|| elf.symbol_table(SHT_SYMTAB));
        let e = expect_err("a huge sparse table", r);
        if size > MAX_TABLE_BYTES {
            assert!(matches!(e, Error::TooLarge { .. }), "{e}");
        } else {
            assert!(e.to_string().contains("sparse"), "{e}");
        }
        assert!(biggest < 4096, "{biggest}");
        // A string table made directly over the region refuses a whole-table scan too.
        if size > MAX_TABLE_BYTES {
            assert!(matches!(StringTable::new(&f, 0, size).find(b"x", 8), Err(Error::TooLarge { .. })));
        }
    }
    // A real (non-sparse) table below the cap is read as before.
    let b = tiny(true, false);
    let elf = Elf::parse(b).unwrap();
    assert!(elf.symbol_table(SHT_SYMTAB).unwrap().is_some());
}

/// Issue 19, finding 4: many symbols that share one 1 MB name. Each name read is cut at
/// `MAX_NAME_BYTES` and marked, so no caller holds more than a few KiB per name.
#[test]
fn finding_4_a_megabyte_name_is_cut_visibly() {
    let name = vec![b'n'; 1 << 20];
    let data = [b"\0".as_slice(), &name, b"\0"].concat();
    let mut t = StringTable::new(&data, 0, data.len() as u64);
    let got = t.get(1).unwrap().unwrap().to_vec();
    assert_eq!(got.len(), MAX_NAME_BYTES + TRUNCATED_MARK.len());
    assert!(got.ends_with(TRUNCATED_MARK.as_bytes()));
    let (_, biggest) = biggest_alloc(|| t.get(1).unwrap().map(<[u8]>::len));
    assert!(biggest <= 4 * MAX_NAME_BYTES, "{biggest}");
}
