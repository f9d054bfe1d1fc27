//! One test (the control block is process-wide): build a region the way the recorder
//! does, enable through the environment, mark from two threads, read the rings back.

use super::*;
use crate::{item_begin, item_begin_class, item_end, ClassLabel, ItemGuard};
use std::os::unix::fs::FileExt;

static QUERY: ClassLabel = ClassLabel::new(c"query");

fn put32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}
fn get64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

#[test]
fn env_enabled_rings_hold_every_marker() {
    // Disabled until enabled: no environment variable yet, so the first call turns it off.
    item_begin(1);
    item_end(1);
    assert_eq!(tailprof_control.state.load(Ordering::Relaxed), STATE_OFF);

    let (nslots, ring) = (4u32, 64u32);
    let slot_size = SLOT_RING_OFFSET as u32 + ring * RECORD_SIZE as u32;
    let len = 4096 + nslots as usize * slot_size as usize;
    let mut img = vec![0u8; len];
    put64(&mut img, 0, MAGIC);
    put32(&mut img, 8, VERSION);
    put32(&mut img, 12, 4096);
    put64(&mut img, 16, len as u64);
    put64(&mut img, 24, 0xabc1);
    put32(&mut img, 32, std::process::id());
    put32(&mut img, 36, CLOCK_MONOTONIC_ID);
    put32(&mut img, 40, nslots);
    put32(&mut img, 44, ring);
    put32(&mut img, 48, slot_size);
    put32(&mut img, 52, 4096);
    let path = format!("/dev/shm/tailprof-markers-test.{}", std::process::id());
    std::fs::write(&path, &img).unwrap();

    // What `tailprof record -p` does: path, generation, state.
    // SAFETY: no marker thread runs while we write the path.
    unsafe { (&mut *tailprof_control.path.get())[..path.len()].copy_from_slice(path.as_bytes()) };
    tailprof_control.generation.store(0xabc1, Ordering::Release);
    tailprof_control.state.store(STATE_ON, Ordering::Release);

    let handles: Vec<_> = (0..2u64)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..10 {
                    if t == 0 {
                        item_begin_class(t * 100 + i, &QUERY);
                        item_end(t * 100 + i);
                    } else {
                        let _g = ItemGuard::new(t * 100 + i);
                    }
                }
                unsafe { libc::gettid() as u32 }
            })
        })
        .collect();
    let mut tids: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    tailprof_control.state.store(STATE_OFF, Ordering::Release);

    let f = std::fs::File::open(&path).unwrap();
    let mut img = vec![0u8; len];
    f.read_exact_at(&mut img, 0).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(u32::from_le_bytes(img[56..60].try_into().unwrap()), 2, "two slots claimed");
    let mut seen_tids = Vec::new();
    for s in 0..2usize {
        let so = 4096 + s * slot_size as usize;
        assert_eq!(img[so], 1, "slot published");
        seen_tids.push(u32::from_le_bytes(img[so + 4..so + 8].try_into().unwrap()));
        assert_eq!(get64(&img, so + 8), 0, "no drops");
        assert_eq!(get64(&img, so + 64), 20, "head");
        let recs: Vec<[u64; 4]> = (0..20)
            .map(|k| {
                let o = so + SLOT_RING_OFFSET + k * RECORD_SIZE;
                [get64(&img, o), get64(&img, o + 8), get64(&img, o + 16), get64(&img, o + 24)]
            })
            .collect();
        let t = recs[0][1] / 100;
        for (k, r) in recs.iter().enumerate() {
            assert_eq!(r[1], t * 100 + k as u64 / 2);
            assert_eq!(r[3], (k % 2) as u64, "begin/end alternate");
            let want_cls = if t == 0 && k % 2 == 0 { &QUERY as *const ClassLabel as u64 } else { 0 };
            assert_eq!(r[2], want_cls);
        }
        assert!(recs.windows(2).all(|w| w[0][0] <= w[1][0]), "monotonic times");
    }
    tids.sort();
    seen_tids.sort();
    assert_eq!(tids, seen_tids);
    assert_eq!(QUERY.name(), "query");
}
