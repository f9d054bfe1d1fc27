//! A Rust process with markers compiled in, started without the recorder, enabled by
//! `MarkerCollector::attach` (the `-p PID` path: ELF lookup of `tailprof_control` +
//! process_vm_writev), here on this very process; then disabled, attached again.

use tailprof_collect::items::markers::MarkerCollector;
use tailprof_format::{MarkerKind, Record};
use tailprof_markers::{item_begin_class, item_end, ClassLabel, ItemGuard};

static QUERY: ClassLabel = ClassLabel::new(c"query");

#[test]
fn attach_to_rust_process_twice() {
    let pid = std::process::id();
    item_begin(0); // before attach: off, recorded nowhere
    for round in 1..=2u64 {
        let mut mc = MarkerCollector::new();
        assert!(mc.attach(pid).unwrap(), "tailprof_control found in the test binary");
        let tid = std::thread::spawn(move || {
            for i in 0..50 {
                item_begin_class(round * 1000 + i, &QUERY);
                item_end(round * 1000 + i);
            }
            let _g = ItemGuard::new(round * 1000 + 50);
            unsafe { libc_gettid() }
        })
        .join()
        .unwrap();
        let mut recs = Vec::new();
        let s = mc.finish(&mut recs);
        assert_eq!((s.markers, s.dropped, s.classes), (102, 0, 1));
        let class = recs.iter().find_map(|r| match r {
            Record::ItemClass(c) => Some((c.name.clone(), c.id)),
            _ => None,
        });
        let (name, cid) = class.unwrap();
        assert_eq!(name, "query");
        let ms: Vec<_> = recs
            .iter()
            .filter_map(|r| match r {
                Record::Marker(m) => Some(m),
                _ => None,
            })
            .collect();
        for (k, m) in ms.iter().enumerate() {
            assert_eq!((m.pid, m.tid), (pid, tid));
            assert_eq!(m.item, round * 1000 + k as u64 / 2);
            assert_eq!(m.kind, if k % 2 == 0 { MarkerKind::Begin } else { MarkerKind::End });
            assert_eq!(m.class, if k % 2 == 0 && k < 100 { cid } else { 0 });
        }
        item_begin(9); // after finish: off again
    }
}

fn item_begin(id: u64) {
    tailprof_markers::item_begin(id)
}

unsafe fn libc_gettid() -> u32 {
    extern "C" {
        fn gettid() -> i32;
    }
    gettid() as u32
}
