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
    if file == "--kallsyms" {
        // the kernel's table, as the agent builds it
        let before = status("VmHWM:");
        let f = std::fs::File::open("/proc/kallsyms").expect("/proc/kallsyms");
        let rows = tailprof_agent::symtab::kallsyms_rows(f, "00", "[kernel.kallsyms]").expect("kallsyms");
        let n = rows.len();
        tailprof_store::write_symbols(std::path::Path::new(out), &rows).expect("write");
        drop(rows);
        println!("symbols {n} {before} {} {}", status("VmHWM:"), status("VmRSS:"));
        return;
    }
    if file == "--name" {
        // which binary a stored symbols file names, and its size
        let rows = tailprof_store::read::read_symbols_file(std::path::Path::new(out)).expect("read");
        println!("{} {}", rows.len(), rows.first().map_or("", |r| r.binary.as_str()));
        return;
    }
    let before = status("VmHWM:");
    let rows = match tailprof_agent::symtab::symbolize_file(file, "00", file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("symtab_peak: {file}: {e}");
            std::process::exit(1);
        }
    };
    let n = rows.len();
    eprintln!("after the table: VmHWM {} KiB, VmRSS {} KiB", status("VmHWM:"), status("VmRSS:"));
    if let Err(e) = tailprof_store::write_symbols(std::path::Path::new(out), &rows) {
        eprintln!("symtab_peak: {out}: {e}");
        std::process::exit(1);
    }
    drop(rows);
    println!("symbols {n} {before} {} {}", status("VmHWM:"), status("VmRSS:"));
}
