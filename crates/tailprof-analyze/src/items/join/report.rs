//! The end of the join: close what is still open, fold locations into functions, and
//! build the [`ItemsReport`] (switching, goroutine runs, ambiguity, anomalies).

use super::{JoinState, NO_ITEM};
use crate::items::anomaly::flag_anomalies;
use crate::items::estimate::Acc;
use crate::items::{hex_id, Ambiguity, CurrentSlice, Estimator, ItemFunction, ItemRow, ItemSwitching, ItemsReport};
use crate::resolve::Resolver;
use crate::symbolize::Symbolizer;
use crate::AnalyzeError;

impl JoinState {
    pub(super) fn finish(mut self, resolver: &Resolver, symbolizer: &mut Symbolizer) -> Result<ItemsReport, AnalyzeError> {
        if self.reg.is_none() && self.markers == 0 {
            return Err(AnalyzeError::NoItems);
        }
        let end = self.last_time;
        if let Some(reg) = self.reg.take() {
            let mut open: Vec<(u32, u32)> = reg.items.values().copied().collect();
            open.sort_unstable();
            for (item, live) in open {
                self.close(item, live, end);
                let it = &mut self.items[item as usize];
                it.begin = it.first_sample;
                it.end = it.last_sample;
            }
            self.reg = Some(reg);
        } else {
            for t in 0..self.threads.len() {
                if self.threads[t].switching {
                    self.set_current(t, NO_ITEM, end);
                }
                self.end_run(t);
                self.drop_pending(t);
            }
            let mut open = Vec::new();
            for t in &mut self.threads {
                open.extend(t.stack.drain(..).filter(|&(i, _)| self.items[i as usize].open));
            }
            open.sort_unstable();
            self.unmatched += open.len() as u64;
            for (item, live) in open {
                self.close(item, live, end);
                self.items[item as usize].open_at_end = true;
            }
        }
        let interval_source = if self.fixed_interval.is_some() { "period" } else { "measured" };
        let interval = self.fixed_interval.or_else(|| self.meter.median()).unwrap_or(0.0);
        let table = resolver.functions(symbolizer);
        let min_rel = self.opts.min_reliable_samples;
        // Fold locations into functions per item, through a reusable dense scratch.
        let mut scratch: Vec<Option<Acc>> = vec![None; table.rows.len()];
        let mut touched: Vec<u32> = Vec::new();
        // Rank of each function by (name, binary): ties in the per-item order compare ints.
        let mut rank = vec![0u32; table.rows.len()];
        let mut by_name: Vec<u32> = (0..table.rows.len() as u32).collect();
        by_name.sort_by(|&a, &b| {
            let (x, y) = (&table.rows[a as usize], &table.rows[b as usize]);
            (&x.name, &x.binary).cmp(&(&y.name, &y.binary))
        });
        for (r, f) in by_name.into_iter().enumerate() {
            rank[f as usize] = r as u32;
        }
        // Current intervals per item, in time order.
        self.slices.sort_unstable_by_key(|&(item, _, from, _)| (item, from));
        let mut slice_at = 0usize;
        let mut ambiguity = Ambiguity::default();
        let mut rows = Vec::with_capacity(self.items.len());
        // The classes there are, for the error when `opts.class` names none of them
        // (at most 10 names: the message is one line).
        let mut other_classes: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        for (index, it) in self.items.iter().enumerate() {
            let first = slice_at;
            while self.slices.get(slice_at).is_some_and(|s| s.0 as usize == index) {
                slice_at += 1;
            }
            let events = self.events.remove(&(index as u32)).map(|a| a.finish(it.end)).unwrap_or_default();
            let class = match it.class {
                0 => None,
                c => Some(self.classes.get(&(it.pid, c)).cloned().unwrap_or_else(|| format!("class {c}"))),
            };
            if self.opts.class.is_some() && class != self.opts.class {
                if other_classes.len() < 10 {
                    other_classes.insert(class.unwrap_or_else(|| "(no class)".to_owned()));
                }
                continue;
            }
            for (loc, acc) in &self.closed[it.rows.0 as usize..it.rows.1 as usize] {
                let f = table.function_of(*loc);
                match &mut scratch[f as usize] {
                    Some(a) => a.merge(acc),
                    slot @ None => {
                        *slot = Some(*acc);
                        touched.push(f);
                    }
                }
            }
            let e = self.opts.estimator;
            let shown = |a: &Acc| match e {
                Estimator::Span => a.span() as f64,
                Estimator::CountTimesInterval => a.count as f64 * interval,
            };
            let mut accs: Vec<(u32, Acc)> = touched.drain(..).map(|f| (f, scratch[f as usize].take().expect("touched slot"))).collect();
            accs.sort_unstable_by(|(fa, a), (fb, b)| {
                shown(b).total_cmp(&shown(a)).then(b.count.cmp(&a.count)).then(rank[*fa as usize].cmp(&rank[*fb as usize]))
            });
            let functions: Vec<ItemFunction> = accs
                .into_iter()
                .map(|(f, a)| {
                    let info = &table.rows[f as usize];
                    ItemFunction {
                        name: info.name.clone(),
                        binary: info.binary.clone(),
                        samples: a.count,
                        first_ns: a.first,
                        last_ns: a.last,
                        span_ns: a.span(),
                        est_ns: a.count as f64 * interval,
                        reliable: a.count >= min_rel,
                        source: info.source.clone(),
                    }
                })
                .collect();
            let (switching, current) = if it.switched {
                let current: Vec<CurrentSlice> = self.slices[first..slice_at]
                    .iter()
                    .filter_map(|&(_, tid, from, to)| {
                        let (b, e) = (from.max(it.begin), to.min(it.end));
                        (e > b).then_some(CurrentSlice { tid, begin_ns: b, end_ns: e })
                    })
                    .collect();
                let current_ns: u64 = current.iter().map(|c| c.end_ns - c.begin_ns).sum();
                let mut tids: Vec<u32> = current.iter().map(|c| c.tid).collect();
                tids.sort_unstable();
                tids.dedup();
                let wall = it.end.saturating_sub(it.begin);
                // Wall time covered by no current interval (they may overlap when two
                // threads claimed the item; then `current_ns` exceeds it).
                let mut covered = 0u64;
                let mut reach = it.begin;
                let mut sorted: Vec<(u64, u64)> = current.iter().map(|c| (c.begin_ns, c.end_ns)).collect();
                sorted.sort_unstable();
                for (b, e) in sorted {
                    if e > reach {
                        covered += e - b.max(reach);
                        reach = e;
                    }
                }
                let sw = ItemSwitching {
                    current_ns,
                    waiting_in_loop_ns: wall.saturating_sub(covered),
                    resumes: it.resumes,
                    threads: tids.len() as u32,
                };
                (Some(sw), current)
            } else if it.go_runs {
                // Goroutine mode: where its goroutine was seen, per thread (a run seen
                // once is one instant).
                let current = self.slices[first..slice_at]
                    .iter()
                    .filter_map(|&(_, tid, from, to)| {
                        let (b, e) = (from.max(it.begin), to.min(it.end));
                        (e >= b).then_some(CurrentSlice { tid, begin_ns: b, end_ns: e })
                    })
                    .collect();
                (None, current)
            } else {
                (None, Vec::new())
            };
            let overlapped = !it.switched && self.threads.get(it.thread as usize).is_some_and(|t| t.overlaps > 0);
            let ambiguous_samples = if overlapped { it.stacked_samples } else { 0 };
            let ambiguous = overlapped && (ambiguous_samples > 0 || it.ended_below_top);
            if ambiguous {
                ambiguity.items += 1;
                ambiguity.samples += ambiguous_samples;
            }
            let trace = self.traces.get(it.trace as usize);
            rows.push(ItemRow {
                trace_id: trace.map(|t| hex_id(&t.0)),
                span_id: trace.map(|t| hex_id(&t.1)),
                pid: it.pid,
                tid: it.tid,
                id: it.id,
                class,
                begin_ns: it.begin,
                end_ns: it.end,
                duration_ns: it.end.saturating_sub(it.begin),
                samples: it.samples,
                anomaly_score: 0.0,
                anomalous: false,
                responsible: Vec::new(),
                open_at_end: it.open_at_end,
                switching,
                current,
                ambiguous_samples,
                ambiguous,
                functions,
                events,
            });
        }
        if let (Some(class), true) = (&self.opts.class, rows.is_empty()) {
            return Err(AnalyzeError::NoSuchClass { class: class.clone(), classes: other_classes.into_iter().collect() });
        }
        rows.sort_by_key(|r| (r.begin_ns, r.pid, r.tid, r.id));
        let open_at_end = rows.iter().filter(|r| r.open_at_end).count() as u64;
        let (mode, duration_source) = match (&self.reg, &self.key) {
            (Some(r), _) => (format!("register:{}", r.name), "samples"),
            (None, Some(k)) => (format!("goroutine:{}", k.name), "markers"),
            (None, None) => ("markers".to_owned(), "markers"),
        };
        let mut report = ItemsReport {
            items: rows,
            outside_samples: self.outside,
            total_samples: self.total,
            shown_estimator: self.opts.estimator,
            mean_interval_ns: interval,
            interval_source: interval_source.to_owned(),
            lost_markers: self.lost_markers,
            unmatched_markers: self.unmatched,
            open_at_end,
            markers: self.markers,
            mode,
            duration_source: duration_source.to_owned(),
            event: self.event_name,
            min_reliable_samples: min_rel,
            mad_k: self.opts.mad_k,
            responsible_share: self.opts.responsible_share,
            classes: Vec::new(),
            switching: self.switching,
            ambiguity,
            item_events: self.item_events,
            item_events_outside: self.item_events_outside,
        };
        flag_anomalies(&mut report, &self.opts);
        Ok(report)
    }
}
