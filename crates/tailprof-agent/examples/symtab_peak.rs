//! Peak memory and CPU of symbolizing one binary the way the agent does (read the symbol
//! tables, write the store's `symbols` file), for bench/agent.sh's memory note:
//!
//!   cargo run --release -p tailprof-agent --example symtab_peak -- FILE OUT.parquet
//!   cargo run --release -p tailprof-agent --example symtab_peak -- --blazesym FILE OUT.parquet
//!   cargo run --release -p tailprof-agent --example symtab_peak -- --kallsyms OUT.parquet
//!   cargo run --release -p tailprof-agent --example symtab_peak -- --name OUT.parquet
//!
//! The first streams (`symtab::write_elf_table`, the agent's way); `--blazesym` is the
//! agent's previous way (blazesym's whole table in memory, then rows with the build-id and
//! path per function, then `write_symbols`), for before/after in one build. Prints
//! "symbols N skipped S VmHWM_KiB_before VmHWM_KiB_after VmRSS_KiB_after cpu_s".

fn status(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// This process's user+sys CPU seconds.
fn cpu_s() -> f64 {
    // SAFETY: getrusage writes into the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn die(msg: String) -> ! {
    eprintln!("symtab_peak: {msg}");
    std::process::exit(1);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let before = status("VmHWM:");
    let cpu0 = cpu_s();
    let (n, skipped) = match a.as_slice() {
        ["--name", out] => {
            // which binary a stored symbols file names, and its size
            let rows = tailprof_store::read::read_symbols_file(std::path::Path::new(out)).unwrap_or_else(|e| die(e.to_string()));
            println!("{} {}", rows.len(), rows.first().map_or("", |r| r.binary.as_str()));
            return;
        }
        ["--kallsyms", out] => {
            // the kernel's table, as the agent builds it
            let f = std::fs::File::open("/proc/kallsyms").unwrap_or_else(|e| die(format!("/proc/kallsyms: {e}")));
            let t = tailprof_agent::symtab::write_kallsyms_table(f, "00", "[kernel.kallsyms]", std::path::Path::new(out))
                .unwrap_or_else(|e| die(e.to_string()));
            (t.functions, t.skipped)
        }
        ["--blazesym", file, out] => {
            let funcs = tailprof_agent::symtab::reference_table(file).unwrap_or_else(|e| die(format!("{file}: {e}")));
            let rows: Vec<tailprof_store::schema::SymbolRow> = funcs
                .into_iter()
                .map(|(start, size, name)| tailprof_store::schema::SymbolRow {
                    build_id: "00".into(),
                    binary: file.to_string(),
                    start,
                    size,
                    name,
                })
                .collect();
            eprintln!("after the table: VmHWM {} KiB, VmRSS {} KiB", status("VmHWM:"), status("VmRSS:"));
            tailprof_store::write_symbols(std::path::Path::new(out), &rows).unwrap_or_else(|e| die(format!("{out}: {e}")));
            (rows.len() as u64, 0)
        }
        [file, out] if !file.starts_with("--") => {
            let f = std::fs::File::open(file).unwrap_or_else(|e| die(format!("{file}: {e}")));
            let t = tailprof_agent::symtab::write_elf_table(&f, "00", file, std::path::Path::new(out))
                .unwrap_or_else(|e| die(format!("{file}: {e}")));
            (t.functions, t.skipped)
        }
        _ => {
            eprintln!("usage: symtab_peak [--blazesym] FILE OUT.parquet | --kallsyms OUT.parquet | --name OUT.parquet");
            std::process::exit(2);
        }
    };
    println!("symbols {n} skipped {skipped} {before} {} {} {:.2}", status("VmHWM:"), status("VmRSS:"), cpu_s() - cpu0);
}
