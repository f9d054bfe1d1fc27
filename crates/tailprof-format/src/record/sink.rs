//! The consumer side: [`Sink`] and the simple sinks.

use super::*;

/// What a consumer tells the producer after a record: go on, or stop here (it has what it
/// needs, or it failed: see [`Sink::take_error`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flow {
    #[default]
    Continue,
    Stop,
}

impl Flow {
    pub fn is_stop(self) -> bool {
        self == Flow::Stop
    }
}

/// The one record stream of the workspace (like perf's `struct perf_tool`): every
/// producer (the trace reader, the recorder, `import`) hands records to a `Sink`, and every
/// consumer (the trace writer, the analyses, the agent's aggregator) is one. One callback
/// per record family, each a no-op by default, plus the hooks that are not records: stack
/// definitions, build-ids, JIT names and round ends.
///
/// The stream is fallible and can stop early: after each record (the return value of
/// [`Sink::handle_record`], which asks [`Sink::flow`]) a producer stops when told
/// [`Flow::Stop`], and then asks [`Sink::take_error`] whether the sink failed (a writer's
/// I/O error: the producer returns it) or simply has enough (the producer returns what it
/// read so far). A sink that fails keeps its first error and answers `Stop` from then on.
///
/// Readers call these in record order, and call [`Sink::handle_stack`] for every stack
/// node before the first record that uses it (a consumer that needs frames keeps a
/// [`crate::StackTable`] and feeds it with [`crate::StackTable::handle_def`]).
pub trait Sink {
    fn handle_sample(&mut self, _s: &Sample) {}
    fn handle_mmap(&mut self, _m: &Mmap) {}
    fn handle_comm(&mut self, _c: &Comm) {}
    fn handle_fork(&mut self, _t: &Task) {}
    fn handle_exit(&mut self, _t: &Task) {}
    fn handle_lost(&mut self, _l: &Lost) {}
    fn handle_throttle(&mut self, _t: &Throttle) {}
    fn handle_marker(&mut self, _m: &Marker) {}
    fn handle_item_class(&mut self, _c: &ItemClass) {}
    fn handle_switch(&mut self, _s: &Switch) {}
    fn handle_wakeup(&mut self, _w: &Wakeup) {}
    /// A probe event inside items (`--item-event`).
    fn handle_item_event(&mut self, _e: &ItemEvent) {}
    fn handle_item_trace(&mut self, _t: &ItemTrace) {}
    /// A stack node, delivered before the first record that uses it, ancestors first.
    /// Not a record: [`Sink::handle_record`] does not see it.
    fn handle_stack(&mut self, _d: &StackDef) {}
    /// A JIT code name (FORMAT.md §6.1). Not a record: the reader delivers every JIT
    /// entry of the trace before the first record (each carries its own validity time),
    /// in file order.
    fn handle_jit(&mut self, _e: &crate::JitEntry) {}
    /// The build-id of a path (a later entry for the same path replaces an earlier one).
    /// Not a record: producers deliver them when they learn them (the reader as it reads
    /// the trace's build-id chunks, `import` those of the perf.data header first, the
    /// recorder as it reads mapped files).
    fn handle_build_id(&mut self, _e: &BuildIdEntry) {}
    /// The end of a batch of records in time order (the recorder's merged round; `import`
    /// every few thousand records). A writer may close a chunk here.
    fn handle_round_end(&mut self) {}
    /// Whether the producer should go on. Asked after every record by the default
    /// [`Sink::handle_record`] (statically dispatched, so free for sinks that never stop).
    fn flow(&self) -> Flow {
        Flow::Continue
    }
    /// The error that made this sink answer [`Flow::Stop`], taken once by the producer.
    /// `None` when it stopped because it has what it needs.
    fn take_error(&mut self) -> Option<crate::FormatError> {
        None
    }

    /// Dispatch one record to the matching `handle_*`; then [`Sink::flow`].
    fn handle_record(&mut self, r: &Record) -> Flow {
        match r {
            Record::Sample(s) => self.handle_sample(s),
            Record::Mmap(m) => self.handle_mmap(m),
            Record::Comm(c) => self.handle_comm(c),
            Record::Fork(t) => self.handle_fork(t),
            Record::Exit(t) => self.handle_exit(t),
            Record::Lost(l) => self.handle_lost(l),
            Record::Throttle(t) => self.handle_throttle(t),
            Record::Marker(m) => self.handle_marker(m),
            Record::ItemClass(c) => self.handle_item_class(c),
            Record::Switch(s) => self.handle_switch(s),
            Record::Wakeup(w) => self.handle_wakeup(w),
            Record::ItemEvent(e) => self.handle_item_event(e),
            Record::ItemTrace(t) => self.handle_item_trace(t),
        }
        self.flow()
    }
}

/// For producers, once the stream is over or a sink answered [`Flow::Stop`]: the sink's
/// error, if it failed.
pub fn sink_result(sink: &mut dyn Sink) -> Result<(), crate::FormatError> {
    match sink.take_error() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Collects every record into a Vec; handy in tests. Stack definitions are ignored (see
/// [`StacksSink`]).
#[derive(Debug, Default)]
pub struct VecSink(pub Vec<Record>);

impl Sink for VecSink {
    fn handle_record(&mut self, r: &Record) -> Flow {
        self.0.push(r.clone());
        Flow::Continue
    }
}

/// Collects every record and every stack definition: `stacks` resolves the
/// [`StackId`]s of `records`.
#[derive(Debug, Default)]
pub struct StacksSink {
    pub records: Vec<Record>,
    pub stacks: crate::StackTable,
    /// Definitions that did not extend `stacks` in order (never, from a reader).
    pub bad_defs: u64,
}

impl Sink for StacksSink {
    fn handle_record(&mut self, r: &Record) -> Flow {
        self.records.push(r.clone());
        Flow::Continue
    }
    fn handle_stack(&mut self, d: &StackDef) {
        if !self.stacks.handle_def(d) {
            self.bad_defs += 1;
        }
    }
}
