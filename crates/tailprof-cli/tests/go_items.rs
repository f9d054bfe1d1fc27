//! Go servers (issue 22 part 4): a Go HTTP server with a fast and a slow path, recorded
//! with an entry probe and a `%return` probe on its handler. On a Go binary the return
//! probe sits on the handler's RET instructions (a uretprobe would corrupt goroutine
//! stacks the runtime moves) and items are keyed by goroutine (R14). Checked: the server
//! answers all 10,000 requests while probed, the item count is the request count, and
//! the slow path's function carries the slow items' time. Needs Go
//! (`/usr/local/go/bin/go` or PATH) and root; skips with a message otherwise. No timing
//! assertions.

use std::path::{Path, PathBuf};
use std::process::Command;

const SERVER: &str = r#"
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

var sink uint64

//go:noinline
func slowWork() {
	x := sink
	for i := uint64(0); i < 3000000; i++ {
		x += i ^ (x >> 3)
	}
	sink = x
}

// The moving slow path's chunk of work (its own function: the samples of the chunks).
//
//go:noinline
func work(n uint64) {
	x := sink
	for i := uint64(0); i < n; i++ {
		x += i ^ (x >> 3)
	}
	sink = x
}

// The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
func threadCPU() int64 {
	var ts syscall.Timespec
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 3, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

// With a third argument "moving": the slow path works in chunks, each on one OS thread
// (locked while it runs, so the thread's CPU clock is the goroutine's), sleeping between
// chunks so the goroutine resumes on whichever thread runs it next. Each slow request's
// own CPU time and the number of threads it ran on are summed up at the end.
var moving bool
var movingMu sync.Mutex
var movingCPUMin, movingCPUMax int64
var movingRequests, movingMigrated int

//go:noinline
func slowMoving() {
	tids := map[int]bool{}
	var cpu int64
	for c := 0; c < 8; c++ {
		runtime.LockOSThread()
		tids[syscall.Gettid()] = true
		t0 := threadCPU()
		work(2500000)
		cpu += threadCPU() - t0
		runtime.UnlockOSThread()
		time.Sleep(200 * time.Microsecond)
	}
	movingMu.Lock()
	if movingRequests == 0 || cpu < movingCPUMin {
		movingCPUMin = cpu
	}
	if cpu > movingCPUMax {
		movingCPUMax = cpu
	}
	movingRequests++
	if len(tids) >= 2 {
		movingMigrated++
	}
	movingMu.Unlock()
}

//go:noinline
func fastWork() {
	sink++
}

//go:noinline
func serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/slow" {
		if moving {
			slowMoving()
		} else {
			slowWork()
		}
		io.WriteString(w, "slow\n")
		return
	}
	fastWork()
	io.WriteString(w, "fast\n")
}

// The server and its clients in one process: 4 client goroutines send N requests over
// keep-alive connections, every SLOW_EVERY-th to /slow.
func main() {
	n, _ := strconv.Atoi(os.Args[1])
	slowEvery, _ := strconv.Atoi(os.Args[2])
	moving = len(os.Args) > 3 && os.Args[3] == "moving"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go (&http.Server{Handler: http.HandlerFunc(serve)}).Serve(ln)
	url := "http://" + ln.Addr().String()
	const clients = 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, slow := 0, 0
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := c; i < n; i += clients {
				path := "/fast"
				if i%slowEvery == 0 {
					path = "/slow"
				}
				resp, err := http.Get(url + path)
				if err != nil {
					fmt.Fprintln(os.Stderr, "request failed:", err)
					os.Exit(2)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				ok++
				if path == "/slow" {
					slow++
				}
				mu.Unlock()
			}
		}(c)
	}
	wg.Wait()
	fmt.Printf("served %d slow %d\n", ok, slow)
	if moving {
		fmt.Printf("moving %d migrated %d cpu_min_ns %d cpu_max_ns %d\n", movingRequests, movingMigrated, movingCPUMin, movingCPUMax)
	}
}
"#;

const REQUESTS: usize = 10_000;
const SLOW_EVERY: usize = 100;

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tailprof-go-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The server built with the machine's Go, or None (and a SKIP line).
fn build(dir: &Path) -> Option<PathBuf> {
    let Some(go) = tailprof_testkit::go() else {
        tailprof_testkit::skip(tailprof_testkit::Need::Go, "no Go toolchain for the Go server");
        return None;
    };
    std::fs::write(dir.join("main.go"), SERVER).unwrap();
    let exe = dir.join("gosrv");
    let o = Command::new(go)
        .current_dir(dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "")
        .env("CGO_ENABLED", "0")
        .args(["build", "-o"])
        .arg(&exe)
        .arg("main.go")
        .output()
        .expect("run go");
    assert!(o.status.success(), "go build failed: {}", String::from_utf8_lossy(&o.stderr));
    Some(exe)
}

fn can_record() -> bool {
    // SAFETY: plain getter.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "recording uprobes (tracefs uprobe events)");
    }
    root
}

fn tailprof(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tailprof")).args(args).output().expect("run tailprof")
}

#[test]
fn go_server_items_by_goroutine_from_entry_and_ret_instruction_probes() {
    let dir = tempdir("http");
    let Some(exe) = build(&dir) else { return };
    if !can_record() {
        return;
    }
    let trace = dir.join("go.trace");
    let bin = exe.display().to_string();
    let o = Command::new(env!("CARGO_BIN_EXE_tailprof"))
        // Rings large enough for 20,000 probe hits in 2 s from a debug build.
        .args(["record", "-F", "999", "--mmap-pages", "2048", "-o"])
        .arg(&trace)
        .args(["--item-begin", &format!("{bin}:main.serve"), "--item-end", &format!("{bin}:main.serve%return")])
        .arg("--")
        .arg(&exe)
        .args([REQUESTS.to_string(), SLOW_EVERY.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "record failed: {}\n{stdout}", String::from_utf8_lossy(&o.stderr));
    // The server survived every request (a uretprobe on a Go function would not).
    let slow = REQUESTS / SLOW_EVERY;
    assert!(stdout.contains(&format!("served {REQUESTS} slow {slow}")), "{stdout}");

    let info = tailprof(&["info", "--json", trace.to_str().unwrap()]);
    let info_text = String::from_utf8_lossy(&info.stdout);
    assert!(info_text.contains("goroutine:r14"), "{info_text}");
    assert!(info_text.contains("main.serve%return(ret)@0x"), "return-instruction sites: {info_text}");

    let o = tailprof(&["items", "--json", "--top", "0", trace.to_str().unwrap()]);
    assert!(o.status.success(), "items failed: {}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["mode"], "goroutine:r14", "{}", v["mode"]);
    let items = v["items"].as_array().expect("items");
    // One item per request: no item lost, none doubled by the prologue's restart.
    assert_eq!(items.len(), REQUESTS, "unmatched {}", v["unmatched_markers"]);
    assert!(items.iter().all(|i| i["open_at_end"] == false));
    // The slow path's function carries the slow items' time: it is the function with
    // the most samples inside items, and it shows in (about) the slow items only.
    let mut per_fn: std::collections::BTreeMap<String, u64> = Default::default();
    let mut with_slow = 0;
    for it in items {
        for f in it["functions"].as_array().unwrap() {
            let name = f["name"].as_str().unwrap_or("").to_string();
            if name == "main.slowWork" {
                with_slow += 1;
            }
            *per_fn.entry(name).or_default() += f["samples"].as_u64().unwrap();
        }
    }
    let top = per_fn.iter().max_by_key(|(_, n)| **n).map(|(f, _)| f.clone());
    assert_eq!(top.as_deref(), Some("main.slowWork"), "{per_fn:?}");
    assert!(with_slow > 0 && with_slow <= slow, "main.slowWork in {with_slow} items, {slow} slow requests");
    let _ = std::fs::remove_dir_all(&dir);
}

const SLEEPER: &str = r#"
package main

import (
	"os"
	"strconv"
	"syscall"
	"time"
)

var sink uint64

// Even requests block their thread in a system call (the goroutine stays on it); odd
// ones park the goroutine (the thread runs the scheduler meanwhile).
//go:noinline
func handle(i int) {
	if i%2 == 0 {
		ts := syscall.Timespec{Nsec: 3000000}
		syscall.Nanosleep(&ts, nil)
	} else {
		time.Sleep(3 * time.Millisecond)
	}
	sink++
}

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	for i := 0; i < n; i++ {
		handle(i)
	}
}
"#;

/// Go off-CPU (issue 22 part 3): a goroutine that blocks its thread in a system call has
/// that blocked time (with the system call's stack) in its item, wherever it resumes; the
/// off-CPU time of a parked goroutine's thread (the scheduler's wait) is never an item's
/// (the goroutine register at each switch-out, `Switch::item_key`). Items come one after another on one goroutine, so even items are the system
/// calls. No timing assertions: which stacks land in which items.
#[test]
fn go_system_call_blocks_are_the_items_off_cpu_time() {
    let dir = tempdir("offcpu");
    let Some(go) = tailprof_testkit::go() else {
        tailprof_testkit::skip(tailprof_testkit::Need::Go, "no Go toolchain for the Go program");
        return;
    };
    if !can_record() {
        return;
    }
    std::fs::write(dir.join("main.go"), SLEEPER).unwrap();
    let exe = dir.join("gosleep");
    let o = Command::new(go)
        .current_dir(&dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "")
        .env("CGO_ENABLED", "0")
        .args(["build", "-o"])
        .arg(&exe)
        .arg("main.go")
        .output()
        .expect("run go");
    assert!(o.status.success(), "go build failed: {}", String::from_utf8_lossy(&o.stderr));
    const N: usize = 200;
    let trace = dir.join("s.trace");
    let bin = exe.display().to_string();
    let o = Command::new(env!("CARGO_BIN_EXE_tailprof"))
        .args(["record", "--off-cpu", "-F", "999", "-o"])
        .arg(&trace)
        .args(["--item-begin", &format!("{bin}:main.handle"), "--item-end", &format!("{bin}:main.handle%return")])
        .arg("--")
        .arg(&exe)
        .arg(N.to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "record failed: {}", String::from_utf8_lossy(&o.stderr));
    let o = tailprof(&["items", "--json", "--top", "0", "--sort", "begin", trace.to_str().unwrap()]);
    assert!(o.status.success(), "items failed: {}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["mode"], "goroutine:r14");
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), N, "one item per call");
    let nanosleep_ns = |it: &serde_json::Value| -> u64 {
        it["off_cpu"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .filter(|r| r["state"] == "blocked")
                    .filter(|r| r["frames"].as_array().is_some_and(|f| f.iter().any(|f| f == "syscall.Nanosleep")))
                    .map(|r| r["ns"].as_u64().unwrap_or(0))
                    .sum()
            })
            .unwrap_or(0)
    };
    let blocked_ns = |it: &serde_json::Value| -> u64 {
        it["off_cpu"]
            .as_array()
            .map(|rows| rows.iter().filter(|r| r["state"] == "blocked").map(|r| r["ns"].as_u64().unwrap_or(0)).sum())
            .unwrap_or(0)
    };
    let parked_blocked: u64 = items.iter().skip(1).step_by(2).map(blocked_ns).sum();
    eprintln!("blocked time in parked items: {parked_blocked} ns");
    let mut with_syscall = 0;
    for (k, it) in items.iter().enumerate() {
        let ns = nanosleep_ns(it);
        if k % 2 == 0 {
            with_syscall += (ns > 0) as usize;
            assert!(ns <= it["duration_ns"].as_u64().unwrap(), "item {k}: {ns} ns blocked in its call: {it}");
        } else {
            assert_eq!(ns, 0, "item {k} parked: no system call of another item in it: {}", it["off_cpu"]);
        }
    }
    // The switch-outs carry the goroutine (R14 of the sched_switch sample): a system call
    // counts for its item even when the runtime resumes the goroutine on another thread
    // (the inference of older traces missed 4 to 6 of these 100), and the scheduler's wait
    // while a goroutine is parked never counts (the inference counted 99 to 181 ms of it
    // for the parked items when the goroutine resumed on the same thread).
    // A switch-out whose sched_switch sample was lost (a full ring on a loaded machine)
    // falls back to the inference: allow one such miss, and well under the 99 ms the
    // inference gave the parked items (20 ms: a few misattributed waits at most).
    eprintln!("system-call items with their block: {with_syscall} of {}", N / 2);
    assert!(with_syscall + 1 >= N / 2, "every system-call item carries its block: {with_syscall} of {}", N / 2);
    assert!(parked_blocked < 20_000_000, "parked items: the thread's wait in the scheduler is not theirs ({parked_blocked} ns)");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 22 leftovers: the agent (`tailprof agent --item-begin/--item-end` on a Go binary)
/// follows requests by goroutine, as `record` and the join do. The server runs in its
/// "moving" mode: each slow request works in 8 chunks, sleeping between them, so its
/// goroutine resumes on other OS threads (the server counts the requests that ran on two
/// threads or more, and measures each one's own CPU time with the thread CPU clock while
/// locked to its thread). The slow requests are retained (threshold 2 ms) with the samples
/// of their goroutine on whichever threads it ran: each retained slow request's top
/// function is `main.work`, and its samples are its own CPU time at the sampling
/// frequency (between the server's least and most, with a margin). Keyed by thread, a
/// request collects the samples of the goroutines that ran on its first thread (4 clients'
/// slow requests share 2 CPUs: about twice its own) and loses its own elsewhere; its end
/// on another thread ends nothing. Needs Go and root (system-wide sampling), else skips.
#[test]
fn agent_retains_go_requests_by_goroutine() {
    let dir = tempdir("agent");
    let Some(exe) = build(&dir) else { return };
    if !can_record() {
        return;
    }
    let bin = exe.display().to_string();
    let store = dir.join("store");
    let freq = 999.0;
    let mut agent = Command::new(env!("CARGO_BIN_EXE_tailprof"))
        .args(["agent", "--store"])
        .arg(&store)
        .args(["--window", "1s", "-F", "999", "--duration", "300s", "--slow-percentile", "off", "--slow-threshold", "2ms", "--causes"])
        .args(["--item-begin", &format!("{bin}:main.serve"), "--item-end", &format!("{bin}:main.serve%return")])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = agent.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut log = Vec::new();
    loop {
        match rx.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok(l) => {
                let ok = l.contains("agent: recording");
                log.push(l);
                if ok {
                    break;
                }
            }
            Err(_) => {
                let _ = agent.kill();
                let _ = agent.wait();
                panic!("the agent did not start recording:\n{}", log.join("\n"));
            }
        }
    }
    let (requests, slow_every) = (2000usize, 20usize);
    let o = Command::new(&exe).args([requests.to_string(), slow_every.to_string(), "moving".to_string()]).output().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(agent.id() as i32, libc::SIGINT) };
    let st = agent.wait().unwrap();
    log.extend(rx.try_iter());
    let log = log.join("\n");
    assert!(st.success(), "agent failed ({st}):\n{log}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let slow = requests / slow_every;
    assert!(stdout.contains(&format!("served {requests} slow {slow}")), "the server survived the probes: {stdout}\n{log}");
    let o = tailprof(&["items", "--store", store.to_str().unwrap(), "--since", "1d", "--json"]);
    assert!(o.status.success(), "items: {}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mine: Vec<&serde_json::Value> = v["items"].as_array().unwrap().iter().filter(|it| it["comm"] == "gosrv").collect();
    // "moving N migrated M cpu_min_ns A cpu_max_ns B"
    let moving: Vec<u64> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("moving "))
        .unwrap_or_else(|| panic!("the server's moving line: {stdout}"))
        .split(' ')
        .filter_map(|w| w.parse().ok())
        .collect();
    let [n_moving, migrated, cpu_min, cpu_max] = moving[..] else { panic!("moving line: {stdout}") };
    assert_eq!(n_moving as usize, slow, "{stdout}");
    // Without migrations the test could not tell goroutine from thread keying.
    assert!(migrated as usize >= slow / 2, "only {migrated} of {slow} slow requests ran on two threads or more: {stdout}");
    let slow_items: Vec<&&serde_json::Value> =
        mine.iter().filter(|it| it["functions"][0][0] == "main.work" && it["samples"].as_u64().unwrap_or(0) >= 3).collect();
    assert!(slow_items.len() >= slow / 2, "{} retained slow requests of {slow}:\n{v:#}\n{log}", slow_items.len());
    // Its own CPU time in samples (the server's least and most, with a margin for the
    // sampling and the handler's code outside the chunks).
    let (lo, hi) = (cpu_min as f64 * freq / 1e9, cpu_max as f64 * freq / 1e9);
    let got: Vec<u64> = slow_items.iter().map(|it| it["samples"].as_u64().unwrap()).collect();
    // Off CPU (with --causes the agent sees the switch-outs, which carry the goroutine):
    // only the OS's switched-out time of the goroutine, not its time parked in the Go
    // scheduler (8 sleeps, waiting for a P). Wall minus samples would leave nothing over.
    let mut left: Vec<i64> = slow_items
        .iter()
        .map(|it| {
            let (dur, off, n) = (it["duration_ns"].as_u64().unwrap(), it["off_cpu_ns"].as_u64().unwrap(), it["samples"].as_u64().unwrap());
            dur as i64 - off as i64 - (n as f64 * 1e9 / freq) as i64
        })
        .collect();
    left.sort_unstable();
    let median_left = left[left.len() / 2];
    eprintln!("wall - off-CPU - samples: median {median_left} ns, {:?}..{:?}", left.first(), left.last());
    assert!(median_left >= 1_000_000, "the goroutines' parked time is not off CPU: median {median_left} ns left over");
    eprintln!(
        "{migrated} of {slow} slow requests migrated; own CPU {lo:.1}..{hi:.1} samples' worth; retained {} with {:?}..{:?} samples",
        got.len(),
        got.iter().min(),
        got.iter().max()
    );
    for it in &slow_items {
        let n = it["samples"].as_u64().unwrap() as f64;
        assert!(
            n >= 0.7 * lo - 3.0 && n <= 1.3 * hi + 3.0,
            "{n} samples, its own CPU time is {lo:.1}..{hi:.1} samples' worth: {it}\n{stdout}"
        );
    }
    for it in &mine {
        let n = it["samples"].as_u64().unwrap() as f64;
        let wall = it["duration_ns"].as_u64().unwrap() as f64 * freq / 1e9;
        // Its goroutine's samples fit in its wall time (Poisson margin): never those of
        // the goroutines that ran on its first thread after it moved.
        assert!(n <= wall + 4.0 * wall.sqrt() + 3.0, "{n} samples in {wall:.1} samples' worth of wall time: {it}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
