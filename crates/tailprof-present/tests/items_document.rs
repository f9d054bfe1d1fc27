//! The items document (`analyze::items::document`) as JSON and text: every optional
//! section present survives serialization with its values, and the text and the JSON
//! count the same items, slow items, off-CPU stacks, causes and losses.

use serde_json::Value;
use tailprof_analyze::causes::{During, PathState, PreemptedBy, WokenBy};
use tailprof_analyze::items::document::{ItemEntry, ItemEvent, ItemList, ItemMemory, ItemOffCpu, ItemSegment, ItemWaits, ItemsDocument};
use tailprof_analyze::items::{Ambiguity, ClassStats, Estimator, ItemFunction, ItemRow, ItemsReport, SwitchStats};
use tailprof_analyze::offcpu::OffState;
use tailprof_analyze::stack_explain::TimeSplit;
use tailprof_analyze::stacks::StatusCount;
use tailprof_format::losses::LossTable;
use tailprof_format::{LossKind, TraceStats};
use tailprof_present::items::{document_json, render_document};

fn row(id: u64, duration_ns: u64, anomalous: bool) -> ItemRow {
    ItemRow {
        pid: 100,
        tid: 101,
        id,
        class: Some("GET".into()),
        begin_ns: 1_000_000 * id,
        end_ns: 1_000_000 * id + duration_ns,
        duration_ns,
        samples: 12,
        anomaly_score: if anomalous { 9.5 } else { 0.4 },
        anomalous,
        responsible: if anomalous { vec!["parse".into()] } else { vec![] },
        open_at_end: false,
        switching: None,
        current: vec![],
        ambiguous_samples: 0,
        ambiguous: false,
        trace_id: None,
        span_id: None,
        functions: vec![ItemFunction {
            name: "parse".into(),
            binary: "/bin/app".into(),
            samples: 12,
            first_ns: 1_000_000 * id,
            last_ns: 1_000_000 * id + 500,
            span_ns: 500,
            // Not a short decimal: its digits must come out as computed (no re-parse).
            est_ns: 15.254114980095727,
            reliable: true,
            source: None,
        }],
        events: Default::default(),
    }
}

fn entry(row: ItemRow, partial: bool) -> ItemEntry {
    let anomalous = row.anomalous;
    ItemEntry {
        split: TimeSplit { cpu_ns: 1_000, off_cpu_ns: Some(3_000), runnable_ns: Some(1_000), blocked_ns: Some(2_000) },
        off_cpu_partial: partial,
        off_cpu: vec![ItemOffCpu {
            state: OffState::Blocked,
            ns: 2_000,
            frames: vec!["main".into(), "read".into(), "schedule".into()],
            kernel: vec![false, false, true],
        }],
        noise: Some(tailprof_analyze::causes::Noise { kernel_samples: 3, page_fault_ns: 750, ..Default::default() }),
        excess_resolvable: anomalous.then_some(true),
        causes: Some(ItemWaits {
            woken_by: vec![WokenBy {
                ns: 2_000,
                pid: 7,
                tid: 8,
                comm: "worker".into(),
                at_ns: 2_500,
                item: Some(42),
                class: Some("bg".into()),
                irq: None,
                frames: vec!["wake".into()],
                during: vec![During { state: PathState::Cpu, ns: 1_500, frames: vec!["work".into()] }],
            }],
            preempted_by: vec![PreemptedBy { ns: 1_000, pid: 9, tid: 9, comm: "hog".into(), item: None }],
        }),
        memory: Some(ItemMemory { mem_bytes: 640, mem_gbps: 1.25 }),
        events: vec![ItemEvent { time_ns: 1_000_100, tid: 101, name: "query".into(), value: Some(3) }],
        segments: vec![ItemSegment { tid: 102, begin_ns: 1_000_200, end_ns: 1_000_300 }],
        measured_runnable_ns: 1_000,
        measured_blocked_ns: 2_000,
        row,
    }
}

/// Three items of which two are listed (`more_items` 1), one slow, with stacks, causes,
/// memory, events, segments and a loss.
fn list() -> ItemList {
    let rows = [row(1, 4_000, false), row(2, 40_000, true), row(3, 5_000, false)];
    let mut stats = TraceStats::default();
    stats.add_loss(LossKind::Markers, 3);
    let report = ItemsReport {
        items: vec![entry(rows[1].clone(), false), entry(rows[2].clone(), true)],
        outside_samples: 5,
        total_samples: 41,
        shown_estimator: Estimator::CountTimesInterval,
        mean_interval_ns: 250.0,
        interval_source: "period".into(),
        lost_markers: 3,
        unmatched_markers: 0,
        open_at_end: 0,
        markers: 6,
        mode: "markers".into(),
        duration_source: "markers".into(),
        event: "cpu-clock".into(),
        min_reliable_samples: 5,
        mad_k: 3.5,
        responsible_share: 0.6,
        classes: vec![ClassStats { class: Some("GET".into()), items: 3, median_duration_ns: 5_000, mad_ns: 1_000, anomalous: 1 }],
        switching: SwitchStats::default(),
        ambiguity: Ambiguity::default(),
        item_events: 0,
        item_events_outside: 0,
    };
    ItemList {
        report,
        more_items: Some(1),
        switches: 17,
        stack_statuses: vec![StatusCount { status: "complete", reason: "complete", samples: 36 }],
        losses: LossTable::new(&stats, None),
        total_items: 3,
        anomalous: vec![rows[1].clone()],
    }
}

#[test]
fn every_optional_section_reaches_the_json_with_its_values() {
    let doc = ItemsDocument::List(Box::new(list()));
    let v: Value = serde_json::from_str(&document_json(&doc).unwrap()).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["more_items"], 1);
    assert_eq!(v["switches"], 17);
    assert_eq!(v["stack_statuses"][0]["samples"], 36);
    assert_eq!(v["losses"][0]["key"], "lost_markers");
    assert_eq!(v["losses"][0]["count"], 3);
    assert_eq!(v["warnings"][0]["kind"], "lost_markers");
    assert_eq!(v["outside_samples"], 5);
    assert_eq!(v["classes"][0]["median_duration_ns"], 5_000);
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    let (slow, partial) = (&items[0], &items[1]);
    // The row itself, flattened.
    assert_eq!(slow["id"], 2);
    assert_eq!(slow["anomalous"], true);
    assert_eq!(slow["functions"][0]["name"], "parse");
    // The split, off-CPU stacks, the flags that appear only when they hold.
    assert_eq!((slow["cpu_ns"].as_u64(), slow["off_cpu_ns"].as_u64()), (Some(1_000), Some(3_000)));
    assert_eq!(slow["off_cpu"][0]["state"], "blocked");
    assert_eq!(slow["off_cpu"][0]["frames"], serde_json::json!(["main", "read", "schedule"]));
    assert!(slow["off_cpu"][0].get("kernel").is_none());
    assert_eq!(slow["excess_resolvable"], true);
    assert!(partial.get("excess_resolvable").is_none());
    assert!(slow.get("off_cpu_partial").is_none());
    assert_eq!(partial["off_cpu_partial"], true);
    // Causes, memory, events, segments.
    assert_eq!(slow["woken_by"][0]["comm"], "worker");
    assert_eq!(slow["woken_by"][0]["during"][0]["state"], "cpu");
    assert_eq!(slow["preempted_by"][0]["comm"], "hog");
    assert_eq!((slow["mem_bytes"].as_u64(), slow["mem_gbps"].as_f64()), (Some(640), Some(1.25)));
    assert_eq!(slow["events"][0]["name"], "query");
    assert_eq!(slow["segments"][0]["tid"], 102);
    // Nothing the text needs leaks into the JSON.
    for k in ["measured_runnable_ns", "measured_blocked_ns", "total_items", "anomalous_items", "row", "split", "causes", "memory"] {
        assert!(slow.get(k).is_none() && v.get(k).is_none(), "{k}");
    }
}

#[test]
fn json_floats_are_printed_as_computed_not_reparsed() {
    // The JSON used to be printed, parsed back and printed again to add `losses`, which
    // moved some floats by one unit in the last place (15.254114980095727 → …729).
    let doc = ItemsDocument::List(Box::new(list()));
    let s = document_json(&doc).unwrap();
    assert!(s.contains("\"est_ns\": 15.254114980095727"), "{s}");
    let t = LossTable::default();
    let s = tailprof_present::losses::document_with_losses(&serde_json::json!({"x": 15.254114980095727}), &t).unwrap();
    assert!(s.contains("\"x\": 15.254114980095727"), "{s}");
}

#[test]
fn text_and_json_agree_on_counts() {
    let l = list();
    let doc = ItemsDocument::List(Box::new(l.clone()));
    let v: Value = serde_json::from_str(&document_json(&doc).unwrap()).unwrap();
    let text = render_document(&doc);
    // Items: the summary's total and slow count, one table row per listed item, the rest.
    assert!(text.contains(&format!("# Items:     {} ({} anomalous)", l.total_items, l.anomalous.len())), "{text}");
    let listed: Vec<u64> = v["items"].as_array().unwrap().iter().map(|i| i["id"].as_u64().unwrap()).collect();
    let table_ids: Vec<u64> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("ID"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty() && !l.starts_with('('))
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(table_ids, listed, "{text}");
    assert!(text.contains(&format!("({} more items; --top 0 shows all)", v["more_items"])), "{text}");
    // Slow items: every one in the text (not only the listed ones).
    assert_eq!(text.matches(" vs median ").count(), l.anomalous.len(), "{text}");
    // Off-CPU: one line per listed item with off-CPU time, one per stack (at most 3).
    let off_lines = text.lines().filter(|s| s.starts_with("  item ") && s.contains(" + runnable ")).count();
    assert_eq!(off_lines, listed.len(), "{text}");
    let stacks: usize = v["items"].as_array().unwrap().iter().map(|i| i["off_cpu"].as_array().unwrap().len().min(3)).sum();
    let stack_lines = text.lines().filter(|s| s.starts_with("      blocked ") || s.starts_with("      runnable ")).count();
    assert_eq!(stack_lines, stacks, "{text}");
    // Losses: one text row per JSON row.
    let loss_rows = v["losses"].as_array().unwrap().len();
    let block: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("losses (worst first):")).skip(1).collect();
    assert_eq!(block.len(), loss_rows, "{text}");
}

/// `--explain`: the explanation by function, by stack and by cause, with causes recorded
/// and a split.
fn explained(recorded: bool) -> ItemsDocument {
    use tailprof_analyze::causes::{CauseExplanation, CauseShare};
    use tailprof_analyze::items::document::{CauseSection, ItemExplain};
    use tailprof_analyze::items::{Baseline, Explanation, FunctionDiff};
    use tailprof_analyze::stack_explain::{OffDiff, StackDiff, StackExplanation};
    let item = row(2, 40_000, true);
    let split = TimeSplit { cpu_ns: 30_000, off_cpu_ns: Some(10_000), runnable_ns: Some(4_000), blocked_ns: Some(6_000) };
    let functions = Explanation {
        item: item.clone(),
        baseline: Baseline { class: item.class.clone(), items: 3, median_duration_ns: 5_000, functions: vec![] },
        excess_ns: 35_000,
        estimator: Estimator::CountTimesInterval,
        diffs: vec![FunctionDiff {
            name: "parse".into(),
            item_ns: 3_000.0,
            median_ns: 0.0,
            delta_ns: 3_000.0,
            share_of_excess: 1.0,
            reliable: true,
            source: None,
        }],
        responsible: vec!["parse".into()],
    };
    let stacks = StackExplanation {
        id: 2,
        class: item.class.clone(),
        class_items: 3,
        duration_ns: 40_000,
        median_duration_ns: 5_000,
        excess_ns: 35_000,
        anomalous: true,
        split,
        interval_ns: 250.0,
        resolution_ns: 1_250.0,
        resolvable: true,
        note: Some("a note".into()),
        stacks: vec![StackDiff {
            path: 4,
            frames: vec!["main".into(), "parse".into()],
            samples: 12,
            est_ns: 3_000.0,
            median_ns: 0.0,
            delta_ns: 3_000.0,
        }],
        off_cpu: vec![OffDiff {
            path: 5,
            frames: vec!["main".into(), "read".into()],
            kernel: vec![false, false],
            state: OffState::Blocked,
            ns: 6_000,
            median_ns: 0.0,
            delta_ns: 6_000.0,
        }],
        incomplete_samples: 0,
    };
    let causes = CauseSection(CauseExplanation {
        id: 2,
        recorded,
        excess_ns: 35_000,
        median_duration_ns: 5_000,
        split: Some(vec![CauseShare { cause: PathState::Blocked, ns: 6_000, median_ns: 0, excess_ns: 6_000 }]),
        cpu_stacks: vec![],
        woken_by: entry(item.clone(), false).causes.unwrap().woken_by,
        preempted_by: vec![],
        noise: tailprof_analyze::causes::Noise { kernel_samples: 3, page_fault_ns: 750, ..Default::default() },
        noise_shares: vec![],
    });
    ItemsDocument::Explain(Box::new(ItemExplain { functions, stacks, causes, losses: LossTable::default() }))
}

/// Issue 23: `--explain` shows a JIT function's `file:line` (jitdump DEBUG_INFO) next to
/// its name in the text and keeps it in the JSON diff.
#[test]
fn the_explanation_shows_jit_source_lines() {
    let mut doc = explained(true);
    if let ItemsDocument::Explain(x) = &mut doc {
        x.functions.diffs[0].source = Some("app.js:12".into());
    }
    let text = render_document(&doc);
    assert!(text.contains("parse (app.js:12)"), "{text}");
    let v: Value = serde_json::from_str(&document_json(&doc).unwrap()).unwrap();
    assert_eq!(v["diffs"][0]["source"], "app.js:12");
    let plain: Value = serde_json::from_str(&document_json(&explained(true)).unwrap()).unwrap();
    assert!(plain["diffs"][0].get("source").is_none(), "left out when unknown");
}

#[test]
fn the_explanation_reaches_the_json_with_every_section() {
    let v: Value = serde_json::from_str(&document_json(&explained(true)).unwrap()).unwrap();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "baseline",
            "blocked_ns",
            "causes",
            "cpu_ns",
            "diffs",
            "estimator",
            "excess_ns",
            "item",
            "losses",
            "noise",
            "noise_shares",
            "off_cpu",
            "off_cpu_ns",
            "preempted_by",
            "resolution_note",
            "resolution_ns",
            "resolvable",
            "responsible",
            "runnable_ns",
            "schema_version",
            "stacks",
            "woken_by"
        ]
    );
    assert_eq!(
        v["stacks"][0],
        serde_json::json!({"frames": ["main", "parse"], "samples": 12, "est_ns": 3000.0, "median_ns": 0.0, "delta_ns": 3000.0})
    );
    assert_eq!(
        v["off_cpu"][0],
        serde_json::json!({"state": "blocked", "ns": 6000, "frames": ["main", "read"], "median_ns": 0.0, "delta_ns": 6000.0})
    );
    assert_eq!(v["causes"][0]["cause"], "blocked");
    assert_eq!(v["woken_by"][0]["comm"], "worker");
    assert_eq!(v["resolution_note"], "a note");
    // Without recorded wakeups: no woken_by / preempted_by, the split stays.
    let v: Value = serde_json::from_str(&document_json(&explained(false)).unwrap()).unwrap();
    assert!(v.get("woken_by").is_none() && v.get("preempted_by").is_none() && v.get("causes").is_some());
    // The text names the same waker.
    let text = render_document(&explained(true));
    assert!(text.contains("woken by worker (pid 7, tid 8), inside item 42 (bg)"), "{text}");
    assert!(text.contains("Responsible: parse"), "{text}");
}
