//! `tailprof record`: open events with perf_event_open, drain the per-CPU rings into a
//! trace file, print a summary, and pass the launched command's exit status through.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tailprof_collect::attr::{parse_regs, ClockChoice, SamplingConfig};
use tailprof_collect::bandwidth::{self, BandwidthRequest, CounterSibling, Mode as BandwidthMode};
use tailprof_collect::event::EventSpec;
use tailprof_collect::items::uprobe::{ItemProbes, ProbeSpec};
use tailprof_collect::session::{finish_trace_file, ItemOptions, Progress, RecordOptions, Recorder, Target, TraceFile};

use crate::{signals, ui};

/// Record timestamped samples of a command, a running process, or the whole system.
///
/// Exactly one target: `-- CMD ARGS...` (counting starts at exec; CMD's exit status is
/// passed through), `-p PID` (all its threads, including ones created later), or `-a`
/// (every CPU; with `-- CMD`, for as long as CMD runs, its exit status passed through).
/// Ctrl-C stops recording cleanly and keeps everything written.
///
/// Events: software `cpu-clock` (default) and `task-clock`; hardware `cycles`,
/// `instructions`, `cache-misses`, `branch-misses`, ...; raw `r01d1` or
/// `cpu/event=0xd1,umask=0x20/`; precise modifiers `:p`, `:pp`, `:ppp`. On a machine
/// without a hardware PMU, hardware events fail with an explanation.
///
/// Code that runtimes generate: the perf maps (`/tmp/perf-PID.map`) and jitdumps
/// (`jit-PID.dump`) of the recorded processes are copied into the trace as they grow, so
/// `report` names JIT frames after the process and its files are gone (docs/SYMBOLS.md).
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tailprof record -o run.trace -- ./server --port 8080\n  \
    tailprof record -e cpu-clock -c 100000 -p 1234      # 10 kHz (period in ns)\n  \
    tailprof record -a -F 999 -o all.trace              # every CPU, 999 Hz, until Ctrl-C\n  \
    tailprof record -a -o all.trace -- sleep 10         # every CPU, while the command runs\n  \
    tailprof record --regs r13,rdi -- ./app             # also capture user registers\n  \
    tailprof record -g -- node --perf-basic-prof app.js # JavaScript functions named\n  \
    tailprof record -a --item-begin /usr/lib/postgresql/15/bin/postgres:exec_simple_query \\\n      \
    --item-end /usr/lib/postgresql/15/bin/postgres:exec_simple_query%return   # queries as items, no code change\n  \
    tailprof record --item-reg r13 -- ./regtag          # item id kept in r13 (user-level threads)")]
pub struct RecordArgs {
    /// Output trace file.
    #[arg(short, long, value_name = "FILE", default_value = "tailprof.trace")]
    output: PathBuf,

    /// Event to sample (repeatable). Default: cpu-clock.
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    events: Vec<String>,

    /// Sample every PERIOD events (nanoseconds for cpu-clock/task-clock).
    /// Default: every 250000 ns for cpu-clock/task-clock (4 kHz); a fixed period for
    /// precise events (2000003 for cycles, 10007 for memory events, 100003 otherwise),
    /// so the kernel can use large PEBS; 4000 Hz for other events.
    #[arg(short = 'c', long = "count", value_name = "PERIOD", conflicts_with = "freq")]
    period: Option<u64>,

    /// Sample at HZ samples per second per CPU (the kernel adapts the period).
    /// Precise (PEBS) events should use a fixed period (-c) instead.
    #[arg(short = 'F', long = "freq", value_name = "HZ")]
    freq: Option<u64>,

    /// Data pages per CPU ring buffer (a power of two). With --call-graph dwarf the
    /// default 128 becomes 512 (a stack copy per sample fills rings much faster).
    #[arg(long, value_name = "N", default_value_t = 128)]
    mmap_pages: usize,

    /// Also capture these user registers with every sample, e.g. `r13,rdi`.
    #[arg(long, value_name = "LIST")]
    regs: Option<String>,

    /// Record every CPU (system-wide; needs root or CAP_PERFMON). With `-- CMD`, until
    /// CMD exits.
    #[arg(short = 'a', long = "all-cpus", conflicts_with = "pid")]
    all_cpus: bool,

    /// Attach to a running process and all its threads.
    #[arg(short, long, value_name = "PID", conflicts_with = "command")]
    pid: Option<u32>,

    /// Item begin from a uprobe on an unmodified binary: `BIN:SYMBOL` (function entry),
    /// or `usdt:BIN:PROVIDER:NAME` (every site of a USDT probe; its semaphore is enabled
    /// through the kernel's counter). BIN is a path or a name looked up in PATH; the symbol
    /// comes from .symtab/.dynsym. `tailprof probes BIN` lists both; docs/PROBES.md.
    #[arg(long, value_name = "BIN:SYMBOL", requires = "item_end")]
    item_begin: Option<String>,

    /// Item end from a uprobe: `BIN:SYMBOL%return` (the function's return; on a Go binary
    /// a probe on each of its RET instructions, never a uretprobe),
    /// `BIN:SYMBOL` (entry of another function) or `usdt:BIN:PROVIDER:NAME`. Closes the
    /// thread's latest open item (on a Go binary: the goroutine's, read from R14).
    #[arg(long, value_name = "BIN:SYMBOL[%return]", requires = "item_begin")]
    item_end: Option<String>,

    /// Item id from this argument register at the begin probe (e.g. `rdi`, the first
    /// argument). Default: a sequence 1, 2, 3, ... in begin order.
    #[arg(long, value_name = "REG", requires = "item_begin")]
    item_id_reg: Option<String>,

    /// Class label for the items of --item-begin/--item-end.
    #[arg(long, value_name = "NAME", requires = "item_begin")]
    item_class: Option<String>,

    /// Item class from an argument of a probed function, without changing the program:
    /// `BIN:SYMBOL:ARG[:string|u64|s64]`. ARG is a register (`rdi`, `rsi`, ... on x86-64,
    /// `x0`..`x7` on arm64) or `arg1`..`arg6`; TYPE `string` (default) reads the C string
    /// the register points to and reduces it to its SQL shape (literals become `?`, as
    /// pg_stat_statements groups queries), `u64`/`s64` use the register's value. Each call
    /// labels the thread's open item that has no class yet, or else the next item the
    /// thread begins (e.g. `postgres:pg_parse_query:rdi` runs before `PortalRun`). Works with
    /// marker-library items and with --item-begin/--item-end. Needs root and tracefs (mounted
    /// at /sys/kernel/tracing when absent); at most 1024 classes per process, the rest are
    /// counted as dropped_item_classes. A USDT probe's argument:
    /// `usdt:BIN:PROVIDER:NAME:argN[:TYPE]` (N from 0, read as its note says). Repeatable.
    #[arg(long, value_name = "BIN:SYMBOL:ARG[:TYPE]")]
    item_class_from: Vec<String>,

    /// Timestamped events inside items from a probe: `usdt:BIN:PROVIDER:NAME` or
    /// `BIN:SYMBOL[%return]`, optionally with arguments `:argN[:string|u64|s64][,argM[:TYPE]]...`
    /// (at most 6; N from 0 for USDT, arg1..arg6 for a function; default u64; strings are
    /// stored cut at 256 bytes, control characters as `?`, not SQL-shaped). A probe named
    /// `X__start` starts span X and `X__done` ends it (durations in the item's breakdown,
    /// `items --explain`, the Perfetto export); others are instants. An event on the very
    /// probe of --item-begin/--item-end belongs to the item that hit begins/ends. At most
    /// 256 events per item are kept by the analysis. Needs root and tracefs. Repeatable.
    #[arg(long, value_name = "PROBE[:argN[:TYPE][,argM...]]")]
    item_event: Vec<String>,

    /// A span from any two probes: `START,END` (each as in --item-event), named after
    /// START. Repeatable.
    #[arg(long, value_name = "START,END")]
    item_span: Vec<String>,

    /// A ready-made probe set: `postgresql[=BIN]` expands to
    /// `--item-begin usdt:BIN:postgresql:query__start --item-end usdt:BIN:postgresql:query__done
    /// --item-class-from usdt:BIN:postgresql:query__start:arg0` and the --item-event probes
    /// `lock__wait__start:arg1,arg0,arg4,arg5`, `lock__wait__done`, `lwlock__wait__start:arg0:string`,
    /// `lwlock__wait__done` (items = statements, classes = SQL shapes, lock and LWLock
    /// waits as spans; no symbols needed). BIN defaults to the newest
    /// /usr/lib/postgresql/*/bin/postgres, else postgres in PATH. docs/PROBES.md.
    #[arg(long, value_name = "NAME[=BIN]", conflicts_with_all = ["item_begin", "item_end", "item_reg"])]
    preset: Option<String>,

    /// Register-tag mode: the item id is in this user register (e.g. `r13`, reserved
    /// with -ffixed-r13), captured with every sample; 0 means outside any item.
    #[arg(long, value_name = "REG")]
    item_reg: Option<String>,

    /// Record main-memory bandwidth: sample this CPU's precise last-level-cache-miss
    /// event (Intel PEBS MEM_LOAD_RETIRED.L3_MISS or its older names, AMD IBS op with
    /// data source) at a fixed period (-c, default 1009) set up for large PEBS, with data
    /// address, data source and weight; says which event and why. Analyze with `tailprof
    /// bandwidth`. Needs a hardware PMU.
    #[arg(long, conflicts_with_all = ["events", "freq"])]
    bandwidth: bool,

    /// With --bandwidth: also count the same event without sampling (the paper's PMC1),
    /// so `tailprof bandwidth` can measure the events lost per PEBS activation.
    #[arg(long, requires = "bandwidth")]
    bandwidth_counter: bool,

    /// With --bandwidth: `soft-tsc` samples the event with an interrupt per overflow
    /// instead of PEBS (the paper's baseline, for comparison).
    #[arg(long, requires = "bandwidth")]
    soft_tsc: bool,

    /// Record call stacks: `fp` (kernel frame-pointer callchains, kernel and user),
    /// `dwarf[,BYTES]` (user registers and BYTES of user stack per sample, default 16384,
    /// unwound with .eh_frame/.debug_frame while recording; only frames are stored), or
    /// `lbr` (the LBR call stack, Intel PMUs only). Every stack's status (complete,
    /// copy_exhausted, no_unwind_info, ...) is stored; see `tailprof info`.
    #[arg(long = "call-graph", value_name = "fp|dwarf[,BYTES]|lbr")]
    call_graph: Option<String>,

    /// Record call stacks with frame pointers (= `--call-graph fp`).
    #[arg(short = 'g', conflicts_with = "call_graph")]
    call_graph_fp: bool,

    /// Record context switches (on CPU / runnable / blocked) and the kernel+user stack
    /// where each thread went off the CPU (a sched:sched_switch event; tracefs is mounted
    /// at /sys/kernel/tracing when absent) from the start. On by default with
    /// --item-begin, --item-reg or --item-class-from. Without any of these, off-CPU
    /// recording still starts by itself at the first marker from the marker library (the
    /// events are opened only then, so a program without markers pays nothing; items that
    /// began before that have only part of their off-CPU time, marked off_cpu_partial); with
    /// -p/-a it starts at once when a process with the marker library is attached.
    #[arg(long = "off-cpu", conflicts_with = "no_off_cpu")]
    off_cpu: bool,

    /// Do not record context switches, even with items or markers.
    #[arg(long = "no-off-cpu")]
    no_off_cpu: bool,

    /// With context switches, do not record wakeups (sched:sched_waking, with the waker's
    /// stack: a thread's user frames only, an interrupt's kernel frames only) and, for a
    /// command or -p, the CPU-wide context switches that say who ran
    /// while a thread waited for a CPU. They give `items` its woken_by and preempted_by
    /// (docs/STACKS.md "Wakeups and CPU-wide switches").
    #[arg(long = "no-wakeups")]
    no_wakeups: bool,

    /// Record every waker's whole stack, kernel and user parts, as `perf record -e
    /// sched:sched_waking -g` does: a thread's wake mechanism (try_to_wake_up ← … ← the
    /// system call) and the interrupted task's user frames under an interrupt's wakeup.
    /// Costs the kernel about 4 µs more per thread wakeup (docs/BENCHMARKS.md "Wakeups and
    /// CPU-wide switches"). Not with --no-wakeups.
    #[arg(long = "full-waker-stacks", conflicts_with = "no_wakeups")]
    full_waker_stacks: bool,

    /// Command to launch and profile (after `--`).
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

pub fn run(args: RecordArgs) -> Result<ExitCode> {
    let target = if args.all_cpus && !args.command.is_empty() {
        Target::SystemWideCommand(args.command.clone())
    } else if args.all_cpus {
        Target::SystemWide
    } else if let Some(pid) = args.pid {
        Target::Pid(pid)
    } else if !args.command.is_empty() {
        Target::Command(args.command.clone())
    } else {
        bail!("nothing to record: give a command after `--`, `-p PID`, or `-a` (see `tailprof record --help`)");
    };
    if args.mmap_pages == 0 || !args.mmap_pages.is_power_of_two() {
        bail!("--mmap-pages must be a power of two (got {})", args.mmap_pages);
    }
    if args.period == Some(0) || args.freq == Some(0) {
        bail!("the sampling period (-c) and frequency (-F) must be greater than zero");
    }

    // --bandwidth: the machine's LLC-miss event (fails here, before any file is
    // created, on a machine without a PMU).
    let bw = if args.bandwidth {
        let mode = if args.soft_tsc { BandwidthMode::SoftTsc } else { BandwidthMode::Precise };
        Some(bandwidth::choose_live(&BandwidthRequest { mode, period: args.period, counter: args.bandwidth_counter })?)
    } else {
        None
    };
    let names = if args.events.is_empty() { vec!["cpu-clock".to_string()] } else { args.events.clone() };
    let mut events = Vec::with_capacity(names.len());
    match &bw {
        Some(c) => events.push(c.spec.clone()),
        None => {
            for name in &names {
                events.push(EventSpec::parse(name)?);
            }
        }
    }
    let regs_user = match &args.regs {
        Some(list) => parse_regs(list)?,
        None => 0,
    };
    let sampling = SamplingConfig {
        // Neither given: each event gets its default rate (attr::default_rate).
        period: bw.as_ref().map(|c| c.period).or(args.period),
        freq: args.freq,
        regs_user,
        clock: ClockChoice::Monotonic, // the recorder picks the real clock from the machine's capabilities
        inherit: true,
        enable_on_exec: false,
        disabled: true,
        sideband: true,
        wakeup_events: 0,
    };

    let bw_target = target.clone();
    let opts = RecordOptions { events, sampling, mmap_pages: args.mmap_pages, target, cmdline: std::env::args().collect() };
    let preset = args.preset.as_deref().map(tailprof_collect::items::preset::expand).transpose()?;
    if let Some(p) = &preset {
        eprintln!("--preset {}: {}", args.preset.as_deref().unwrap_or(""), p.args().join(" "));
    }
    let (item_begin, item_end) = match &preset {
        Some(p) => (Some(p.item_begin.clone()), Some(p.item_end.clone())),
        None => (args.item_begin.clone(), args.item_end.clone()),
    };
    let probes = match (&item_begin, &item_end) {
        (Some(b), Some(e)) => Some(ItemProbes {
            begin: ProbeSpec::parse(b)?,
            end: ProbeSpec::parse(e)?,
            id_reg: args.item_id_reg.clone(),
            class: args.item_class.clone(),
        }),
        _ => None,
    };
    let class_from = args
        .item_class_from
        .iter()
        .chain(preset.iter().flat_map(|p| p.item_class_from.iter()))
        .map(|s| tailprof_collect::items::classprobe::ClassSpec::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut events = Vec::new();
    for s in args.item_event.iter().chain(preset.iter().flat_map(|p| p.item_event.iter())) {
        events.push(tailprof_collect::items::events::EventSpec::parse(s)?);
    }
    for s in &args.item_span {
        events.extend(tailprof_collect::items::events::EventSpec::parse_span(s)?);
    }
    let items = ItemOptions {
        probes,
        item_reg: args.item_reg.clone(),
        class_from,
        events,
        // Markers may show up in any target: off-CPU then starts at the first one.
        off_cpu_on_markers: !args.no_off_cpu,
    };

    // Open the output before launching anything, so an unwritable path fails first. It is
    // a new temporary file (0600, never following a symlink) next to the final name; if
    // the recorder cannot start, dropping it removes it and an existing trace of that name
    // is untouched (docs/SECURITY.md, "Output files").
    let file = TraceFile::create(&args.output).with_context(|| format!("cannot create output file {}", args.output.display()))?;
    let call_graph = match (&args.call_graph, args.call_graph_fp) {
        (Some(s), _) => Some(tailprof_collect::session::CallGraph::parse(s).map_err(anyhow::Error::msg)?),
        (None, true) => Some(tailprof_collect::session::CallGraph::Fp),
        (None, false) => None,
    };
    let items_recorded = items.probes.is_some() || items.item_reg.is_some() || !items.class_from.is_empty() || !items.events.is_empty();
    let stack_opts = tailprof_collect::session::StackOptions {
        call_graph,
        off_cpu: !args.no_off_cpu && (args.off_cpu || items_recorded),
        no_wakeups: args.no_wakeups,
        full_waker_stacks: args.full_waker_stacks,
    };
    let mut opts = opts;
    if matches!(stack_opts.call_graph, Some(tailprof_collect::session::CallGraph::Dwarf { .. })) && opts.mmap_pages == 128 {
        // A stack copy per sample fills the default ring 40x faster: 2 MiB rings.
        opts.mmap_pages = 512;
    }
    let mut recorder = match Recorder::with_stacks(opts, items, stack_opts) {
        Ok(r) => r,
        Err(e) => {
            drop(file);
            return Err(e.into());
        }
    };
    for note in recorder.notes() {
        eprintln!("tailprof: note: {note}");
    }
    let notes_before = recorder.notes().len();
    let mut header = recorder.header();
    let mut sibling = None;
    let mut counter_event = None;
    if let Some(c) = &bw {
        eprintln!("tailprof: bandwidth: {} ({}, one sample per {} events): {}", c.event_name, c.method.as_str(), c.period, c.reason);
        for n in &c.notes {
            eprintln!("tailprof: note: {n}");
        }
        if let Some(spec) = &c.counter {
            match CounterSibling::open(spec, &bw_target, recorder.child_pid()) {
                Ok(s) => sibling = Some(s),
                Err(e) => eprintln!("tailprof: warning: {e}; recording without it"),
            }
        }
        counter_event = bandwidth::annotate_header(&mut header, c, 0, sibling.is_some());
    }
    let mut writer = file.start(&header).with_context(|| format!("cannot write {}", args.output.display()))?;

    signals::install().context("cannot install the Ctrl-C handler")?;
    let show_progress = ui::stderr_is_tty();
    let started = Instant::now();
    let mut last_draw = Instant::now();
    // -p / -a run until Ctrl-C: say when recording has begun (after the first round,
    // so events are enabled and /proc has been read), so a driver knows when to start load.
    let mut announce = args.command.is_empty();
    let mut progress = |p: &Progress| {
        if std::mem::take(&mut announce) {
            eprintln!("tailprof: recording; press Ctrl-C to stop");
        }
        if show_progress && last_draw.elapsed() >= Duration::from_millis(500) {
            last_draw = Instant::now();
            eprint!(
                "\r\x1b[Ktailprof: recording {} | {} samples | {} lost | {} markers{} | {}",
                ui::duration(p.elapsed_ns),
                ui::thousands(p.samples),
                ui::thousands(p.lost),
                ui::thousands(p.markers),
                if p.lost_markers > 0 { format!(" ({} dropped)", ui::thousands(p.lost_markers)) } else { String::new() },
                ui::bytes(p.bytes)
            );
            let _ = std::io::stderr().flush();
        }
    };
    if let Some(s) = &sibling {
        s.enable()?;
    }
    let run_result = recorder.run(&mut writer, &signals::STOP, &mut progress);
    if let (Some(s), Some(idx)) = (&sibling, counter_event) {
        match bandwidth::append_counter_readings(&mut writer, s, idx) {
            Ok(r) => eprintln!("tailprof: counting sibling: {} events", r.iter().map(|x| x.value).sum::<u64>()),
            Err(e) => eprintln!("tailprof: warning: {e}"),
        }
    }
    if show_progress {
        eprint!("\r\x1b[K");
    }
    // Keep what was written even when the drain loop failed part-way.
    let wall_ns = started.elapsed().as_nanos() as u64;
    let summary = match &run_result {
        Ok(s) => Some(s.duration_ns),
        Err(_) => Some(wall_ns),
    };
    let written = finish_trace_file(writer, summary).with_context(|| format!("cannot finish {}", args.output.display()))?;
    let rec = run_result?;
    // Notices from while recording (e.g. a process truncated its marker region).
    for note in &recorder.notes()[notes_before..] {
        let what = if note.starts_with("off-CPU recording enabled") || note.starts_with("markers: attached") { "note" } else { "warning" };
        eprintln!("tailprof: {what}: {note}");
    }

    let lost = rec.lost_records + rec.lost_samples;
    let bps = if written.stats.samples > 0 { written.bytes as f64 / written.stats.samples as f64 } else { 0.0 };
    eprintln!(
        "tailprof: recorded {} | {} samples | lost {} | throttled {}",
        ui::duration(rec.duration_ns),
        ui::thousands(written.stats.samples),
        ui::thousands(lost),
        ui::thousands(rec.throttled)
    );
    if rec.jit_names > 0 || rec.skipped_jit_names > 0 {
        eprintln!(
            "tailprof: JIT code names (perf maps, jitdumps) {} | skipped {}",
            ui::thousands(rec.jit_names),
            ui::thousands(rec.skipped_jit_names)
        );
    }
    if rec.jit_lines > 0 || rec.skipped_jit_lines > 0 {
        eprintln!(
            "tailprof: JIT source lines (jitdump DEBUG_INFO) {} | skipped {}",
            ui::thousands(rec.jit_lines),
            ui::thousands(rec.skipped_jit_lines)
        );
    }
    if rec.jit_unwind_infos > 0 || rec.jit_unwind_skipped > 0 || (rec.jit_names > 0 && rec.unwind_fallback_frames > 0) {
        eprintln!(
            "tailprof: --call-graph dwarf: JIT functions with unwind information {} (frames {}) | skipped {} | frames without unwind information walked by frame pointers {}",
            ui::thousands(rec.jit_unwind_infos),
            ui::thousands(rec.jit_cfi_frames),
            ui::thousands(rec.jit_unwind_skipped),
            ui::thousands(rec.unwind_fallback_frames)
        );
    }
    if rec.spooled > 0 {
        eprintln!("tailprof: the recorder fell behind at times: its drain thread held {} records for it", ui::thousands(rec.spooled));
    }
    eprintln!("tailprof: item markers {} | dropped markers {}", ui::thousands(rec.markers), ui::thousands(rec.lost_markers));
    for w in &rec.warnings {
        eprintln!("tailprof: warning: {w}");
    }
    eprintln!("tailprof: wrote {} | {} | {:.2} bytes/sample", args.output.display(), ui::bytes(written.bytes), bps);
    let st = &written.stats.sample_stacks;
    let with_stack = tailprof_format::StackStatus::ALL.iter().map(|&x| st.get(x)).sum::<u64>();
    if with_stack > 0 {
        let truncated = st.copy_exhausted + st.no_unwind_info + st.unwind_error + st.max_depth + st.user_missing;
        eprintln!(
            "tailprof: stacks {} complete, {} truncated (copy exhausted {}, no unwind info {}, unwind error {}, max depth {}, no user part {}), {} judged by `report --by stack` (frame-pointer/LBR chains: complete if they reach a thread or process entry)",
            ui::thousands(st.complete),
            ui::thousands(truncated),
            ui::thousands(st.copy_exhausted),
            ui::thousands(st.no_unwind_info),
            ui::thousands(st.unwind_error),
            ui::thousands(st.max_depth),
            ui::thousands(st.user_missing),
            ui::thousands(st.unknown)
        );
        if st.copy_exhausted * 100 > with_stack {
            eprintln!(
                "tailprof: hint: {:.1} % of the stacks were deeper than the copied user stack; a larger copy helps (--call-graph dwarf,32768)",
                100.0 * st.copy_exhausted as f64 / with_stack as f64
            );
        }
    }
    // The loss table stored in the trace, printed as `info`, `report` and `items` print it.
    let losses = tailprof_present::losses::render_losses(&tailprof_format::losses::LossTable::new(&written.stats, None));
    eprint!("{losses}");
    if signals::STOP.load(Ordering::SeqCst) {
        eprintln!("tailprof: stopped by signal; the trace is complete up to that point");
    }
    Ok(match rec.exit_status {
        Some(code) => ExitCode::from(code.clamp(0, 255) as u8),
        None => ExitCode::SUCCESS,
    })
}
