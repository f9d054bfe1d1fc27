//! Rust: cost of a switch marker against a begin+end pair, of an `in_item` future's poll
//! and of the trace-context pair (`item_trace`), enabled (a region built here the way the
//! recorder does, announcing trace context, a drainer thread), side by side, medians of
//! repeats. With the feature `tracing`, also one `tracing` span's life (new, enter, exit,
//! close) on a registry with `TailprofLayer` (an item: 4 markers) and without it.
//! Used by bench/switch-markers.sh.
//!   cargo run --release -p tailprof-markers --features tracing --example switch_cost [REPS] [OPS]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use tailprof_markers::{item_begin, item_end, item_switch, item_switch_none, item_trace, ClassLabel, InItem};
use tailprof_markers_protocol::{header, slot, MAGIC};

static REQ: ClassLabel = ClassLabel::new(c"req");
const TRACE_ID: [u8; 16] = *b"\x4b\xf9\x2f\x35\x77\xb3\x4d\xa6\xa3\xce\x92\x9d\x0e\x0e\x47\x36";
const SPAN_ID: [u8; 8] = *b"\x00\xf0\x67\xaa\x0b\xa9\x02\xb7";
const NSLOTS: u32 = 2;
const RING: u32 = 1 << 19;

fn put32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

/// A future that is pending `left` times (waking nobody: the bench polls it in a loop).
struct Steps(u32);
impl Future for Steps {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            return Poll::Ready(());
        }
        self.0 -= 1;
        Poll::Pending
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let reps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(11);
    let ops: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2_000_000);
    let slot_size = slot::size(RING) as usize;
    let size = header::SIZE + NSLOTS as usize * slot_size;
    let path = format!("/dev/shm/tailprof-rsbench.{}", std::process::id());
    let mut h = vec![0u8; header::SIZE];
    put64(&mut h, header::MAGIC, MAGIC);
    put32(&mut h, header::VERSION, 1);
    put32(&mut h, header::HEADER_SIZE, header::SIZE as u32);
    put64(&mut h, header::REGION_SIZE, size as u64);
    put64(&mut h, header::GENERATION, 0x4321);
    put32(&mut h, header::PID, std::process::id());
    put32(&mut h, header::CLOCK, 1);
    put32(&mut h, header::NSLOTS, NSLOTS);
    put32(&mut h, header::RING_RECORDS, RING);
    put32(&mut h, header::SLOT_SIZE, slot_size as u32);
    put32(&mut h, header::SLOTS_OFFSET, header::SIZE as u32);
    put32(&mut h, header::FEATURES, header::FEATURE_TRACE_CONTEXT);
    let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    f.set_len(size as u64).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &h, 0).unwrap();
    std::env::set_var("TAILPROF_MARKERS", &path);
    // SAFETY: mapping the file just sized.
    let base = unsafe {
        use std::os::unix::io::AsRawFd;
        libc::mmap(std::ptr::null_mut(), size, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, f.as_raw_fd(), 0)
    } as usize;
    assert_ne!(base, libc::MAP_FAILED as usize);
    static STOP: AtomicBool = AtomicBool::new(false);
    let drainer = std::thread::spawn(move || {
        while !STOP.load(Ordering::Relaxed) {
            for i in 0..NSLOTS as usize {
                let s = base + header::SIZE + i * slot_size;
                // SAFETY: inside the mapping; 8-aligned words.
                let (head, tail) =
                    unsafe { (AtomicU64::from_ptr((s + slot::HEAD) as *mut u64), AtomicU64::from_ptr((s + slot::TAIL) as *mut u64)) };
                tail.store(head.load(Ordering::Acquire), Ordering::Release);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
    item_begin(0); // maps the region (slow path once)
    item_end(0);
    // The trace context is written only when the region announces it: check it is.
    let head = || {
        // SAFETY: inside the mapping (slot 0, this thread's).
        unsafe { AtomicU64::from_ptr((base + header::SIZE + slot::HEAD) as *mut u64) }.load(Ordering::Acquire)
    };
    let h0 = head();
    item_trace(0, TRACE_ID, SPAN_ID);
    assert_eq!(head(), h0 + 2, "trace context not written: results invalid");
    #[cfg(feature = "tracing")]
    let with_layer = tracing::Dispatch::new(tracing_subscriber::layer::SubscriberExt::with(
        tracing_subscriber::registry(),
        tailprof_markers::TailprofLayer::new(),
    ));
    #[cfg(feature = "tracing")]
    let without = tracing::Dispatch::new(tracing_subscriber::registry());
    #[cfg(feature = "tracing")]
    let span = |d: &tracing::Dispatch| {
        tracing::dispatcher::with_default(d, || {
            for _ in 0..ops {
                tracing::info_span!("req").in_scope(|| std::hint::black_box(()));
            }
        })
    };
    #[allow(unused_mut)]
    let mut methods: Vec<(&str, &dyn Fn(u64))> = vec![
        ("rust_begin_end_pair", &|i| {
            item_begin(i);
            item_end(i);
        }),
        ("rust_switch", &|i| item_switch(i)),
        ("rust_switch_plus_none", &|i| {
            item_switch(i);
            item_switch_none();
        }),
        ("rust_in_item_poll", &|_| {}),
        ("rust_trace_context", &|i| item_trace(i, TRACE_ID, SPAN_ID)),
    ];
    #[cfg(feature = "tracing")]
    {
        methods.push(("rust_tracing_span_no_layer", &|_| {}));
        methods.push(("rust_tracing_span_tailprof_layer", &|_| {}));
    }
    let mut res = vec![Vec::new(); methods.len()];
    let waker = Waker::noop();
    for r in 0..reps {
        for k in 0..methods.len() {
            let m = (k + r) % methods.len();
            let t0 = Instant::now();
            #[cfg(feature = "tracing")]
            if m >= 5 {
                span(if m == 5 { &without } else { &with_layer });
                res[m].push(t0.elapsed().as_nanos() as f64 / ops as f64);
                continue;
            }
            if m == 3 {
                // One item of 9 polls per 8 ops: begin, 7 switch/none pairs, end.
                let mut cx = Context::from_waker(waker);
                let mut i = 0;
                while i < ops {
                    let mut fut = std::pin::pin!(Steps(7).in_item(i, &REQ));
                    while fut.as_mut().poll(&mut cx).is_pending() {}
                    i += 8;
                }
            } else {
                for i in 0..ops {
                    (methods[m].1)(std::hint::black_box(i));
                }
            }
            res[m].push(t0.elapsed().as_nanos() as f64 / ops as f64);
        }
    }
    STOP.store(true, Ordering::Relaxed);
    drainer.join().unwrap();
    // Nothing may have been dropped (a full ring would skip the clock read and look cheap).
    let (mut written, mut dropped) = (0, 0);
    for i in 0..NSLOTS as usize {
        let s = base + header::SIZE + i * slot_size;
        // SAFETY: inside the mapping.
        unsafe {
            written += AtomicU64::from_ptr((s + slot::HEAD) as *mut u64).load(Ordering::Acquire);
            dropped += AtomicU64::from_ptr((s + slot::DROPPED) as *mut u64).load(Ordering::Acquire);
        }
    }
    // SAFETY: inside the mapping.
    let noslot = unsafe { AtomicU64::from_ptr((base + header::NOSLOT_DROPPED) as *mut u64).load(Ordering::Acquire) };
    assert!(written > 0 && dropped == 0 && noslot == 0, "markers written {written}, dropped {dropped}, no slot {noslot}");
    let _ = std::fs::remove_file(&path);
    for (m, v) in res.iter_mut().enumerate() {
        v.sort_by(f64::total_cmp);
        println!("{}\t{:.2}", methods[m].0, v[v.len() / 2]);
    }
}
