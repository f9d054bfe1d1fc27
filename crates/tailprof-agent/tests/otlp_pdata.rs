//! The agent's OTLP requests as the OpenTelemetry Collector reads them: a window (several
//! processes; named, unnamed, unmapped and truncated stacks) is encoded by
//! `otlp::window_request` and decoded by the Collector's own data model
//! (`go.opentelemetry.io/collector/pdata/pprofile`, the code behind its `otlp` receiver)
//! in `tests/otlp_pdata/main.go`, which also re-indexes it into a fresh dictionary
//! (failing on any reference out of range). The samples per (pid, leaf function) must be
//! those of the window's rows named through the store's symbol table.
//!
//! Skips with a message when Go is missing or older than the module needs (1.26;
//! GOTOOLCHAIN=local: no toolchain download), or the Go modules cannot be fetched.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use prost::Message;
use tailprof_agent::writer::WindowBatch;
use tailprof_store::schema::{stack_id, SampleRow, StoreFrame, SymbolRow, KERNEL_BUILD_ID};
use tailprof_store::Store;

fn row(pid: u32, comm: &str, binary: &str, frames: &[(&str, u64)], count: u64, truncated: bool) -> SampleRow {
    let frames: Vec<StoreFrame> = frames.iter().map(|&(b, o)| StoreFrame { build_id: b.into(), offset: o }).collect();
    SampleRow {
        window_start_us: 1_700_000_000_000_000,
        window_end_us: 1_700_000_010_000_000,
        pid,
        comm: comm.into(),
        event: "cpu-clock".into(),
        binary: binary.into(),
        stack_id: stack_id(&frames),
        frames,
        truncated,
        count,
        period: count * 20_408_163,
    }
}

#[test]
fn the_collectors_pdata_decodes_the_request_with_the_stored_counts_and_names() {
    let go_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp_pdata");
    // Go is often at /usr/local/go/bin/go and not on PATH: tailprof_testkit::go() looks there too.
    let go = tailprof_testkit::go()
        .filter(|go| Command::new(go).arg("version").env("GOTOOLCHAIN", "local").output().is_ok_and(|o| o.status.success()));
    let Some(go) = go else {
        tailprof_testkit::skip(
            tailprof_testkit::Need::Go,
            "no Go toolchain (the check decodes with the OpenTelemetry Collector's Go pdata)",
        );
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(&tmp.path().join("store")).unwrap();
    let app = "0123456789abcdef0123456789abcdef01234567";
    let libc = "89abcdef0123456789abcdef0123456789abcdef";
    let table = |bid: &str, bin: &str, fns: &[(u64, u64, &str)]| -> Vec<SymbolRow> {
        fns.iter()
            .map(|&(start, size, name)| SymbolRow { build_id: bid.into(), binary: bin.into(), start, size, name: name.into() })
            .collect()
    };
    store.ensure_dir(&store.symbols_dir()).unwrap();
    tailprof_store::write_symbols(
        &store.symbols_file(app).unwrap(),
        &table(app, "/srv/app", &[(0x1000, 0x100, "main"), (0x1100, 0x80, "handle"), (0x1180, 0x80, "parse")]),
    )
    .unwrap();
    tailprof_store::write_symbols(&store.symbols_file(libc).unwrap(), &table(libc, "/lib/libc.so.6", &[(0x9000, 0x200, "memcpy")]))
        .unwrap();
    let rows = vec![
        row(100, "app", "/srv/app", &[(app, 0x1190), (app, 0x1120), (app, 0x1010)], 40, false),
        row(100, "app", "/srv/app", &[(app, 0x1120), (app, 0x1010)], 25, false),
        row(100, "app", "/lib/libc.so.6", &[(libc, 0x9010), (app, 0x1190), (app, 0x1010)], 9, false),
        row(100, "app", "/lib/libc.so.6", &[(libc, 0x9010)], 3, true),
        row(200, "worker", "/srv/app", &[(app, 0x1190), (app, 0x1010)], 7, false),
        // a binary with no symbol table in the store, the kernel marker, an unmapped frame
        row(200, "worker", "/opt/x", &[("nobuildid-00ff", 0x44), (app, 0x1010)], 2, false),
        row(300, "idle", "[kernel]", &[(KERNEL_BUILD_ID, 0x7fff_ffff_ffff_ffff)], 11, false),
        row(300, "idle", "[unknown]", &[("", 0xdead)], 1, false),
    ];
    let w = WindowBatch {
        host: "h".into(),
        start_us: rows[0].window_start_us,
        end_us: rows[0].window_end_us,
        samples: rows.iter().map(|r| r.count).sum(),
        lost_samples: 0,
        losses: Default::default(),
        dropped_rows: 0,
        events: vec!["cpu-clock".into()],
        rows: rows.clone(),
        items: Vec::new(),
        latency: Vec::new(),
    };
    let body = tailprof_agent::otlp::window_request(&store, &w).encode_to_vec();
    let file = tmp.path().join("window.otlp.pb");
    std::fs::write(&file, &body).unwrap();

    let out = Command::new(&go)
        .args(["run", "."])
        .arg(&file)
        .current_dir(&go_dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=readonly")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let env_problem = [
            "requires go >=",
            "go.mod requires go",
            "dial tcp",
            "no such host",
            "i/o timeout",
            "proxy.golang.org",
            "connection refused",
            "TLS handshake",
            "toolchain",
        ];
        if env_problem.iter().any(|p| stderr.contains(p)) {
            tailprof_testkit::skip(
                tailprof_testkit::Need::GoModules,
                format_args!("the Go check cannot be built here (Go >= 1.26 and the module proxy are needed): {}", stderr.trim()),
            );
            return;
        }
        panic!("the Go check failed: {stderr}");
    }
    let got: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert!(got["error"].is_null(), "pdata rejected the request: {}", got["error"]);

    // the same from the rows: leaf named by the store's table, else binary+offset
    let mut want: BTreeMap<String, i64> = BTreeMap::new();
    let names = |bid: &str, off: u64| -> Option<String> {
        let t = tailprof_store::StoreReader::new(store.clone()).symbols(bid).ok()?;
        tailprof_analyze::store_query::lookup(&t, off).map(|r| r.name.clone())
    };
    for r in &rows {
        let f = &r.frames[0];
        let name = names(&f.build_id, f.offset)
            .unwrap_or_else(|| format!("{}+0x{:x}", if f.build_id.is_empty() { "" } else { r.binary.as_str() }, f.offset));
        *want.entry(format!("{} {name}", r.pid)).or_insert(0) += r.count as i64;
    }
    let leaves: BTreeMap<String, i64> = got["leaves"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_i64().unwrap())).collect();
    assert_eq!(leaves, want);
    assert_eq!(got["samples"].as_i64().unwrap(), rows.iter().map(|r| r.count as i64).sum::<i64>());
    assert_eq!(got["resources"].as_i64().unwrap(), 3, "one resource per (pid, comm)");
    // cpu-clock: a samples/count and a cpu/nanoseconds profile per resource
    assert_eq!(got["profiles"].as_i64().unwrap(), 6);
    // names came from the tables, not from the fallback
    assert!(want.contains_key("100 parse") && want.contains_key("100 memcpy") && want.contains_key("200 /opt/x+0x44"), "{want:?}");
}
