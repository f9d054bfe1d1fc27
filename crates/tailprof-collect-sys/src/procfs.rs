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
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use tailprof_format::{Comm, CpuMode, Mmap, Record};

/// The pid used for kernel mappings.
pub const KERNEL_PID: u32 = u32::MAX;

/// Thread ids of process `pid` (from /proc/PID/task), sorted.
pub fn thread_ids(pid: u32) -> io::Result<Vec<u32>> {
    let mut v: Vec<u32> = fs::read_dir(format!("/proc/{pid}/task"))?.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
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

/// Whether `pid` is a kernel thread (PF_KTHREAD in /proc/PID/stat's flags): it has no
/// user address space, so `record -p` of it records nothing useful and is refused.
pub fn is_kernel_thread(pid: u32) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    let Ok(s) = fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // Fields after the comm: state(3) ppid pgrp session tty_nr tpgid flags(9).
    let flags = s.rsplit_once(')').and_then(|(_, r)| r.split_ascii_whitespace().nth(6)?.parse::<u64>().ok());
    flags.is_some_and(|f| f & PF_KTHREAD != 0)
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
    /// Device of the mapped file (`libc::makedev(major, minor)`, comparable with `st_dev`).
    pub dev: u64,
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
    let dev = parse_dev(it.next()?)?;
    let inode = it.next()?.parse().ok()?;
    let path = it.next().unwrap_or("").trim_start();
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    let (s, e) = range.split_once('-')?;
    let (start, end) = (u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(e, 16).ok()?);
    if perms.len() < 4 || end < start {
        return None;
    }
    let prot = (perms[0] == b'r') as u32 | ((perms[1] == b'w') as u32) << 1 | ((perms[2] == b'x') as u32) << 2;
    Some(MapsEntry { start, end, prot, shared: perms[3] == b's', offset, dev, inode, path: path.to_string() })
}

/// `maj:min` in hex (as /proc/PID/maps prints a device) -> `st_dev`.
fn parse_dev(s: &str) -> Option<u64> {
    let (maj, min) = s.split_once(':')?;
    Some(libc::makedev(u32::from_str_radix(maj, 16).ok()?, u32::from_str_radix(min, 16).ok()?))
}

use tailprof_elf::open::reopen_checked;
/// The one untrusted-file opener ([`tailprof_elf::open`]; docs/SECURITY.md), for every path
/// a profiled process can influence (mapped files, their `/proc/PID/root/...` forms).
pub use tailprof_elf::open::{open_untrusted, open_untrusted_as};

/// Open the file behind mapping `m` of process `pid`, safely (issue 10, finding 3): first
/// through `/proc/PID/map_files/START-END` (the kernel's reference to the mapped file
/// itself, whatever now sits at its path; needs CAP_SYS_ADMIN), else `/proc/PID/root/PATH`
/// and `PATH` with [`open_untrusted`]. In every case the result is a regular file whose
/// device and inode equal the mapping's, else an error: a FIFO, socket, device, symlink or
/// different file put at the mapped path is never opened for reading and never blocks.
pub fn open_mapped_file(pid: u32, m: &MapsEntry) -> io::Result<fs::File> {
    if m.inode == 0 || !m.path.starts_with('/') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a file mapping"));
    }
    if let Ok(f) = open_map_files(pid, m.start, m.end, Some((m.dev, m.inode))) {
        return Ok(f);
    }
    let rooted = format!("/proc/{pid}/root{}", m.path);
    open_untrusted_as(Path::new(&rooted), m.dev, m.inode).or_else(|_| open_untrusted_as(Path::new(&m.path), m.dev, m.inode))
}

/// The mapped file behind `/proc/PID/map_files/START-END` (a regular file, checked before
/// it is opened, opened `O_NOCTTY|O_NONBLOCK`), and its device and inode equal `expect`
/// when given.
fn open_map_files(pid: u32, start: u64, end: u64, expect: Option<(u64, u64)>) -> io::Result<fs::File> {
    // map_files entries are magic links the kernel resolves to the mapped file itself (no
    // path walk), so no O_NOFOLLOW here; O_PATH: nothing is opened until it is checked.
    let mf = format!("/proc/{pid}/map_files/{start:x}-{end:x}");
    let h = fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH | libc::O_CLOEXEC).open(&mf)?;
    let md = h.metadata()?;
    if !md.file_type().is_file() || expect.is_some_and(|e| e != (md.dev(), md.ino())) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "mapped file does not match the mapping"));
    }
    reopen_checked(&h, md.dev(), md.ino(), Path::new(&mf))
}

/// Lines of /proc/PID/maps read at most by [`open_mapping`] (a process may map ~65,530
/// areas by default).
const MAX_MAPS_LINES: usize = 1 << 17;

/// The file mapped at `[start, end)` in process `pid` now, for a mapping known
/// only from a MMAP2 record (the agent): through `/proc/PID/map_files` (root), else the
/// process's current `/proc/PID/maps` line at `start` and [`open_mapped_file`] (its
/// device and inode checked). A range that is no longer mapped (munmap, exec, exit) is
/// `NotFound`: the path named in the record is never opened by itself, so a file, FIFO,
/// directory, device or pty put there since is never opened. Issue 19, finding 1.
pub fn open_mapping(pid: u32, start: u64, end: u64) -> io::Result<fs::File> {
    match open_map_files(pid, start, end, None) {
        Ok(f) => return Ok(f),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => return Err(e), // not a regular file
        Err(_) => {}
    }
    let maps = fs::File::open(format!("/proc/{pid}/maps"))?;
    let entry = io::BufReader::new(maps)
        .lines()
        .take(MAX_MAPS_LINES)
        .map_while(Result::ok)
        .filter_map(|l| parse_maps_line(&l))
        .find(|m| m.start <= start && start < m.end && m.inode != 0); // split by mprotect: the part at `start`
    match entry {
        Some(m) => open_mapped_file(pid, &m),
        None => Err(io::Error::new(io::ErrorKind::NotFound, format!("{start:#x}-{end:#x} is not mapped by {pid} any more"))),
    }
}

/// Whether a mapping is worth a synthesized Mmap: executable, and a file or the vdso.
pub fn is_symbolizable(m: &MapsEntry) -> bool {
    m.prot & 4 != 0 && (m.path.starts_with('/') || m.path == "[vdso]")
}

/// The name of thread `tid` of process `pid` (`/proc/PID/task/TID/comm`, at most 64
/// bytes read: the kernel's names have 15).
pub fn thread_comm(pid: u32, tid: u32) -> Option<String> {
    use std::io::Read;
    let mut buf = Vec::with_capacity(64);
    fs::File::open(format!("/proc/{pid}/task/{tid}/comm")).ok()?.take(64).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).trim_end_matches('\n').to_string())
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
            // The build-id is read here, through the mapping itself (map_files), so the
            // recorder never has to open the path a process could have replaced.
            let build_id = mapped_build_id(pid, &m);
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
                build_id,
            }));
            any = true;
        }
    }
    any
}

/// Largest number of files whose build-ids [`mapped_build_id`] remembers.
const BUILD_ID_CACHE_MAX: usize = 1 << 16;

thread_local! {
    /// Build-ids by (device, inode): `-a` sees libc in every process; read it once.
    #[allow(clippy::type_complexity)]
    static BUILD_IDS: std::cell::RefCell<std::collections::HashMap<(u64, u64), Option<Vec<u8>>>> =
        Default::default();
}

/// The build-id of the file behind mapping `m` of `pid`, opened with
/// [`open_mapped_file`]; `None` for the vdso, anonymous memory, files without one, and
/// files that cannot be opened safely.
fn mapped_build_id(pid: u32, m: &MapsEntry) -> Option<Vec<u8>> {
    if m.inode == 0 {
        return None;
    }
    let key = (m.dev, m.inode);
    if let Some(hit) = BUILD_IDS.with(|c| c.borrow().get(&key).cloned()) {
        return hit;
    }
    let f = open_mapped_file(pid, m).ok()?; // not cached: another process may map it readably
    let id = crate::buildid::read_build_id_from(&f);
    BUILD_IDS.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= BUILD_ID_CACHE_MAX {
            c.clear();
        }
        c.insert(key, id.clone());
    });
    id
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
        assert_eq!(m.dev, libc::makedev(0xfd, 1));
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
    fn untrusted_paths_never_block_and_must_match() {
        let dir = std::env::temp_dir().join(format!("tailprof-procfs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // A FIFO without a writer: a blocking open would hang this test forever.
        assert!(open_untrusted(&fifo).is_err());
        let link = dir.join("link");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        assert!(open_untrusted(&link).is_err(), "a final symlink is not followed");
        let file = dir.join("file");
        fs::write(&file, b"x").unwrap();
        let md = fs::metadata(&file).unwrap();
        assert!(open_untrusted(&file).is_ok());
        assert!(open_untrusted_as(&file, md.dev(), md.ino()).is_ok());
        assert!(open_untrusted_as(&file, md.dev(), md.ino() + 1).is_err(), "another inode is refused");
        assert!(open_untrusted(&dir).is_err(), "directories are refused");
        // A mapping of this process: opened through map_files (root) or the path.
        let me = std::process::id();
        let exe = std::env::current_exe().unwrap();
        let maps = fs::read_to_string("/proc/self/maps").unwrap();
        let m = maps.lines().filter_map(parse_maps_line).find(|m| Path::new(&m.path) == exe).unwrap();
        let f = open_mapped_file(me, &m).unwrap();
        assert_eq!(f.metadata().unwrap().ino(), m.inode);
        // The same mapping, claimed to be the FIFO's path: refused at once (the map_files
        // entry still names the real file, whose path differs; with a wrong inode, refused).
        let fake = MapsEntry { inode: m.inode.wrapping_add(1), path: fifo.display().to_string(), ..m.clone() };
        assert!(open_mapped_file(me, &fake).is_err());
        let anon = MapsEntry { inode: 0, path: String::new(), ..m };
        assert!(open_mapped_file(me, &anon).is_err());
        fs::remove_dir_all(&dir).unwrap();
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
        assert!(!is_kernel_thread(me));
        if comm_of("/proc/2/comm").as_deref() == Some("kthreadd") {
            assert!(is_kernel_thread(2), "pid 2 is kthreadd");
        }
        assert!(!synthesize_process(u32::MAX - 1, &mut out), "vanished process is not an error");
        let mut k = Vec::new();
        kernel_mmaps(&mut k); // contents depend on privileges
    }
}
