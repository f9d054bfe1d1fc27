//! `skip` as CI sees it: run this test binary's `child_skips` in a child process with
//! `TAILPROF_SKIP_LOG` / `TAILPROF_REQUIRE` set, and read its exit status and log.

use std::path::PathBuf;
use std::process::{Command, Output};

use tailprof_testkit::{skip, Need};

const CHILD: &str = "TAILPROF_TESTKIT_CHILD";

/// Does nothing in a normal run; the child the other tests start skips twice.
#[test]
fn child_skips() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    skip(Need::Fact, "a fact about this machine");
    skip(Need::Go, "no go\there\n(second line)");
}

fn run_child(log: &PathBuf, require: Option<&str>) -> Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_skips", "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .env("TAILPROF_SKIP_LOG", log)
        .env_remove("TAILPROF_REQUIRE");
    if let Some(r) = require {
        cmd.env("TAILPROF_REQUIRE", r);
    }
    cmd.output().unwrap()
}

fn scratch_log(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("tailprof-testkit-{tag}-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn skips_are_logged_one_line_each_and_pass_when_not_required() {
    let log = scratch_log("log");
    let out = run_child(&log, Some("cc,root"));
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0][0], "fact");
    assert_eq!(lines[1][0], "go");
    assert!(lines[1][1].ends_with("::child_skips") && lines[1][1].starts_with("skip::"), "{}", lines[1][1]);
    assert_eq!(lines[1][2], "no go here (second line)");
    assert!(String::from_utf8_lossy(&out.stderr).contains("skipping (go): no go here"));
}

#[test]
fn a_required_need_that_skips_fails_the_test() {
    for require in ["go", "root, go", "all"] {
        let log = scratch_log("req");
        let out = run_child(&log, Some(require));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        assert!(!out.status.success(), "TAILPROF_REQUIRE={require} should fail the skipping test");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stdout.contains("TAILPROF_REQUIRE names `go`") || stderr.contains("TAILPROF_REQUIRE names `go`"), "{stdout}\n{stderr}");
        // The fact before it never fails; the failing skip is still logged.
        assert_eq!(text.lines().count(), 2, "{text}");
    }
}
