//! Real recordings with the slim sample layout (issue 9): samples carry neither
//! PERF_SAMPLE_CPU (every ring belongs to one CPU, the decoder takes the ring's) nor, for a
//! fixed period, PERF_SAMPLE_PERIOD (the decoder fills in the attr's period). These
//! tests would fail if a sample got another ring's CPU, a CPU that does not exist, or a
//! period other than the one the kernel used.
//!
//! Ground truth for the CPU: one thread of this test process pinned to each online CPU
//! (`sched_setaffinity`) spins while `-a` records; every sample of the thread pinned to
//! CPU k must say k. Runs as root (tests here do); skips when perf_event_open is refused.
//! No timing assertions: sleeps only decide when to stop.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tailprof_collect::attr::SamplingConfig;
use tailprof_collect::caps::online_cpus;
use tailprof_collect::event::EventSpec;
use tailprof_collect::parse::sample_type as st;
use tailprof_collect::session::{RecordOptions, RecordOutput, RecordSummary, Target};
use tailprof_format::{BuildIdEntry, FormatError, Record, Sample, TraceHeader, TraceReader, TraceWriter, VecSink};

mod common;
use common::recorder;

fn opts(events: &[&str], sampling: SamplingConfig, mmap_pages: usize) -> RecordOptions {
    RecordOptions {
        events: events.iter().map(|e| EventSpec::parse(e).unwrap()).collect(),
        sampling,
        mmap_pages,
        target: Target::SystemWideCommand(vec!["sleep".into(), "0.3".into()]),
        cmdline: vec!["test".into()],
    }
}

/// A trace writer whose rounds take 40 ms, so the drain thread copies the rings the
/// main thread is late for (the spool path, which must keep each record's CPU too).
struct SlowRounds(TraceWriter<Vec<u8>>);

/// The recorder writes through the `RecordOutput` methods below (overridden), so the
/// stream's own handlers are not needed.
impl tailprof_format::Sink for SlowRounds {}

impl RecordOutput for SlowRounds {
    fn write_record(&mut self, r: &Record) -> Result<(), FormatError> {
        self.0.write(r)
    }
    fn write_sample(&mut self, s: &Sample) -> Result<(), FormatError> {
        self.0.write_sample(s)
    }
    fn add_build_id(&mut self, e: BuildIdEntry) -> Result<(), FormatError> {
        self.0.add_build_id(e)
    }
    fn end_round(&mut self) -> Result<(), FormatError> {
        std::thread::sleep(Duration::from_millis(40));
        self.0.end_round()
    }
    fn bytes_written(&self) -> u64 {
        self.0.bytes_written()
    }
}

struct Recorded {
    summary: RecordSummary,
    header: TraceHeader,
    records: Vec<Record>,
    /// tid -> the CPU that thread was pinned to.
    pinned: BTreeMap<u32, u32>,
}

impl Recorded {
    fn samples(&self) -> impl Iterator<Item = &Sample> {
        self.records.iter().filter_map(|r| match r {
            Record::Sample(s) => Some(s),
            _ => None,
        })
    }
}

/// Record `o` while one spinning thread is pinned to each online CPU; read it all back.
fn record_pinned(o: RecordOptions, slow_rounds: bool) -> Option<Recorded> {
    let cpus = online_cpus().unwrap();
    let mut rec = recorder(o)?;
    let header = rec.header();
    let stop = AtomicBool::new(false);
    let pinned = Mutex::new(BTreeMap::new());
    let (summary, bytes) = std::thread::scope(|s| {
        for &cpu in &cpus {
            let (stop, pinned) = (&stop, &pinned);
            s.spawn(move || {
                // SAFETY: a zeroed cpu_set_t is valid; CPU_SET stays within it for cpu <
                // CPU_SETSIZE (online CPU numbers are); pid 0 is the calling thread.
                let ok = unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu as usize, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
                };
                assert!(ok, "pinning to CPU {cpu}: {}", std::io::Error::last_os_error());
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() } as u32;
                pinned.lock().unwrap().insert(tid, cpu);
                // Bounded, in case the recording fails before setting `stop`.
                let until = Instant::now() + Duration::from_secs(20);
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    for i in 0..10_000u64 {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                    }
                }
            });
        }
        // Every spinner has its tid registered before recording starts.
        while pinned.lock().unwrap().len() < cpus.len() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let never = AtomicBool::new(false);
        let r = if slow_rounds {
            let mut out = SlowRounds(TraceWriter::new(Vec::new(), &header).unwrap());
            let summary = rec.run_to(&mut out, &never, &mut |_| {});
            summary.map(|sm| {
                let bytes = out.0.finish_into_inner(Some(sm.duration_ns)).unwrap().0;
                (sm, bytes)
            })
        } else {
            let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
            let summary = rec.run(&mut w, &never, &mut |_| {});
            summary.map(|sm| {
                let bytes = w.finish_into_inner(Some(sm.duration_ns)).unwrap().0;
                (sm, bytes)
            })
        };
        stop.store(true, Ordering::Relaxed);
        r.expect("run")
    });
    let mut r = TraceReader::from_bytes(bytes).unwrap();
    let mut sink = VecSink::default();
    let read = r.read_all(&mut sink).unwrap();
    assert!(read.complete && read.damaged_chunks == 0, "{read:?}");
    assert_eq!(summary.malformed, 0, "{summary:?}");
    assert_eq!(summary.exit_status, Some(0));
    let out = Recorded { summary, header: r.header().clone(), records: sink.0, pinned: pinned.into_inner().unwrap() };
    check_cpus(&out, &cpus);
    Some(out)
}

/// Every CPU named in the trace is online, and every sample of a pinned thread names
/// the CPU it was pinned to; each pinned thread was sampled.
fn check_cpus(out: &Recorded, cpus: &[u32]) {
    let online: BTreeSet<u32> = cpus.iter().copied().collect();
    let mut per_pinned: BTreeMap<u32, u64> = BTreeMap::new();
    for r in &out.records {
        let cpu = match r {
            Record::Sample(s) => {
                if let Some(&want) = out.pinned.get(&s.tid) {
                    assert_eq!(s.cpu, want, "a sample of the thread pinned to CPU {want} says CPU {}: {s:?}", s.cpu);
                    *per_pinned.entry(want).or_default() += 1;
                }
                s.cpu
            }
            Record::Lost(l) => l.cpu,
            Record::Throttle(t) => t.cpu,
            Record::Switch(w) => w.cpu,
            _ => continue,
        };
        assert!(online.contains(&cpu), "CPU {cpu} is not online ({online:?}): {r:?}");
    }
    for cpu in cpus {
        assert!(per_pinned.get(cpu).is_some_and(|&n| n > 0), "the thread pinned to CPU {cpu} was not sampled: {per_pinned:?}");
    }
    eprintln!("samples of pinned threads per CPU: {per_pinned:?}; spooled {}", out.summary.spooled);
}

/// `record -a -e cpu-clock -c 100000`: 40-byte samples, the CPU from the ring, the
/// period from the attr.
#[test]
fn fixed_period_samples_get_the_ring_cpu_and_the_attr_period() {
    let sampling = SamplingConfig { period: Some(100_000), ..SamplingConfig::default() };
    let Some(out) = record_pinned(opts(&["cpu-clock"], sampling, 64), false) else { return };
    let ev = &out.header.events[0];
    assert_eq!(ev.sample_type & (st::CPU | st::PERIOD), 0, "requested {:#x}", ev.sample_type);
    assert_eq!(ev.sample_period, Some(100_000));
    let n = out.samples().count();
    assert!(n > 0);
    assert!(out.samples().all(|s| s.period == 100_000 && s.event == 0));
}

/// The same through the drain thread's spool (rounds 40 ms late, 2-page rings).
#[test]
fn spooled_samples_keep_their_ring_cpu() {
    let sampling = SamplingConfig { period: Some(100_000), ..SamplingConfig::default() };
    let Some(out) = record_pinned(opts(&["cpu-clock"], sampling, 2), true) else { return };
    assert!(out.samples().all(|s| s.period == 100_000));
}

/// Two layouts in one ring: cpu-clock at its fixed default period (no PERIOD) and
/// page-faults at its default frequency (PERIOD requested: the kernel adapts it). Each
/// event's samples decode with their own layout.
#[test]
fn fixed_and_frequency_events_share_a_ring() {
    let Some(out) = record_pinned(opts(&["cpu-clock", "page-faults"], SamplingConfig::default(), 64), false) else {
        return;
    };
    let (clock, faults) = (&out.header.events[0], &out.header.events[1]);
    assert_eq!(clock.sample_type & (st::CPU | st::PERIOD), 0);
    assert_eq!(faults.sample_type & (st::CPU | st::PERIOD), st::PERIOD);
    assert_eq!((clock.sample_period, faults.sample_period, faults.sample_freq.is_some()), (Some(250_000), None, true));
    let mut n = [0u64; 2];
    for s in out.samples() {
        n[s.event as usize] += 1;
        match s.event {
            0 => assert_eq!(s.period, 250_000, "{s:?}"),
            _ => assert!(s.period > 0, "{s:?}"),
        }
    }
    assert!(n[0] > 0 && n[1] > 0, "samples per event {n:?}");
}

/// `-F`: the kernel's period goes into every sample.
#[test]
fn frequency_mode_still_requests_the_period() {
    let sampling = SamplingConfig { freq: Some(2000), ..SamplingConfig::default() };
    let Some(out) = record_pinned(opts(&["cpu-clock"], sampling, 64), false) else { return };
    let ev = &out.header.events[0];
    assert_eq!(ev.sample_type & (st::CPU | st::PERIOD), st::PERIOD);
    assert_eq!((ev.sample_period, ev.sample_freq), (None, Some(2000)));
    assert!(out.samples().count() > 0 && out.samples().all(|s| s.period > 0));
}

/// A fixed period on a software event is honoured: the kernel samples every N page
/// faults. (With PERF_SAMPLE_PERIOD requested, `perf_swevent_event` ignores the period and
/// writes a sample per fault with period 1; tailprof did that before issue 9.)
#[test]
fn fixed_period_software_events_sample_every_nth_event() {
    if !std::process::Command::new("python3").args(["-c", ""]).status().is_ok_and(|s| s.success()) {
        tailprof_testkit::skip(tailprof_testkit::Need::Python, "no python3");
        return;
    }
    let sampling = SamplingConfig { period: Some(50), ..SamplingConfig::default() };
    let o = RecordOptions {
        target: Target::Command(vec![
            "python3".into(),
            "-c".into(),
            "b = bytearray(64 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1".into(),
        ]),
        ..opts(&["page-faults"], sampling, 64)
    };
    let Some(mut rec) = recorder(o) else { return };
    let header = rec.header();
    let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
    let summary = rec.run(&mut w, &AtomicBool::new(false), &mut |_| {}).expect("run");
    assert_eq!(summary.exit_status, Some(0), "{summary:?}");
    let bytes = w.finish_into_inner(Some(summary.duration_ns)).unwrap().0;
    let mut sink = VecSink::default();
    TraceReader::from_bytes(bytes).unwrap().read_all(&mut sink).unwrap();
    let periods: Vec<u64> = sink
        .0
        .iter()
        .filter_map(|r| match r {
            Record::Sample(s) => Some(s.period),
            _ => None,
        })
        .collect();
    // 64 MiB touched page by page: >= 16,384 faults (fewer with huge pages), so a few
    // hundred samples at one per 50; one per fault would be 50 times as many.
    assert!(!periods.is_empty());
    assert!(periods.iter().all(|&p| p == 50), "periods other than 50: {:?}", &periods[..periods.len().min(10)]);
    assert!(summary.lost_records == 0 && summary.lost_samples == 0, "{summary:?}");
    eprintln!("{} page-fault samples at -c 50", periods.len());
}

/// What the kernel writes into a ring: every sample record of a fixed-period cpu-clock
/// event is 40 bytes (header + IDENTIFIER IP TID TIME), 48 with `-F` (+ PERIOD), as
/// `SampleLayout::sample_record_size` (`tailprof plan`) says.
#[test]
fn the_kernel_writes_the_slim_records() {
    use std::os::fd::AsFd;
    use tailprof_collect::attr::build_attr;
    use tailprof_collect::ring::Ring;
    use tailprof_collect::sys;
    use tailprof_perf_abi::{SampleLayout, VariableSizes};
    let spec = EventSpec::parse("cpu-clock").unwrap();
    let cfgs = [
        (SamplingConfig { period: Some(100_000), sideband: false, ..SamplingConfig::default() }, 40),
        (SamplingConfig { freq: Some(4000), sideband: false, ..SamplingConfig::default() }, 48),
    ];
    for (cfg, want) in cfgs {
        let plan = build_attr(&spec, &cfg).unwrap();
        let est = SampleLayout::new(plan.attr.sample_type).sample_record_size(&VariableSizes::default());
        assert_eq!(est, want, "{cfg:?}");
        // This thread, any CPU: only the record size matters here.
        let fd = match sys::perf_event_open(&plan.attr, 0, -1, -1, sys::PERF_FLAG_FD_CLOEXEC) {
            Ok(fd) => fd,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) => {
                tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("perf_event_open refused: {e}"));
                return;
            }
            Err(e) => panic!("perf_event_open: {e}"),
        };
        let mut ring = Ring::map(fd.as_fd(), 16, 0).expect("mapping a 16-page ring");
        sys::ioctl_enable(fd.as_fd()).unwrap();
        let until = Instant::now() + Duration::from_millis(30);
        let mut x = 0u64;
        while Instant::now() < until {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        sys::ioctl_disable(fd.as_fd()).unwrap();
        let mut sizes: BTreeMap<usize, u64> = BTreeMap::new();
        ring.drain(|rec| {
            if rec.get(..4) == Some(&9u32.to_ne_bytes()[..]) {
                *sizes.entry(rec.len()).or_default() += 1;
            }
        });
        assert_eq!(sizes.keys().copied().collect::<Vec<_>>(), vec![want as usize], "sample record sizes {sizes:?}");
    }
}
