//! `tailprof`: the command-line front end. It parses arguments, wires the stage
//! libraries together, prints, and maps errors to one line and an exit code. All
//! real work lives in the `tailprof-*` library crates.

mod cmd_agent;
mod cmd_bandwidth;
mod cmd_calibrate;
mod cmd_demo;
mod cmd_diff;
mod cmd_export;
mod cmd_import;
mod cmd_info;
mod cmd_items;
mod cmd_overhead;
mod cmd_plan;
mod cmd_probes;
mod cmd_record;
mod cmd_report;
mod cmd_stat;
mod cmd_top;
mod measure;
mod signals;
mod ui;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// tailprof: a low-overhead sampling profiler that answers "why was this request slow?"
///
/// Record timestamped samples with perf_event_open into a compact, crash-safe trace,
/// attribute them to the requests in flight, and explain the slow ones.
#[derive(Parser)]
#[command(
    name = "tailprof",
    version,
    about,
    long_about,
    propagate_version = true,
    after_help = "Start here:\n  \
        tailprof demo                                 # the paper's example, end to end\n  \
        tailprof record -o run.trace -- ./server      # record (markers are picked up)\n  \
        tailprof items run.trace --sort anomaly       # slow requests and why\n  \
        tailprof report run.trace                     # flat profile\n  \
        tailprof plan --budget 2 -- ./server          # pick a period for a 2% overhead budget"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Record(cmd_record::RecordArgs),
    Report(cmd_report::ReportArgs),
    Info(cmd_info::InfoArgs),
    Import(cmd_import::ImportArgs),
    Items(cmd_items::ItemsArgs),
    Demo(cmd_demo::DemoArgs),
    Export(cmd_export::ExportArgs),
    Stat(cmd_stat::StatArgs),
    Calibrate(cmd_calibrate::CalibrateArgs),
    Plan(cmd_plan::PlanArgs),
    Overhead(cmd_overhead::OverheadArgs),
    Bandwidth(cmd_bandwidth::BandwidthArgs),
    Agent(cmd_agent::AgentArgs),
    Top(cmd_top::TopArgs),
    Probes(cmd_probes::ProbesArgs),
    Diff(cmd_diff::DiffArgs),
    #[command(name = "__spin", hide = true)]
    Spin(cmd_calibrate::SpinArgs),
    #[command(name = "__timed", hide = true)]
    Timed(measure::TimedArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Record(a) => cmd_record::run(a),
        Command::Report(a) => cmd_report::run(a),
        Command::Info(a) => cmd_info::run(a),
        Command::Import(a) => cmd_import::run(a),
        Command::Items(a) => cmd_items::run(a),
        Command::Demo(a) => cmd_demo::run(a),
        Command::Export(a) => cmd_export::run(a),
        Command::Stat(a) => cmd_stat::run(a),
        Command::Calibrate(a) => cmd_calibrate::run(a),
        Command::Plan(a) => cmd_plan::run(a),
        Command::Overhead(a) => cmd_overhead::run(a),
        Command::Bandwidth(a) => cmd_bandwidth::run(a),
        Command::Agent(a) => cmd_agent::run(a),
        Command::Top(a) => cmd_top::run(a),
        Command::Probes(a) => cmd_probes::run(a),
        Command::Diff(a) => cmd_diff::run(a),
        Command::Spin(a) => cmd_calibrate::run_spin(a),
        Command::Timed(a) => measure::run_timed(a),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            if ui::is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            eprintln!("tailprof: error: {}", ui::one_line(&err));
            ExitCode::from(1)
        }
    }
}
