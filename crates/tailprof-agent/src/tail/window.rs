//! The window's end: retained requests as store rows (docs/STORE.md, "items") and the
//! latency histogram.

use super::*;

impl TailRetainer {
    /// The window's retained requests (explanations with build-ids filled in) and
    /// latency histogram rows. Drops the open requests of threads that exited in the
    /// previous window.
    pub fn take_window(&mut self, start: i64, end: i64, build_id: &dyn Fn(u32) -> Option<String>) -> (Vec<ItemRow>, Vec<LatencyRow>) {
        self.apply_exits();
        let mut items = Vec::new();
        let frames_of = |frames: &[(u32, u64)]| -> Vec<StoreFrame> {
            frames
                .iter()
                .map(|&(b, offset)| StoreFrame {
                    build_id: match b {
                        u32::MAX => String::new(),
                        x if x == u32::MAX - 1 => KERNEL_BUILD_ID.to_string(),
                        x if x == u32::MAX - 2 => String::new(),
                        x => build_id(x).unwrap_or_default(),
                    },
                    offset,
                })
                .collect()
        };
        for Retained { mut row, mut stacks, causes, switching } in std::mem::take(&mut self.retained) {
            stacks.sort_by_key(|s| std::cmp::Reverse(s.0));
            // docs/STORE.md, "items".
            let doc = ItemExplanation {
                stacks: stacks.iter().take(50).map(|(n, frames)| StoredStack { samples: *n, frames: frames_of(frames) }).collect(),
                woken_by: causes
                    .woken_by
                    .iter()
                    .map(|w| StoredWaker {
                        ns: w.waker.ns,
                        pid: w.waker.pid,
                        tid: w.waker.tid,
                        comm: w.comm.to_string(),
                        item: w.item,
                        class: w.class.clone(),
                        frames: frames_of(&w.frames),
                        during: w
                            .during
                            .iter()
                            .map(|(state, ns, frames)| StoredDuring {
                                state: match state {
                                    PathState::Cpu => StoredState::Cpu,
                                    PathState::Blocked => StoredState::Blocked,
                                    PathState::Runnable => StoredState::Runnable,
                                },
                                ns: *ns,
                                frames: frames_of(frames),
                            })
                            .collect(),
                    })
                    .collect(),
                preempted_by: causes
                    .preempted_by
                    .iter()
                    .map(|(p, comm, item)| StoredPreempter { ns: p.ns, pid: p.pid, tid: p.tid, comm: comm.to_string(), item: *item })
                    .collect(),
                switching,
            };
            row.explanation = doc.to_json();
            items.push(row);
        }
        let mut latency: Vec<LatencyRow> = std::mem::take(&mut self.hist)
            .into_iter()
            .map(|((ci, le), count)| LatencyRow {
                window_start_us: start,
                window_end_us: end,
                class: self.class_names[ci as usize].clone(),
                le_ns: le,
                count,
            })
            .collect();
        latency.sort_by(|a, b| (&a.class, a.le_ns).cmp(&(&b.class, b.le_ns)));
        (items, latency)
    }
}
