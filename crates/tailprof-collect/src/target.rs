//! Launching the profiled command *stopped before exec*.
//!
//! [`spawn_stopped`] forks; the child blocks reading a "go" pipe, so the parent can
//! open events on the child's pid (with `enable_on_exec`, counting starts at exec).
//! [`Child::release`] writes to the go pipe; the child then `execve`s. Exec failure is
//! reported back over a second, close-on-exec pipe: a successful exec closes it (the
//! parent reads EOF), a failed one writes `errno` into it. So the parent learns the
//! outcome without guessing and without hanging.
//!
//! The command is looked up in `PATH` before forking (so "command not found" is
//! reported before any event is opened) and everything the child needs is prepared
//! before `fork`: between fork and exec the child only calls async-signal-safe
//! functions. If the parent drops a [`Child`] that was never released, the child
//! reads EOF on the go pipe and `_exit(127)`s without running anything.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Why a command could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    #[error("command not found: {0}")]
    NotFound(String),
    #[error("cannot execute {cmd}: {source}")]
    Exec { cmd: String, source: io::Error },
    #[error("cannot start {cmd}: {source}")]
    Io { cmd: String, source: io::Error },
}

extern "C" {
    static environ: *const *const libc::c_char;
}

fn is_executable(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else { return false };
    // SAFETY: valid NUL-terminated path.
    p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
}

/// Find `cmd` like a shell would: as given if it contains '/', else in `PATH`.
pub fn resolve_command(cmd: &str) -> Result<PathBuf, LaunchError> {
    if cmd.is_empty() {
        return Err(LaunchError::NotFound(String::new()));
    }
    if cmd.contains('/') {
        let p = PathBuf::from(cmd);
        return match p.metadata() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(LaunchError::NotFound(cmd.into())),
            _ => Ok(p), // other problems are reported by execve itself
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut non_exec = None;
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
        let cand = dir.join(cmd);
        if is_executable(&cand) {
            return Ok(cand);
        }
        if cand.is_file() && non_exec.is_none() {
            non_exec = Some(cand);
        }
    }
    match non_exec {
        Some(p) => {
            Err(LaunchError::Exec { cmd: p.display().to_string(), source: io::Error::from_raw_os_error(libc::EACCES) })
        }
        None => Err(LaunchError::NotFound(cmd.into())),
    }
}

fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid 2-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two fresh fds we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `pidfd_open(2)`: a file descriptor that becomes readable when `pid` exits.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh fd we own (pidfds are close-on-exec).
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Exit code, or 128 + signal number (as shells report it).
pub fn decode_wait_status(st: i32) -> i32 {
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else if libc::WIFSIGNALED(st) {
        128 + libc::WTERMSIG(st)
    } else {
        255
    }
}

/// A forked child waiting to exec (see the module docs).
#[derive(Debug)]
pub struct Child {
    pid: libc::pid_t,
    cmd: String,
    go: Option<OwnedFd>,
    err: Option<OwnedFd>,
    pidfd: Option<OwnedFd>,
    status: Option<i32>,
}

/// Fork a child that will exec `argv` once [`Child::release`] is called.
pub fn spawn_stopped(argv: &[String]) -> Result<Child, LaunchError> {
    let cmd = argv.first().cloned().unwrap_or_default();
    let path = resolve_command(&cmd)?;
    let io_err = |source| LaunchError::Io { cmd: cmd.clone(), source };
    let nul = |_| LaunchError::Exec { cmd: cmd.clone(), source: io::Error::from_raw_os_error(libc::EINVAL) };
    let cpath = CString::new(path.as_os_str().as_bytes()).map_err(nul)?;
    let cargs: Vec<CString> =
        argv.iter().map(|a| CString::new(OsStr::new(a).as_bytes())).collect::<Result<_, _>>().map_err(nul)?;
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let (go_r, go_w) = pipe_cloexec().map_err(io_err)?;
    let (err_r, err_w) = pipe_cloexec().map_err(io_err)?;

    // SAFETY: after fork the child only calls async-signal-safe functions on data
    // prepared above, then execs or _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io_err(io::Error::last_os_error()));
    }
    if pid == 0 {
        unsafe { child_after_fork(go_r.as_raw_fd(), go_w.as_raw_fd(), err_w.as_raw_fd(), &cpath, &ptrs) }
    }
    drop(go_r);
    drop(err_w);
    let pidfd = pidfd_open(pid as u32).ok();
    Ok(Child { pid, cmd, go: Some(go_w), err: Some(err_r), pidfd, status: None })
}

/// The child's side: wait for "go", exec, or report errno.
unsafe fn child_after_fork(go_r: i32, go_w: i32, err_w: i32, path: &CString, argv: &[*const libc::c_char]) -> ! {
    libc::close(go_w); // so a dying parent means EOF for us
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    // Rust ignores SIGPIPE; an ignored disposition would survive exec.
    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    let mut b = 0u8;
    loop {
        let n = libc::read(go_r, &mut b as *mut u8 as *mut libc::c_void, 1);
        if n == 1 {
            break;
        }
        if n < 0 && *libc::__errno_location() == libc::EINTR {
            continue;
        }
        libc::_exit(127); // parent gave up
    }
    libc::execve(path.as_ptr(), argv.as_ptr(), environ);
    let e: i32 = *libc::__errno_location();
    libc::write(err_w, &e as *const i32 as *const libc::c_void, 4);
    libc::_exit(127);
}

impl Child {
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// A pidfd for the child (readable once it exits), if the kernel has pidfd_open.
    pub fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(|f| f.as_fd())
    }

    /// Let the child exec, and wait until it has (or has failed to).
    pub fn release(&mut self) -> Result<(), LaunchError> {
        let Some(go) = self.go.take() else { return Ok(()) };
        let b = 1u8;
        // SAFETY: writing one byte to our pipe.
        let w = unsafe { libc::write(go.as_raw_fd(), &b as *const u8 as *const libc::c_void, 1) };
        let werr = io::Error::last_os_error();
        drop(go);
        if w != 1 {
            let _ = self.wait();
            return Err(LaunchError::Io { cmd: self.cmd.clone(), source: werr });
        }
        let Some(err) = self.err.take() else { return Ok(()) };
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            // SAFETY: reading into the rest of `buf`.
            let n = unsafe { libc::read(err.as_raw_fd(), buf[got..].as_mut_ptr() as *mut libc::c_void, 4 - got) };
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                break;
            }
            got += n as usize;
        }
        if got == 0 {
            return Ok(()); // the pipe was closed by a successful exec
        }
        let _ = self.wait();
        let e = i32::from_ne_bytes(buf);
        if e == libc::ENOENT {
            Err(LaunchError::NotFound(self.cmd.clone()))
        } else {
            Err(LaunchError::Exec { cmd: self.cmd.clone(), source: io::Error::from_raw_os_error(e) })
        }
    }

    /// Send a signal, unless the child was already reaped.
    pub fn signal(&self, sig: i32) {
        if self.status.is_none() {
            // SAFETY: our own child; its pid cannot be reused before we reap it.
            unsafe { libc::kill(self.pid, sig) };
        }
    }

    fn waitpid(&mut self, flags: i32) -> io::Result<Option<i32>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        let mut st = 0;
        loop {
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut st, flags) };
            if r == self.pid {
                self.status = Some(decode_wait_status(st));
                return Ok(self.status);
            }
            if r == 0 {
                return Ok(None);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Reap the child if it has exited; its status (exit code or 128 + signal).
    pub fn try_wait(&mut self) -> io::Result<Option<i32>> {
        self.waitpid(libc::WNOHANG)
    }

    /// Block until the child exits.
    pub fn wait(&mut self) -> io::Result<i32> {
        self.waitpid(0).map(|s| s.unwrap_or(255))
    }

    /// The status, once reaped.
    pub fn status(&self) -> Option<i32> {
        self.status
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        if self.go.take().is_none() {
            // It is running the command: do not leave it behind.
            self.signal(libc::SIGKILL);
        } // else: closing the go pipe makes it _exit(127) before exec
        let _ = self.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn runs_and_reports_status() {
        let mut c = spawn_stopped(&s(&["sh", "-c", "exit 3"])).unwrap();
        assert_eq!(c.try_wait().unwrap(), None, "waits for release");
        c.release().unwrap();
        assert_eq!(c.wait().unwrap(), 3);
        let mut c = spawn_stopped(&s(&["sh", "-c", "kill -TERM $$"])).unwrap();
        c.release().unwrap();
        assert_eq!(c.wait().unwrap(), 128 + libc::SIGTERM);
    }

    #[test]
    fn not_found_and_exec_errors() {
        let e = spawn_stopped(&s(&["tailprof-no-such-command-xyz"])).unwrap_err();
        assert_eq!(e.to_string(), "command not found: tailprof-no-such-command-xyz");
        let e = spawn_stopped(&s(&["/nonexistent/dir/cmd"])).unwrap_err();
        assert_eq!(e.to_string(), "command not found: /nonexistent/dir/cmd");
        // A file that exists but cannot be executed: reported through the exec pipe.
        let mut c = spawn_stopped(&s(&["/proc/self/status"])).unwrap();
        let e = c.release().unwrap_err();
        assert!(matches!(e, LaunchError::Exec { .. }), "{e}");
        assert_eq!(c.status(), Some(127));
        // ENOENT from execve itself (a missing interpreter) also comes back through the pipe.
        use std::os::unix::fs::PermissionsExt;
        let script = std::env::temp_dir().join(format!("tailprof-noint-{}", std::process::id()));
        std::fs::write(&script, "#!/nonexistent/interpreter\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (mut c, mut e);
        let mut tries = 0;
        loop {
            // ETXTBSY while another test's forked child still holds our write fd.
            c = spawn_stopped(&s(&[script.to_str().unwrap()])).unwrap();
            e = c.release().unwrap_err();
            tries += 1;
            match &e {
                LaunchError::Exec { source, .. } if source.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                _ => break,
            }
        }
        let _ = std::fs::remove_file(&script);
        assert_eq!(e.to_string(), format!("command not found: {}", script.display()));
        assert_eq!(c.status(), Some(127));
    }

    #[test]
    fn dropped_before_release_runs_nothing() {
        let dir = std::env::temp_dir().join(format!("tailprof-target-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let c = spawn_stopped(&s(&["touch", dir.to_str().unwrap()])).unwrap();
        drop(c);
        assert!(!dir.exists());
    }
}
