//! `tailprof plan`: the sampling period that keeps a command's overhead within a budget.
//! The plan is `tailprof_measure::plan`, the output `tailprof_present::overhead`.

use anyhow::{Context, Result};
use clap::Args;
use std::process::ExitCode;

use tailprof_collect::event::EventSpec;
use tailprof_measure::plan::{parse_budget, plan, PlanConfig};
use tailprof_present::overhead::{plan_json, plan_text};

use crate::signals;

/// Recommend a sampling period for a command and an overhead budget.
///
/// Runs CMD once in counting mode (almost free) to measure how often the event occurs
/// and how many threads run at once, then picks the smallest period whose predicted
/// overhead (α from `tailprof calibrate`) stays within the budget, and prints the
/// sample interval, samples per second, the trace data rate and the ring size per CPU
/// it implies. For precise (PEBS) events it adds the buffer guidance of Akiyama &
/// Hirofuchi (ROSS '17) §5.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tailprof plan --budget 2 -- ./server --selftest\n  \
    tailprof plan --budget 0.5% -e instructions --json -- python3 script.py")]
pub struct PlanArgs {
    /// Acceptable slowdown in percent (e.g. 2, 2% or 0.5).
    #[arg(long, value_name = "PCT", required = true)]
    budget: String,

    /// Event to sample.
    #[arg(short = 'e', long = "event", value_name = "EVENT", default_value = "cpu-clock")]
    event: String,

    /// α in ns per sample, instead of the stored calibration.
    #[arg(long, value_name = "NS")]
    alpha: Option<f64>,

    /// Print JSON.
    #[arg(long)]
    json: bool,

    /// The command (after `--`).
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

pub fn run(args: PlanArgs) -> Result<ExitCode> {
    let budget = parse_budget(&args.budget)?;
    if args.command.is_empty() {
        anyhow::bail!("no command: give the command to plan for after `--` (see `tailprof plan --help`)");
    }
    let cfg = PlanConfig { spec: EventSpec::parse(&args.event)?, budget, alpha_ns: args.alpha, command: args.command };
    signals::install().context("cannot install the Ctrl-C handler")?;
    // Ctrl-C reaches CMD through the terminal; counting ends when it exits.
    let report = plan(&cfg)?;
    if args.json {
        println!("{}", tailprof_present::json::document(&plan_json(&report))?);
    } else {
        print!("{}", plan_text(&report));
    }
    Ok(ExitCode::SUCCESS)
}
