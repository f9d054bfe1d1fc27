//! `tailprof probes BIN`: the USDT probes of a binary and the functions a uprobe can use.

use anyhow::Result;
use clap::Args;
use std::io::Write;
use std::process::ExitCode;

/// List what a binary offers as item boundaries without changing it: its USDT
/// (SystemTap SDT) probes, with their sites, argument specs and semaphores, for
/// `--item-begin usdt:BIN:PROVIDER:NAME` and `--item-class-from
/// usdt:BIN:PROVIDER:NAME:argN`; and the functions a uprobe can use
/// (`--item-begin BIN:FUNCTION`). See docs/PROBES.md.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  tailprof probes /usr/lib/postgresql/15/bin/postgres\n  \
    tailprof probes ./server --functions\n  tailprof probes ./server --json")]
pub struct ProbesArgs {
    /// The binary (a path, or a name looked up in PATH).
    #[arg(value_name = "BIN")]
    binary: String,

    /// Also list the functions a uprobe can use (otherwise only their number).
    #[arg(long)]
    functions: bool,

    /// Print JSON: path, probes [{provider, name, sites [{pc, offset, semaphore,
    /// ref_ctr_offset, args}]}], skipped_notes, functions, functions_left_out.
    #[arg(long)]
    json: bool,
}

pub fn run(args: ProbesArgs) -> Result<ExitCode> {
    let l = tailprof_collect::items::usdt::list(&args.binary)?;
    let mut out = String::new();
    if args.json {
        out = tailprof_present::json::document(&l)?;
        out.push('\n');
    } else {
        use std::fmt::Write as _;
        let sites: usize = l.probes.iter().map(|p| p.sites.len()).sum();
        let _ = writeln!(out, "{}", l.path.display());
        let _ = writeln!(out, "USDT probes: {} ({} sites)", l.probes.len(), sites);
        for p in &l.probes {
            let first = &p.sites[0];
            let sem = if first.semaphore != 0 { format!("  semaphore {:#x}", first.semaphore) } else { String::new() };
            let _ = writeln!(
                out,
                "  usdt:{}:{}:{}  {} site{}{sem}  args: {}",
                l.path.display(),
                p.provider,
                p.name,
                p.sites.len(),
                if p.sites.len() == 1 { "" } else { "s" },
                if first.args.is_empty() { "(none)" } else { &first.args }
            );
            for s in p.sites.iter().skip(1).filter(|s| s.args != first.args) {
                let _ = writeln!(out, "      site {:#x} args: {}", s.pc, s.args);
            }
        }
        if l.skipped_notes > 0 {
            let _ = writeln!(out, "  ({} malformed probe notes skipped)", l.skipped_notes);
        }
        let _ = writeln!(out, "Functions a uprobe can use (BIN:FUNCTION): {}", l.functions.len());
        if args.functions {
            for f in &l.functions {
                let _ = writeln!(out, "  {f}");
            }
        } else if !l.functions.is_empty() {
            let _ = writeln!(out, "  (--functions lists them)");
        }
        if l.functions_left_out > 0 {
            let _ = writeln!(out, "  ({} more not listed)", l.functions_left_out);
        }
    }
    std::io::stdout().lock().write_all(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
