//! Kernel symbols: which kallsyms file may name a trace's kernel addresses, and the
//! copy of the running kernel's vDSO image.
//!
//! Kernel addresses are named from a kallsyms file (`/proc/kallsyms` by default) only
//! when it shows real addresses and the trace plausibly comes from the running kernel
//! (same release, same host, same boot id when the trace records one in
//! `TraceHeader::extra["boot_id"]`, and `_text` at the address the trace's
//! `[kernel.kallsyms]` mapping recorded: otherwise KASLR moved the kernel since).
//! The same "is this the running kernel" rule decides whether `[vdso]` addresses may be
//! named from this process's own vDSO image.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use blazesym::symbolize::source::{Kernel, Source};
use blazesym::symbolize::Input;
use blazesym::MaybeDefault;
use tailprof_format::TraceHeader;

use super::{intern_all, SymIdResult, SymResult, Symbolizer, UnknownReason};

/// Which kernel symbols to use.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KernelSymbols {
    /// `/proc/kallsyms` when readable with real addresses and the trace comes from the
    /// running kernel.
    #[default]
    Auto,
    /// Never name kernel addresses (they all fold into `[kernel]`).
    Off,
    /// This kallsyms file (e.g. saved on the traced machine), used without the
    /// same-kernel checks.
    Kallsyms(PathBuf),
}

#[derive(Debug, Clone)]
pub(crate) enum KernelState {
    Usable(PathBuf),
    Unusable(String),
}

/// What a trace says about the kernel it ran on (to decide whether this machine's
/// kernel symbols apply).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelOrigin {
    pub os_release: Option<String>,
    pub hostname: Option<String>,
    /// `TraceHeader::extra["boot_id"]`, when the recorder stored it.
    pub boot_id: Option<String>,
    /// Address of `_text` at record time (from the `[kernel.kallsyms]` mapping).
    pub text_addr: Option<u64>,
}

impl KernelOrigin {
    pub fn new(header: &TraceHeader, text_addr: Option<u64>) -> Self {
        KernelOrigin {
            os_release: header.os_release.clone(),
            hostname: header.hostname.clone(),
            boot_id: header.extra.get("boot_id").cloned(),
            text_addr,
        }
    }
}

impl Symbolizer {
    /// Name kernel addresses (one result per address, same order), if the kallsyms
    /// file applies to the trace (see [`Symbolizer::set_origin`]).
    pub fn symbolize_kernel(&mut self, addrs: &[u64]) -> Vec<SymResult> {
        let ids = self.symbolize_kernel_ids(addrs);
        self.to_strings(ids)
    }

    /// Like [`Symbolizer::symbolize_kernel`], answering [`NameId`](super::NameId)s.
    pub fn symbolize_kernel_ids(&mut self, addrs: &[u64]) -> Vec<SymIdResult> {
        let state = self.kernel_state().clone();
        let path = match state {
            KernelState::Usable(p) => p,
            KernelState::Unusable(why) => {
                return addrs
                    .iter()
                    .map(|_| Err(UnknownReason::KernelSymbolsUnavailable { why: why.clone() }))
                    .collect()
            }
        };
        let src = Source::Kernel(Kernel {
            kallsyms: MaybeDefault::Some(path),
            vmlinux: MaybeDefault::None,
            kaslr_offset: Some(0),
            debug_syms: false,
            ..Default::default()
        });
        match self.inner.symbolize(&src, Input::AbsAddr(addrs)) {
            Ok(syms) => intern_all(&mut self.names, &syms),
            Err(e) => {
                let why = format!("kallsyms: {e}");
                addrs.iter().map(|_| Err(UnknownReason::KernelSymbolsUnavailable { why: why.clone() })).collect()
            }
        }
    }

    /// `Ok(path)` of the kallsyms file that will be used, or why kernel addresses will
    /// not be named.
    pub fn kernel_symbols_status(&mut self) -> Result<PathBuf, String> {
        match self.kernel_state() {
            KernelState::Usable(p) => Ok(p.clone()),
            KernelState::Unusable(w) => Err(w.clone()),
        }
    }

    fn kernel_state(&mut self) -> &KernelState {
        let origin = &self.origin;
        if self.kernel.is_none() {
            let st = match &self.opts.kernel {
                KernelSymbols::Off => KernelState::Unusable("disabled".into()),
                KernelSymbols::Kallsyms(p) => match check_kallsyms(p, origin.text_addr) {
                    Ok(()) => KernelState::Usable(p.clone()),
                    Err(w) => KernelState::Unusable(w),
                },
                KernelSymbols::Auto => {
                    let p = PathBuf::from("/proc/kallsyms");
                    match same_kernel(origin).and_then(|()| check_kallsyms(&p, origin.text_addr)) {
                        Ok(()) => KernelState::Usable(p),
                        Err(w) => KernelState::Unusable(w),
                    }
                }
            };
            self.kernel = Some(st);
        }
        self.kernel.as_ref().expect("set above")
    }
}

fn read_trimmed(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

/// `Ok` unless the trace demonstrably comes from another kernel, host or boot.
pub(crate) fn same_kernel(origin: &KernelOrigin) -> Result<(), String> {
    if let (Some(t), Some(here)) = (&origin.os_release, read_trimmed("/proc/sys/kernel/osrelease")) {
        // Accept a full `uname -a`-like string too: the release must appear in it.
        if t.trim() != here && !t.split_whitespace().any(|w| w == here) {
            return Err(format!("trace is from kernel {t:?}, running kernel is {here:?}"));
        }
    }
    if let (Some(t), Some(here)) = (&origin.hostname, read_trimmed("/proc/sys/kernel/hostname")) {
        if t.trim() != here {
            return Err(format!("trace is from host {t:?}, this is {here:?}"));
        }
    }
    if let (Some(t), Some(here)) = (&origin.boot_id, read_trimmed("/proc/sys/kernel/random/boot_id")) {
        if t.trim() != here {
            return Err("trace is from an earlier boot (kernel addresses moved)".into());
        }
    }
    Ok(())
}

/// Copy this process's vDSO image (as mapped: the vDSO is mapped whole, so memory
/// offsets are file offsets) into a temporary file blazesym can open.
pub(crate) fn copy_own_vdso() -> Result<tempfile::NamedTempFile, String> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let maps = fs::read_to_string("/proc/self/maps").map_err(|e| format!("/proc/self/maps: {e}"))?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]")).ok_or("this process has no vDSO")?;
    let range = line.split_whitespace().next().unwrap_or("");
    let (a, b) = range.split_once('-').ok_or("bad /proc/self/maps line")?;
    let parse = |x: &str| u64::from_str_radix(x, 16).map_err(|e| format!("bad /proc/self/maps line: {e}"));
    let (start, end) = (parse(a)?, parse(b)?);
    let len = usize::try_from(end.saturating_sub(start)).map_err(|e| e.to_string())?;
    let mut image = vec![0u8; len];
    let mut mem = fs::File::open("/proc/self/mem").map_err(|e| format!("/proc/self/mem: {e}"))?;
    mem.seek(SeekFrom::Start(start)).and_then(|_| mem.read_exact(&mut image)).map_err(|e| format!("reading the vDSO: {e}"))?;
    if !image.starts_with(b"\x7fELF") {
        return Err("the vDSO mapping is not an ELF image".into());
    }
    let mut f = tempfile::Builder::new().prefix("tailprof-vdso-").suffix(".so").tempfile().map_err(|e| e.to_string())?;
    f.write_all(&image).map_err(|e| e.to_string())?;
    Ok(f)
}

/// `Ok` if `path` is a readable kallsyms file showing real (non-zero) addresses and,
/// when `text_addr` is known, placing `_text` there (else the kernel was relocated
/// since the trace was taken: KASLR after a reboot).
fn check_kallsyms(path: &Path, text_addr: Option<u64>) -> Result<(), String> {
    let f = fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut nonzero = false;
    let mut lines = 0usize;
    for line in BufReader::new(f).lines() {
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        lines += 1;
        let mut fields = line.split_whitespace();
        let (Some(addr), Some(_kind), Some(name)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let addr = u64::from_str_radix(addr, 16).unwrap_or(0);
        nonzero |= addr != 0;
        match text_addr {
            Some(want) if name == "_text" => {
                if addr == 0 {
                    break;
                }
                if addr != want {
                    return Err(format!(
                        "kernel was relocated since the trace was taken (_text at {want:#x} then, {addr:#x} in {})",
                        path.display()
                    ));
                }
                return Ok(());
            }
            None if nonzero => return Ok(()),
            _ if lines >= 64 && !nonzero => break,
            _ => {}
        }
    }
    if lines == 0 {
        Err(format!("{} is empty", path.display()))
    } else if !nonzero {
        Err(format!("{} shows zero addresses (kernel.kptr_restrict, or not root)", path.display()))
    } else {
        // Real addresses but no `_text` to compare with: trust it.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::SymbolizerOptions;
    use super::*;
    use std::io::Write;

    #[test]
    fn kallsyms_file_with_zero_addresses_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kallsyms");
        let mut f = fs::File::create(&p).unwrap();
        writeln!(f, "0000000000000000 T _text\n0000000000000000 T foo").unwrap();
        let mut s = Symbolizer::new(SymbolizerOptions {
            kernel: KernelSymbols::Kallsyms(p.clone()),
            ..Default::default()
        });
        let r = s.symbolize_kernel(&[0xffff_ffff_8100_0010]);
        assert!(matches!(&r[0], Err(UnknownReason::KernelSymbolsUnavailable { why }) if why.contains("zero")));
    }

    #[test]
    fn kallsyms_file_names_kernel_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kallsyms");
        let mut f = fs::File::create(&p).unwrap();
        writeln!(
            f,
            "ffffffff81000000 T _text\nffffffff81000100 T do_work\nffffffff81000200 t helper\nffffffff81000300 T _etext"
        )
        .unwrap();
        let mut s = Symbolizer::new(SymbolizerOptions {
            kernel: KernelSymbols::Kallsyms(p.clone()),
            ..Default::default()
        });
        let addrs = [0xffff_ffff_8100_0110, 0xffff_ffff_8100_0204];
        let r = s.symbolize_kernel(&addrs);
        assert_eq!(r[0].as_deref(), Ok("do_work"));
        assert_eq!(r[1].as_deref(), Ok("helper"));
        // Same _text as at record time: fine. Another one: relocated, refused.
        s.set_origin(KernelOrigin { text_addr: Some(0xffff_ffff_8100_0000), ..Default::default() });
        assert_eq!(s.symbolize_kernel(&addrs)[0].as_deref(), Ok("do_work"));
        s.set_origin(KernelOrigin { text_addr: Some(0xffff_ffff_a200_0000), ..Default::default() });
        let r = s.symbolize_kernel(&addrs);
        assert!(matches!(&r[0], Err(UnknownReason::KernelSymbolsUnavailable { why }) if why.contains("relocated")), "{r:?}");
    }

    #[test]
    fn other_kernel_release_is_refused() {
        let header = TraceHeader { os_release: Some("0.0.1-not-this-one".into()), ..Default::default() };
        let mut s = Symbolizer::default();
        s.set_origin(KernelOrigin::new(&header, None));
        let st = s.kernel_symbols_status();
        assert!(st.unwrap_err().contains("0.0.1-not-this-one"));
    }
}
