//! `tailprof calibrate`: measure α, the elapsed-time cost of one sample, on this machine.
//! The experiment lives in `tailprof_measure::calibrate`, the output in
//! `tailprof_present::overhead`; this file parses the arguments.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use std::process::ExitCode;

use tailprof_analyze::overhead::Basis;
use tailprof_collect::event::EventSpec;
use tailprof_measure::calibrate::{calibrate, spin, CalibrateConfig};
use tailprof_present::overhead::{calibration_json, calibration_refusal, calibration_text};

use crate::{measure, signals};

/// Exit code when the fit is refused.
pub const EXIT_REFUSED: u8 = 3;

/// Measure the cost of one sample (α) on this machine and save it for `plan` and
/// `overhead`.
///
/// Runs a built-in busy loop (no memory traffic) unprofiled and at a sweep of sampling
/// periods (cpu-clock: 1 ms down to 10 µs; hardware events: 128K down to 2K), each point
/// repeated with the order rotated, and fits elapsed time against the number of samples
/// with a robust (Theil–Sen) line. The slope is α, reported with a 95% interval and R².
/// The fit is accepted when α is known to ±25% (95%) from at least 8 runs over 3 design
/// points, at most 1 run in 5 far off the line and R² ≥ 0.9. When the wall-clock fit
/// misses that and the CPU-time fit does not (a busy machine), the CPU-time fit is used;
/// when neither does, a fit whose cost is still clearly above zero (interval within
/// ±100%, excluding 0) is saved with its wider interval said. Only when no cost can be
/// told from the noise is nothing saved, with exit status 3.
///
/// Saved to $TAILPROF_HOME/calibration/ (else /var/lib/tailprof/calibration/ as root, else
/// $XDG_DATA_HOME/tailprof/calibration/, else ~/.local/share/tailprof/calibration/), one
/// file per CPU model, kernel and event.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tailprof calibrate                       # cpu-clock, about a minute\n  \
    tailprof calibrate --repeats 9 --pin     # on a noisy machine\n  \
    tailprof calibrate -e instructions --json")]
pub struct CalibrateArgs {
    /// Event to calibrate.
    #[arg(short = 'e', long = "event", value_name = "EVENT", default_value = "cpu-clock")]
    event: String,

    /// Runs per design point (unprofiled and each period).
    #[arg(long, value_name = "N", default_value_t = 5)]
    repeats: usize,

    /// Unprofiled duration of one busy-loop run.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.5)]
    seconds: f64,

    /// Periods to sweep, comma-separated (default: see above).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    periods: Vec<u64>,

    /// Time to fit: `wall` (elapsed, as in the paper) or `cpu` (the loop's CPU time,
    /// which other processes' load does not inflate) [default: wall, and cpu when the
    /// wall-clock fit is refused and the CPU-time one is not].
    #[arg(long, value_enum)]
    basis: Option<BasisArg>,

    /// Before each run, wait up to this many seconds for the machine to be idle (other
    /// processes using under 15% of the CPUs); 0: do not wait.
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    wait_idle: f64,

    /// Pin the busy loop to one CPU and the recorder to the others.
    #[arg(long)]
    pin: bool,

    /// Data pages per CPU ring buffer.
    #[arg(long, value_name = "N", default_value_t = 128)]
    mmap_pages: usize,

    /// Do not save the result.
    #[arg(long)]
    no_save: bool,

    /// Print JSON.
    #[arg(long)]
    json: bool,

    /// Calibrate on this command instead of the busy loop (after `--`): α for that
    /// workload, including its cache effects. Printed, never saved.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BasisArg {
    Wall,
    Cpu,
}

impl From<BasisArg> for Basis {
    fn from(b: BasisArg) -> Basis {
        match b {
            BasisArg::Wall => Basis::Wall,
            BasisArg::Cpu => Basis::Cpu,
        }
    }
}

/// Hidden helper: run the busy loop.
#[derive(Args, Debug)]
pub struct SpinArgs {
    #[arg(long, value_name = "N")]
    iters: u64,
}

pub fn run_spin(args: SpinArgs) -> Result<ExitCode> {
    std::hint::black_box(spin(args.iters));
    Ok(ExitCode::SUCCESS)
}

pub fn run(args: CalibrateArgs) -> Result<ExitCode> {
    let cfg = CalibrateConfig {
        spec: EventSpec::parse(&args.event)?,
        repeats: args.repeats,
        seconds: args.seconds,
        periods: args.periods,
        basis: args.basis.unwrap_or(BasisArg::Wall).into(),
        basis_fallback: args.basis.is_none(),
        wait_idle_s: args.wait_idle,
        pin: args.pin,
        mmap_pages: args.mmap_pages,
        save: !args.no_save,
        command: args.command,
    };
    tailprof_measure::calibrate::check_config(&cfg)?;
    signals::install().context("cannot install the Ctrl-C handler")?;
    let report = calibrate(&cfg, &signals::STOP, &measure::status);
    measure::clear_status();
    let report = report?;
    if args.json {
        println!("{}", tailprof_present::json::document(&calibration_json(&report))?);
    } else {
        print!("{}", calibration_text(&report));
    }
    if let Some(line) = calibration_refusal(&report) {
        eprintln!("tailprof: error: {line}");
        return Ok(ExitCode::from(EXIT_REFUSED));
    }
    Ok(ExitCode::SUCCESS)
}
