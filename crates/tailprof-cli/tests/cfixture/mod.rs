//! C test programs: `tests/programs/*.c` and sources held by the tests, compiled with the
//! project's `include/` (tailprof.h), frame pointers and debug info.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `tests/programs/NAME.c` compiled into `DIR/NAME` with `defines` (e.g.
/// `"-DTAILPROF_TEST_AGENT"`); `None` after a skip when there is no C compiler.
#[allow(dead_code)] // not every test binary builds a program of tests/programs
pub fn compile(dir: &Path, name: &str, defines: &[&str]) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs").join(format!("{name}.c"));
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    compile_source(dir, name, &src, defines)
}

/// `src` written to `DIR/NAME.c` and compiled into `DIR/NAME`; `None` after a skip when
/// there is no C compiler.
#[allow(dead_code)] // not every test binary holds its own sources
pub fn compile_source(dir: &Path, name: &str, src: &str, defines: &[&str]) -> Option<PathBuf> {
    let Some(cc) = tailprof_testkit::c_compiler() else {
        tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, "no C compiler");
        return None;
    };
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let out = dir.join(name);
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
    let st = Command::new(cc)
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread"])
        .args(defines)
        .arg("-I")
        .arg(&include)
        .arg("-o")
        .arg(&out)
        .arg(&c)
        .status()
        .unwrap();
    assert!(st.success(), "cc failed on {}", c.display());
    Some(out)
}
