//! USDT (SystemTap SDT) probes as item boundaries and class sources (issue 22 item 1).
//!
//! `usdt:BIN:PROVIDER:NAME` is accepted wherever a probe location is (`--item-begin`,
//! `--item-end`, `--item-class-from usdt:BIN:PROVIDER:NAME:argN`). This module owns:
//!
//! * finding a probe's sites in the binary's `.note.stapsdt` (read through
//!   [`tailprof_elf::stapsdt`], bounded) and turning each into a uprobe location: the
//!   site's PC and its semaphore translated to file offsets through the `PT_LOAD`
//!   segments ([`sites`]). Every site of a probe (one per inlined copy) gets its own
//!   uprobe. The semaphore's file offset is the uprobe's `ref_ctr_offset`: the kernel
//!   increments the counter in every process that maps the file while the uprobe exists
//!   and decrements it when it goes, so the program's `*_ENABLED()` test is true only while
//!   we record. tailprof never writes the target's memory;
//! * decoding the argument specs ([`parse_args`]: `[-]SIZE@OPERAND` with the x86-64
//!   operands `%reg`, `$imm`, `OFF(%reg)`, `OFF(%base,%index,SCALE)`) and turning one into
//!   a tracefs fetch-argument ([`ArgSpec::fetch_arg`]);
//! * the listing of `tailprof probes BIN` ([`list`]): USDT probes and the functions a
//!   plain uprobe can use.
//!
//! A wrong provider or name is an error that lists the probes the binary has.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tailprof_elf::stapsdt::{stapsdt_probes, vaddr_to_offset};
use tailprof_elf::{Elf, SHN_UNDEF, SHT_DYNSYM, SHT_SYMTAB, STT_FUNC, STT_GNU_IFUNC};

use crate::items::uprobe::UprobeError;

/// Probe names listed at most in an error about a wrong name.
const MAX_NAMES_IN_ERROR: usize = 40;
/// Functions listed at most by [`list`] (a big binary has hundreds of thousands).
pub const MAX_LISTED_FUNCTIONS: usize = 200_000;

/// Width and signedness of an argument and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgSpec {
    /// 1, 2, 4 or 8 bytes.
    pub size: u8,
    pub signed: bool,
    pub operand: Operand,
}

/// Where an argument's value is at the probe (x86-64 AT&T syntax).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// A register as written (`rdi`, `r13d`, `eax`), its tracefs name and width.
    Reg { name: String, tracefs: String, width: u8 },
    /// A constant (`$42`).
    Imm(i64),
    /// Memory at `disp(%base)` or `disp(%base,%index,scale)`; `symbol` when the
    /// displacement is a symbol (`foo+8(%rip)`).
    Mem { disp: i64, symbol: Option<String>, base: String, index: Option<(String, u8)> },
}

/// x86-64 register name (without `%`) → (tracefs name, width in bytes). High-byte
/// registers (`ah`...) are not listed: their value is not the register's low bits.
pub fn x86_register(r: &str) -> Option<(String, u8)> {
    const LEGACY: [(&str, &str, &str, &str, &str); 8] = [
        ("rax", "eax", "ax", "al", "ax"),
        ("rbx", "ebx", "bx", "bl", "bx"),
        ("rcx", "ecx", "cx", "cl", "cx"),
        ("rdx", "edx", "dx", "dl", "dx"),
        ("rsi", "esi", "si", "sil", "si"),
        ("rdi", "edi", "di", "dil", "di"),
        ("rbp", "ebp", "bp", "bpl", "bp"),
        ("rsp", "esp", "sp", "spl", "sp"),
    ];
    for (q, d, w, b, t) in LEGACY {
        for (n, width) in [(q, 8), (d, 4), (w, 2), (b, 1)] {
            if r == n {
                return Some((t.to_string(), width));
            }
        }
    }
    if r == "rip" {
        return Some(("ip".to_string(), 8));
    }
    let n = r.strip_prefix('r')?;
    let (num, width) = match n.as_bytes().last()? {
        b'd' => (&n[..n.len() - 1], 4),
        b'w' => (&n[..n.len() - 1], 2),
        b'b' => (&n[..n.len() - 1], 1),
        _ => (n, 8),
    };
    let k: u8 = num.parse().ok().filter(|k| (8..=15).contains(k))?;
    Some((format!("r{k}"), width))
}

fn parse_int(s: &str) -> Option<i64> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok()?,
        None => s.parse::<u64>().ok()?,
    } as i64;
    Some(if neg { v.wrapping_neg() } else { v })
}

/// A USDT argument spec that cannot be parsed or read ([`ArgSpec::parse`],
/// [`ArgSpec::fetch_arg`]); the message names the part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgSpecError {
    /// Not a spec we understand (bad size, register, constant, displacement...).
    #[error("{0}")]
    Malformed(String),
    /// A valid operand that tracefs cannot read, or not as asked.
    #[error("{0}")]
    NotReadable(String),
}

fn reg(s: &str) -> Result<String, ArgSpecError> {
    let r = s.trim().strip_prefix('%').ok_or_else(|| ArgSpecError::Malformed(format!("'{s}' is not a register")))?;
    x86_register(r).map(|_| r.to_string()).ok_or_else(|| ArgSpecError::Malformed(format!("unknown register %{r}")))
}

impl ArgSpec {
    /// One `[-]SIZE@OPERAND` (a bare operand is taken as 8 bytes unsigned, as SystemTap
    /// does for the oldest notes).
    pub fn parse(s: &str) -> Result<ArgSpec, ArgSpecError> {
        let (signed, size, op) = match s.split_once('@') {
            Some((sz, op)) => {
                let (signed, n) = match sz.strip_prefix('-') {
                    Some(n) => (true, n),
                    None => (false, sz),
                };
                let size: u8 = n
                    .parse()
                    .ok()
                    .filter(|n| [1, 2, 4, 8].contains(n))
                    .ok_or_else(|| ArgSpecError::Malformed(format!("bad size '{sz}' in '{s}'")))?;
                (signed, size, op)
            }
            None => (false, 8, s),
        };
        let operand = if let Some(imm) = op.strip_prefix('$') {
            Operand::Imm(parse_int(imm).ok_or_else(|| ArgSpecError::Malformed(format!("bad constant in '{s}'")))?)
        } else if let Some(r) = op.strip_prefix('%') {
            let (tracefs, width) = x86_register(r).ok_or_else(|| ArgSpecError::Malformed(format!("unknown register %{r} in '{s}'")))?;
            Operand::Reg { name: r.to_string(), tracefs, width }
        } else if let Some((disp, rest)) = op.split_once('(') {
            let inner = rest.strip_suffix(')').ok_or_else(|| ArgSpecError::Malformed(format!("unclosed '(' in '{s}'")))?;
            let mut parts = inner.split(',');
            let base = reg(parts.next().unwrap_or(""))?;
            let index = match (parts.next(), parts.next()) {
                (None, _) => None,
                (Some(i), scale) => {
                    let scale = match scale.map(str::trim) {
                        None => 1,
                        Some(sc) => sc
                            .parse::<u8>()
                            .ok()
                            .filter(|n| [1, 2, 4, 8].contains(n))
                            .ok_or_else(|| ArgSpecError::Malformed(format!("bad scale in '{s}'")))?,
                    };
                    Some((reg(i)?, scale))
                }
            };
            if parts.next().is_some() {
                return Err(ArgSpecError::Malformed(format!("too many parts in '{s}'")));
            }
            let (disp, symbol) = if disp.is_empty() {
                (0, None)
            } else if let Some(v) = parse_int(disp) {
                (v, None)
            } else {
                // `sym`, `sym+8`, `sym-8`
                let (name, off) = match disp.rfind(['+', '-']).filter(|&i| i > 0) {
                    Some(i) => {
                        (&disp[..i], parse_int(&disp[i..]).ok_or_else(|| ArgSpecError::Malformed(format!("bad displacement in '{s}'")))?)
                    }
                    None => (disp, 0),
                };
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_.$@".contains(c)) {
                    return Err(ArgSpecError::Malformed(format!("bad displacement in '{s}'")));
                }
                (off, Some(name.to_string()))
            };
            Operand::Mem { disp, symbol, base, index }
        } else {
            return Err(ArgSpecError::Malformed(format!("unknown operand in '{s}'")));
        };
        Ok(ArgSpec { size, signed, operand })
    }

    /// The tracefs fetch-argument reading this argument: as a pointer to a C string
    /// (`as_string`: `+0(%di):string`; the argument must be 8 bytes), else as an integer
    /// of the argument's size (`signed`: the argument's own sign unless the caller says).
    /// Operands tracefs cannot express (an index register, a symbolic displacement, a
    /// constant read as a string) are an error naming the operand.
    pub fn fetch_arg(&self, as_string: bool, signed: Option<bool>) -> Result<String, ArgSpecError> {
        let loc = match &self.operand {
            Operand::Reg { tracefs, .. } => format!("%{tracefs}"),
            Operand::Imm(v) => {
                if as_string {
                    return Err(ArgSpecError::NotReadable(format!(
                        "the argument is the constant {v}, not a string pointer (read it as :u64 or :s64)"
                    )));
                }
                format!("\\{v}")
            }
            Operand::Mem { index: Some(_), .. } => {
                return Err(ArgSpecError::NotReadable("tracefs cannot read a memory operand with an index register".into()))
            }
            Operand::Mem { symbol: Some(s), .. } => {
                return Err(ArgSpecError::NotReadable(format!("tracefs cannot read a memory operand relative to the symbol {s}")))
            }
            Operand::Mem { disp, base, .. } => {
                let (t, _) = x86_register(base).ok_or_else(|| ArgSpecError::NotReadable(format!("unknown register %{base}")))?;
                if *disp < 0 {
                    format!("-{}(%{t})", disp.unsigned_abs())
                } else {
                    format!("+{disp}(%{t})")
                }
            }
        };
        if as_string {
            if self.size != 8 {
                return Err(ArgSpecError::NotReadable(format!(
                    "a {}-byte argument is not a string pointer (read it as :u64 or :s64)",
                    self.size
                )));
            }
            return Ok(format!("+0({loc}):string"));
        }
        let s = signed.unwrap_or(self.signed);
        Ok(format!("{loc}:{}{}", if s { 's' } else { 'u' }, self.size * 8))
    }
}

/// Every argument of a spec string (space separated).
pub fn parse_args(s: &str) -> Result<Vec<ArgSpec>, ArgSpecError> {
    s.split_ascii_whitespace().map(ArgSpec::parse).collect()
}

/// One site of a USDT probe, ready for a uprobe.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Site {
    pub pc: u64,
    /// File offset of the site (the uprobe's offset).
    pub offset: u64,
    /// Semaphore address, 0 when none.
    pub semaphore: u64,
    /// File offset of the semaphore (the uprobe's `ref_ctr_offset`), 0 when none.
    pub ref_ctr_offset: u64,
    /// The site's argument spec as stored.
    pub args: String,
}

/// A probe of [`list`]: its sites.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Probe {
    pub provider: String,
    pub name: String,
    pub sites: Vec<Site>,
}

/// What `tailprof probes BIN` shows.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Listing {
    pub path: PathBuf,
    /// By provider, then name.
    pub probes: Vec<Probe>,
    /// Notes skipped as malformed or over a bound.
    pub skipped_notes: u64,
    /// Defined function symbols (`.symtab`, then `.dynsym`), sorted, unique, at most
    /// [`MAX_LISTED_FUNCTIONS`].
    pub functions: Vec<String>,
    /// Functions left out past the bound.
    pub functions_left_out: u64,
}

fn bad_elf(path: &Path, e: tailprof_elf::Error) -> UprobeError {
    match e {
        tailprof_elf::Error::NotElf | tailprof_elf::Error::Unsupported { .. } | tailprof_elf::Error::TruncatedHeader => {
            UprobeError::NotElf { path: path.display().to_string() }
        }
        tailprof_elf::Error::Io { source, .. } => UprobeError::Read { path: path.display().to_string(), source },
        e => UprobeError::BadElf { path: path.display().to_string(), reason: e.to_string() },
    }
}

/// The USDT probes of an opened ELF file, grouped by provider and name, each site with its
/// file offsets. A site whose PC or semaphore lies in no loadable segment is an error (a
/// damaged file: the probe would go to the wrong place).
fn probes_of<R: tailprof_elf::ReadAt>(elf: &Elf<R>, path: &Path) -> Result<(Vec<Probe>, u64), UprobeError> {
    let found = stapsdt_probes(elf).map_err(|e| bad_elf(path, e))?;
    let mut by: BTreeMap<(String, String), Vec<Site>> = BTreeMap::new();
    for p in found.probes {
        let loaded = |a: u64, what: &str| -> Result<u64, UprobeError> {
            vaddr_to_offset(elf, a).map_err(|e| bad_elf(path, e))?.ok_or_else(|| UprobeError::BadElf {
                path: path.display().to_string(),
                reason: format!("the {what} of USDT probe {}:{} (address {a:#x}) lies in no loadable segment", p.provider, p.name),
            })
        };
        let offset = loaded(p.pc, "site")?;
        let ref_ctr_offset = if p.semaphore == 0 { 0 } else { loaded(p.semaphore, "semaphore")? };
        by.entry((p.provider.clone(), p.name.clone())).or_default().push(Site {
            pc: p.pc,
            offset,
            semaphore: p.semaphore,
            ref_ctr_offset,
            args: p.args,
        });
    }
    let probes = by.into_iter().map(|((provider, name), sites)| Probe { provider, name, sites }).collect();
    Ok((probes, found.skipped))
}

/// Opens `binary` (a path, or a name looked up in `PATH`) as an untrusted file.
pub(crate) fn open_binary(binary: &str) -> Result<(PathBuf, std::fs::File), UprobeError> {
    let path = crate::items::uprobe::find_binary(binary)?;
    let f = crate::procfs::open_untrusted(&path).map_err(|source| UprobeError::Read { path: path.display().to_string(), source })?;
    Ok((path, f))
}

/// The sites of probe `provider:name` in `binary`. A name the binary does not have is an
/// error listing the probes it has.
pub fn sites(binary: &str, provider: &str, name: &str) -> Result<(PathBuf, Vec<Site>), UprobeError> {
    let (path, f) = open_binary(binary)?;
    let elf = Elf::parse(&f).map_err(|e| bad_elf(&path, e))?;
    if !elf.class().is64 || elf.class().big_endian {
        return Err(UprobeError::NotElf { path: path.display().to_string() });
    }
    let (probes, _) = probes_of(&elf, &path)?;
    match probes.iter().find(|p| p.provider == provider && p.name == name) {
        Some(p) => Ok((path, p.sites.clone())),
        None => {
            let names: Vec<String> = probes.iter().map(|p| format!("{}:{}", p.provider, p.name)).collect();
            Err(UprobeError::UsdtNotFound {
                probe: format!("{provider}:{name}"),
                path: path.display().to_string(),
                available: available(&names, &path),
            })
        }
    }
}

fn available(names: &[String], path: &Path) -> String {
    if names.is_empty() {
        return "it has no USDT probes (no .note.stapsdt section)".into();
    }
    let shown: Vec<&str> = names.iter().take(MAX_NAMES_IN_ERROR).map(String::as_str).collect();
    let more = names.len().saturating_sub(shown.len());
    format!(
        "it has {}{} (`tailprof probes {}` lists them)",
        shown.join(", "),
        if more > 0 { format!(" and {more} more") } else { String::new() },
        path.display()
    )
}

/// USDT probes and uprobe-able functions of `binary` (`tailprof probes`).
pub fn list(binary: &str) -> Result<Listing, UprobeError> {
    let (path, f) = open_binary(binary)?;
    let elf = Elf::parse(&f).map_err(|e| bad_elf(&path, e))?;
    if !elf.class().is64 || elf.class().big_endian {
        return Err(UprobeError::NotElf { path: path.display().to_string() });
    }
    let (probes, skipped_notes) = probes_of(&elf, &path)?;
    let mut functions = std::collections::BTreeSet::new();
    let mut left_out = 0u64;
    for want in [SHT_SYMTAB, SHT_DYNSYM] {
        for (i, _) in elf.sections().iter().enumerate().filter(|(_, s)| s.kind == want) {
            let Ok(table) = elf.symbol_table_at(i) else {
                continue;
            };
            let mut names = elf.strings(&table).with_limits(256, 4096);
            for sym in elf.symbols(&table) {
                let sym = sym.map_err(|e| bad_elf(&path, e))?;
                if !matches!(sym.kind(), STT_FUNC | STT_GNU_IFUNC) || sym.shndx == SHN_UNDEF || sym.value == 0 {
                    continue;
                }
                let Ok(Some(n)) = names.get(sym.name.into()) else {
                    continue;
                };
                let Ok(n) = std::str::from_utf8(n) else {
                    continue;
                };
                let n = n.split('@').next().unwrap_or(n);
                if functions.len() >= MAX_LISTED_FUNCTIONS && !functions.contains(n) {
                    left_out += 1;
                    continue;
                }
                functions.insert(n.to_string());
            }
        }
    }
    Ok(Listing { path, probes, skipped_notes, functions: functions.into_iter().collect(), functions_left_out: left_out })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(name: &str, tracefs: &str, width: u8) -> Operand {
        Operand::Reg { name: name.into(), tracefs: tracefs.into(), width }
    }

    #[test]
    fn arg_specs_of_every_operand_kind() {
        let a = parse_args("8@%rdi -4@%r13d 4@4(%r12) 8@-16(%rbp) -4@$-42 2@%ax 1@%sil -8@8(%rax,%rbx,4) 8@foo+8(%rip) %rsi").unwrap();
        assert_eq!(a[0], ArgSpec { size: 8, signed: false, operand: reg("rdi", "di", 8) });
        assert_eq!(a[1], ArgSpec { size: 4, signed: true, operand: reg("r13d", "r13", 4) });
        assert_eq!(
            a[2],
            ArgSpec { size: 4, signed: false, operand: Operand::Mem { disp: 4, symbol: None, base: "r12".into(), index: None } }
        );
        assert_eq!(a[3].operand, Operand::Mem { disp: -16, symbol: None, base: "rbp".into(), index: None });
        assert_eq!(a[4], ArgSpec { size: 4, signed: true, operand: Operand::Imm(-42) });
        assert_eq!(a[5].operand, reg("ax", "ax", 2));
        assert_eq!(a[6].operand, reg("sil", "si", 1));
        assert_eq!(a[7].operand, Operand::Mem { disp: 8, symbol: None, base: "rax".into(), index: Some(("rbx".into(), 4)) });
        assert_eq!(a[8].operand, Operand::Mem { disp: 8, symbol: Some("foo".into()), base: "rip".into(), index: None });
        assert_eq!(a[9], ArgSpec { size: 8, signed: false, operand: reg("rsi", "si", 8) });
        // The fetch-arguments tracefs gets.
        let f = |i: usize, s: bool| a[i].fetch_arg(s, None);
        assert_eq!(f(0, true).unwrap(), "+0(%di):string");
        assert_eq!(f(0, false).unwrap(), "%di:u64");
        assert_eq!(f(1, false).unwrap(), "%r13:s32");
        assert_eq!(f(2, false).unwrap(), "+4(%r12):u32");
        assert_eq!(f(3, true).unwrap(), "+0(-16(%bp)):string");
        assert_eq!(f(4, false).unwrap(), "\\-42:s32");
        assert_eq!(a[0].fetch_arg(false, Some(true)).unwrap(), "%di:s64");
        assert!(f(4, true).is_err(), "a constant is no string");
        assert!(f(1, true).is_err(), "a 4-byte value is no pointer");
        assert!(f(7, false).is_err() && f(8, false).is_err(), "tracefs cannot express these");
        assert_eq!(parse_args("").unwrap(), []);
    }

    #[test]
    fn bad_arg_specs_are_errors() {
        for s in [
            "3@%rdi",
            "8@%xyz",
            "8@$",
            "8@4(%r12",
            "8@4(%r12,%rbx,3)",
            "8@(%rax,%rbx,4,5)",
            "8@",
            "-@%rdi",
            "8@%ah",
            "8@4(rax)",
            "8@a b(%rax)",
            "8@+(%rax)",
        ] {
            assert!(ArgSpec::parse(s).is_err(), "{s}");
        }
        // Never a panic on any short input.
        for s in ["@", "%", "$", "(", ")", "-", "8@-", "8@%r", "8@%r1", "8@%r16", "8@%rd", "8@0x(%rax)", "8@-0x8000000000000000(%rbp)"] {
            let _ = ArgSpec::parse(s);
        }
    }

    #[test]
    fn registers() {
        assert_eq!(x86_register("r13d"), Some(("r13".into(), 4)));
        assert_eq!(x86_register("r8"), Some(("r8".into(), 8)));
        assert_eq!(x86_register("r15b"), Some(("r15".into(), 1)));
        assert_eq!(x86_register("edi"), Some(("di".into(), 4)));
        assert_eq!(x86_register("r7"), None);
        assert_eq!(x86_register("ah"), None);
    }
}
