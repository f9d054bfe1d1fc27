//! Describing processes that were already running when recording started.
//!
//! The kernel only reports side-band (MMAP2/COMM) for things that happen while we
//! record. For `-p` and `-a`, the mappings and names that existed before are read
//! from /proc and written as time-0 records (the trace format puts time-0 records
//! first), so samples of those processes can be symbolized even after they exit.
//!
//! Everything here races with processes exiting or changing; a process that vanishes
//! between listing and reading is skipped, never an error.
//!
//! Kernel conventions (same as perf): kernel and module mappings have `pid == u32::MAX`
//! (perf's pid -1), `cpumode == Kernel`; the kernel image is `[kernel.kallsyms]` with
//! `start` = address of `_text`, `len` reaching the top of the address space and
//! `pgoff` = `start`; modules are `[name]` with their load address and size.

use std::fs;
use std::io::{self, BufRead};
use tailprof_format::{Comm, CpuMode, Mmap, Record};

/// The pid used for kernel mappings.
pub const KERNEL_PID: u32 = u32::MAX;

/// Thread ids of process `pid` (from /proc/PID/task), sorted.
pub fn thread_ids(pid: u32) -> io::Result<Vec<u32>> {
    let mut v: Vec<u32> =
        fs::read_dir(format!("/proc/{pid}/task"))?.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    v.sort_unstable();
    Ok(v)
}

/// All process ids in /proc, sorted.
pub fn all_pids() -> Vec<u32> {
    let mut v: Vec<u32> = match fs::read_dir("/proc") {
        Ok(d) => d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect(),
        Err(_) => Vec::new(),
    };
    v.sort_unstable();
    v
}

/// Whether a process exists (a zombie counts as gone).
pub fn process_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            // The state follows the last ')' (comm may contain parentheses).
            let state = s.rsplit_once(')').and_then(|(_, r)| r.trim_start().chars().next());
            !matches!(state, Some('Z') | Some('X') | None)
        }
        Err(_) => false,
    }
}

/// One line of /proc/PID/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsEntry {
    pub start: u64,
    pub end: u64,
    /// PROT_READ = 1, PROT_WRITE = 2, PROT_EXEC = 4.
    pub prot: u32,
    pub shared: bool,
    pub offset: u64,
    pub inode: u64,
    /// Path or pseudo-name (`[vdso]`, `[heap]`); empty for anonymous memory. A
    /// ` (deleted)` suffix is removed.
    pub path: String,
}

/// Parse one /proc/PID/maps line: `start-end perms offset dev inode   path`.
pub fn parse_maps_line(line: &str) -> Option<MapsEntry> {
    let mut it = line.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?.as_bytes();
    let offset = u64::from_str_radix(it.next()?, 16).ok()?;
    let _dev = it.next()?;
    let inode = it.next()?.parse().ok()?;
    let path = it.next().unwrap_or("").trim_start();
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    let (s, e) = range.split_once('-')?;
    let (start, end) = (u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(e, 16).ok()?);
    if perms.len() < 4 || end < start {
        return None;
    }
    let prot = (perms[0] == b'r') as u32 | ((perms[1] == b'w') as u32) << 1 | ((perms[2] == b'x') as u32) << 2;
    Some(MapsEntry { start, end, prot, shared: perms[3] == b's', offset, inode, path: path.to_string() })
}

/// Whether a mapping is worth a synthesized Mmap: executable, and a file or the vdso.
pub fn is_symbolizable(m: &MapsEntry) -> bool {
    m.prot & 4 != 0 && (m.path.starts_with('/') || m.path == "[vdso]")
}

fn comm_of(path: &str) -> Option<String> {
    let s = fs::read_to_string(path).ok()?;
    Some(s.trim_end_matches('\n').to_string())
}

/// Append time-0 records describing process `pid`: a Comm per thread, then a Mmap per
/// executable mapping. Returns false if the process vanished before anything was
/// read.
pub fn synthesize_process(pid: u32, out: &mut Vec<Record>) -> bool {
    let Ok(tids) = thread_ids(pid) else { return false };
    let mut any = false;
    for tid in tids {
        if let Some(comm) = comm_of(&format!("/proc/{pid}/task/{tid}/comm")) {
            out.push(Record::Comm(Comm { time: 0, pid, tid, exec: false, comm }));
            any = true;
        }
    }
    // Kernel threads have an empty maps file; that is fine.
    if let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) {
        for m in maps.lines().filter_map(parse_maps_line).filter(is_symbolizable) {
            out.push(Record::Mmap(Mmap {
                time: 0,
                pid,
                tid: pid,
                start: m.start,
                len: m.end - m.start,
                pgoff: m.offset,
                prot: m.prot,
                cpumode: CpuMode::User,
                path: m.path,
                build_id: None,
            }));
            any = true;
        }
    }
    any
}

/// Address of `_text` (or else `_stext`) from /proc/kallsyms text (`addr type name`).
/// Both sit near the start, so reading stops there: formatting all of /proc/kallsyms
/// costs the kernel tens of milliseconds.
fn kernel_text_addr(kallsyms: impl BufRead) -> Option<u64> {
    let mut stext = None;
    for (i, line) in kallsyms.lines().enumerate() {
        let Ok(line) = line else { break };
        let mut it = line.split_ascii_whitespace();
        let (Some(a), Some(_), Some(n)) = (it.next(), it.next(), it.next()) else { continue };
        let addr = || u64::from_str_radix(a, 16).ok().filter(|&a| a != 0); // 0: kptr_restrict
        match n {
            "_text" => return addr(),
            "_stext" => stext = addr(),
            _ if stext.is_some() && i > 10_000 => break,
            _ => {}
        }
    }
    stext
}

/// Time-0 Mmaps for the kernel image and loaded modules (needs readable kallsyms
/// addresses, i.e. root or kptr_restrict=0; otherwise nothing is produced).
pub fn kernel_mmaps(out: &mut Vec<Record>) {
    let Ok(f) = fs::File::open("/proc/kallsyms") else { return };
    let Some(text) = kernel_text_addr(io::BufReader::new(f)) else { return };
    out.push(Record::Mmap(Mmap {
        time: 0,
        pid: KERNEL_PID,
        tid: KERNEL_PID,
        start: text,
        len: u64::MAX - text,
        pgoff: text,
        prot: 5,
        cpumode: CpuMode::Kernel,
        path: "[kernel.kallsyms]".into(),
        build_id: None,
    }));
    let Ok(mods) = fs::read_to_string("/proc/modules") else { return };
    out.extend(mods.lines().filter_map(parse_module_line).map(|(name, size, addr)| {
        Record::Mmap(Mmap {
            time: 0,
            pid: KERNEL_PID,
            tid: KERNEL_PID,
            start: addr,
            len: size,
            pgoff: 0,
            prot: 5,
            cpumode: CpuMode::Kernel,
            path: format!("[{name}]"),
            build_id: None,
        })
    }));
}

/// `name size refcount deps state address` -> (name, size, address).
fn parse_module_line(line: &str) -> Option<(String, u64, u64)> {
    let f: Vec<&str> = line.split_ascii_whitespace().collect();
    let size = f.get(1)?.parse().ok()?;
    let addr = u64::from_str_radix(f.get(5)?.trim_start_matches("0x"), 16).ok()?;
    (addr != 0).then(|| (f[0].to_string(), size, addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines() {
        let m = parse_maps_line("55d0c0a00000-55d0c0a21000 r-xp 00002000 fd:01 1234      /usr/bin/cat").unwrap();
        assert_eq!((m.start, m.end, m.prot, m.offset, m.inode), (0x55d0c0a00000, 0x55d0c0a21000, 5, 0x2000, 1234));
        assert_eq!(m.path, "/usr/bin/cat");
        assert!(is_symbolizable(&m));
        let m = parse_maps_line("7ffd1000-7ffd3000 r-xp 00000000 00:00 0                          [vdso]").unwrap();
        assert!(is_symbolizable(&m));
        let m = parse_maps_line("7f00-8f00 rw-p 00000000 00:00 0").unwrap();
        assert_eq!(m.path, "");
        assert!(!is_symbolizable(&m));
        let m = parse_maps_line("1000-2000 r-xs 00000000 00:05 7 /tmp/my file (deleted)").unwrap();
        assert_eq!(m.path, "/tmp/my file");
        assert!(m.shared);
        assert!(parse_maps_line("garbage").is_none());
        assert!(parse_maps_line("2000-1000 r-xp 0 0:0 0 /x").is_none());
    }

    #[test]
    fn modules_and_kallsyms() {
        assert_eq!(
            parse_module_line("virtio_net 61440 0 - Live 0xffffffffc0200000"),
            Some(("virtio_net".into(), 61440, 0xffffffffc0200000))
        );
        assert_eq!(parse_module_line("x 1 0 - Live 0x0000000000000000"), None);
        let k = "0000000000000000 A fixed_percpu_data\nffffffff81001000 T _stext\nffffffff81000000 T _text\n";
        assert_eq!(kernel_text_addr(k.as_bytes()), Some(0xffffffff81000000));
        assert_eq!(kernel_text_addr("ffffffff81001000 T _stext\n".as_bytes()), Some(0xffffffff81001000));
        assert_eq!(kernel_text_addr("0000000000000000 T _text\n".as_bytes()), None);
    }

    #[test]
    fn describes_this_process() {
        let me = std::process::id();
        let mut out = Vec::new();
        assert!(synthesize_process(me, &mut out));
        let comms = out.iter().filter(|r| matches!(r, Record::Comm(c) if c.pid == me)).count();
        assert!(comms >= 1);
        let exe = std::env::current_exe().unwrap();
        assert!(
            out.iter().any(|r| matches!(r, Record::Mmap(m) if m.path == exe.to_str().unwrap() && m.prot & 4 != 0)),
            "the test binary's text mapping is described"
        );
        assert!(process_alive(me));
        assert!(!synthesize_process(u32::MAX - 1, &mut out), "vanished process is not an error");
        let mut k = Vec::new();
        kernel_mmaps(&mut k); // contents depend on privileges
    }
}
