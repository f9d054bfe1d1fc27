//! `tailprof diff`: which functions, binaries or stacks grew between two time ranges
//! of the continuous-profiling store.

use anyhow::{Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use tailprof_analyze::store_query::diff;
use tailprof_present::store_view;
use tailprof_store::time::{now_us, parse_duration_us, parse_time_us};
use tailprof_store::{SampleQuery, Store, StoreReader};

use crate::cmd_top::ByArg;

/// Compare two time ranges of the agent's store: share of samples per function (or
/// binary, stack) in B minus in A, largest growth first, then the largest shrinks.
///
/// A RANGE is FROM..TO, each a time as in `top --from` (2026-11-23T20:00:00Z,
/// @UNIX_SECONDS, -2h, now), or a single DURATION meaning the last DURATION.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tailprof diff --a -2h..-1h --b 1h\n  \
    tailprof diff --a 2026-11-22T10:00Z..2026-11-22T11:00Z --b 2026-11-23T10:00Z..2026-11-23T11:00Z --binary postgres")]
pub struct DiffArgs {
    /// Store directory [default: $TAILPROF_HOME, else /var/lib/tailprof as root, else $XDG_DATA_HOME/tailprof, else ~/.local/share/tailprof].
    #[arg(long, value_name = "DIR")]
    store: Option<PathBuf>,
    /// The baseline range.
    #[arg(long = "a", value_name = "RANGE", allow_hyphen_values = true)]
    a: String,
    /// The range compared with it.
    #[arg(long = "b", value_name = "RANGE", allow_hyphen_values = true)]
    b: String,
    /// Only this host's files (the host=… partition).
    #[arg(long, value_name = "NAME")]
    host: Option<String>,
    /// Only samples whose binary path ends with B (e.g. libc.so.6) or whose process is named B.
    #[arg(long, value_name = "B")]
    binary: Option<String>,
    /// Only this process.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
    #[arg(long, value_enum, default_value = "function")]
    by: ByArg,
    /// Rows shown (0: all).
    #[arg(long, value_name = "N", default_value_t = 30)]
    top: usize,
    /// Print JSON (docs/JSON.md): {"schema_version", "by", "a": {from, to, samples},
    /// "b": {...}, "functions": [{"name", "a_samples", "b_samples", "a_percent",
    /// "b_percent", "delta_percent"}]} (`binaries` / `stacks` with --by binary / stack).
    #[arg(long)]
    json: bool,
}

fn parse_range(s: &str, what: &str) -> Result<(i64, i64)> {
    let now = now_us();
    let bad = || format!("--{what} {s:?}: give FROM..TO (times like 2026-11-23T20:00Z, @UNIX_SECONDS, -2h, now) or a duration like 1h");
    if let Some((a, b)) = s.split_once("..") {
        let f = parse_time_us(a, now).with_context(bad)?;
        let t = parse_time_us(b, now).with_context(bad)?;
        anyhow::ensure!(f < t, "--{what} {s:?}: the start must be before the end");
        Ok((f, t))
    } else {
        let d = parse_duration_us(s).with_context(bad)?;
        Ok((now - d, now + 1))
    }
}

pub fn run(a: DiffArgs) -> Result<ExitCode> {
    let root = match a.store.clone() {
        Some(r) => r,
        None => tailprof_store::default_root()?,
    };
    anyhow::ensure!(root.is_dir(), "no store at {} (start `tailprof agent`, or give --store DIR)", root.display());
    let reader = StoreReader::new(Store::at(&root));
    let (af, at) = parse_range(&a.a, "a")?;
    let (bf, bt) = parse_range(&a.b, "b")?;
    let q = |from_us, to_us| SampleQuery { from_us, to_us, host: a.host.clone(), pid: a.pid, binary: a.binary.clone() };
    let d = diff(&reader, &q(af, at), &q(bf, bt), a.by.into(), a.top);
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", tailprof_present::json::document(&store_view::diff_json(&d))?)?;
    } else {
        out.write_all(store_view::diff_text(&d).as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}
