//! tracefs: find it, and mount it at `/sys/kernel/tracing` when it is not mounted (tracepoint
//! events such as `sched:sched_switch` are resolved through `events/*/*/id`).

use std::io;
use std::path::{Path, PathBuf};

use crate::event::TRACEFS_ROOTS;

/// Where tracefs is mounted (the first root that has `events/`), if anywhere.
pub fn find() -> Option<PathBuf> {
    TRACEFS_ROOTS.iter().map(PathBuf::from).find(|r| r.join("events").is_dir())
}

/// tracefs' root, mounting it at `/sys/kernel/tracing` first when no root is mounted.
/// Returns the root and whether this call mounted it (callers say so in one line).
pub fn ensure_mounted() -> io::Result<(PathBuf, bool)> {
    if let Some(r) = find() {
        return Ok((r, false));
    }
    let target = Path::new("/sys/kernel/tracing");
    let src = c"nodev";
    let fstype = c"tracefs";
    let tgt = c"/sys/kernel/tracing";
    // SAFETY: NUL-terminated constant strings; no data argument.
    let rc = unsafe {
        libc::mount(src.as_ptr(), tgt.as_ptr(), fstype.as_ptr(), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, std::ptr::null())
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("tracefs is not mounted and mounting it at /sys/kernel/tracing failed: {e} (run as root, or mount -t tracefs nodev /sys/kernel/tracing)"),
        ));
    }
    if !target.join("events").is_dir() {
        return Err(io::Error::new(io::ErrorKind::NotFound, "tracefs mounted at /sys/kernel/tracing has no events/ directory"));
    }
    Ok((target.to_path_buf(), true))
}
