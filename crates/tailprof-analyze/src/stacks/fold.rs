//! The end of the stack pass: location paths folded into function paths, stack and
//! off-CPU rows, per-item views with their noise, and the causes.

use rustc_hash::FxHashMap;
use tailprof_format::StackStatus;

use super::chain::{chain_end, ChainEnd, BROKEN, BROKEN_REASON};
use super::{is_kernel_binary, status_counts, ItemStacks, OffRow, StackBuilder, StackProfile, StackRow, StatusCount};
use crate::offcpu::OffState;
use crate::resolve::{FunctionInfo, Resolver};
use crate::symbolize::Symbolizer;

impl StackBuilder {
    /// Close open off-CPU intervals, symbolize and fold into a [`StackProfile`].
    /// Call after the last record with the resolver it was read with.
    pub fn finish(mut self, resolver: &mut Resolver, symbolizer: &mut Symbolizer) -> StackProfile {
        for iv in self.timelines.finish(self.last_time) {
            self.add_interval(resolver, &iv);
        }
        let mut table = resolver.functions_by(symbolizer, self.granularity);
        // Each location's functions innermost first: functions inlined at the address
        // (DWARF inline records) become frames of their own, inside the function that
        // holds the code.
        let inlined = crate::resolve::inline_rows(resolver, &mut table, symbolizer);
        // Location paths → function paths, interned.
        let mut fpath_ids: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
        let mut paths: Vec<Vec<u32>> = Vec::new();
        let of_path: Vec<u32> = self
            .loc_paths
            .iter()
            .map(|locs| {
                let mut fp: Vec<u32> = Vec::with_capacity(locs.len() + 2);
                for &l in locs {
                    match inlined.get(l.index()) {
                        Some(rows) => fp.extend(rows.iter().rev()),
                        None => fp.push(table.of_loc.get(l.index()).copied().unwrap_or(0)),
                    }
                }
                let next = paths.len() as u32;
                *fpath_ids.entry(fp).or_insert_with_key(|k| {
                    paths.push(k.clone());
                    next
                })
            })
            .collect();
        // Stacks the recorder could not judge (frame-pointer and LBR chains): judged now
        // by their outermost frame's name (see [`chain_end`]), once per location path.
        let mut ends: Vec<Option<ChainEnd>> = vec![None; self.loc_paths.len()];
        let mut end_of =
            |p: u32| -> ChainEnd { *ends[p as usize].get_or_insert_with(|| chain_end(&self.loc_paths[p as usize], resolver, &table)) };
        let mut moved = [0u64; 3];
        for (&(p, status), &(n, _)) in &self.samples {
            if status == StackStatus::Unknown {
                moved[end_of(p) as usize] += n;
            }
        }
        // (complete, truncated) of a sample's stack.
        let mut judged = |p: u32, status: StackStatus| match (status == StackStatus::Unknown).then(|| end_of(p)) {
            Some(ChainEnd::Entry) => (true, false),
            Some(ChainEnd::Broken) => (false, true),
            _ => (status == StackStatus::Complete, status.is_truncated()),
        };
        let mut whole: FxHashMap<(u32, bool, bool), (u64, u64)> = FxHashMap::default();
        let (mut samples, mut period) = (0u64, 0u64);
        for (&(p, status), &(n, per)) in &self.samples {
            let (complete, truncated) = judged(p, status);
            let e = whole.entry((of_path[p as usize], complete, truncated)).or_default();
            e.0 += n;
            e.1 = e.1.saturating_add(per);
            samples += n;
            period = period.saturating_add(per);
        }
        let mut off_whole: FxHashMap<(u32, OffState), u64> = FxHashMap::default();
        for (&(p, state), &ns) in &self.off {
            *off_whole.entry((of_path[p as usize], state)).or_default() += ns;
        }
        let timeline = self.timeline.take().map(|mut t| {
            for s in &mut t.samples {
                s.path = of_path[s.path as usize];
            }
            for o in &mut t.off_cpu {
                o.path = of_path[o.path as usize];
            }
            t.off_cpu.sort_by_key(|o| (o.begin_ns, o.tid));
            t.wakes = self.causes.take_edges();
            t
        });
        let stacks = stack_rows(whole.into_iter());
        let (off_cpu, runnable_ns, blocked_ns) = off_rows(off_whole.into_iter());
        let interval = self.fixed_interval.or_else(|| self.meter.median()).unwrap_or(0.0);
        // What each function path's kernel part was doing, once per path.
        let mut works: Vec<Option<Option<crate::causes::KernelWork<'_>>>> = vec![None; paths.len()];
        let switches = self.timelines.switches > 0;
        // Per item: its entries keyed by function path, merged (two location paths may
        // fold into one function path), in reused buffers.
        let mut st: Vec<(StackKey, (u64, u64))> = Vec::new();
        let mut off: Vec<((u32, OffState), u64)> = Vec::new();
        let items = self
            .spans
            .iter()
            .enumerate()
            .map(|(i, s)| {
                st.clear();
                for (&(p, status), &v) in self.item_samples.get(i as u32) {
                    let (complete, truncated) = judged(p, status);
                    st.push(((of_path[p as usize], complete, truncated), v));
                }
                merge_rows(&mut st, |a, b| (a.0 + b.0, a.1.saturating_add(b.1)));
                off.clear();
                off.extend(self.item_off.get(i as u32).map(|(&(p, state), &ns)| ((of_path[p as usize], state), ns)));
                merge_rows(&mut off, |a, b| a + b);
                let (off_cpu, runnable_ns, blocked_ns) = off_rows(off.iter().copied());
                let off_cpu_partial = self.off_cpu_late && self.first_switch.get(&s.pid).is_none_or(|&t| t > s.begin_ns);
                let mut noise = crate::causes::Noise {
                    migrations: switches.then(|| self.migrations.get(i).copied().unwrap_or(0)),
                    ..Default::default()
                };
                for &((fp, _, _), (n, _)) in &st {
                    if let Some(w) = kernel_work_of(fp, &paths, &table.rows, &mut works) {
                        noise.add(w, n, interval);
                    }
                }
                noise.sort();
                ItemStacks { id: s.id, stacks: stack_rows(st.iter().copied()), off_cpu, runnable_ns, blocked_ns, off_cpu_partial, noise }
            })
            .collect();
        drop(works);
        let (causes, cause_stats) = {
            let names = |p: u32| -> Vec<String> {
                of_path
                    .get(p as usize)
                    .and_then(|&fp| paths.get(fp as usize))
                    .map(|v| v.iter().map(|&f| table.rows[f as usize].name.clone()).collect())
                    .unwrap_or_default()
            };
            let spans = &self.spans;
            let span = |i: u32| spans.get(i as usize).map_or((0, None), |s| (s.id, s.class.clone()));
            std::mem::take(&mut self.causes).finish(&names, &span)
        };
        let mut counts = self.statuses;
        let unknown = StackStatus::Unknown as usize;
        counts[unknown] = counts[unknown].saturating_sub(moved[ChainEnd::Entry as usize] + moved[ChainEnd::Broken as usize]);
        counts[StackStatus::Complete as usize] += moved[ChainEnd::Entry as usize];
        let mut statuses = status_counts(&counts);
        if moved[ChainEnd::Broken as usize] > 0 {
            // Before `unknown`, the last code: statuses stay in code order otherwise.
            let at = statuses.iter().position(|s| s.status == StackStatus::Unknown.name()).unwrap_or(statuses.len());
            statuses.insert(at, StatusCount { status: BROKEN, reason: BROKEN_REASON, samples: moved[ChainEnd::Broken as usize] });
        }
        StackProfile {
            event: self.event_name,
            total_samples: self.total,
            samples,
            period,
            statuses,
            functions: table.rows,
            paths,
            stacks,
            off_cpu,
            runnable_ns,
            blocked_ns,
            items,
            switches: self.timelines.switches,
            off_open_at_end: self.timelines.open_at_end,
            off_double_outs: self.timelines.double_outs,
            filter: self.filter,
            kernel_symbols: table.kernel_note,
            read: self.read,
            timeline,
            causes,
            cause_stats,
        }
    }
}

/// What the kernel part of function path `fp` was doing ([`crate::causes::kernel_work`]),
/// remembered per path in `works`. A kernel frame counts as named when it has a symbol
/// (not `[kernel]`: no kernel symbols).
fn kernel_work_of<'a>(
    fp: u32,
    paths: &[Vec<u32>],
    functions: &'a [FunctionInfo],
    works: &mut [Option<Option<crate::causes::KernelWork<'a>>>],
) -> Option<crate::causes::KernelWork<'a>> {
    let slot = works.get_mut(fp as usize)?;
    *slot.get_or_insert_with(|| {
        let rows: Vec<&FunctionInfo> = paths.get(fp as usize).into_iter().flatten().filter_map(|&f| functions.get(f as usize)).collect();
        let frames: Vec<(&str, bool)> = rows
            .iter()
            .filter(|f| is_kernel_binary(&f.binary))
            .map(|f| (f.name.as_str(), f.unknown_reason.is_none() && !f.name.starts_with('[')))
            .collect();
        // The innermost user frame below the kernel part (root first: user, then kernel).
        let caller =
            rows.iter().take_while(|f| !is_kernel_binary(&f.binary)).last().filter(|f| f.unknown_reason.is_none()).map(|f| f.name.as_str());
        crate::causes::kernel_work(&frames, caller)
    })
}

/// A stack row's key: (function path, complete, truncated).
type StackKey = (u32, bool, bool);

/// Sums the values of equal keys of `v` (sorts it by key).
fn merge_rows<K: Ord + Copy, V: Copy>(v: &mut Vec<(K, V)>, add: impl Fn(V, V) -> V) {
    if v.len() < 2 {
        return;
    }
    v.sort_unstable_by_key(|e| e.0);
    let mut w = 0;
    for r in 1..v.len() {
        if v[r].0 == v[w].0 {
            v[w].1 = add(v[w].1, v[r].1);
        } else {
            w += 1;
            v[w] = v[r];
        }
    }
    v.truncate(w + 1);
}

fn stack_rows(m: impl Iterator<Item = ((u32, bool, bool), (u64, u64))>) -> Vec<StackRow> {
    let mut v: Vec<StackRow> =
        m.map(|((path, complete, truncated), (samples, period))| StackRow { path, samples, period, complete, truncated }).collect();
    v.sort_unstable_by(|a, b| {
        b.samples.cmp(&a.samples).then(a.path.cmp(&b.path)).then(b.complete.cmp(&a.complete)).then(a.truncated.cmp(&b.truncated))
    });
    v
}

fn off_rows(m: impl Iterator<Item = ((u32, OffState), u64)>) -> (Vec<OffRow>, u64, u64) {
    let (mut r, mut b) = (0u64, 0u64);
    let mut v: Vec<OffRow> = m
        .map(|((path, state), ns)| {
            match state {
                OffState::Runnable => r = r.saturating_add(ns),
                OffState::Blocked => b = b.saturating_add(ns),
            }
            OffRow { path, state, ns }
        })
        .collect();
    v.sort_unstable_by(|a, b| b.ns.cmp(&a.ns).then(a.path.cmp(&b.path)).then(a.state.cmp(&b.state)));
    (v, r, b)
}
