//! Launching the profiled command *stopped before exec*.
//!
//! [`spawn_stopped`] forks; the child blocks reading a "go" pipe, so the parent can
//! open events on the child's pid (with `enable_on_exec`, counting starts at exec).
//! [`Child::release`] writes to the go pipe; the child then `execve`s.
//! [`Child::release_with_env`] also hands the child extra environment variables (the
//! marker transport's, which name the child's pid and so can only be known after the
//! fork): the go message is a 4-byte length plus `KEY=VALUE\0...`, read by the child into
//! a buffer allocated before the fork and replace inherited variables of the same name.
//! Exec failure is
//! reported back over a second, close-on-exec pipe: a successful exec closes it (the
//! parent reads EOF), a failed one writes `errno` into it. So the parent learns the
//! outcome without guessing and without hanging.
//!
//! The command is looked up in `PATH` before forking (so "command not found" is
//! reported before any event is opened) and everything the child needs is prepared
//! before `fork`: between fork and exec the child only calls async-signal-safe
//! functions. If the parent drops a [`Child`] that was never released, the child
//! reads EOF on the go pipe and `_exit(127)`s without running anything. The child gets
//! `PR_SET_PDEATHSIG(SIGKILL)`: if the recorder dies (even by SIGKILL), so does the
//! command it launched. The kernel ties this to the *thread* that forked: call
//! [`spawn_stopped`] (and so `Recorder::new` for a command target) from a thread that
//! outlives the recording.

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
        Some(p) => Err(LaunchError::Exec { cmd: p.display().to_string(), source: io::Error::from_raw_os_error(libc::EACCES) }),
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

/// Most bytes of extra environment [`Child::release_with_env`] can pass.
pub const MAX_EXTRA_ENV_BYTES: usize = 16 * 1024;
/// Most extra environment variables [`Child::release_with_env`] can pass.
pub const MAX_EXTRA_ENV_VARS: usize = 64;

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
    let cargs: Vec<CString> = argv.iter().map(|a| CString::new(OsStr::new(a).as_bytes())).collect::<Result<_, _>>().map_err(nul)?;
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let (go_r, go_w) = pipe_cloexec().map_err(io_err)?;
    let (err_r, err_w) = pipe_cloexec().map_err(io_err)?;
    // Everything the child needs for extra environment variables, allocated now: it may
    // not allocate between fork and exec.
    let mut n_env = 0usize;
    // SAFETY: `environ` is the process's NULL-terminated environment array.
    unsafe {
        while !(*environ.add(n_env)).is_null() {
            n_env += 1;
        }
    }
    let mut blob = vec![0u8; MAX_EXTRA_ENV_BYTES + 1];
    let mut envp: Vec<*const libc::c_char> = vec![std::ptr::null(); MAX_EXTRA_ENV_VARS + n_env + 64 + 1];
    let bufs = EnvBufs { blob: blob.as_mut_ptr(), envp: envp.as_mut_ptr(), envp_len: envp.len() };

    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: after fork the child only calls async-signal-safe functions on data
    // prepared above, then execs or _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io_err(io::Error::last_os_error()));
    }
    if pid == 0 {
        unsafe { child_after_fork(parent, go_r.as_raw_fd(), go_w.as_raw_fd(), err_w.as_raw_fd(), &cpath, &ptrs, bufs) }
    }
    drop((blob, envp));
    drop(go_r);
    drop(err_w);
    let pidfd = pidfd_open(pid as u32).ok();
    Ok(Child { pid, cmd, go: Some(go_w), err: Some(err_r), pidfd, status: None })
}

/// Buffers for the child's extra environment, allocated before fork.
#[derive(Clone, Copy)]
struct EnvBufs {
    /// MAX_EXTRA_ENV_BYTES + 1 bytes.
    blob: *mut u8,
    envp: *mut *const libc::c_char,
    envp_len: usize,
}

/// Read exactly `len` bytes (retrying on EINTR); false on EOF or error.
unsafe fn read_full(fd: i32, buf: *mut u8, len: usize) -> bool {
    let mut got = 0;
    while got < len {
        let n = libc::read(fd, buf.add(got) as *mut libc::c_void, len - got);
        if n < 0 && *libc::__errno_location() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            return false;
        }
        got += n as usize;
    }
    true
}

/// Whether two `KEY=VALUE` strings have the same key (no allocation: runs after fork).
unsafe fn same_key(a: *const libc::c_char, b: *const libc::c_char) -> bool {
    let mut i = 0;
    loop {
        let (x, y) = (*a.add(i), *b.add(i));
        if x != y {
            return false;
        }
        if x == b'=' as libc::c_char || x == 0 {
            return x != 0;
        }
        i += 1;
    }
}

/// The child's side: wait for "go" (and the extra environment), exec, or report errno.
unsafe fn child_after_fork(
    parent: libc::pid_t,
    go_r: i32,
    go_w: i32,
    err_w: i32,
    path: &CString,
    argv: &[*const libc::c_char],
    bufs: EnvBufs,
) -> ! {
    libc::close(go_w); // so a dying parent means EOF for us
                       // Die with the recorder (issue 10): a recorder killed with SIGKILL must not leave the
                       // command running unobserved. The signal survives exec (not for set-uid programs,
                       // which the kernel exempts). If the parent died before the prctl, exit now.
    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
    if libc::getppid() != parent {
        libc::_exit(127);
    }
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    // Rust ignores SIGPIPE; an ignored disposition would survive exec.
    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    let mut len = [0u8; 4];
    if !read_full(go_r, len.as_mut_ptr(), 4) {
        libc::_exit(127); // parent gave up
    }
    let len = u32::from_ne_bytes(len) as usize;
    if len > MAX_EXTRA_ENV_BYTES || !read_full(go_r, bufs.blob, len) {
        libc::_exit(127);
    }
    *bufs.blob.add(len) = 0;
    // Extra variables first (they win over inherited ones), then the inherited ones.
    let mut n = 0usize;
    let mut start = 0usize;
    for i in 0..len {
        if *bufs.blob.add(i) == 0 {
            if i > start && n < MAX_EXTRA_ENV_VARS {
                *bufs.envp.add(n) = bufs.blob.add(start) as *const libc::c_char;
                n += 1;
            }
            start = i + 1;
        }
    }
    let extra = n;
    let mut j = 0usize;
    while n + 1 < bufs.envp_len && !(*environ.add(j)).is_null() {
        let e = *environ.add(j);
        j += 1;
        if (0..extra).any(|k| same_key(*bufs.envp.add(k), e)) {
            continue; // overridden
        }
        *bufs.envp.add(n) = e;
        n += 1;
    }
    *bufs.envp.add(n) = std::ptr::null();
    libc::execve(path.as_ptr(), argv.as_ptr(), bufs.envp);
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
        self.release_with_env(&[])
    }

    /// [`Child::release`], adding `env` to the command's environment (overriding
    /// inherited variables of the same name). At most [`MAX_EXTRA_ENV_VARS`] variables
    /// and [`MAX_EXTRA_ENV_BYTES`] bytes.
    pub fn release_with_env(&mut self, env: &[(String, String)]) -> Result<(), LaunchError> {
        let mut msg = vec![0u8; 4];
        for (k, v) in env {
            if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
                return Err(LaunchError::Io {
                    cmd: self.cmd.clone(),
                    source: io::Error::new(io::ErrorKind::InvalidInput, format!("bad environment variable '{k}'")),
                });
            }
            msg.extend_from_slice(format!("{k}={v}\0").as_bytes());
        }
        if msg.len() - 4 > MAX_EXTRA_ENV_BYTES || env.len() > MAX_EXTRA_ENV_VARS {
            return Err(LaunchError::Io {
                cmd: self.cmd.clone(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "extra environment too large"),
            });
        }
        let len = (msg.len() - 4) as u32;
        msg[..4].copy_from_slice(&len.to_ne_bytes());
        let Some(go) = self.go.take() else { return Ok(()) };
        let mut sent = 0usize;
        let mut w = 0isize;
        while sent < msg.len() {
            // SAFETY: writing the rest of `msg` to our pipe.
            w = unsafe { libc::write(go.as_raw_fd(), msg[sent..].as_ptr() as *const libc::c_void, msg.len() - sent) };
            if w < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if w <= 0 {
                break;
            }
            sent += w as usize;
        }
        let werr = io::Error::last_os_error();
        drop(go);
        if sent != msg.len() || w <= 0 {
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
    fn extra_environment_reaches_the_command_and_overrides() {
        let dir = std::env::temp_dir().join(format!("tailprof-env-{}", std::process::id()));
        let out = dir.display().to_string();
        let script = format!("printf '%s|%s' \"$TAILPROF_T1\" \"$HOME\" > {out}");
        let mut c = spawn_stopped(&s(&["sh", "-c", &script])).unwrap();
        let env = [("TAILPROF_T1".to_string(), "a b=c".to_string()), ("HOME".to_string(), "/h".to_string())];
        c.release_with_env(&env).unwrap();
        assert_eq!(c.wait().unwrap(), 0);
        let got = std::fs::read_to_string(&dir).unwrap();
        let _ = std::fs::remove_file(&dir);
        assert_eq!(got, "a b=c|/h");
        let mut c = spawn_stopped(&s(&["true"])).unwrap();
        assert!(c.release_with_env(&[("A=B".into(), "x".into())]).is_err());
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
