//! Control blocks a process publishes in a memfd (the pure-Python runtime, which has no
//! native symbol): a `memfd_create("tailprof_control")` file mapped shared, seen in
//! `/proc/PID/maps` as `/memfd:tailprof_control (deleted)` (the way the OpenTelemetry
//! process-context proposal publishes its context).
//!
//! The mapping is the target's to make, so it is checked before its address is used
//! (docs/SECURITY.md): a shared, writable mapping of the file from offset 0, at most
//! [`MAX_MAPPING`] long; the file, looked at through `/proc/PID/map_files/START-END` (the
//! kernel's reference to the mapped file; an `O_PATH` handle, so nothing is opened and no
//! open routine runs) is a regular file with the mapping's device and inode, linked in no
//! directory (a memfd), owned by the process's uid or root, and [`MIN_SIZE`]..=[`MAX_SIZE`]
//! bytes long. Only then does the caller read the block (`process_vm_readv`) and validate
//! it exactly as a C program's, and write it with `process_vm_writev`.
//!
//! Without the privilege `map_files` needs (CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE) the
//! file checks are skipped: the recorder then runs as the target's user (it can only
//! `process_vm_writev` processes it could ptrace), so the block is nothing that user
//! could not write anyway.

use std::io::{self, BufRead};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

use crate::procfs::{parse_maps_line, MapsEntry};

/// The pseudo-path of the control memfd in `/proc/PID/maps` (the ` (deleted)` suffix
/// removed by [`parse_maps_line`]).
pub fn memfd_maps_path() -> String {
    format!("/memfd:{}", tailprof_markers_protocol::CONTROL_MEMFD)
}

/// Smallest control memfd: one control block.
pub const MIN_SIZE: u64 = tailprof_markers_protocol::control::SIZE as u64;
/// Largest control memfd (the largest `size` a control block may declare).
pub const MAX_SIZE: u64 = 4096;
/// Longest mapping of it (a page; 64 KiB pages exist on aarch64).
pub const MAX_MAPPING: u64 = 1 << 16;
/// Most control memfd mappings looked at per process.
pub const MAX_PER_PROCESS: usize = 16;
/// Lines of /proc/PID/maps read at most.
const MAX_MAPS_LINES: usize = 1 << 17;

/// What [`find_memfd_controls`] found in one process.
#[derive(Debug, Default)]
pub struct MemfdControls {
    /// Addresses of control memfd mappings that passed the checks (the block itself is
    /// still to be validated).
    pub addrs: Vec<u64>,
    /// One line per mapping named like a control memfd that was refused, and why.
    pub refused: Vec<String>,
}

/// The control memfd mappings of `pid`, checked (module docs). An error only when its
/// maps cannot be read.
pub fn find_memfd_controls(pid: u32) -> io::Result<MemfdControls> {
    let maps = std::fs::File::open(format!("/proc/{pid}/maps"))?;
    let name = memfd_maps_path();
    let mut found = Vec::new();
    for line in io::BufReader::new(maps).lines().take(MAX_MAPS_LINES) {
        let line = line?;
        // Cheap test first: most lines are not it.
        if !line.ends_with(" (deleted)") || !line.contains(&name) {
            continue;
        }
        found.extend(parse_maps_line(&line));
    }
    memfd_controls_in_maps(pid, &found)
}

/// [`find_memfd_controls`] over `pid`'s maps already read (`entries`, any of them).
pub fn memfd_controls_in_maps(pid: u32, entries: &[MapsEntry]) -> io::Result<MemfdControls> {
    let name = memfd_maps_path();
    let mut out = MemfdControls::default();
    let mut target_uid = None;
    for m in entries.iter().take(MAX_MAPS_LINES) {
        if m.path != name {
            continue;
        }
        if out.addrs.len() + out.refused.len() >= MAX_PER_PROCESS {
            out.refused.push(format!("more than {MAX_PER_PROCESS} '{name}' mappings; the rest are not looked at"));
            break;
        }
        let uid = match target_uid {
            Some(u) => u,
            None => {
                let u = std::fs::metadata(format!("/proc/{pid}"))?.uid();
                target_uid = Some(u);
                u
            }
        };
        match check_mapping(pid, m, uid) {
            Ok(()) => out.addrs.push(m.start),
            Err(why) => out.refused.push(format!("'{name}' at {:#x}: {why}", m.start)),
        }
    }
    Ok(out)
}

/// Whether `m` may hold a control block the recorder writes; else why not.
fn check_mapping(pid: u32, m: &MapsEntry, target_uid: u32) -> Result<(), String> {
    let len = m.end - m.start;
    if !m.shared || m.prot & 3 != 3 || m.offset != 0 || len > MAX_MAPPING || m.inode == 0 {
        return Err(format!("not a shared read-write mapping of a file from offset 0 of at most {MAX_MAPPING} bytes"));
    }
    let mf = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
    // A magic link to the mapped file itself (no path walk), so no O_NOFOLLOW; O_PATH:
    // nothing is opened, only looked at.
    let h = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH | libc::O_CLOEXEC).open(&mf);
    let md = match h.and_then(|h| h.metadata()) {
        Ok(md) => md,
        // Not privileged for map_files: the recorder runs as the target's user (module docs).
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) && !privileged() => return Ok(()),
        Err(e) => return Err(format!("cannot look at it through {mf}: {e}")),
    };
    if !md.file_type().is_file() || (md.dev(), md.ino()) != (m.dev, m.inode) {
        return Err("not a regular file, or not the mapped one".to_string());
    }
    if md.nlink() != 0 {
        return Err("a file linked in a directory, not a memfd".to_string());
    }
    if md.uid() != target_uid && md.uid() != 0 {
        return Err(format!("owned by uid {}, not by the process's uid {target_uid} or root", md.uid()));
    }
    if !(MIN_SIZE..=MAX_SIZE).contains(&md.size()) {
        return Err(format!("{} bytes, not {MIN_SIZE}..={MAX_SIZE}", md.size()));
    }
    Ok(())
}

fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memfd(name: &str, size: i64) -> std::fs::File {
        use std::os::unix::io::FromRawFd;
        let c = std::ffi::CString::new(name).unwrap();
        // SAFETY: a valid C string; the fd is owned by the File.
        let fd = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create");
        let f = unsafe { std::fs::File::from_raw_fd(fd) };
        f.set_len(size as u64).unwrap();
        f
    }

    struct Map(*mut libc::c_void, usize);
    impl Drop for Map {
        fn drop(&mut self) {
            // SAFETY: our own mapping.
            unsafe { libc::munmap(self.0, self.1) };
        }
    }

    fn map(f: &std::fs::File, len: usize, flags: i32) -> Map {
        use std::os::unix::io::AsRawFd;
        // SAFETY: a fresh mapping of our own fd.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, f.as_raw_fd(), 0) };
        assert_ne!(p, libc::MAP_FAILED);
        Map(p, len)
    }

    /// Our own control memfd is found; a private mapping, a too large one and one of the
    /// wrong size are refused, each with a reason.
    #[test]
    fn control_memfd_mappings_are_checked() {
        let me = std::process::id();
        let good = memfd(tailprof_markers_protocol::CONTROL_MEMFD, 128);
        let good_map = map(&good, 128, libc::MAP_SHARED);
        let private = memfd(tailprof_markers_protocol::CONTROL_MEMFD, 128);
        let private_map = map(&private, 128, libc::MAP_PRIVATE);
        let big = memfd(tailprof_markers_protocol::CONTROL_MEMFD, 1 << 20);
        let big_map = map(&big, 1 << 20, libc::MAP_SHARED);
        let found = find_memfd_controls(me).unwrap();
        assert!(found.addrs.contains(&(good_map.0 as u64)), "{found:?}");
        assert!(!found.addrs.contains(&(private_map.0 as u64)) && !found.addrs.contains(&(big_map.0 as u64)));
        let said = |a: &Map| found.refused.iter().any(|r| r.contains(&format!("{:#x}", a.0 as u64)));
        assert!(said(&private_map) && said(&big_map), "{found:?}");
        // Wrong size within one page (only map_files shows it: privileged runs).
        let odd = memfd(tailprof_markers_protocol::CONTROL_MEMFD, 64);
        let odd_map = map(&odd, 64, libc::MAP_SHARED);
        let found = find_memfd_controls(me).unwrap();
        if privileged() {
            assert!(found.refused.iter().any(|r| r.contains(&format!("{:#x}", odd_map.0 as u64)) && r.contains("64 bytes")));
        }
        // Other names are not looked at.
        let other = memfd("tailprof_control_x", 128);
        let other_map = map(&other, 128, libc::MAP_SHARED);
        let found = find_memfd_controls(me).unwrap();
        assert!(!found.addrs.contains(&(other_map.0 as u64)));
        assert!(!found.refused.iter().any(|r| r.contains(&format!("{:#x}", other_map.0 as u64))));
    }
}
