//! tailprof collect stage: everything that talks to the kernel's perf_event interface.
//!
//! * [`event`]: parse event names (`cpu-clock`, `cycles:pp`, `r01d1`, `cpu/event=..,umask=../`).
//! * [`attr`]: turn a parsed event plus sampling options into a `perf_event_attr`
//!   (golden-tested in `tests/attr/`), including the large-PEBS rules.
//! * [`caps`]: what this machine can do (PMU, precise levels, TSC conversion, CPUs).
//! * [`sys`]: the raw `perf_event_open` syscall and errno-to-advice mapping.
//! * [`ring`] / [`parse`]: the mmap ring buffer and the raw-record decoder.
//! * [`session`]: the recorder: open events for a target, drain rings with one epoll
//!   loop, merge CPUs in timestamp order (rounds), and write records to a trace.
//! * [`target`] / [`procfs`] / [`buildid`]: launching a command, attaching to a PID or
//!   the whole system, describing already-running processes from /proc, build-ids.
//!
//! This crate never prints and never exits; errors are [`CollectError`]s.

pub mod attr;
pub mod bandwidth;
pub mod caps;
pub mod event;
pub mod sys;

pub mod buildid;
pub mod counting;
pub mod datadir;
pub mod parse;
pub mod procfs;
pub mod ring;
pub mod session;
pub mod stacks;
pub mod tracefs;
pub mod target;
pub mod markers;
pub mod uprobe;
pub mod sqlshape;
pub mod classprobe;
