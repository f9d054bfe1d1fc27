//! Countable, refusable test skips (dev-dependency only).
//!
//! **The rule.** A test that needs something the machine may lack (root, `perf_event_open`,
//! a C compiler, the `perf` tool, Go, PostgreSQL, DuckDB, tracefs...) does not return quietly
//! when it is missing: it calls [`skip`] with the [`Need`] and why, then returns. [`skip`]
//!
//! - prints `skipping (need): why` on stderr (shown with `--nocapture` or on failure);
//! - appends `need<TAB>test<TAB>why` to the file named by `$TAILPROF_SKIP_LOG`, when set,
//!   so a run can count its skips by need (`.ci/run` prints that summary);
//! - **panics** instead when `$TAILPROF_REQUIRE` (comma-separated need names, or `all`)
//!   names the need: CI computes what the machine has and exports it, so a test that skips
//!   although the capability is there fails rather than passing silently.
//!
//! Skips that are facts about the machine, not missing capabilities ("this machine has a
//! PMU", "the compiler inlined nothing", "postgres has symbols here", an optional rewrite
//! mode) use [`Need::Fact`]: logged and counted, never required, not even by `all`.
//!
//! Small lookups several tests repeat live here too: [`go`], [`is_root`], [`have_command`],
//! [`c_compiler`].

use std::ffi::OsStr;
use std::fmt::{self, Display};
use std::io::Write;
use std::path::{Path, PathBuf};

pub mod postgres;

/// What a skipped test lacked. [`Need::name`] is the word `$TAILPROF_REQUIRE` and the skip
/// log use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Need {
    /// Running as root (uid 0): recording other users' processes, tracefs, setpriv, mounts.
    Root,
    /// `perf_event_open` permitted for this process (software events, recording).
    PerfEvents,
    /// System-wide (`-a`) sampling permitted.
    SystemWide,
    /// The uprobe PMU (`/sys/bus/event_source/devices/uprobe`).
    Uprobe,
    /// tracefs mounted or mountable (tracepoints, uprobe events).
    Tracefs,
    /// A working C compiler (`cc`/`gcc`) for the tests' fixture programs.
    CCompiler,
    /// binutils (`nm`, `readelf`) as an independent oracle.
    Binutils,
    /// The `perf` tool (linux-perf), as an oracle or recorder.
    PerfTool,
    /// A Go toolchain (`go tool pprof`, the OpenTelemetry pdata check).
    Go,
    /// Go modules downloadable (module proxy reachable) and a recent enough Go.
    GoModules,
    /// `python3`.
    Python,
    /// The `duckdb` Python module.
    DuckDb,
    /// The OpenTelemetry Python SDK (`opentelemetry-sdk`).
    OpenTelemetry,
    /// PostgreSQL server binaries (`/usr/lib/postgresql/*/bin/postgres`) and `psql`.
    Postgres,
    /// `useradd` (tests that create an unprivileged user).
    Useradd,
    /// The shared perf.data corpus in `../shared/testdata/perf`.
    TestData,
    /// `<sys/sdt.h>` (Debian `systemtap-sdt-dev`) for the USDT fixture programs.
    Sdt,
    /// `systemd-analyze` with `security --offline` (the unit file's rating).
    SystemdAnalyze,
    /// Node.js (`node`), for the JIT perf-map and jitdump tests.
    Node,
    /// A Java runtime (`java`), for the JIT perf-map test.
    Java,
    /// A fact about this machine or run, not a capability: counted, never required.
    Fact,
}

impl Need {
    /// Every need, in the order summaries list them.
    pub const ALL: [Need; 21] = [
        Need::Root,
        Need::PerfEvents,
        Need::SystemWide,
        Need::Uprobe,
        Need::Tracefs,
        Need::CCompiler,
        Need::Binutils,
        Need::PerfTool,
        Need::Go,
        Need::GoModules,
        Need::Python,
        Need::DuckDb,
        Need::OpenTelemetry,
        Need::Postgres,
        Need::Useradd,
        Need::TestData,
        Need::Sdt,
        Need::SystemdAnalyze,
        Need::Node,
        Need::Java,
        Need::Fact,
    ];

    /// The need's name in `$TAILPROF_REQUIRE` and the skip log.
    pub fn name(self) -> &'static str {
        match self {
            Need::Root => "root",
            Need::PerfEvents => "perf_event_open",
            Need::SystemWide => "system-wide",
            Need::Uprobe => "uprobe",
            Need::Tracefs => "tracefs",
            Need::CCompiler => "cc",
            Need::Binutils => "binutils",
            Need::PerfTool => "perf",
            Need::Go => "go",
            Need::GoModules => "go-modules",
            Need::Python => "python3",
            Need::DuckDb => "duckdb",
            Need::OpenTelemetry => "opentelemetry",
            Need::Postgres => "postgres",
            Need::Useradd => "useradd",
            Need::TestData => "testdata",
            Need::Sdt => "sdt",
            Need::SystemdAnalyze => "systemd-analyze",
            Need::Node => "node",
            Need::Java => "java",
            Need::Fact => "fact",
        }
    }

    /// Whether `require` (the value of `$TAILPROF_REQUIRE`) requires this need.
    /// [`Need::Fact`] never is.
    pub fn required_by(self, require: &str) -> bool {
        if self == Need::Fact {
            return false;
        }
        require.split(',').map(str::trim).any(|w| w == "all" || w == self.name())
    }
}

impl Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The longest reason written to the skip log (reasons may quote a tool's stderr).
const MAX_WHY: usize = 400;

/// Records that the calling test skips for want of `need`: prints it, logs it to
/// `$TAILPROF_SKIP_LOG`, and panics when `$TAILPROF_REQUIRE` names `need` (see the module
/// docs). The caller returns right after.
#[track_caller]
pub fn skip(need: Need, why: impl Display) {
    let why = one_line(&why.to_string());
    let test = test_name();
    eprintln!("skipping ({need}): {why}");
    if let Some(log) = std::env::var_os("TAILPROF_SKIP_LOG").filter(|v| !v.is_empty()) {
        append_line(Path::new(&log), &format!("{need}\t{test}\t{why}\n"));
    }
    if let Some(require) = std::env::var_os("TAILPROF_REQUIRE") {
        if need.required_by(&require.to_string_lossy()) {
            panic!("TAILPROF_REQUIRE names `{need}`: this machine (CI) has it, but {test} skipped: {why}");
        }
    }
}

/// `why` on one line without tabs, at most [`MAX_WHY`] characters.
fn one_line(why: &str) -> String {
    let mut s: String = why.trim().chars().map(|c| if c.is_control() { ' ' } else { c }).take(MAX_WHY).collect();
    if why.trim().chars().count() > MAX_WHY {
        s.push('…');
    }
    s
}

/// `binary::test`: the test binary's name without cargo's hash, and the harness's thread
/// name (the test's path) — `main` when tests run on the main thread.
fn test_name() -> String {
    let bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .map(|n| match n.rsplit_once('-') {
            Some((stem, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => stem.to_string(),
            _ => n,
        })
        .unwrap_or_else(|| "?".to_string());
    let thread = std::thread::current();
    format!("{bin}::{}", thread.name().unwrap_or("?"))
}

/// One `write` with `O_APPEND`, so lines from parallel tests and test binaries don't
/// interleave. A log that cannot be written is reported, not fatal.
fn append_line(path: &Path, line: &str) {
    let res = std::fs::OpenOptions::new().append(true).create(true).open(path).and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = res {
        eprintln!("tailprof-testkit: cannot append to TAILPROF_SKIP_LOG {}: {e}", path.display());
    }
}

/// Whether this process runs as root (the owner of `/proc/self` is the effective uid).
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// (uid, gid) of the unprivileged account `name` the attacker tests play, created with
/// `useradd --system` when missing. `None` after a [`skip`] when not root ([`Need::Root`]:
/// `why` says what the test does as that user) or when the account cannot be made
/// ([`Need::Useradd`]). Tests running in parallel may create it at once; both succeed.
pub fn unprivileged_user(name: &str, why: impl Display) -> Option<(u32, u32)> {
    if !is_root() {
        skip(Need::Root, why);
        return None;
    }
    let id = |flag: &str| -> Option<u32> {
        let o = std::process::Command::new("id").args([flag, name]).output().ok()?;
        String::from_utf8_lossy(&o.stdout).trim().parse().ok().filter(|_| o.status.success())
    };
    if id("-u").is_none() {
        let _ = std::process::Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name])
            .stderr(std::process::Stdio::null())
            .status();
    }
    match (id("-u"), id("-g")) {
        (Some(u), Some(g)) if u != 0 => Some((u, g)),
        _ => {
            skip(Need::Useradd, format!("cannot create the unprivileged user {name} (useradd missing?)"));
            None
        }
    }
}

/// `name` found as an executable file in a `$PATH` directory.
pub fn have_command(name: &str) -> Option<PathBuf> {
    command_in(std::env::var_os("PATH").as_deref(), name)
}

fn command_in(path: Option<&OsStr>, name: &str) -> Option<PathBuf> {
    std::env::split_paths(path?).map(|d| d.join(name)).find(|p| is_executable(p))
}

/// Where the official Go tarball puts `go`; often not on `$PATH`.
const GO_FALLBACK: &str = "/usr/local/go/bin/go";

/// The Go tool: `go` on `$PATH`, else `/usr/local/go/bin/go`.
pub fn go() -> Option<PathBuf> {
    go_in(std::env::var_os("PATH").as_deref(), Path::new(GO_FALLBACK))
}

fn go_in(path: Option<&OsStr>, fallback: &Path) -> Option<PathBuf> {
    command_in(path, "go").or_else(|| is_executable(fallback).then(|| fallback.to_path_buf()))
}

/// A C compiler that compiles and links a trivial program: `cc`, else `gcc`.
pub fn c_compiler() -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!("tailprof-testkit-cc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let src = dir.join("t.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").ok()?;
    let found = ["cc", "gcc"]
        .iter()
        .filter_map(|c| have_command(c))
        .find(|cc| std::process::Command::new(cc).arg(&src).arg("-o").arg(dir.join("t")).output().is_ok_and(|o| o.status.success()));
    let _ = std::fs::remove_dir_all(&dir);
    found
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn require_names_needs_by_word_and_all_but_never_facts() {
        assert!(Need::Root.required_by("root"));
        assert!(Need::Go.required_by("root, go ,cc"));
        assert!(Need::CCompiler.required_by("all"));
        assert!(!Need::Root.required_by("rootless,cc"));
        assert!(!Need::Postgres.required_by(""));
        assert!(!Need::Fact.required_by("all"));
        assert!(!Need::Fact.required_by("fact"));
    }

    #[test]
    fn names_are_distinct_single_words() {
        let names: std::collections::BTreeSet<_> = Need::ALL.iter().map(|n| n.name()).collect();
        assert_eq!(names.len(), Need::ALL.len());
        assert!(names.iter().all(|n| !n.contains([',', '\t', ' ']) && !n.is_empty()));
    }

    #[test]
    fn reasons_are_one_bounded_line() {
        assert_eq!(one_line(" a\tb\nc \n"), "a b c");
        let long = "x".repeat(MAX_WHY * 2);
        assert_eq!(one_line(&long).chars().count(), MAX_WHY + 1);
    }

    /// Go outside `$PATH` (the official tarball's /usr/local/go/bin) used to make the Go
    /// checks skip silently; `go()` looks there after `$PATH`.
    #[test]
    fn go_is_found_on_path_then_at_the_fallback() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("tailprof-testkit-go-{}", std::process::id()));
        let (on_path, off_path) = (root.join("bin"), root.join("usr-local-go-bin"));
        std::fs::create_dir_all(&on_path).unwrap();
        std::fs::create_dir_all(&off_path).unwrap();
        let exe = |p: &Path, mode: u32| {
            std::fs::write(p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        let fallback = off_path.join("go");
        exe(&fallback, 0o755);
        let empty = root.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        assert_eq!(go_in(Some(empty.as_os_str()), &fallback), Some(fallback.clone()));
        assert_eq!(go_in(None, &fallback), Some(fallback.clone()));
        exe(&on_path.join("go"), 0o755);
        let path = std::env::join_paths([&empty, &on_path]).unwrap();
        assert_eq!(go_in(Some(&path), &fallback), Some(on_path.join("go")));
        exe(&on_path.join("go"), 0o644);
        exe(&fallback, 0o644);
        assert_eq!(go_in(Some(&path), &fallback), None, "a file without an exec bit is not a tool");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_test_name_is_the_harness_thread() {
        let name = test_name();
        assert!(name.ends_with("::tests::the_test_name_is_the_harness_thread") || name.ends_with("::main"), "{name}");
        assert!(name.starts_with("tailprof_testkit::"), "{name}");
    }
}
