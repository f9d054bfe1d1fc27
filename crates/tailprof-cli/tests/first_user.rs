//! What a new user hits first (issue 18): the README's command lines parse, flags that
//! do not apply are refused with a reason, and the views work on traces without items.
//! These tests need no perf_event_open: they read committed traces and empty stores.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tailprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tailprof"))
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs `tailprof ARGS` with `{store}` replaced by `store`.
fn run(args: &[&str], store: &Path) -> Output {
    let s = store.to_str().unwrap();
    let args: Vec<String> = args.iter().map(|a| a.replace("{store}", s)).collect();
    tailprof()
        .args(&args)
        .env("TAILPROF_CACHE_DIR", "off")
        .output()
        .unwrap()
}

fn assert_ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: exit {:?}: {}",
        o.status.code(),
        stderr(o)
    );
}

/// One line on stderr, non-zero exit, mentioning `needle`.
fn assert_refused(o: &Output, needle: &str, what: &str) {
    assert!(
        !o.status.success(),
        "{what}: should fail, printed {}",
        stdout(o)
    );
    let e = stderr(o);
    assert!(
        e.contains(needle),
        "{what}: error should mention {needle:?}: {e}"
    );
    assert_eq!(
        e.trim_end().lines().count(),
        1,
        "{what}: one error line: {e}"
    );
}

/// The README's store commands with relative times: clap took `-2h` for a flag.
#[test]
fn readme_relative_times_parse() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    std::fs::create_dir(&store).unwrap();
    for line in [
        "diff --store {store} --a -2h..-1h --b 1h",
        "diff --store {store} --a -2h..-1h --b -1h..now --json",
        "top --store {store} --from -2h",
        "top --store {store} --from -2h --to -1h",
        "top --store {store} --since -2h",
        "top --store {store} --since 1h",
        "items --store {store} --from -2h",
        "items --store {store} --since -2h",
        "items --store {store} --since 1d",
    ] {
        let args: Vec<&str> = line.split(' ').collect();
        assert_ok(&run(&args, &store), line);
    }
    // A malformed relative time is still an error, about the value.
    let o = run(&["top", "--store", "{store}", "--from", "-2x"], &store);
    assert_refused(&o, "--from", "top --from -2x");
}
