//! Stack views and exports on a small hand-built stack profile: folded stacks, the stack
//! and off-CPU JSON, pprof (decoded back with prost), flame graph SVGs, the Firefox
//! Profiler and Perfetto documents.

use prost::Message;
use serde_json::Value;
use tailprof_analyze::offcpu::OffState;
use tailprof_analyze::resolve::FunctionInfo;
use tailprof_analyze::stacks::{ItemStacks, OffRow, OffSlice, StackFilter, StackProfile, StackRow, StatusCount, TimedSample, Timeline};
use tailprof_present::{firefox, flamegraph, pprof, stacks};

fn f(name: &str, binary: &str) -> FunctionInfo {
    FunctionInfo { name: name.into(), binary: binary.into(), unknown_reason: None, source: None, first_line: None }
}

/// main → a → leaf 30 samples, main → b → leaf 70 (7 truncated), a path with a `;` in a
/// name; blocked 20 ms in main → wait ← kernel schedule.
fn profile() -> StackProfile {
    let functions = vec![
        f("main", "/bin/app"),
        f("a", "/bin/app"),
        f("b", "/bin/app"),
        f("leaf", "/bin/app"),
        f("wait", "/bin/app"),
        f("schedule", "[kernel.kallsyms]"),
        f("op;weird", "/bin/app"),
    ];
    let paths = vec![vec![0, 1, 3], vec![0, 2, 3], vec![0, 4, 5], vec![0, 6]];
    let stacks = vec![
        StackRow { path: 1, samples: 63, period: 63_000_000, complete: true, truncated: false },
        StackRow { path: 0, samples: 30, period: 30_000_000, complete: true, truncated: false },
        StackRow { path: 1, samples: 7, period: 7_000_000, complete: false, truncated: true },
        StackRow { path: 3, samples: 1, period: 1_000_000, complete: true, truncated: false },
    ];
    let off_cpu = vec![OffRow { path: 2, state: OffState::Blocked, ns: 20_000_000 }];
    let timeline = Timeline {
        samples: (0..10).map(|i| TimedSample { time_ns: 1_000_000 * i, pid: 7, tid: 8, path: (i % 2) as u32 }).collect(),
        off_cpu: vec![OffSlice { pid: 7, tid: 8, begin_ns: 10_000_000, end_ns: 30_000_000, state: OffState::Blocked, path: 2 }],
        wakes: Vec::new(),
    };
    StackProfile {
        event: "cpu-clock".into(),
        total_samples: 101,
        samples: 101,
        period: 101_000_000,
        statuses: vec![
            StatusCount { status: "complete", reason: "complete", samples: 94 },
            StatusCount { status: "copy_exhausted", reason: "copy exhausted", samples: 7 },
        ],
        functions,
        paths,
        stacks,
        off_cpu,
        runnable_ns: 0,
        blocked_ns: 20_000_000,
        items: vec![ItemStacks {
            id: 1,
            stacks: vec![StackRow { path: 0, samples: 30, period: 30_000_000, complete: true, truncated: false }],
            off_cpu: vec![],
            runnable_ns: 0,
            blocked_ns: 0,
            off_cpu_partial: false,
            noise: Default::default(),
        }],
        switches: 2,
        off_open_at_end: 0,
        off_double_outs: 0,
        filter: StackFilter::default(),
        kernel_symbols: None,
        causes: Vec::new(),
        cause_stats: Default::default(),
        read: None,
        timeline: Some(timeline),
    }
}

#[test]
fn folded_lines_merge_statuses_and_escape_names() {
    let p = profile();
    assert_eq!(stacks::folded(&p), "main;b;leaf 70\nmain;a;leaf 30\nmain;op:weird 1\n");
    assert_eq!(stacks::folded_off_cpu(&p), "[blocked];main;wait;schedule 20000000\n");
}

#[test]
fn stack_and_off_cpu_json() {
    let p = profile();
    let v = stacks::stacks_json(&p, Some(2));
    assert_eq!(v["samples"], 101);
    assert_eq!(v["stacks"][0]["frames"], serde_json::json!(["main", "b", "leaf"]));
    assert_eq!(v["stacks"][0]["samples"], 63);
    assert_eq!(v["stacks"][0]["complete"], true);
    assert_eq!(v["more_stacks"], 2);
    assert_eq!(v["statuses"]["copy_exhausted"], 7);
    let o = stacks::off_cpu_json(&p, None);
    assert_eq!(o["blocked_ns"], 20_000_000);
    assert_eq!(o["stacks"][0]["frames"], serde_json::json!(["main", "wait", "schedule"]));
    // Flat: self at the innermost user frame, not the kernel's schedule.
    assert_eq!(o["functions"][0]["function"], "wait"); // the innermost user frame
    let text = stacks::render_off_cpu(&p, None);
    assert!(text.contains("blocked 20.00 ms in wait ← main"), "{text}");
    let text = stacks::render_stacks(&p, None);
    assert!(text.contains("leaf ← b ← main"), "{text}");
    assert!(text.contains("copy exhausted"), "{text}");
}

#[test]
fn pprof_round_trips() {
    let p = profile();
    let gz = pprof::pprof_gzip(&p, &pprof::PprofOptions { off_cpu: true, ..Default::default() }).unwrap();
    assert_eq!(&gz[..2], &[0x1f, 0x8b]);
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw).unwrap();
    let prof = pprof::Profile::decode(&raw[..]).unwrap();
    let s = |i: i64| prof.string_table[i as usize].as_str();
    assert_eq!(s(0), "");
    let types: Vec<(&str, &str)> = prof.sample_type.iter().map(|t| (s(t.r#type), s(t.unit))).collect();
    assert_eq!(types, vec![("samples", "count"), ("cpu", "nanoseconds"), ("off_cpu", "nanoseconds")]);
    let name_of_loc = |id: u64| {
        let l = prof.location.iter().find(|l| l.id == id).unwrap();
        let f = prof.function.iter().find(|f| f.id == l.line[0].function_id).unwrap();
        s(f.name)
    };
    let first: Vec<&str> = prof.sample[0].location_id.iter().map(|&l| name_of_loc(l)).collect();
    assert_eq!(first, vec!["leaf", "b", "main"]); // leaf first
    let total: i64 = prof.sample.iter().map(|x| x.value[0]).sum();
    assert_eq!(total, 101);
    let off: Vec<&Vec<u64>> = prof.sample.iter().filter(|x| x.value[2] > 0).map(|x| &x.location_id).collect();
    assert_eq!(off.len(), 1);
    assert_eq!(name_of_loc(*off[0].last().unwrap()), "[blocked]");
}

/// Issue 23: a function with a source location (a JIT function's DEBUG_INFO) names its
/// file and line in pprof (`Function.filename`, `start_line`, the location's `Line`);
/// others keep their binary as the file name.
#[test]
fn pprof_names_jit_source_lines() {
    let mut p = profile();
    p.functions[0].source = Some("/srv/app.js:42".into());
    let name0 = p.functions[0].name.clone();
    let raw = pprof::pprof_profile(&p, &pprof::PprofOptions::default());
    let s = |i: i64| raw.string_table[i as usize].as_str();
    let f0 = raw.function.iter().find(|f| s(f.name) == name0).unwrap();
    assert_eq!((s(f0.filename), f0.start_line), ("/srv/app.js", 42));
    let loc = raw.location.iter().find(|l| l.line[0].function_id == f0.id).unwrap();
    assert_eq!(loc.line[0].line, 42);
    let f1 = raw.function.iter().find(|f| s(f.name) == p.functions[1].name).unwrap();
    assert_eq!((s(f1.filename), f1.start_line), (p.functions[1].binary.as_str(), 0));
}

#[test]
fn flame_graphs_are_svg() {
    let p = profile();
    let lines = flamegraph::folded_rows(&p, &p.stacks);
    let svg = flamegraph::flame_svg(&lines, "whole trace", "samples").unwrap();
    assert!(svg.contains("<svg") && svg.contains("leaf") && svg.contains("main"));
    let diff = flamegraph::differential_svg(&p, &p.items[0].stacks, &p.stacks, "diff").unwrap();
    assert!(diff.contains("<svg"));
    assert!(flamegraph::flame_svg(&[], "x", "samples").is_none());
    let html = flamegraph::flame_section_html(&p, None, &Default::default());
    assert!(html.contains("<iframe") && html.contains("srcdoc=\"&lt;"), "{}", &html[..200.min(html.len())]);
}

#[test]
fn firefox_and_perfetto_documents() {
    let p = profile();
    let text = firefox::firefox_json(&p, &Default::default()).unwrap().unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(v["meta"]["interval"].as_f64().unwrap() > 0.0);
    let threads = v["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 1);
    // 10 samples plus one off-CPU sample.
    assert_eq!(threads[0]["samples"]["length"], 11);
    let mut doc = serde_json::json!({"traceEvents": []});
    let (n, off) = tailprof_present::perfetto::add_stack_timeline(&mut doc, &p);
    assert_eq!((n, off), (10, 1));
    let ev = doc["traceEvents"].as_array().unwrap();
    assert_eq!(ev.iter().filter(|e| e["cat"] == "off-cpu").count(), 2);
    let sample = ev.iter().find(|e| e["cat"] == "stack").unwrap();
    assert_eq!(sample["name"], "leaf");
    let sf = sample["sf"].as_str().unwrap();
    assert_eq!(doc["stackFrames"][sf]["name"], "leaf");
    let parent = doc["stackFrames"][sf]["parent"].as_str().unwrap();
    assert_eq!(doc["stackFrames"][parent]["name"], "a");
}

/// The leaf function name of each sample of the Firefox document's first thread.
fn firefox_leaf_names(v: &Value) -> Vec<String> {
    let t = &v["threads"][0];
    let strings = t["stringArray"].as_array().or_else(|| v["shared"]["stringArray"].as_array()).expect("a string table");
    let at = |col: &Value, i: u64| col[i as usize].as_u64().unwrap();
    t["samples"]["stack"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let frame = at(&t["stackTable"]["frame"], s.as_u64().unwrap());
            let func = at(&t["frameTable"]["func"], frame);
            let name = at(&t["funcTable"]["name"], func);
            strings[name as usize].as_str().unwrap().to_owned()
        })
        .collect()
}

/// Issue 23: a function with a source location (a JIT function's DEBUG_INFO) shows it in
/// flame graphs (`name (file:line)`, in the frame and its tooltip); functions without
/// one keep their bare name, so native frames merge as before.
#[test]
fn flame_graphs_name_jit_source_lines() {
    let mut p = profile();
    p.functions[3].source = Some("/srv/app.js:42".into());
    let lines = flamegraph::folded_rows(&p, &p.stacks);
    assert_eq!(lines, ["main;a;leaf (/srv/app.js:42) 30", "main;b;leaf (/srv/app.js:42) 70", "main;op:weird 1"]);
    let svg = flamegraph::flame_svg(&lines, "whole trace", "samples").unwrap();
    assert!(svg.contains("<title>leaf (/srv/app.js:42) (70 samples, "), "{svg}");
    assert!(svg.contains("<title>main (101 samples, "), "{svg}");
    let diff = flamegraph::differential_svg(&p, &p.items[0].stacks, &p.stacks, "diff").unwrap();
    assert!(diff.contains("leaf (/srv/app.js:42)"));
}

/// Issue 23: the Firefox export names a function with a source location `name
/// (file:line)` (fxprof-processed-profile 0.8.1 writes no file or line columns); others
/// keep their name.
#[test]
fn firefox_names_jit_source_lines() {
    let mut p = profile();
    p.functions[3].source = Some("/srv/app.js:42".into());
    let text = firefox::firefox_json(&p, &Default::default()).unwrap().unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let leaves = firefox_leaf_names(&v);
    assert_eq!(leaves.iter().filter(|n| *n == "leaf (/srv/app.js:42)").count(), 10, "{leaves:?}");
    let plain = firefox::firefox_json(&profile(), &Default::default()).unwrap().unwrap();
    let v: Value = serde_json::from_str(&plain).unwrap();
    assert_eq!(firefox_leaf_names(&v).iter().filter(|n| *n == "leaf").count(), 10);
}

/// Issue 23 item 3: at line granularity (`export --lines`) the rows of one function at
/// several lines are one pprof `Function` (its `start_line` the function's first line)
/// and one `Location` per line, whose `Line.line` is that line (like `pprof -lines`).
#[test]
fn pprof_lines_one_function_one_location_per_line() {
    let mut p = profile();
    for (i, line) in [(1, 20), (2, 22)] {
        p.functions[i] = FunctionInfo {
            source: Some(format!("/src/work.c:{line}")),
            first_line: Some("/src/work.c:12".into()),
            ..f("work", "/bin/app")
        };
    }
    let prof = pprof::pprof_profile(&p, &Default::default());
    let s = |i: i64| prof.string_table[i as usize].as_str();
    let work: Vec<&pprof::Function> = prof.function.iter().filter(|f| s(f.name) == "work").collect();
    assert_eq!(work.len(), 1, "{:?}", prof.function);
    assert_eq!((s(work[0].filename), work[0].start_line), ("/src/work.c", 12));
    let mut lines: Vec<i64> = prof.location.iter().filter(|l| l.line[0].function_id == work[0].id).map(|l| l.line[0].line).collect();
    lines.sort_unstable();
    assert_eq!(lines, [20, 22]);
    // The samples keep their lines: main → work:22 (b's path) is the first stack.
    let leaf_parent = prof.location.iter().find(|l| l.id == prof.sample[0].location_id[1]).unwrap();
    assert_eq!(leaf_parent.line[0].line, 22);
}
