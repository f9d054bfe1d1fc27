//! Issue 19: the always-on agent must not trust the machine it watches. Each test plays
//! the unprivileged user (an account made with `useradd`; skipped with a message when not
//! root) and asserts a bound: files opened, memory, time to stop, windows written.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use tailprof_agent::aggregate::Aggregator;
use tailprof_agent::writer::Job;
use tailprof_collect::session::RecordOutput;
use tailprof_format::{CpuMode, Mmap, Record, Sample};

/// The unprivileged account these tests play (created with useradd when missing).
const ATTACKER: &str = "tailprof-agent-atk";

/// (uid, gid) of the attacker account (tailprof-testkit creates it; skips when not root).
fn attacker(test: &str) -> Option<(u32, u32)> {
    tailprof_testkit::unprivileged_user(ATTACKER, format!("{test} plays an unprivileged user"))
}

/// `argv` running as the attacker.
fn spawn_as(who: (u32, u32), argv: &[&str]) -> Child {
    use std::os::unix::process::CommandExt;
    Command::new(argv[0])
        .args(&argv[1..])
        .uid(who.0)
        .gid(who.1)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("run as the attacker")
}

/// Files this process has open whose (device, inode) is `key`.
fn open_fds_of(key: (u64, u64)) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::metadata(e.path()).is_ok_and(|m| (m.dev(), m.ino()) == key))
        .count()
}

/// Finding 1: a process maps an ELF, unmaps it, and puts a FIFO, a device, a directory,
/// or its own pty slave at the path; a forged return address into the stale range makes
/// the aggregator resolve it. The aggregator opens only through the one way to open a
/// mapped file (`procfs::open_mapping`): the stale range opens nothing (before: the path
/// was opened as root, the pty became the agent's controlling tty), is forgotten and
/// counted; a live mapping of the same process is still opened (a regular file).
#[test]
fn finding_1_stale_mapping_path_swapped_for_fifo_device_or_pty() {
    let Some(who) = attacker("finding_1_stale_mapping_path_swapped_for_fifo_device_or_pty") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    // The attacker's FIFO and pty (a pty pair opened here stands for the attacker's).
    let fifo = dir.path().join("lib.so");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    std::os::unix::fs::chown(&fifo, Some(who.0), Some(who.1)).unwrap();
    // SAFETY: plain libc calls on a fd we own.
    let master = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY) };
    assert!(master >= 0);
    // SAFETY: master is a pty master.
    unsafe {
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0)
    };
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: the buffer is large enough and NUL-terminated by ptsname_r.
    assert_eq!(unsafe { libc::ptsname_r(master, name.as_mut_ptr(), name.len()) }, 0);
    // SAFETY: NUL-terminated by ptsname_r.
    let pts = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();

    // A writer blocked in open(2) of the FIFO returns as soon as anyone opens it for
    // reading: it tells whether the aggregator opened the FIFO, even for a moment.
    let opened_fifo = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (fifo, flag) = (fifo.clone(), opened_fifo.clone());
        std::thread::spawn(move || {
            let _w = std::fs::OpenOptions::new().write(true).open(&fifo);
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let mut victim = spawn_as(who, &["sleep", "30"]);
    let pid = victim.id();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let text = maps
        .lines()
        .filter_map(tailprof_collect::procfs::parse_maps_line)
        .find(|m| m.prot & 4 != 0 && m.path.starts_with('/'))
        .expect("an executable file mapping of sleep");
    let keys: Vec<(u64, u64)> = [fifo.to_str().unwrap(), "/dev/full", pts.as_str(), "/dev"]
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).unwrap())
        .collect();

    let (tx, rx) = mpsc::channel::<Job>();
    let mut agg = Aggregator::new(vec!["cpu-clock".into()], 3_600_000_000, "h".into(), tx, None);
    let stale = 0x1000_0000u64; // not mapped in sleep
    let paths = [fifo.to_str().unwrap().to_string(), "/dev/full".into(), pts.clone(), "/dev".into()];
    for (i, path) in paths.iter().enumerate() {
        let start = stale + i as u64 * 0x10_0000;
        let mmap = Mmap { pid, tid: pid, start, len: 0x1000, prot: 5, cpumode: CpuMode::User, path: path.clone(), ..Mmap::default() };
        agg.write_record(&Record::Mmap(mmap)).unwrap();
        let s = Sample { pid, tid: pid, ip: start + 0x10, period: 1, cpumode: CpuMode::User, ..Sample::default() };
        agg.write_record(&Record::Sample(s)).unwrap();
        for &k in &keys {
            assert_eq!(open_fds_of(k), 0, "{path}: the aggregator opened an attacker-chosen file");
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(100)); // let a released writer note it
    assert!(!opened_fifo.load(std::sync::atomic::Ordering::SeqCst), "the aggregator opened the attacker's FIFO");
    assert_eq!(agg.stats.mappings_forgotten, paths.len() as u64, "stale ranges are forgotten and counted");
    // A second sample in a forgotten range opens nothing and stays unknown.
    let s = Sample { pid, tid: pid, ip: stale + 0x20, period: 1, cpumode: CpuMode::User, ..Sample::default() };
    agg.write_record(&Record::Sample(s)).unwrap();
    assert_eq!(agg.stats.mappings_forgotten, paths.len() as u64);
    // The live text mapping of the same process: its very file is opened (regular).
    let mmap = Mmap {
        pid,
        tid: pid,
        start: text.start,
        len: text.end - text.start,
        pgoff: text.offset,
        prot: 5,
        cpumode: CpuMode::User,
        path: text.path.clone(),
        ..Mmap::default()
    };
    agg.write_record(&Record::Mmap(mmap)).unwrap();
    let s = Sample { pid, tid: pid, ip: text.start + 0x10, period: 1, cpumode: CpuMode::User, ..Sample::default() };
    agg.write_record(&Record::Sample(s)).unwrap();
    let jobs: Vec<Job> = rx.try_iter().collect();
    let opened: Vec<(u64, u64)> = jobs
        .iter()
        .filter_map(|j| match j {
            Job::Symbols(s) => s.file.metadata().ok().map(|m| (m.dev(), m.ino())),
            _ => None,
        })
        .collect();
    assert_eq!(opened, [(text.dev, text.inode)], "only the live mapping's own file is opened");
    // release the writer thread
    let _r = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&fifo);
    writer.join().unwrap();
    let _ = victim.kill();
    let _ = victim.wait();
    // SAFETY: our fd.
    unsafe { libc::close(master) };
}

/// An ELF64-LE shared object with `n` functions (16 bytes apart in `.text`), function `i`
/// named by offset `name_at(i)` in the string table `strtab`.
fn elf_with_functions(n: usize, strtab: &[u8], name_at: impl Fn(usize) -> u32) -> Vec<u8> {
    let shoff = 0x40usize;
    let count = 4usize; // null, .text, .symtab, .strtab
    let mut b = vec![0u8; shoff + count * 64];
    b[..4].copy_from_slice(b"\x7fELF");
    (b[4], b[5], b[6]) = (2, 1, 1);
    b[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
    b[40..48].copy_from_slice(&(shoff as u64).to_le_bytes());
    b[52..54].copy_from_slice(&64u16.to_le_bytes());
    b[58..60].copy_from_slice(&64u16.to_le_bytes());
    b[60..62].copy_from_slice(&(count as u16).to_le_bytes());
    let symtab_at = b.len();
    b.extend(vec![0u8; 24]); // symbol 0
    for i in 0..n {
        let mut sym = [0u8; 24];
        sym[..4].copy_from_slice(&name_at(i).to_le_bytes());
        sym[4] = 0x12; // GLOBAL FUNC
        sym[6..8].copy_from_slice(&1u16.to_le_bytes()); // .text
        sym[8..16].copy_from_slice(&(0x1000 + 16 * i as u64).to_le_bytes());
        sym[16..24].copy_from_slice(&16u64.to_le_bytes());
        b.extend(sym);
    }
    let strtab_at = b.len();
    b.extend(strtab);
    let mut sec = |i: usize, kind: u32, addr: u64, off: usize, size: usize, link: u32, es: u64| {
        let at = shoff + i * 64;
        b[at + 4..at + 8].copy_from_slice(&kind.to_le_bytes());
        b[at + 16..at + 24].copy_from_slice(&addr.to_le_bytes());
        b[at + 24..at + 32].copy_from_slice(&(off as u64).to_le_bytes());
        b[at + 32..at + 40].copy_from_slice(&(size as u64).to_le_bytes());
        b[at + 40..at + 44].copy_from_slice(&link.to_le_bytes());
        b[at + 56..at + 64].copy_from_slice(&es.to_le_bytes());
    };
    sec(1, 1, 0x1000, 0x1000, 16 * n, 0, 0); // .text (PROGBITS)
    sec(2, 2, 0, symtab_at, 24 * (n + 1), 3, 24); // .symtab
    sec(3, 3, 0, strtab_at, strtab.len(), 0, 0); // .strtab
    b
}

/// Peak resident KiB of a child running this test binary's test `name` (with `env` set).
///
/// The child reports its own `VmHWM` (see `report_peak`). `wait4`'s `ru_maxrss` is not
/// usable here: std spawns with `CLONE_VM|CLONE_VFORK`, and at `execve` the kernel folds the
/// *parent's* high-water mark (this whole test harness, other tests included) into the
/// child's `maxrss`, so a busy harness made the child look 3× its size.
fn child_peak_kib(name: &str, env: (&str, &str)) -> (bool, i64) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(env.0, env.1)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let kib = stdout
        .lines()
        // libtest prints "test NAME ... " on the same line
        .find_map(|l| l.split_once("tailprof-test-peak-kib ").map(|(_, v)| v))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("the child reported no peak: {stdout}"));
    (out.status.success(), kib)
}

/// In a child of `child_peak_kib`: print this process's peak resident size (`VmHWM`, per
/// address space, so it starts fresh at `execve`).
fn report_peak() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: i64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status");
    println!("tailprof-test-peak-kib {kib}");
}

/// Finding 4: 8,200 functions sharing one 1 MB name (a 1.26 MB file). Before, every row
/// held its own copy of the name: more than 7.8 GB. Now each name is cut at 4 KiB and
/// marked, equal neighbouring names share a buffer and a row group holds at most 4 MiB of
/// names: the symbolizing process stays far below the agent's 100 MiB budget.
#[test]
fn finding_4_functions_sharing_a_megabyte_name_stay_bounded() {
    if std::env::var_os("TAILPROF_H3_FINDING4").is_some() {
        let dir = tempfile::tempdir().unwrap();
        let strtab = [b"\0".as_slice(), &vec![b'A'; 1 << 20], b"\0"].concat();
        let elf = elf_with_functions(8200, &strtab, |_| 1);
        let p = dir.path().join("hostile.so");
        std::fs::write(&p, &elf).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        let out = dir.path().join("t.parquet");
        let t = tailprof_agent::symtab::write_elf_table(&f, "ab", "hostile.so", &out).unwrap();
        assert_eq!(t.functions, 8200);
        let rows = tailprof_store::read::read_symbols_file(&out).unwrap();
        assert!(rows.iter().all(|r| r.name.len() == tailprof_elf::MAX_NAME_BYTES + tailprof_elf::TRUNCATED_MARK.len()));
        assert!(rows[0].name.ends_with(tailprof_elf::TRUNCATED_MARK));
        report_peak();
        return;
    }
    let (ok, kib) = child_peak_kib("finding_4_functions_sharing_a_megabyte_name_stay_bounded", ("TAILPROF_H3_FINDING4", "1"));
    assert!(ok, "the child failed");
    eprintln!("finding 4: peak RSS {} MiB", kib / 1024);
    // The test harness and the read-back of the table count too; the agent's whole
    // budget is 100 MiB.
    assert!(kib < 100 * 1024, "peak RSS {kib} KiB");
}

/// Finding 5: the agent stops while the symbolizer is in the middle of a big table, out
/// of CPU credit, with more queued. Before, it drained its whole queue first (400 s), and
/// a job waiting for credit slept until the budget refilled. Now it goes on for
/// `stop_within`, then drops what is queued or running, and counts it: the stop is
/// bounded whatever is queued.
#[test]
fn finding_5_stop_is_bounded_whatever_the_symbolizer_has_queued() {
    use tailprof_agent::writer::{run_writer, DroppedBinaries, Job, SymbolJob, WriterConfig, WriterStats};
    let dir = tempfile::tempdir().unwrap();
    let n = 400_000;
    let mut strtab = vec![0u8];
    let mut at = Vec::with_capacity(n);
    for i in 0..n {
        at.push(strtab.len() as u32);
        strtab.extend(format!("_ZN7hostile8function{i:08}17h0123456789abcdefE\0").bytes());
    }
    let elf = elf_with_functions(n, &strtab, |i| at[i]);
    let p = dir.path().join("big.so");
    std::fs::write(&p, &elf).unwrap();
    let (store, _) = tailprof_store::Store::open(&dir.path().join("store")).unwrap();
    let stats = std::sync::Arc::new(std::sync::Mutex::new(WriterStats::default()));
    let cfg = WriterConfig {
        store,
        retain: Default::default(),
        compact: false,
        push: None,
        otlp: None,
        stop_within: std::time::Duration::from_millis(500),
        dropped: DroppedBinaries::default(),
        // A small burst: the first job starts, runs out of credit in its middle and
        // sleeps for more (0.4 % of a core) — the stop must reach it there too.
        symbolizer_burst_s: 0.05,
    };
    let (tx, rx) = mpsc::channel();
    let st = stats.clone();
    let writer = std::thread::spawn(move || run_writer(cfg, rx, st));
    let jobs = 20u64;
    for i in 0..jobs {
        let file = std::fs::File::open(&p).unwrap();
        tx.send(Job::Symbols(SymbolJob { build_id: format!("{i:040x}"), path: "big.so".into(), file })).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_secs(1)); // the first job is under way
    let t0 = std::time::Instant::now();
    drop(tx); // the agent stops
    writer.join().unwrap();
    let took = t0.elapsed();
    let s = stats.lock().unwrap().clone();
    eprintln!(
        "finding 5: stopped in {took:?}: {} tables written, {} dropped at stop, {} failed",
        s.symbol_tables, s.symbol_tables_dropped_at_stop, s.symbol_tables_failed
    );
    assert_eq!(s.symbol_tables + s.symbol_tables_dropped_at_stop + s.symbol_tables_failed, jobs, "every job accounted for");
    assert_eq!(s.symbol_tables_failed, 0, "{:?}", s.last_error);
    assert!(s.symbol_tables_dropped_at_stop > 0, "something was queued at the stop");
    // Generous: the bound is stop_within plus one pace step, not the queue's length.
    assert!(took < std::time::Duration::from_secs(30), "{took:?}");
}

/// Finding 10: rejected markers, dropped class references and ring-full LOST records were
/// all counted (and printed) as lost samples (4.86 M). Each is counted by its own kind, in
/// the summary and in the window handed to the store.
#[test]
fn finding_10_losses_are_counted_by_their_true_kind() {
    use tailprof_format::{LossKind, Lost};
    let (tx, rx) = mpsc::channel::<Job>();
    let mut agg = Aggregator::new(vec!["cpu-clock".into()], 3_600_000_000, "h".into(), tx, None);
    let kinds = [
        (LossKind::Samples, 1),
        (LossKind::RingFull, 20),
        (LossKind::Markers, 300),
        (LossKind::MarkersRejected, 4_000),
        (LossKind::Malformed, 50_000),
        (LossKind::ItemClasses, 600_000),
    ];
    for (kind, count) in kinds {
        agg.write_record(&Record::Lost(Lost { time: 1, cpu: 0, event: Some(0), kind, count })).unwrap();
    }
    let s = agg.stats;
    assert_eq!(s.lost_samples, 1, "only PERF_RECORD_LOST_SAMPLES are lost samples");
    assert_eq!((s.losses.lost_records, s.losses.lost_markers), (20, 4_300));
    assert_eq!((s.losses.malformed_records, s.losses.dropped_item_classes), (50_000, 600_000));
    agg.maybe_flush(true);
    let w = rx
        .try_iter()
        .find_map(|j| match j {
            Job::Window(w) => Some(w),
            _ => None,
        })
        .expect("a window");
    assert_eq!(w.lost_samples, 1);
    assert_eq!(w.losses, s.losses, "the window carries the same counts to the store");
}

/// A pid no process has (beyond the kernel's largest pid_max, 2^22).
const NO_PID: u32 = 5_000_000;

/// Finding 6: one process maps and unmaps a page 65,000 times under a 3.8 KB path, then
/// forks 300 children, each of which is sampled. Before, the unmapped ranges were never
/// forgotten and every fork copied the list: 28 MB → 1.5 GB. Now a fork shares the list,
/// a process keeps at most MAX_MAPS_PER_PROC mappings (oldest never sampled evicted), all
/// lists at most MAX_MAP_BYTES, and the aggregating process stays under the agent's
/// 100 MiB budget.
#[test]
fn finding_6_mmap_churn_and_forks_stay_bounded() {
    use tailprof_agent::aggregate::{MAX_MAPS_PER_PROC, MAX_MAP_BYTES};
    if std::env::var_os("TAILPROF_H3_FINDING6").is_some() {
        let (tx, _rx) = mpsc::channel::<Job>();
        let mut agg = Aggregator::new(vec!["cpu-clock".into()], 3_600_000_000, "h".into(), tx, None);
        let path = format!("/tmp/{}", "p".repeat(3800));
        let pid = NO_PID;
        for i in 0..65_000u64 {
            let m = Mmap {
                pid,
                tid: pid,
                start: 0x1000_0000 + i * 0x2000,
                len: 0x1000,
                prot: 5,
                cpumode: CpuMode::User,
                path: path.clone(),
                build_id: Some(vec![7; 20]),
                ..Mmap::default()
            };
            agg.write_record(&Record::Mmap(m)).unwrap();
        }
        for c in 1..=300u32 {
            let child = pid + c;
            agg.write_record(&Record::Fork(tailprof_format::Task { pid: child, ppid: pid, tid: child, ptid: pid, time: 1 })).unwrap();
            // a sample in one of its (inherited) mappings: resolving it changes the child's list
            let ip = 0x1000_0000 + (65_000 - u64::from(c)) * 0x2000 + 0x10;
            agg.write_record(&Record::Sample(Sample {
                pid: child,
                tid: child,
                ip,
                period: 1,
                cpumode: CpuMode::User,
                ..Sample::default()
            }))
            .unwrap();
        }
        let (procs, _maps, bytes, _) = agg.held();
        eprintln!("finding 6: {procs} processes, {bytes} bytes of mapping lists, {:?}", agg.stats);
        assert!(bytes <= MAX_MAP_BYTES, "{bytes}");
        assert!(agg.stats.mappings_evicted >= 65_000 - MAX_MAPS_PER_PROC as u64);
        report_peak();
        return;
    }
    let (ok, kib) = child_peak_kib("finding_6_mmap_churn_and_forks_stay_bounded", ("TAILPROF_H3_FINDING6", "1"));
    assert!(ok, "the child failed");
    eprintln!("finding 6: peak RSS {} MiB", kib / 1024);
    assert!(kib < 100 * 1024, "peak RSS {kib} KiB");
}

/// Finding 8: stacks forged through 119,426 distinct tiny binaries. Before, `binaries`,
/// `bin_ids` and the symbolizer's `seen` grew without bound (30 → 145 MB, never freed)
/// and a binary dropped under pressure was never retried. Now the binary table starts
/// over beyond MAX_BINARIES (counted), and a binary the symbolizer dropped is queued again
/// when a new mapping of it is sampled.
#[test]
fn finding_8_distinct_binaries_are_bounded_and_a_dropped_one_is_retried() {
    use tailprof_agent::aggregate::MAX_BINARIES;
    use tailprof_agent::writer::DroppedBinaries;
    let (tx, rx) = mpsc::channel::<Job>();
    let mut agg = Aggregator::new(vec!["cpu-clock".into()], 3_600_000_000, "h".into(), tx, None);
    let pid = NO_PID;
    let n = 119_426u64;
    for i in 0..n {
        let start = 0x1000_0000 + i * 0x2000;
        let mut id = vec![0u8; 20];
        id[..8].copy_from_slice(&i.to_le_bytes());
        let m = Mmap {
            pid,
            tid: pid,
            start,
            len: 0x1000,
            prot: 5,
            cpumode: CpuMode::User,
            path: format!("/tmp/b{i}"),
            build_id: Some(id),
            ..Mmap::default()
        };
        agg.write_record(&Record::Mmap(m)).unwrap();
        agg.write_record(&Record::Sample(Sample { pid, tid: pid, ip: start + 1, period: 1, cpumode: CpuMode::User, ..Sample::default() }))
            .unwrap();
        if i % 10_000 == 9_999 {
            agg.maybe_flush(true); // a window ends
            assert!(agg.held().3 <= MAX_BINARIES, "{:?}", agg.held());
        }
    }
    agg.maybe_flush(true);
    let (_, _, _, bins) = agg.held();
    assert!(bins <= MAX_BINARIES, "{bins}");
    assert!(agg.stats.binary_table_resets >= 1);
    drop(rx);

    // The retry, with a real mapping of a process of the unprivileged user.
    let Some(who) = attacker("finding_8_distinct_binaries_are_bounded_and_a_dropped_one_is_retried") else {
        return;
    };
    let mut victim = spawn_as(who, &["sleep", "30"]);
    let vpid = victim.id();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let maps = std::fs::read_to_string(format!("/proc/{vpid}/maps")).unwrap();
    let text = maps
        .lines()
        .filter_map(tailprof_collect::procfs::parse_maps_line)
        .find(|m| m.prot & 4 != 0 && m.path.starts_with('/'))
        .expect("an executable file mapping of sleep");
    let (tx, rx) = mpsc::channel::<Job>();
    let dropped = DroppedBinaries::default();
    let mut agg = Aggregator::new(vec!["cpu-clock".into()], 3_600_000_000, "h".into(), tx, None);
    agg.set_dropped_binaries(dropped.clone());
    let mmap = Mmap {
        pid: vpid,
        tid: vpid,
        start: text.start,
        len: text.end - text.start,
        pgoff: text.offset,
        prot: 5,
        cpumode: CpuMode::User,
        path: text.path.clone(),
        build_id: Some(vec![0xab; 20]),
        ..Mmap::default()
    };
    let sample = Sample { pid: vpid, tid: vpid, ip: text.start + 0x10, period: 1, cpumode: CpuMode::User, ..Sample::default() };
    let jobs = |rx: &mpsc::Receiver<Job>| rx.try_iter().filter(|j| matches!(j, Job::Symbols(_))).count();
    agg.write_record(&Record::Mmap(mmap.clone())).unwrap();
    agg.write_record(&Record::Sample(sample.clone())).unwrap();
    assert_eq!(jobs(&rx), 1, "the first sample queues the binary");
    agg.write_record(&Record::Mmap(mmap.clone())).unwrap();
    agg.write_record(&Record::Sample(sample.clone())).unwrap();
    assert_eq!(jobs(&rx), 0, "known and not dropped: not queued again");
    dropped.note(&"ab".repeat(20));
    agg.write_record(&Record::Mmap(mmap)).unwrap();
    agg.write_record(&Record::Sample(sample)).unwrap();
    assert_eq!(jobs(&rx), 1, "dropped by the symbolizer: queued again when sampled again");
    let _ = victim.kill();
    let _ = victim.wait();
}

/// Finding 9: 30 marked processes × 64 threads write garbage: class descriptors with new
/// ids and long names, and items that begin and never end (with samples on every thread).
/// Before, the agent peaked at 800 MB. The request retainer's structures are all bounded
/// (open requests, class labels, kept samples, pending exits): the process feeding it
/// stays under the agent's 100 MiB budget, and every window is taken.
#[test]
fn finding_9_garbage_markers_and_endless_items_stay_bounded() {
    use tailprof_agent::tail::TailRetainer;
    use tailprof_format::{ItemClass, Marker, MarkerKind};
    if std::env::var_os("TAILPROF_H3_FINDING9").is_some() {
        let mut t = TailRetainer::new(Some(1_000_000), 0.99);
        let frames: Vec<(u32, u64)> = (0..64).map(|i| (1, i)).collect();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut windows = 0;
        for round in 0..60u64 {
            for p in 0..30u32 {
                let pid = 4_100_000 + p;
                for th in 0..64u32 {
                    let tid = pid * 100 + th;
                    let time = round * 1_000_000_000 + u64::from(th);
                    for _ in 0..20 {
                        let class = rnd() as u32;
                        t.handle_class(&ItemClass { time, pid, id: class, name: format!("{:0>128}", rnd()) });
                        let m = Marker { time, pid, tid, kind: MarkerKind::Begin, item: rnd(), class, ..Marker::default() };
                        t.handle_marker(&m, "garbage");
                    }
                    let s = Sample { time, pid, tid, period: 1, ..Sample::default() };
                    t.handle_sample(&s, &frames);
                }
            }
            if round % 2 == 1 {
                let _ = t.take_window(round as i64, round as i64 + 1, &|_| Some("ab".into()));
                windows += 1;
            }
        }
        assert_eq!(windows, 30);
        eprintln!("finding 9: {} open, {:?}", t.open_requests(), t.stats);
        report_peak();
        return;
    }
    let (ok, kib) = child_peak_kib("finding_9_garbage_markers_and_endless_items_stay_bounded", ("TAILPROF_H3_FINDING9", "1"));
    assert!(ok, "the child failed");
    eprintln!("finding 9: peak RSS {} MiB", kib / 1024);
    assert!(kib < 100 * 1024, "peak RSS {kib} KiB");
}

/// Fairness (issue 19): one user floods the symbolizer with 600 binaries of their own,
/// then root's `dash` is sampled. Before, the queue (512) was full and dash was dropped
/// for good. Now one owner's files take at most a quarter of the queue: the flood's
/// surplus is dropped (and noted for a retry), root's binary is queued.
#[test]
fn fairness_one_users_binaries_cannot_crowd_out_another_users() {
    use std::os::unix::fs::chown;
    use tailprof_agent::writer::{run_writer, DroppedBinaries, SymbolJob, WriterConfig, WriterStats, MAX_DEFERRED_PER_OWNER};
    let Some(who) = attacker("fairness_one_users_binaries_cannot_crowd_out_another_users") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = tailprof_store::Store::open(&dir.path().join("store")).unwrap();
    let stats = std::sync::Arc::new(std::sync::Mutex::new(WriterStats::default()));
    let dropped = DroppedBinaries::default();
    let cfg = WriterConfig {
        store,
        retain: Default::default(),
        compact: false,
        push: None,
        otlp: None,
        stop_within: std::time::Duration::from_secs(60),
        dropped: dropped.clone(),
        symbolizer_burst_s: 10.0,
    };
    let (tx, rx) = mpsc::channel();
    let job = |i: u32, uid: u32| {
        let p = dir.path().join(format!("bin{i}"));
        std::fs::write(&p, b"not an ELF file").unwrap();
        chown(&p, Some(uid), None).unwrap();
        Job::Symbols(SymbolJob { build_id: format!("{i:040x}"), path: p.display().to_string(), file: std::fs::File::open(&p).unwrap() })
    };
    let flood = 600u32;
    for i in 0..flood {
        tx.send(job(i, who.0)).unwrap();
    }
    tx.send(job(flood, 0)).unwrap(); // root's binary, sampled after the flood
    let st = stats.clone();
    let writer = std::thread::spawn(move || run_writer(cfg, rx, st));
    drop(tx);
    writer.join().unwrap();
    let s = stats.lock().unwrap().clone();
    eprintln!("fairness: {} dropped, {} failed (not ELF)", s.symbol_tables_dropped, s.symbol_tables_failed);
    assert!(!dropped.take(&format!("{flood:040x}")), "root's binary was dropped");
    assert!(s.symbol_tables_dropped >= 1 && s.symbol_tables_dropped <= u64::from(flood) - MAX_DEFERRED_PER_OWNER as u64);
    assert_eq!(s.symbol_tables_dropped + s.symbol_tables_failed + s.symbol_tables, u64::from(flood) + 1);
}
