//! `tailprof top`: the hottest functions, binaries or stacks of a time range of the
//! continuous-profiling store, and exports of that range (folded, pprof, flame graph).

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tailprof_analyze::store_query::{export_stacks, top, GroupBy};
use tailprof_present::store_view;
use tailprof_store::time::{now_us, parse_duration_us, parse_time_us};
use tailprof_store::{SampleQuery, Store, StoreReader};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ByArg {
    /// The sampled function (self) and every function on the stack (total)
    Function,
    /// The sampled function's binary
    Binary,
    /// Whole stacks, folded (process;root;...;leaf)
    Stack,
}

impl From<ByArg> for GroupBy {
    fn from(b: ByArg) -> GroupBy {
        match b {
            ByArg::Function => GroupBy::Function,
            ByArg::Binary => GroupBy::Binary,
            ByArg::Stack => GroupBy::Stack,
        }
    }
}

/// Where the store is and which part of it: shared by top, diff and items --store.
#[derive(Args, Debug, Clone)]
pub struct StoreRange {
    /// Store directory [default: $TAILPROF_HOME, else /var/lib/tailprof as root, else $XDG_DATA_HOME/tailprof, else ~/.local/share/tailprof].
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// The last DURATION (e.g. 15m, 1h, 2d; -2h means the same as 2h) [default: 1h].
    #[arg(long, value_name = "DURATION", conflicts_with_all = ["from", "to"], allow_hyphen_values = true)]
    pub since: Option<String>,
    /// Range start: 2026-11-23T20:00:00Z, "2026-11-23 20:00", @UNIX_SECONDS or -2h.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub from: Option<String>,
    /// Range end (same forms) [default: now].
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub to: Option<String>,
    /// Only this host's files (the host=… partition).
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
}

impl StoreRange {
    pub fn reader(&self) -> Result<StoreReader> {
        let root = match self.store.clone() {
            Some(r) => r,
            None => tailprof_store::default_root()?,
        };
        if !root.is_dir() {
            bail!("no store at {} (start `tailprof agent`, or give --store DIR)", root.display());
        }
        Ok(StoreReader::new(Store::at(&root)))
    }

    pub fn range(&self) -> Result<(i64, i64)> {
        let now = now_us();
        if let Some(s) = &self.since {
            // `--since -2h` reads as "since two hours ago": the same as `--since 2h`.
            let d = parse_duration_us(s.strip_prefix('-').unwrap_or(s))
                .with_context(|| format!("--since {s:?}: give a duration such as 15m, 1h, 2d"))?;
            return Ok((now - d, now + 1));
        }
        let from = match &self.from {
            Some(f) => parse_time_us(f, now).with_context(|| format!("--from {f:?}: give 2026-11-23T20:00:00Z, @UNIX_SECONDS or -2h"))?,
            None => now - 3_600_000_000,
        };
        let to = match &self.to {
            Some(t) => parse_time_us(t, now).with_context(|| format!("--to {t:?}: give 2026-11-23T21:00:00Z, @UNIX_SECONDS or now"))?,
            None => now + 1,
        };
        if from >= to {
            bail!("--from must be before --to");
        }
        Ok((from, to))
    }
}

/// Hottest functions, binaries or stacks of a time range of the agent's store.
///
/// Reads the Parquet files of `tailprof agent` whose windows overlap the range (pruned
/// by the host/date/hour folders), names frames from the store's per-build-id symbol
/// tables, and counts samples. `self` counts samples whose innermost frame is the
/// function, `total` those with the function anywhere on the stack. The same numbers
/// come from DuckDB over the same files (examples/store-duckdb.sql).
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tailprof top --since 1h\n  \
    tailprof top --from 2026-11-23T20:00:00Z --to 2026-11-23T21:00:00Z --binary nginx\n  \
    tailprof top --since 1d --by stack --top 20\n  \
    tailprof top --since 1h --pprof cpu.pb.gz --folded cpu.folded --flamegraph cpu.html")]
pub struct TopArgs {
    #[command(flatten)]
    range: StoreRange,
    /// Only samples whose binary path ends with B (e.g. libc.so.6) or whose process is named B.
    #[arg(long, value_name = "B")]
    binary: Option<String>,
    /// Only this process.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
    /// What to group by.
    #[arg(long, value_enum, default_value = "function")]
    by: ByArg,
    /// Rows shown (0: all).
    #[arg(long, value_name = "N", default_value_t = 30)]
    top: usize,
    /// Print JSON, the shape of `report --json` (docs/JSON.md): {"schema_version", "by",
    /// "from", "to", "samples", "functions": [{"name", "samples", "percent",
    /// "total_samples", "total_percent"}] (`binaries` / `stacks` with --by binary / stack),
    /// "read": {files, bad_files, lost_samples, ...}}.
    #[arg(long)]
    json: bool,
    /// Also write the range's stacks as folded lines (flame-graph input) to FILE.
    #[arg(long, value_name = "FILE")]
    folded: Option<PathBuf>,
    /// Also write the range as a gzipped pprof profile (go tool pprof) to FILE.
    #[arg(long, value_name = "FILE")]
    pprof: Option<PathBuf>,
    /// Also write a flame-graph HTML page of the range to FILE.
    #[arg(long, value_name = "FILE")]
    flamegraph: Option<PathBuf>,
}

fn write_out(path: &Path, bytes: &[u8]) -> Result<()> {
    tailprof_store::atomic::write_file(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

pub fn run(a: TopArgs) -> Result<ExitCode> {
    let reader = a.range.reader()?;
    let (from_us, to_us) = a.range.range()?;
    let q = SampleQuery { from_us, to_us, host: a.range.host.clone(), pid: a.pid, binary: a.binary.clone() };
    let report = top(&reader, &q, a.by.into(), a.top);
    if a.folded.is_some() || a.pprof.is_some() || a.flamegraph.is_some() {
        let e = export_stacks(&reader, &q);
        if let Some(p) = &a.folded {
            write_out(p, store_view::folded(&e).as_bytes())?;
        }
        if let Some(p) = &a.pprof {
            write_out(p, &store_view::pprof_gzip(&e)?)?;
        }
        if let Some(p) = &a.flamegraph {
            write_out(p, store_view::flame_html(&e, "tailprof: CPU").as_bytes())?;
        }
    }
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", tailprof_present::json::document(&store_view::top_json(&report))?)?;
    } else {
        out.write_all(store_view::top_text(&report).as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}
