//! Firefox Profiler export: the processed profile format (the fxprof-processed-profile
//! crate), opened by dropping the file on profiler.firefox.com.
//!
//! Built from a stack profile's timeline ([`StackProfile::timeline`]): one process per
//! pid and one thread per tid, every sample at its time with its (already symbolized)
//! stack as label frames, categorized `User` / `Kernel` by the frame's binary. Off-CPU
//! intervals become samples at the interval's start with a leaf frame `[blocked]` /
//! `[runnable]`, weighted by how many sampling intervals the thread was off CPU (at
//! least 1), with zero CPU delta, so the call tree and flame graph show on- and off-CPU
//! time in one unit.
//!
//! A function with a source location (a JIT function's jitdump DEBUG_INFO) is named
//! `name (file:line)` ([`crate::fmt::name_with_source`]): the crate (0.8.1, the newest in
//! the registry) writes the func table's `fileName` and `lineNumber` columns as null and
//! has no way to set them, so the name is where the profiler's call tree, flame graph and
//! tooltips show the source.

use std::collections::{BTreeMap, HashMap};

use fxprof_processed_profile::{
    CategoryColor, CategoryPairHandle, CpuDelta, Frame, FrameFlags, FrameInfo, Profile, ReferenceTimestamp, SamplingInterval, ThreadHandle,
    Timestamp,
};
use tailprof_analyze::stacks::StackProfile;

/// Options of [`firefox_profile`].
#[derive(Debug, Clone, Default)]
pub struct FirefoxOptions {
    /// Process and thread names (pid or tid → name).
    pub names: BTreeMap<u32, String>,
    /// The sampling interval in ns (0: 1 ms).
    pub interval_ns: u64,
    /// The trace's clock origin as ns since the Unix epoch, when known.
    pub unix_origin_ns: Option<u64>,
    /// Product name shown by the profiler.
    pub product: String,
}

/// The processed profile; `None` without a timeline.
pub fn firefox_profile(p: &StackProfile, opts: &FirefoxOptions) -> Option<Profile> {
    let t = p.timeline.as_ref()?;
    let interval = if opts.interval_ns == 0 { 1_000_000 } else { opts.interval_ns };
    let first = t.samples.first().map(|s| s.time_ns).into_iter().chain(t.off_cpu.first().map(|o| o.begin_ns)).min().unwrap_or(0);
    let origin_ms = opts.unix_origin_ns.map_or(0.0, |o| (o as f64 + first as f64) / 1e6);
    let product = if opts.product.is_empty() { "tailprof" } else { opts.product.as_str() };
    let mut prof =
        Profile::new(product, ReferenceTimestamp::from_millis_since_unix_epoch(origin_ms), SamplingInterval::from_nanos(interval));
    let user: CategoryPairHandle = prof.add_category("User", CategoryColor::Yellow).into();
    let kernel: CategoryPairHandle = prof.add_category("Kernel", CategoryColor::Orange).into();
    let off: CategoryPairHandle = prof.add_category("Off-CPU", CategoryColor::Gray).into();
    let ts = |ns: u64| Timestamp::from_nanos_since_reference(ns.saturating_sub(first));
    let mut procs = HashMap::new();
    let mut threads: HashMap<u32, ThreadHandle> = HashMap::new();
    let mut thread_of = |prof: &mut Profile, pid: u32, tid: u32, at: u64| -> ThreadHandle {
        if let Some(&h) = threads.get(&tid) {
            return h;
        }
        let ph = *procs.entry(pid).or_insert_with(|| {
            let name = opts.names.get(&pid).cloned().unwrap_or_else(|| format!("pid {pid}"));
            prof.add_process(&name, pid, ts(at))
        });
        let h = prof.add_thread(ph, tid, ts(at), tid == pid);
        if let Some(n) = opts.names.get(&tid) {
            prof.set_thread_name(h, n);
        }
        threads.insert(tid, h);
        h
    };
    // Function rows as interned strings and categories, once.
    let names: Vec<_> =
        p.functions.iter().map(|f| prof.intern_string(&crate::fmt::name_with_source(&f.name, f.source.as_deref()))).collect();
    let cats: Vec<CategoryPairHandle> =
        p.functions.iter().map(|f| if crate::stacks::is_kernel_binary(&f.binary) { kernel } else { user }).collect();
    let frames_of = |path: u32| -> Vec<FrameInfo> {
        p.paths
            .get(path as usize)
            .map(|v| {
                v.iter()
                    .map(|&f| FrameInfo {
                        frame: Frame::Label(names[f as usize]),
                        category_pair: cats[f as usize],
                        flags: FrameFlags::empty(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut stack_cache: HashMap<(u32, u32), Option<fxprof_processed_profile::StackHandle>> = HashMap::new();
    for s in &t.samples {
        let th = thread_of(&mut prof, s.pid, s.tid, s.time_ns);
        let stack = *stack_cache.entry((s.tid, s.path)).or_insert_with(|| prof.intern_stack_frames(th, frames_of(s.path).into_iter()));
        prof.add_sample(th, ts(s.time_ns), stack, CpuDelta::from_nanos(interval), 1);
    }
    let state_label = [prof.intern_string("[runnable]"), prof.intern_string("[blocked]")];
    for o in &t.off_cpu {
        let th = thread_of(&mut prof, o.pid, o.tid, o.begin_ns);
        let mut frames = frames_of(o.path);
        frames.push(FrameInfo {
            frame: Frame::Label(state_label[(o.state as usize).min(1)]),
            category_pair: off,
            flags: FrameFlags::empty(),
        });
        let stack = prof.intern_stack_frames(th, frames.into_iter());
        let weight = ((o.end_ns - o.begin_ns) / interval).clamp(1, i32::MAX as u64) as i32;
        prof.add_sample(th, ts(o.begin_ns), stack, CpuDelta::ZERO, weight);
    }
    Some(prof)
}

/// The profile as JSON text; `None` without a timeline.
pub fn firefox_json(p: &StackProfile, opts: &FirefoxOptions) -> Option<Result<String, serde_json::Error>> {
    firefox_profile(p, opts).map(|prof| serde_json::to_string(&prof))
}
