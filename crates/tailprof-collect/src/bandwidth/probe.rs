//! The machine's sustainable read bandwidth, measured in software (`tailprof bandwidth
//! --probe`): no PMU needed.
//!
//! # Method
//! A streaming-read loop in the spirit of pmbw's `ScanRead64` (the benchmark the paper
//! reads its 32 GiB/s machine peak from, §6.6): one thread per online CPU, each owning
//! an equal slice of one buffer several times larger than the last-level cache (so reads
//! come from DRAM), touched first by its own thread (first-touch NUMA placement). A run
//! reads every slice `passes` times, the threads released together by a barrier; the
//! run's bandwidth is all bytes read / wall time from release to the last thread's end.
//! `passes` is chosen so that a run lasts at least `min_run_ns`. The result keeps every
//! run, the best (the sustainable peak: noise on a shared machine only slows runs down)
//! and the median.
//!
//! # Storage
//! Like calibrations, in the calibration directory: `tailprof_measure::probe_store`.

use std::sync::Barrier;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::caps::Capabilities;
use crate::counting::last_level_cache;

/// Why the probe failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    #[error("bandwidth probe: {0}")]
    Options(String),
    #[error("bandwidth probe: cannot allocate a {bytes}-byte buffer")]
    Alloc { bytes: u64 },
    #[error("bandwidth probe: {what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("bandwidth probe: {path} is not a probe result ({reason}); run `tailprof bandwidth --probe` again")]
    BadFile { path: String, reason: String },
}

/// Options of [`run_probe`].
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeOptions {
    /// Buffer size; `None`: 4 × the last-level cache, at least 256 MiB, at most 1 GiB.
    pub buffer_bytes: Option<u64>,
    /// Reader threads; `None`: one per online CPU.
    pub threads: Option<usize>,
    /// Timed runs (the best and the median are reported).
    pub runs: usize,
    /// Minimum duration of one run.
    pub min_run_ns: u64,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions { buffer_bytes: None, threads: None, runs: 5, min_run_ns: 200_000_000 }
    }
}

/// What the probe measured (also the stored file's content).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    /// Best run, GB/s (10^9 bytes per second): the sustainable read bandwidth.
    pub peak_gbps: f64,
    pub median_gbps: f64,
    /// Every timed run, GB/s.
    pub runs_gbps: Vec<f64>,
    pub threads: usize,
    pub buffer_bytes: u64,
    /// Bytes read per run.
    pub bytes_per_run: u64,
    pub cpu_model: String,
    pub kernel: String,
    pub online_cpus: u32,
    /// Unix time of the measurement, seconds.
    pub measured_unix_s: u64,
    /// `"streaming read, 8-byte loads, 8 accumulators"`.
    pub method: String,
}

const MIB: u64 = 1 << 20;

/// The default buffer: 4 × LLC in [256 MiB, 1 GiB].
pub fn default_buffer_bytes() -> u64 {
    let llc = last_level_cache(std::path::Path::new("/sys/devices/system/cpu")).map_or(0, |c| c.size_bytes);
    (4 * llc).clamp(256 * MIB, 1024 * MIB)
}

/// Sum a slice with 8 independent accumulators (so the loop is bound by loads, not by
/// the add chain; the compiler may widen it to vector loads).
#[inline(never)]
fn read_slice(s: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let mut chunks = s.chunks_exact(8);
    for c in &mut chunks {
        for i in 0..8 {
            acc[i] = acc[i].wrapping_add(c[i]);
        }
    }
    let mut t = chunks.remainder().iter().fold(0u64, |a, &b| a.wrapping_add(b));
    for a in acc {
        t = t.wrapping_add(a);
    }
    t
}

/// Measure (see the module docs). Takes about `runs × min_run_ns` plus the buffer setup.
pub fn run_probe(opts: &ProbeOptions) -> Result<ProbeResult, ProbeError> {
    let caps = Capabilities::probe();
    let threads = opts.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if threads == 0 || threads > 4096 {
        return Err(ProbeError::Options(format!("{threads} threads")));
    }
    if opts.runs == 0 {
        return Err(ProbeError::Options("at least one run".into()));
    }
    let buffer_bytes = opts.buffer_bytes.unwrap_or_else(default_buffer_bytes);
    let per_thread_words = (buffer_bytes / 8 / threads as u64) as usize;
    if per_thread_words < 4096 {
        return Err(ProbeError::Options(format!("a {buffer_bytes}-byte buffer is too small for {threads} threads (at least 32 KiB each)")));
    }
    let total_words = per_thread_words * threads;
    let mut buf: Vec<u64> = Vec::new();
    buf.try_reserve_exact(total_words).map_err(|_| ProbeError::Alloc { bytes: total_words as u64 * 8 })?;
    // SAFETY: u64 has no invalid bit patterns; every element is written (first touch by
    // its owning thread) before any is read.
    unsafe { buf.set_len(total_words) };

    let slices: Vec<&mut [u64]> = buf.chunks_mut(per_thread_words).collect();
    let bytes_per_pass = total_words as u64 * 8;
    let barrier = Barrier::new(threads + 1);
    let mut runs_gbps = Vec::with_capacity(opts.runs);
    let mut passes = 1u64;
    // Plan: one untimed warm-up to size `passes`, then `runs` timed runs. The main thread
    // publishes each run's pass count through `plan` between barriers.
    let plan = std::sync::atomic::AtomicU64::new(1);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        let (plan, stop, barrier) = (&plan, &stop, &barrier);
        for (k, slice) in slices.into_iter().enumerate() {
            sc.spawn(move || {
                for (i, w) in slice.iter_mut().enumerate() {
                    *w = (i as u64) ^ (k as u64) << 40;
                }
                let mut sink = 0u64;
                loop {
                    barrier.wait(); // start of a run (or of the end)
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        break;
                    }
                    let n = plan.load(std::sync::atomic::Ordering::SeqCst);
                    for _ in 0..n {
                        sink = sink.wrapping_add(read_slice(std::hint::black_box(&*slice)));
                    }
                    barrier.wait(); // end of the run
                }
                std::hint::black_box(sink);
            });
        }
        let timed = |n: u64| {
            plan.store(n, std::sync::atomic::Ordering::SeqCst);
            barrier.wait();
            let t0 = Instant::now();
            barrier.wait();
            t0.elapsed().as_nanos().max(1) as u64
        };
        let warm = timed(1);
        passes = (opts.min_run_ns / warm.max(1)).clamp(1, 1 << 20);
        for _ in 0..opts.runs {
            let ns = timed(passes);
            runs_gbps.push((bytes_per_pass * passes) as f64 / ns as f64);
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        barrier.wait();
    });
    let mut sorted = runs_gbps.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let median = sorted[sorted.len() / 2];
    let peak = *sorted.last().unwrap_or(&0.0);
    Ok(ProbeResult {
        peak_gbps: peak,
        median_gbps: median,
        runs_gbps,
        threads,
        buffer_bytes: bytes_per_pass,
        bytes_per_run: bytes_per_pass * passes,
        cpu_model: caps.cpu_desc.clone().unwrap_or_else(|| "unknown CPU".into()),
        kernel: caps.os_release.clone().unwrap_or_else(|| "unknown kernel".into()),
        online_cpus: caps.online_cpus.len() as u32,
        measured_unix_s: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        method: "streaming read, 8-byte loads, 8 accumulators, one thread per CPU".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_slice_sums() {
        let v: Vec<u64> = (1..=1003).collect();
        assert_eq!(read_slice(&v), 1003 * 1004 / 2);
    }

    #[test]
    fn small_probe_is_positive_and_round_trips() {
        let r = run_probe(&ProbeOptions { buffer_bytes: Some(32 << 20), threads: Some(2), runs: 2, min_run_ns: 20_000_000 }).unwrap();
        assert!(r.peak_gbps > 0.0 && r.median_gbps > 0.0 && r.peak_gbps >= r.median_gbps, "{r:?}");
        assert_eq!(r.runs_gbps.len(), 2);
        // serde_json (without float_roundtrip) may return a float 1 ULP off: compare floats
        // with a relative tolerance, everything else exactly.
        let back: ProbeResult = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(b.abs());
        assert!(close(back.peak_gbps, r.peak_gbps) && close(back.median_gbps, r.median_gbps), "{back:?} vs {r:?}");
        assert!(back.runs_gbps.iter().zip(&r.runs_gbps).all(|(&a, &b)| close(a, b)));
        let strip = |p: &ProbeResult| ProbeResult { peak_gbps: 0.0, median_gbps: 0.0, runs_gbps: vec![], ..p.clone() };
        assert_eq!(strip(&back), strip(&r));
        assert!(run_probe(&ProbeOptions { buffer_bytes: Some(1024), ..Default::default() }).is_err());
    }
}
