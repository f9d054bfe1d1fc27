//! Debugging aid: print the outermost frames (as `path+offset`) of a trace's stacks with a
//! given status, grouped. `cargo run -p tailprof-unwind --example stack_status -- TRACE [STATUS]`
use std::collections::BTreeMap;

use tailprof_format::{Mmap, Sample, Sink, StackDef, StackStatus, StackTable, TraceReader};

#[derive(Default)]
struct C {
    t: StackTable,
    s: Vec<Sample>,
    m: Vec<Mmap>,
}
impl Sink for C {
    fn handle_sample(&mut self, s: &Sample) {
        self.s.push(s.clone());
    }
    fn handle_mmap(&mut self, m: &Mmap) {
        self.m.push(m.clone());
    }
    fn handle_stack(&mut self, d: &StackDef) {
        self.t.handle_def(d);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let want = args.get(2).map(String::as_str).unwrap_or("unwind_error");
    let mut r = TraceReader::open(std::path::Path::new(&args[1])).expect("trace");
    let mut c = C::default();
    r.read_all(&mut c).expect("read");
    let mut groups: BTreeMap<String, u64> = BTreeMap::new();
    for s in &c.s {
        if s.stack_status.name() != want {
            continue;
        }
        let frames: Vec<_> = c.t.frames_leaf_first(s.stack).collect();
        let n = frames.len();
        let desc: Vec<String> = frames[n.saturating_sub(3)..]
            .iter()
            .map(|f| match c.m.iter().rev().find(|m| m.pid == s.pid && (m.start..m.start + m.len).contains(&f.ip)) {
                Some(m) => format!("{}+{:#x}", m.path.rsplit('/').next().unwrap_or(""), f.ip - m.start + m.pgoff),
                None => format!("{:#x}", f.ip),
            })
            .collect();
        *groups.entry(format!("depth {n}: {}", desc.join(" <- "))).or_default() += 1;
    }
    let mut v: Vec<_> = groups.into_iter().collect();
    v.sort_by_key(|b| std::cmp::Reverse(b.1));
    for (k, n) in v.into_iter().take(15) {
        println!("{n:6} {k}");
    }
    let _ = StackStatus::ALL;
}
