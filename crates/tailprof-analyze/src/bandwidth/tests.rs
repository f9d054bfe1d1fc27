//! Tests of the bandwidth analysis against synthetic recordings with known truth.

use super::synth::{generate, trace_bytes, Arrivals, Phase, SynthConfig};
use super::*;
use tailprof_format::Record;

fn run(cfg: &SynthConfig, opts: &BandwidthOptions) -> (BandwidthReport, synth::Truth) {
    let (h, records, truth) = generate(cfg);
    let mut b = BandwidthBuilder::new(&h, opts).unwrap();
    for r in &records {
        b.handle_record(r);
    }
    (b.finish().unwrap(), truth)
}

/// Share of non-gap bins whose interval (raw or corrected) contains the true bandwidth.
fn coverage(r: &BandwidthReport, truth: &synth::Truth, corrected: bool) -> f64 {
    let bins: Vec<&BinRow> = r.bins.iter().filter(|b| !b.gap && b.width_ns == r.bin_ns).collect();
    let inside = bins
        .iter()
        .filter(|b| {
            let t = truth.mean_gbps(b.start_ns, b.start_ns + b.width_ns);
            let (lo, hi) = if corrected { (b.gbps_corrected_low, b.gbps_corrected_high) } else { (b.gbps_low, b.gbps_high) };
            lo <= t && t <= hi
        })
        .count();
    inside as f64 / bins.len() as f64
}

#[test]
fn estimate_within_its_error_bars_poisson_samples() {
    let cfg = SynthConfig { seed: 7, ..Default::default() };
    let (r, truth) = run(&cfg, &BandwidthOptions::default());
    assert_eq!(r.event, "MEM_LOAD_RETIRED.L3_MISS");
    assert_eq!((r.method.as_str(), r.period, r.bin_ns), ("pebs", 1009, 100_000));
    assert!(r.bins.len() >= 1999, "{}", r.bins.len());
    let c = coverage(&r, &truth, false);
    assert!(c >= 0.95, "coverage {c}");
    // The bars are not trivially wide: in the 12 GB/s phases (about 19 samples per bin)
    // the 95% interval spans well under ±60% of the truth.
    let high: Vec<&BinRow> = r.bins.iter().filter(|b| truth.mean_gbps(b.start_ns, b.start_ns + b.width_ns) == 12.0).collect();
    let rel = high.iter().map(|b| (b.gbps_high - b.gbps_low) / 12.0).sum::<f64>() / high.len() as f64;
    assert!(rel < 1.2 && rel > 0.5, "relative width {rel}");
    // Totals and the mean.
    let expected = truth.bytes(truth.start(), truth.end());
    let got = r.total_bytes as f64;
    assert!((got - expected).abs() / expected < 0.02, "{got} vs {expected}");
    assert!(r.summary.mean_gbps_low <= 7.0 && 7.0 <= r.summary.mean_gbps_high, "{:?}", r.summary);
    assert_eq!(r.samples, truth.activations);
    assert_eq!(r.gaps.len(), 0);
    // Without a counting sibling, PEBS gets the default loss model, shown separately.
    assert_eq!(r.loss.source, loss::LossSource::Default);
    assert!(r.summary.mean_gbps_corrected > r.summary.mean_gbps);
}

#[test]
fn estimate_within_error_bars_poisson_events_and_loss_model_recovers_l() {
    // Realistic arrivals (every (t+l)-th event of a Poisson event stream), 35 events
    // lost per activation (the paper's worst case), counting sibling present.
    let cfg = SynthConfig {
        period: 100,
        loss_per_activation: 35,
        arrivals: Arrivals::PoissonEvents,
        phases: vec![Phase { duration_ns: 10_000_000, gbps: 4.0 }, Phase { duration_ns: 10_000_000, gbps: 16.0 }],
        repeat: 6,
        cpus: 3,
        counter: true,
        seed: 11,
        ..Default::default()
    };
    let (r, truth) = run(&cfg, &BandwidthOptions::default());
    let counter = r.counter.as_ref().expect("counter readings");
    assert_eq!(counter.readings, 3);
    let m = &r.loss;
    assert!(matches!(m.source, loss::LossSource::Measured { .. }), "{m:?}");
    assert!((m.l - 35.0).abs() / 35.0 < 0.10, "l = {} (truth 35)", m.l);
    assert!(m.l_low <= m.l && m.l <= m.l_high);
    // The raw estimate under-counts by t/(t+l) = 0.74: its bars miss the truth in most
    // bins; the corrected ones cover it.
    assert!(coverage(&r, &truth, false) < 0.5, "raw coverage {}", coverage(&r, &truth, false));
    let c = coverage(&r, &truth, true);
    assert!(c >= 0.95, "corrected coverage {c}");
    let expected = truth.bytes(truth.start(), truth.end());
    assert!((r.total_bytes_corrected - expected).abs() / expected < 0.03, "{} vs {expected}", r.total_bytes_corrected);
    assert!((r.total_bytes as f64 / expected - 100.0 / 135.0).abs() < 0.03);
}

#[test]
fn phases_and_bursts_are_found() {
    let cfg = SynthConfig {
        phases: vec![Phase { duration_ns: 15_000_000, gbps: 1.5 }, Phase { duration_ns: 5_000_000, gbps: 10.0 }],
        repeat: 6,
        seed: 3,
        ..Default::default()
    };
    let (r, truth) = run(&cfg, &BandwidthOptions::default());
    assert!(r.burst_split.distinct, "{:?}", r.burst_split);
    assert_eq!(r.bursts.len(), 6, "{:?}", r.bursts);
    let tol = (r.burst_split.window_bins + 1) * r.bin_ns;
    for (k, b) in r.bursts.iter().enumerate() {
        let (s, e, g) = truth.phases[2 * k + 1];
        assert_eq!(g, 10.0);
        assert!(b.start_ns.abs_diff(s) <= tol && b.end_ns.abs_diff(e) <= tol, "burst {k}: {b:?} vs {s}..{e}");
        assert!((b.mean_gbps - 10.0).abs() < 1.5, "{b:?}");
        assert!(b.mean_gbps_low < b.mean_gbps && b.mean_gbps < b.mean_gbps_high);
    }
    assert!((r.burst_split.low_gbps - 1.5).abs() < 1.0 && (r.burst_split.high_gbps - 10.0).abs() < 2.0, "{:?}", r.burst_split);
    // A flat recording has no bursts.
    let flat = SynthConfig { phases: vec![Phase { duration_ns: 100_000_000, gbps: 6.0 }], repeat: 1, seed: 5, ..Default::default() };
    let (r, _) = run(&flat, &BandwidthOptions::default());
    assert!(r.bursts.is_empty(), "{:?} {:?}", r.bursts, r.burst_split);
    assert!((r.summary.p50_gbps - 6.0).abs() < 1.5);
}

#[test]
fn throttling_is_a_gap_not_low_bandwidth() {
    let cfg = SynthConfig {
        phases: vec![Phase { duration_ns: 100_000_000, gbps: 8.0 }],
        repeat: 1,
        cpus: 2,
        throttle: vec![(1, 30_000_000, 50_000_000)],
        seed: 9,
        ..Default::default()
    };
    let (r, truth) = run(&cfg, &BandwidthOptions::default());
    assert_eq!(r.throttles, 1);
    assert_eq!(r.gaps.len(), 1);
    let g = &r.gaps[0];
    assert_eq!((g.kind.as_str(), g.cpu, g.start_ns, g.end_ns), ("throttled", 1, cfg.start_ns + 30_000_000, cfg.start_ns + 50_000_000));
    let gap_bins: Vec<&BinRow> = r.bins.iter().filter(|b| b.gap).collect();
    assert!((200..=202).contains(&gap_bins.len()), "{}", gap_bins.len());
    assert!(gap_bins.iter().all(|b| b.start_ns + b.width_ns > g.start_ns && b.start_ns <= g.end_ns));
    // Half the samples are missing in the gap, yet the summary's mean is the truth.
    assert!(r.summary.mean_gbps_low <= 8.0 && 8.0 <= r.summary.mean_gbps_high, "{:?}", r.summary);
    assert!(r.bursts.is_empty(), "the gap must not look like a phase change: {:?}", r.bursts);
    assert_eq!(r.summary.gap_bins, gap_bins.len() as u64);
    assert!(coverage(&r, &truth, false) >= 0.95);
}

#[test]
fn lost_samples_make_gaps_from_the_previous_sample() {
    let cfg = SynthConfig { phases: vec![Phase { duration_ns: 10_000_000, gbps: 8.0 }], repeat: 1, cpus: 1, seed: 2, ..Default::default() };
    let (h, mut records, _) = generate(&cfg);
    // Insert a LOST_SAMPLES record after the 100th sample.
    let at = records.iter().enumerate().filter(|(_, r)| matches!(r, Record::Sample(_))).nth(100).unwrap().0;
    let (t_prev, t_next) = (records[at].time(), records[at + 1].time());
    records.insert(at + 1, Record::Lost(Lost { time: t_next, cpu: 0, event: Some(0), kind: LossKind::Samples, count: 40 }));
    let mut b = BandwidthBuilder::new(&h, &BandwidthOptions::default()).unwrap();
    for r in &records {
        b.handle_record(r);
    }
    let r = b.finish().unwrap();
    assert_eq!(r.lost_samples, 40);
    assert_eq!(r.gaps.len(), 1);
    assert_eq!((r.gaps[0].start_ns, r.gaps[0].end_ns, r.gaps[0].count), (t_prev, t_next, 40));
    assert!(r.bins.iter().any(|b| b.gap));
}

#[test]
fn dram_filter_keeps_only_memory_samples() {
    let cfg = SynthConfig { dram_share: Some(0.25), seed: 4, ..Default::default() };
    let (r, truth) = run(&cfg, &BandwidthOptions::default());
    assert_eq!(r.method, "ibs-op");
    assert!(r.dram_filter);
    assert_eq!(r.samples, truth.activations + truth.other_samples);
    assert_eq!(r.samples_used, truth.activations);
    let l1 = r.levels.iter().find(|l| l.level == MemLevel::L1).unwrap().samples;
    let dram = r.levels.iter().find(|l| l.level == MemLevel::LocalDram).unwrap().samples;
    assert_eq!((l1, dram), (truth.other_samples, truth.activations));
    assert!(!r.loss.applies());
    assert!(coverage(&r, &truth, false) >= 0.95);
    // Without the filter the L1 hits would triple the estimate.
    let (unfiltered, _) = run(&cfg, &BandwidthOptions { dram_filter: DramFilter::Off, ..Default::default() });
    assert!(unfiltered.total_bytes > 3 * r.total_bytes);
}

#[test]
fn groups_and_items() {
    let cfg = SynthConfig { cpus: 4, items: true, seed: 6, ..Default::default() };
    let (r, truth) = run(&cfg, &BandwidthOptions { by: Some(BwGroupBy::Cpu), items: true, ..Default::default() });
    assert_eq!(r.groups.len(), 4);
    let total: u64 = r.groups.iter().map(|g| g.bytes).sum();
    assert_eq!(total, r.total_bytes);
    for g in &r.groups {
        let share = g.bytes as f64 / total as f64;
        assert!((share - 0.25).abs() < 0.02, "{}: {share}", g.label);
        assert_eq!(g.series.len(), r.bins.len());
        assert_eq!(g.series.iter().map(|&n| n as u64).sum::<u64>(), g.samples);
    }
    assert_eq!(r.items.len(), truth.items.len());
    let mut inside = 0;
    for (it, &(id, b, e)) in r.items.iter().zip(&truth.items) {
        assert_eq!((it.id, it.begin_ns, it.end_ns), (id, b, e));
        let t = truth.mean_gbps(b, e) / truth.cpus as f64;
        if it.gbps_low <= t && t <= it.gbps_high {
            inside += 1;
        }
    }
    assert!(inside >= r.items.len() - 1, "{inside} of {} items within their bars", r.items.len());
    // --by thread labels threads by name.
    let (r, _) = run(&cfg, &BandwidthOptions { by: Some(BwGroupBy::Thread), ..Default::default() });
    assert!(r.groups.iter().all(|g| g.label.starts_with("synth (")), "{:?}", r.groups.iter().map(|g| &g.label).collect::<Vec<_>>());
    // --by item without markers is an error; items are otherwise optional.
    let plain = SynthConfig { seed: 6, ..Default::default() };
    let (h, records, _) = generate(&plain);
    let mut b = BandwidthBuilder::new(&h, &BandwidthOptions { by: Some(BwGroupBy::Item), ..Default::default() }).unwrap();
    for rec in &records {
        b.handle_record(rec);
    }
    assert!(matches!(b.finish(), Err(BandwidthError::Items(AnalyzeError::NoItems))));
}

#[test]
fn saturation_marks_and_resolution() {
    let cfg = SynthConfig { seed: 8, ..Default::default() };
    let opts = BandwidthOptions { peak_gbps: Some((14.0, "test".into())), ..Default::default() };
    let (r, truth) = run(&cfg, &opts);
    let s = r.saturation.as_ref().unwrap();
    assert!((s.threshold_gbps - 9.8).abs() < 1e-9);
    // 12 GB/s phases are near saturation (most bins), 2 GB/s ones never.
    for b in &r.bins {
        let t = truth.mean_gbps(b.start_ns, b.start_ns + b.width_ns);
        if t == 2.0 {
            assert!(!b.near_saturation);
        }
    }
    let hi = r.bins.iter().filter(|b| truth.mean_gbps(b.start_ns, b.start_ns + b.width_ns) == 12.0).count();
    assert!(s.bins as f64 > 0.5 * hi as f64, "{} of {hi}", s.bins);
    assert!(!s.windows.is_empty());
    // Low phases (about 3 samples per bin) are mostly below resolution; high ones not.
    assert!(r.summary.below_resolution_bins > 0);
    assert!((r.summary.resolution_gbps - 1009.0 * 64.0 / 100_000.0).abs() < 1e-9);
}

#[test]
fn trace_file_round_trip_and_event_selection() {
    let cfg = SynthConfig { counter: true, seed: 12, ..Default::default() };
    let (bytes, truth) = trace_bytes(&cfg).unwrap();
    let mut reader = TraceReader::from_bytes(bytes.clone()).unwrap();
    let r = bandwidth_report(&mut reader, &BandwidthOptions::default()).unwrap();
    assert_eq!(r.samples, truth.activations);
    let (direct, _) = run(&cfg, &BandwidthOptions::default());
    assert_eq!(r.bins, direct.bins);
    assert_eq!(r.counter.as_ref().unwrap().readings, 4);
    // Event by name and by index; an unknown one is an error that lists the events.
    let mut reader = TraceReader::from_bytes(bytes.clone()).unwrap();
    let r2 = bandwidth_report(&mut reader, &BandwidthOptions { event: Some("0".into()), ..Default::default() }).unwrap();
    assert_eq!(r2.total_bytes, r.total_bytes);
    let mut reader = TraceReader::from_bytes(bytes).unwrap();
    let e = bandwidth_report(&mut reader, &BandwidthOptions { event: Some("nope".into()), ..Default::default() }).unwrap_err();
    assert!(e.to_string().contains("MEM_LOAD_RETIRED.L3_MISS"), "{e}");
    // A trace without any memory event.
    let h = TraceHeader { events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, ..Default::default() }], ..Default::default() };
    let e = BandwidthBuilder::new(&h, &BandwidthOptions::default()).unwrap_err();
    assert!(e.to_string().contains("cpu-clock") && e.to_string().contains("--bandwidth"), "{e}");
    assert!(matches!(BandwidthBuilder::new(&h, &BandwidthOptions { bin_ns: 0, ..Default::default() }), Err(BandwidthError::ZeroBin)));
}

#[test]
fn too_many_bins_is_an_error_not_an_allocation() {
    let h = synth::header(&SynthConfig::default());
    let mut b = BandwidthBuilder::new(&h, &BandwidthOptions { bin_ns: 1, ..Default::default() }).unwrap();
    b.handle_sample(&Sample { time: 1, event: 0, period: 1, ..Default::default() });
    b.handle_sample(&Sample { time: 10_000_000_000, event: 0, period: 1, ..Default::default() });
    assert!(matches!(b.finish(), Err(BandwidthError::TooManyBins { .. })));
}

#[test]
fn llc_event_recognition() {
    let d = |name: &str, t: u32, c: u64| EventDesc { name: name.into(), attr_type: t, config: c, ..Default::default() };
    assert!(is_llc_miss_event(&d("r20d1", 4, 0x20d1)));
    assert!(is_llc_miss_event(&d("cpu/event=0xcb,umask=0x10/pp", 4, 0x10cb)));
    assert!(is_llc_miss_event(&d("mem_load_retired.l3_miss:pp", 4, 0)));
    assert!(is_llc_miss_event(&d("LLC-load-misses", 3, 0x10002)));
    assert!(!is_llc_miss_event(&d("cpu/mem-loads/pp", 4, 0x1cd)));
    assert!(!is_llc_miss_event(&d("cpu-clock", 1, 0)));
    assert!(!is_llc_miss_event(&d("cycles", 0, 0x20d1)));
}
