//! Call stacks of imported samples (issue 7): kernel callchains (`perf record -g`), LBR
//! call stacks (`--call-graph lbr`) and DWARF stack copies (`--call-graph dwarf`, unwound
//! here with [`tailprof_unwind`] from the binaries on this machine, when they are present
//! and have the recorded build-id). Only frames reach the trace, interned by the writer.
//!
//! The sample decoder (`sample.rs`) keeps each sample's stack fields in the reader's
//! [`StackFields`]; the import loop hands them, with every record in order, to
//! [`ImportStacks::process_with`]: side-band
//! records build the address spaces the unwinder needs, and the sample that was just
//! decoded gets its stack id and [`StackStatus`]:
//!
//! * REGS_USER + STACK_USER: kernel part of the callchain, then the unwound user frames
//!   (status from the unwinder; `NoUnwindInfo` when the binary is missing);
//! * CALLCHAIN + BRANCH_STACK (perf's LBR call graph), as perf resolves it: when the chain
//!   has a user part, the kernel part, the most recent entry's `to`, then the `from`
//!   address of each LBR entry; status `Unknown`;
//! * CALLCHAIN only: the chain as recorded (status `Unknown`, `MaxDepth` at perf's default
//!   limit of 127 entries, `UserMissing` for a user sample without user part).
//!
//! A BRANCH_STACK without CALLCHAIN (`perf record -b`) is a branch sample, not a stack,
//! and is not kept here.

use tailprof_format::{Frame, Record, Sample, StackId, StackStatus};
use tailprof_perf_abi::{regs_abi, SampleView};
use tailprof_unwind::{Limits, Unwinder, UserRegs};

/// perf's default `kernel.perf_event_max_stack`.
const PERF_MAX_STACK: usize = 127;
/// Bytes of one captured user stack copy kept (the kernel's own maximum).
const MAX_STACK_COPY: usize = 65536;

/// The stack fields of one decoded sample, handed from the sample decoder to
/// [`ImportStacks::process_with`] by the reader along with the sample's record
/// ([`crate::PerfDataReader::stack_fields`]); the buffers are reused from sample to sample.
#[derive(Debug, Default)]
pub struct StackFields {
    valid: bool,
    chain: Vec<u64>,
    has_chain: bool,
    regs: Option<(u64, u64, Vec<u64>)>,
    stack: Vec<u8>,
    has_stack: bool,
    branches: Vec<(u64, u64)>,
    has_branches: bool,
}

impl StackFields {
    /// Keep the stack fields of a decoded sample (replacing the previous sample's).
    pub(crate) fn capture(&mut self, v: &SampleView<'_>) {
        use tailprof_perf_abi::sample_type as st;
        let c = self;
        c.valid = v.layout().sample_type() & (st::CALLCHAIN | st::STACK_USER | st::BRANCH_STACK) != 0;
        if !c.valid {
            return;
        }
        c.chain.clear();
        c.has_chain = false;
        if let Some(ch) = v.callchain() {
            c.has_chain = true;
            c.chain.extend(ch.iter());
        }
        c.regs = v.regs_user().map(|r| (r.abi, r.mask, r.values.to_vec()));
        c.stack.clear();
        c.has_stack = false;
        if let Some(s) = v.stack_user() {
            c.has_stack = true;
            let valid = s.valid();
            c.stack.extend_from_slice(&valid[..valid.len().min(MAX_STACK_COPY)]);
        }
        c.branches.clear();
        c.has_branches = false;
        if let Some(b) = v.branch_stack() {
            c.has_branches = true;
            c.branches.extend(b.iter().map(|e| (e.from, e.to)));
        }
    }

    /// Forget the fields (a decode that was not kept).
    pub(crate) fn clear(&mut self) {
        self.valid = false;
    }
}

fn cc_has_user(chain: &[u64]) -> bool {
    chain.contains(&tailprof_perf_abi::context::USER)
}

/// Stacks for one import (see the module docs).
pub struct ImportStacks {
    unwinder: Unwinder,
    frames: Vec<Frame>,
    /// Samples given a stack, per status (for the import summary).
    pub counts: [u64; 8],
}

impl std::fmt::Debug for ImportStacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportStacks").field("counts", &self.counts).finish()
    }
}

impl Default for ImportStacks {
    fn default() -> Self {
        Self::new()
    }
}

impl ImportStacks {
    pub fn new() -> ImportStacks {
        ImportStacks {
            unwinder: Unwinder::new(Box::new(tailprof_unwind::open_host_file), Limits::default()),
            frames: Vec::with_capacity(256),
            counts: [0; 8],
        }
    }

    /// Follow side-band records; give the sample just decoded (whose stack fields are
    /// `fields`) its stack, interned by `intern`.
    pub fn process_with(&mut self, r: &mut Record, fields: &mut StackFields, intern: &mut dyn FnMut(&[Frame]) -> StackId) {
        match r {
            Record::Sample(s) => self.sample(s, fields, intern),
            // The unwinder's one record glue (shared with the recorder).
            other => self.unwinder.observe(other, None),
        }
    }

    fn sample(&mut self, s: &mut Sample, c: &mut StackFields, intern: &mut dyn FnMut(&[Frame]) -> StackId) {
        let status = stack_of(s, c, &mut self.frames, &mut self.unwinder);
        if status == StackStatus::None && self.frames.is_empty() {
            return;
        }
        let status = if self.frames.is_empty() { StackStatus::UserMissing } else { status };
        s.stack = intern(&self.frames);
        s.stack_status = if self.frames.len() > tailprof_format::MAX_STACK_DEPTH { StackStatus::MaxDepth } else { status };
        self.counts[s.stack_status as usize] += 1;
    }
}

/// The frames (into `frames`) and status of sample `s` from its stack fields `c` (taken).
fn stack_of(s: &Sample, c: &mut StackFields, frames: &mut Vec<Frame>, unwinder: &mut Unwinder) -> StackStatus {
    if !std::mem::take(&mut c.valid) {
        return StackStatus::None;
    }
    frames.clear();
    let chain = c.has_chain.then(|| tailprof_unwind::callchain_frames(c.chain.iter().copied(), frames));
    let kernel_sample = s.cpumode.is_kernel();
    if c.has_stack {
        match &c.regs {
            Some((abi, _, _)) if *abi == regs_abi::NONE => StackStatus::UserMissing,
            Some((_, mask, vals)) => match UserRegs::from_perf(*mask, |i| vals.get(i).copied()) {
                Some(ur) if !c.stack.is_empty() => unwinder.unwind(s.pid, &ur, &c.stack, frames),
                Some(ur) => {
                    frames.push(Frame::user(ur.ip));
                    StackStatus::CopyExhausted
                }
                None => StackStatus::UserMissing,
            },
            None => StackStatus::UserMissing,
        }
    } else if c.has_branches && c.has_chain {
        // perf's LBR call graph (callee order, as `perf script` prints it): when
        // the chain has a user part, the kernel part, then the most recent branch's
        // target, then each entry's source; otherwise the chain as is.
        if cc_has_user(&c.chain) {
            frames.retain(|f| f.kind == tailprof_format::FrameKind::Kernel);
            tailprof_unwind::lbr_frames(c.branches.iter().copied(), frames);
        }
        StackStatus::Unknown
    } else if let Some(cc) = chain {
        tailprof_unwind::callchain_status(&cc, c.chain.len(), !kernel_sample, PERF_MAX_STACK)
    } else {
        StackStatus::None
    }
}
