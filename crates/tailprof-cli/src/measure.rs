//! The CLI side of measurement: the hidden `__timed` wrapper's arguments and the
//! transient status line. The measuring itself is `tailprof_measure`.

use anyhow::Result;
use clap::Args;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use tailprof_measure::run::{timed_child, TimedRequest};

/// A transient status line on stderr (only when it is a terminal).
pub fn status(msg: &str) {
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[K{msg}");
    }
}

pub fn clear_status() {
    status("");
}

/// Hidden helper: run CMD and write its elapsed time, CPU time and status to a file.
#[derive(Args, Debug)]
pub struct TimedArgs {
    /// Where to write "elapsed_ns cpu_ns status".
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Pin CMD to this CPU.
    #[arg(long, value_name = "CPU")]
    cpu: Option<usize>,
    /// Keep CMD's stdout/stderr (default: /dev/null).
    #[arg(long)]
    show_output: bool,
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// `tailprof __timed`.
pub fn run_timed(args: TimedArgs) -> Result<ExitCode> {
    let status = timed_child(&TimedRequest { out: args.out, cpu: args.cpu, show_output: args.show_output, command: args.command })?;
    Ok(ExitCode::from(status.clamp(0, 255) as u8))
}
