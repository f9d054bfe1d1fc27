//! tailprof collect stage: recording. The kernel interface (event names, attrs,
//! capabilities, the syscall, rings, decoding, /proc, targets) is `tailprof-collect-sys`,
//! re-exported here under the same module names.
//!
//! * [`event`]: parse event names (`cpu-clock`, `cycles:pp`, `r01d1`, `cpu/event=..,umask=../`).
//! * [`attr`]: turn a parsed event plus sampling options into a `perf_event_attr`
//!   (golden-tested in `tests/attr/`), including the large-PEBS rules.
//! * [`caps`]: what this machine can do (PMU, precise levels, TSC conversion, CPUs).
//! * [`sys`]: the raw `perf_event_open` syscall and errno-to-advice mapping.
//! * [`ring`] / [`parse`]: the mmap ring buffer and the raw-record decoder.
//! * [`session`]: the recorder: open events for a target, drain rings with one epoll
//!   loop, merge CPUs in timestamp order (rounds), and write records to a trace.
//! * [`items`]: item recording: the marker library's regions, `--item-begin/--item-end`
//!   uprobes, USDT probes, `--item-class-from` class probes and SQL shapes.
//! * [`target`] / [`procfs`] / [`buildid`]: launching a command, attaching to a PID or
//!   the whole system, describing already-running processes from /proc, build-ids.
//!
//! This crate never prints and never exits; errors are [`CollectError`]s.

// The kernel interface lives in `tailprof-collect-sys`; re-exported under the old names.
pub use tailprof_collect_sys::{attr, buildid, caps, event, parse, procfs, ring, sys, target};

pub mod bandwidth;

pub mod counting;
pub mod items;
pub mod jit;
pub mod session;
pub mod stacks;
pub mod tracefs;
