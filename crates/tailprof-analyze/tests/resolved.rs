//! The `Resolved` adapter (issue 11 item 4): side-band records reach the resolver before
//! the inner analysis sees them, samples come with a resolver that is current as of the
//! sample, every other record is forwarded, and the stack table is kept only on request.

use tailprof_analyze::maps::{BinaryKind, BIN_UNMAPPED};
use tailprof_analyze::resolve::{LocId, Resolved, ResolvedSink, Resolver};
use tailprof_format::{
    Comm, CpuMode, Frame, ItemClass, LossKind, Lost, Marker, MarkerKind, Mmap, Sample, Sink, StackDef, StackId, Switch, Task, Throttle,
    TraceHeader,
};

const PID: u32 = 10;

#[derive(Default)]
struct Log {
    events: Vec<String>,
    locs: Vec<LocId>,
    /// (binary path, offset) of each sample, as the resolver saw it then.
    seen: Vec<(String, u64)>,
    stack_depths: Vec<usize>,
}

impl ResolvedSink for Log {
    fn handle_sample(&mut self, s: &Sample, r: &mut Resolver) {
        let loc = r.loc(s);
        let l = r.locations()[loc.index()];
        self.seen.push((r.spaces().binary(l.binary).path.clone(), l.offset));
        self.locs.push(loc);
        self.events.push("sample".into());
    }
    fn handle_switch(&mut self, s: &Switch, r: &mut Resolver) {
        self.stack_depths.push(r.stacks().depth(s.stack));
        self.events.push("switch".into());
    }
    fn handle_stack(&mut self, _d: &StackDef) {
        self.events.push("stack".into());
    }
    fn handle_mmap(&mut self, m: &Mmap) {
        self.events.push(format!("mmap {}", m.path));
    }
    fn handle_comm(&mut self, c: &Comm) {
        self.events.push(format!("comm {}", c.comm));
    }
    fn handle_fork(&mut self, _t: &Task) {
        self.events.push("fork".into());
    }
    fn handle_exit(&mut self, _t: &Task) {
        self.events.push("exit".into());
    }
    fn handle_lost(&mut self, l: &Lost) {
        self.events.push(format!("lost {}", l.count));
    }
    fn handle_throttle(&mut self, _t: &Throttle) {
        self.events.push("throttle".into());
    }
    fn handle_marker(&mut self, _m: &Marker) {
        self.events.push("marker".into());
    }
    fn handle_item_class(&mut self, c: &ItemClass) {
        self.events.push(format!("class {}", c.name));
    }
}

/// The same analysis, keeping stacks.
#[derive(Default)]
struct WithStacks(Log);

impl ResolvedSink for WithStacks {
    const KEEP_STACKS: bool = true;
    fn handle_sample(&mut self, s: &Sample, r: &mut Resolver) {
        self.0.handle_sample(s, r)
    }
    fn handle_switch(&mut self, s: &Switch, r: &mut Resolver) {
        self.0.handle_switch(s, r)
    }
}

fn sample(time: u64, ip: u64) -> Sample {
    Sample { time, pid: PID, tid: PID, ip, cpumode: CpuMode::User, period: 1, ..Default::default() }
}

fn mmap(time: u64, path: &str) -> Mmap {
    Mmap { time, pid: PID, tid: PID, start: 0x40_0000, len: 0x1000, pgoff: 0, path: path.into(), ..Default::default() }
}

fn feed(sink: &mut dyn Sink) {
    sink.handle_sample(&sample(1, 0x40_0010)); // nothing mapped yet
    sink.handle_mmap(&mmap(2, "/bin/first"));
    sink.handle_sample(&sample(3, 0x40_0010)); // first + 0x10
    sink.handle_comm(&Comm { time: 4, pid: PID, tid: PID, exec: true, comm: "second".into() });
    sink.handle_mmap(&mmap(5, "/bin/second"));
    sink.handle_sample(&sample(6, 0x40_0010)); // same (pid, ip), new mapping: second + 0x10
    sink.handle_fork(&Task { time: 7, pid: PID + 1, ppid: PID, tid: PID + 1, ptid: PID });
    sink.handle_exit(&Task { time: 8, pid: PID + 1, ppid: PID, tid: PID + 1, ptid: PID });
    sink.handle_lost(&Lost { time: 9, cpu: 0, event: None, kind: LossKind::RingFull, count: 3 });
    sink.handle_throttle(&Throttle { time: 10, cpu: 0, event: None, throttled: true });
    sink.handle_item_class(&ItemClass { pid: PID, id: 1, name: "c".into(), ..Default::default() });
    sink.handle_marker(&Marker { time: 11, pid: PID, tid: PID, kind: MarkerKind::Begin, item: 1, class: 1, ..Default::default() });
    sink.handle_stack(&StackDef { id: StackId(1), parent: StackId::NONE, frame: Frame::user(0x40_0020) });
    sink.handle_stack(&StackDef { id: StackId(2), parent: StackId(1), frame: Frame::user(0x40_0030) });
    sink.handle_switch(&Switch { time: 12, pid: PID, tid: PID, stack: StackId(2), ..Default::default() });
}

#[test]
fn side_band_is_applied_before_the_analysis_sees_records() {
    let mut sink = Resolved::wrap(&TraceHeader::default(), Log::default());
    feed(&mut sink);
    let (log, resolver) = sink.into_parts();
    assert_eq!(
        log.events,
        [
            "sample",
            "mmap /bin/first",
            "sample",
            "comm second",
            "mmap /bin/second",
            "sample",
            "fork",
            "exit",
            "lost 3",
            "throttle",
            "class c",
            "marker",
            "stack",
            "stack",
            "switch"
        ]
    );
    // Each sample resolved against the mappings of its time.
    assert_eq!(resolver.spaces().binary(BIN_UNMAPPED).kind, BinaryKind::Unmapped);
    assert_eq!(log.seen[1], ("/bin/first".to_owned(), 0x10));
    assert_eq!(log.seen[2], ("/bin/second".to_owned(), 0x10));
    assert_eq!(log.locs.len(), 3);
    assert_ne!(log.locs[1], log.locs[2]);
    assert_eq!(resolver.locations().len(), 3);
    // Stacks are not kept unless asked for.
    assert!(resolver.stacks().is_empty());
    assert_eq!(log.stack_depths, [0]);
}

#[test]
fn stacks_are_kept_on_request() {
    let mut sink = Resolved::wrap(&TraceHeader::default(), WithStacks::default());
    feed(&mut sink);
    let (w, resolver) = sink.into_parts();
    assert_eq!(resolver.stacks().len(), 2);
    assert_eq!(resolver.bad_stack_defs(), 0);
    assert_eq!(w.0.stack_depths, [2]);
    let frames: Vec<u64> = resolver.stacks().frames_leaf_first(StackId(2)).map(|f| f.ip).collect();
    assert_eq!(frames, [0x40_0030, 0x40_0020]);
}
