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

/// (uid, gid) of the attacker account, creating it when running as root; `None` (with a
/// message naming the test) when not root.
fn attacker(test: &str) -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: {test} needs root to play an unprivileged user");
        return None;
    }
    let id = |flag: &str| -> Option<u32> {
        let o = Command::new("id").args([flag, ATTACKER]).output().ok()?;
        String::from_utf8_lossy(&o.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        let o = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                ATTACKER,
            ])
            .output()
            .expect("run useradd");
        // Another test may have created it meanwhile (exit 9: already exists).
        assert!(
            o.status.success() || o.status.code() == Some(9),
            "useradd: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Some((id("-u")?, id("-g")?))
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
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
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
    assert_eq!(
        unsafe { libc::ptsname_r(master, name.as_mut_ptr(), name.len()) },
        0
    );
    // SAFETY: NUL-terminated by ptsname_r.
    let pts = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();

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
    let mut agg = Aggregator::new(
        vec!["cpu-clock".into()],
        3_600_000_000,
        "h".into(),
        tx,
        None,
    );
    let stale = 0x1000_0000u64; // not mapped in sleep
    let paths = [
        fifo.to_str().unwrap().to_string(),
        "/dev/full".into(),
        pts.clone(),
        "/dev".into(),
    ];
    for (i, path) in paths.iter().enumerate() {
        let start = stale + i as u64 * 0x10_0000;
        let mmap = Mmap {
            pid,
            tid: pid,
            start,
            len: 0x1000,
            prot: 5,
            cpumode: CpuMode::User,
            path: path.clone(),
            ..Mmap::default()
        };
        agg.write_record(&Record::Mmap(mmap)).unwrap();
        let s = Sample {
            pid,
            tid: pid,
            ip: start + 0x10,
            period: 1,
            cpumode: CpuMode::User,
            ..Sample::default()
        };
        agg.write_record(&Record::Sample(s)).unwrap();
        for &k in &keys {
            assert_eq!(
                open_fds_of(k),
                0,
                "{path}: the aggregator opened an attacker-chosen file"
            );
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(100)); // let a released writer note it
    assert!(
        !opened_fifo.load(std::sync::atomic::Ordering::SeqCst),
        "the aggregator opened the attacker's FIFO"
    );
    assert_eq!(
        agg.stats.mappings_forgotten,
        paths.len() as u64,
        "stale ranges are forgotten and counted"
    );
    // A second sample in a forgotten range opens nothing and stays unknown.
    let s = Sample {
        pid,
        tid: pid,
        ip: stale + 0x20,
        period: 1,
        cpumode: CpuMode::User,
        ..Sample::default()
    };
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
    let s = Sample {
        pid,
        tid: pid,
        ip: text.start + 0x10,
        period: 1,
        cpumode: CpuMode::User,
        ..Sample::default()
    };
    agg.write_record(&Record::Sample(s)).unwrap();
    let jobs: Vec<Job> = rx.try_iter().collect();
    let opened: Vec<(u64, u64)> = jobs
        .iter()
        .filter_map(|j| match j {
            Job::Symbols(s) => s.file.metadata().ok().map(|m| (m.dev(), m.ino())),
            _ => None,
        })
        .collect();
    assert_eq!(
        opened,
        [(text.dev, text.inode)],
        "only the live mapping's own file is opened"
    );
    // release the writer thread
    let _r = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo);
    writer.join().unwrap();
    let _ = victim.kill();
    let _ = victim.wait();
    // SAFETY: our fd.
    unsafe { libc::close(master) };
}
