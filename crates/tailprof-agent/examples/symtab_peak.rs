//! Peak memory of symbolizing one binary the way the agent does (table parse + store
//! file), for bench/agent.sh's memory note:
//!
//!   cargo run --release -p tailprof-agent --example symtab_peak -- FILE OUT.parquet
//!
//! Prints "symbols N VmHWM_KiB_before VmHWM_KiB_after VmRSS_KiB_after".

fn status(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(file), Some(out)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: symtab_peak FILE OUT.parquet");
        std::process::exit(2);
    };
    let before = status("VmHWM:");
    let rows = match tailprof_agent::symtab::symbolize_file(file, "00", file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("symtab_peak: {file}: {e}");
            std::process::exit(1);
        }
    };
    let n = rows.len();
    if let Err(e) = tailprof_store::write_symbols(std::path::Path::new(out), &rows) {
        eprintln!("symtab_peak: {out}: {e}");
        std::process::exit(1);
    }
    drop(rows);
    println!("symbols {n} {before} {} {}", status("VmHWM:"), status("VmRSS:"));
}
