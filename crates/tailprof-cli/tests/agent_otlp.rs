//! `tailprof agent --otlp`: documented in `--help`, checked before anything starts (a bad
//! URL is one line naming the option and a non-zero exit). What arrives at a receiver is
//! checked by `crates/tailprof-agent/tests/otlp.rs`.

use std::process::Command;

fn tailprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tailprof"))
}

#[test]
fn otlp_is_in_the_help() {
    let out = tailprof().args(["agent", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--otlp <URL>"), "{help}");
    assert!(help.contains("/v1development/profiles"), "{help}");
}

#[test]
fn a_bad_otlp_url_is_one_line_and_nonzero() {
    let tmp = tempfile::tempdir().unwrap();
    for (args, what) in [(vec!["--otlp", "https://collector:4318"], "--otlp"), (vec!["--otlp", "http://"], "--otlp")] {
        let out = tailprof().args(["agent", "--store"]).arg(tmp.path().join("s")).args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(what) && err.contains("OTLP"), "{err}");
    }
    // the config-file key, with its line number
    let conf = tmp.path().join("agent.conf");
    std::fs::write(&conf, "window = 5s\notlp = ftp://x\n").unwrap();
    let out = tailprof().args(["agent", "--config"]).arg(&conf).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2") && err.contains("otlp"), "{err}");
}
