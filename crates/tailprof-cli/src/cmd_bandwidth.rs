//! `tailprof bandwidth`: main-memory bandwidth over time from samples of last-level-cache
//! misses, with error bars, loss correction, gaps, bursts and per-item numbers; `--probe`
//! measures this machine's sustainable read bandwidth.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use tailprof_analyze::bandwidth::{bandwidth_report, BandwidthOptions, BwGroupBy, DramFilter};
use tailprof_collect::bandwidth::probe::{self, ProbeOptions, ProbeResult};
use tailprof_format::TraceReader;
use tailprof_present::bandwidth::{self as view, BandwidthView};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ByArg {
    Cpu,
    Process,
    Thread,
    Item,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FilterArg {
    /// on for AMD IBS, Arm SPE and memory events that are not LLC-miss events
    Auto,
    On,
    Off,
}

/// Main-memory bandwidth over time, from samples of last-level-cache misses.
///
/// Each bin's bytes are samples x period x 64 B (one cache line per miss); its 95% error
/// bar comes from the sample count (exact Poisson interval), and bins with few samples are
/// marked below resolution. For PEBS recordings a loss-corrected estimate is shown beside
/// the raw one: every PEBS activation loses about l events (Larysch 2016, §6.3.2), l being
/// measured from the counting sibling (`record --bandwidth --bandwidth-counter`) or
/// assumed. Lost and throttled samples are gaps, not low bandwidth. Bursts are the phases
/// of high use; items (requests) get their own bytes and mean bandwidth.
///
/// `--probe` measures the machine's sustainable read bandwidth with a streaming-read loop
/// (software, no PMU needed) and stores it; reports then mark the bins near saturation.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tailprof record --bandwidth -o mem.trace -- ./app    # needs a PMU (PEBS, IBS)\n  \
    tailprof import perf.data -o mem.trace              # or a `perf record -e <LLC-miss event> -c N -d` file\n  \
    tailprof bandwidth mem.trace --bin 1ms\n  \
    tailprof bandwidth mem.trace --by item --html mem.html\n  \
    tailprof bandwidth --probe                          # this machine's peak, stored\n  \
    tailprof bandwidth mem.trace --json | jq '.bins[] | select(.gbps > 10)'")]
pub struct BandwidthArgs {
    /// The trace (from `record --bandwidth` or `import`); optional with --probe.
    #[arg(value_name = "TRACE", required_unless_present = "probe")]
    trace: Option<PathBuf>,

    /// Bin width: `100us`, `1ms`, `250ns`, `0.5s` (a plain number is nanoseconds).
    #[arg(long, value_name = "DURATION", default_value = "100us", value_parser = parse_duration)]
    bin: u64,

    /// Also break the traffic down by CPU, process, thread or item.
    #[arg(long, value_enum)]
    by: Option<ByArg>,

    /// Print JSON: {"event", "period", "bin_ns", "total_bytes", "bins": [{"start_ns",
    /// "samples", "bytes", "gbps", "gbps_low", "gbps_high", "gbps_corrected", "gap", ...}],
    /// "summary", "bursts", "loss", "gaps", "groups", "items", ...}.
    #[arg(long)]
    json: bool,

    /// Write an HTML report with the timeline (error band, gaps, bursts, saturation, items).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,

    /// The sampled event, by name or index (default: the trace's LLC-miss event).
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    event: Option<String>,

    /// Count only samples whose data source is DRAM or remote memory.
    #[arg(long, value_enum, default_value = "auto")]
    dram_filter: FilterArg,

    /// Events lost per PEBS activation, instead of measuring or assuming it.
    #[arg(long, value_name = "L")]
    loss_l: Option<f64>,

    /// Bins with fewer samples are marked below resolution.
    #[arg(long, value_name = "N", default_value_t = 5)]
    min_samples: u64,

    /// The machine's sustainable bandwidth in GB/s (default: the stored --probe result).
    #[arg(long, value_name = "GBPS")]
    peak: Option<f64>,

    /// Share of the peak from which a bin counts as near saturation.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.7)]
    saturation: f64,

    /// Rows shown per table (0: all).
    #[arg(long, value_name = "N", default_value_t = 20)]
    top: usize,

    /// Do not join items (skips the per-item table and overlay).
    #[arg(long)]
    no_items: bool,

    /// Measure this machine's sustainable read bandwidth and store it.
    #[arg(long)]
    probe: bool,

    /// Buffer of the probe, e.g. `512M`, `1G` (default: 4 x LLC, 256 MiB .. 1 GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "probe")]
    probe_size: Option<u64>,

    /// Reader threads of the probe (default: one per CPU).
    #[arg(long, value_name = "N", requires = "probe")]
    probe_threads: Option<usize>,

    /// Timed runs of the probe (the best is the peak).
    #[arg(long, value_name = "N", default_value_t = 5, requires = "probe")]
    probe_runs: usize,
}

/// `100us`, `1ms`, `2.5s`, `250ns`, `1000` (ns).
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = [("ns", 1.0), ("us", 1e3), ("µs", 1e3), ("ms", 1e6), ("s", 1e9)]
        .iter()
        .find_map(|(suf, m)| t.strip_suffix(suf).map(|n| (n, *m)))
        .unwrap_or((t, 1.0));
    let v: f64 = num.trim().parse().map_err(|_| format!("'{s}' is not a duration (e.g. 100us, 1ms, 0.5s)"))?;
    let ns = v * mult;
    if !(ns.is_finite() && ns >= 1.0) {
        return Err(format!("'{s}': the bin must be at least 1 ns"));
    }
    Ok(ns.round() as u64)
}

/// `512M`, `1G`, `64K`, `1048576`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().trim_end_matches(['B', 'b']).trim_end_matches('i');
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("'{s}' is not a size (e.g. 512M, 1G)"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("'{s}': the size must be positive"));
    }
    Ok((v * mult as f64) as u64)
}

fn describe_probe(r: &ProbeResult) -> String {
    format!(
        "{:.2} GB/s sustainable read bandwidth (best of {} runs; median {:.2} GB/s; {} threads over a {} buffer)",
        r.peak_gbps,
        r.runs_gbps.len(),
        r.median_gbps,
        r.threads,
        tailprof_present::fmt::bytes(r.buffer_bytes)
    )
}

pub fn run(args: BandwidthArgs) -> Result<ExitCode> {
    if !(args.saturation > 0.0 && args.saturation <= 1.5) {
        bail!("--saturation must be a share of the peak in (0, 1.5] (got {})", args.saturation);
    }
    let mut peak: Option<(f64, String)> = args.peak.map(|p| (p, "--peak".to_string()));
    if let Some(p) = args.peak {
        if !(p.is_finite() && p > 0.0) {
            bail!("--peak must be a positive bandwidth in GB/s (got {p})");
        }
    }
    if args.probe {
        let opts = ProbeOptions { buffer_bytes: args.probe_size, threads: args.probe_threads, runs: args.probe_runs, ..Default::default() };
        eprintln!("tailprof: measuring the machine's read bandwidth (streaming reads, {} runs)...", opts.runs);
        let r = probe::run_probe(&opts)?;
        let path = tailprof_measure::probe_store::save(&r)?;
        if args.trace.is_none() {
            // The result goes to stdout once; stderr says where it was stored.
            eprintln!("tailprof: saved to {}", path.display());
            if args.json {
                println!("{}", tailprof_present::json::document(&r)?);
            } else {
                println!("{}", describe_probe(&r));
            }
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!("tailprof: {}; saved to {}", describe_probe(&r), path.display());
        if peak.is_none() {
            peak = Some((r.peak_gbps, "probe, just measured".into()));
        }
    }
    let trace = args.trace.as_ref().expect("clap requires TRACE without --probe");
    if peak.is_none() {
        // A stored probe result is optional; a damaged one is reported and ignored.
        match tailprof_measure::probe_store::load() {
            Ok(Some((r, p))) => peak = Some((r.peak_gbps, format!("probe {}", p.display()))),
            Ok(None) => {}
            Err(e) => eprintln!("tailprof: warning: {e}"),
        }
    }
    let name = trace.display().to_string();
    let mut reader = TraceReader::open(trace).with_context(|| format!("cannot read {name}"))?;
    let opts = BandwidthOptions {
        event: args.event.clone(),
        bin_ns: args.bin,
        by: args.by.map(|b| match b {
            ByArg::Cpu => BwGroupBy::Cpu,
            ByArg::Process => BwGroupBy::Process,
            ByArg::Thread => BwGroupBy::Thread,
            ByArg::Item => BwGroupBy::Item,
        }),
        dram_filter: match args.dram_filter {
            FilterArg::Auto => DramFilter::Auto,
            FilterArg::On => DramFilter::On,
            FilterArg::Off => DramFilter::Off,
        },
        loss_l: args.loss_l,
        min_samples: args.min_samples,
        peak_gbps: peak,
        saturation: args.saturation,
        items: !args.no_items,
        ..Default::default()
    };
    let report = bandwidth_report(&mut reader, &opts).with_context(|| name.clone())?;
    let v = BandwidthView { top: args.top, subtitle: Some(name.clone()), ..Default::default() };
    if let Some(path) = &args.html {
        let page = view::render_bandwidth_html(&report, &v);
        tailprof_format::atomic::write_file(path, page).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("tailprof: wrote {}", path.display());
    }
    let out = if args.json { view::bandwidth_json_string(&report)? + "\n" } else { view::render_bandwidth(&report, &v) };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("100us"), Ok(100_000));
        assert_eq!(parse_duration("1ms"), Ok(1_000_000));
        assert_eq!(parse_duration("0.5s"), Ok(500_000_000));
        assert_eq!(parse_duration("250ns"), Ok(250));
        assert_eq!(parse_duration("1000"), Ok(1000));
        assert!(parse_duration("0").is_err() && parse_duration("fast").is_err());
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert!(parse_size("-1").is_err());
    }
}
