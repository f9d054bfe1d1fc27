//! tailprof collect stage, the kernel interface: everything the recorder needs from
//! `perf_event_open` and /proc, with no recording policy. Split out of `tailprof-collect`
//! along this seam (the recorder, markers, uprobes, stacks and bandwidth stay there and
//! re-export these modules under the same names).
//!
//! * [`event`]: parse event names (`cpu-clock`, `cycles:pp`, `r01d1`, `cpu/event=..,umask=../`).
//! * [`attr`]: turn a parsed event plus sampling options into a `perf_event_attr`
//!   (golden-tested in `tailprof-collect/tests/attr/`), including the large-PEBS rules
//!   and the call-graph modes.
//! * [`caps`]: what this machine can do (PMU, precise levels, TSC conversion, CPUs).
//! * [`sys`]: the raw `perf_event_open` syscall and errno-to-advice mapping.
//! * [`ring`] / [`parse`]: the mmap ring buffer and the raw-record decoder.
//! * [`target`] / [`procfs`] / [`buildid`]: launching a command, finding a PID,
//!   describing running processes from /proc (opened safely), build-ids.
//!
//! This crate never prints and never exits.

pub mod attr;
pub mod buildid;
pub mod caps;
pub mod event;
pub mod parse;
pub mod procfs;
pub mod ring;
pub mod sys;
pub mod target;
