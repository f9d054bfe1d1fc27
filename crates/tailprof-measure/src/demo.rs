//! The demo's workload: the paper's query application (`examples/queries.c`, embedded
//! with the marker header), built and run under `tailprof record` in the demo's private
//! directory ([`crate::private::prepare_demo_dir`]): the sources are written there 0600
//! through a temporary name, compiled there, and the binary run from there, so no other
//! user can plant a file or swap the program root runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::accuracy::{parse_truth, Truth};
use crate::error::{MeasureError, Result};
use crate::private::{read_regular, write_private};

/// The example's source.
pub const QUERIES_C: &str = include_str!("../../../examples/queries.c");
/// The marker header it includes.
pub const TAILPROF_H: &str = include_str!("../../../include/tailprof.h");
/// The example's truth log is refused beyond this size.
pub const MAX_LOG_BYTES: u64 = 256 << 20;

/// The first working C compiler of `$CC`, cc, gcc, clang.
pub fn find_c_compiler() -> Option<String> {
    let mut candidates: Vec<String> = Vec::new();
    if let Ok(cc) = std::env::var("CC") {
        if !cc.trim().is_empty() {
            candidates.push(cc.trim().to_string());
        }
    }
    candidates.extend(["cc", "gcc", "clang"].map(String::from));
    candidates.into_iter().find(|cc| Command::new(cc).arg("--version").output().map(|o| o.status.success()).unwrap_or(false))
}

/// Write the sources into the private `dir` and compile them there; returns the
/// executable's path.
pub fn build_example(dir: &Path) -> Result<PathBuf> {
    let src = dir.join("queries.c");
    write_private(&src, QUERIES_C.as_bytes()).map_err(|e| MeasureError::io("cannot write", &src, e))?;
    let hdr = dir.join("tailprof.h");
    write_private(&hdr, TAILPROF_H.as_bytes()).map_err(|e| MeasureError::io("cannot write", &hdr, e))?;
    let cc = find_c_compiler().ok_or_else(|| {
        MeasureError::Invalid("no C compiler found (tried $CC, cc, gcc, clang); install one (e.g. `apt-get install gcc`) or set CC".into())
    })?;
    let exe = dir.join("queries");
    let out = Command::new(&cc)
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-I"])
        .arg(dir)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .map_err(|e| MeasureError::os(format!("cannot run the C compiler {cc}"), e))?;
    if !out.status.success() {
        return Err(MeasureError::CommandFailed(format!(
            "compiling {} with {cc} failed:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(exe)
}

/// One recording of the example.
#[derive(Debug, Clone)]
pub struct ExampleRun {
    pub trace: PathBuf,
    /// The example's own log of every query and function call.
    pub truth: BTreeMap<u64, Truth>,
    /// Lines of `record`'s and the example's output worth showing (warnings, the
    /// example's summary).
    pub messages: Vec<String>,
}

/// Record the example once with `tailprof record` (this executable, as a user would)
/// into `dir/STEM.trace`, its log in `dir/STEM.truth.log`.
pub fn record_example(dir: &Path, exe: &Path, period: u64, scale: u32, queries: u32, stem: &str) -> Result<ExampleRun> {
    let trace = dir.join(format!("{stem}.trace"));
    let log = dir.join(format!("{stem}.truth.log"));
    let me = std::env::current_exe().map_err(|e| MeasureError::os("cannot find the tailprof executable", e))?;
    let out = Command::new(me)
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .args(["-c", &period.to_string(), "--"])
        .arg(exe)
        .args(["--scale", &scale.to_string(), "--queries", &queries.to_string(), "--log"])
        .arg(&log)
        .output()
        .map_err(|e| MeasureError::os("cannot run `tailprof record`", e))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(MeasureError::CommandFailed(format!("`tailprof record` of the example failed: {}", stderr.trim())));
    }
    let messages = String::from_utf8_lossy(&out.stdout)
        .lines()
        .chain(stderr.lines())
        .filter(|l| l.contains("warning") || l.starts_with("queries:"))
        .map(String::from)
        .collect();
    let bytes = read_regular(&log, MAX_LOG_BYTES)
        .map_err(|e| MeasureError::io("cannot read the example's log", &log, e))?
        .ok_or_else(|| MeasureError::CommandFailed(format!("the example left no log at {}", log.display())))?;
    Ok(ExampleRun { trace, truth: parse_truth(&String::from_utf8_lossy(&bytes)), messages })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_embedded() {
        assert!(QUERIES_C.contains("transform_points"));
        assert!(TAILPROF_H.contains("tailprof"));
    }
}
