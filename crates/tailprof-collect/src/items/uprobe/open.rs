//! Opening the uprobe item boundaries per (task, CPU) ([`ProbeSet`]).

use std::io;

use super::{PreparedProbes, ProbeRole, ResolvedProbe, UprobeAttrConfig};
use crate::attr::ClockChoice;
use crate::items::uprobe;
use crate::parse::Layout;
use crate::sys::{self, CollectError};

/// Uprobe item boundaries, ready to open per (task, CPU).
#[derive(Debug)]
pub(crate) struct ProbeSet {
    /// The resolved begin/end probes (binary, offsets, id register, class).
    pub prepared: PreparedProbes,
    /// Event index of the begin probe in the decoder (the end probe is the next one).
    pub begin_event: u16,
}

impl ProbeSet {
    /// How site `site` of `role` is opened (every site of a role shares the decoder
    /// event: its hits mean the same boundary).
    pub fn attr_config(&self, role: ProbeRole, site: usize, clock: ClockChoice, inherit: bool, enable_on_exec: bool) -> UprobeAttrConfig {
        let r = self.probe(role, site);
        UprobeAttrConfig {
            offset: r.offset,
            ref_ctr_offset: r.ref_ctr_offset,
            ret: r.uretprobe(),
            regs_user: if role == ProbeRole::Begin || self.prepared.goroutine { self.prepared.id_reg_mask } else { 0 },
            clock,
            inherit,
            enable_on_exec,
        }
    }

    /// Site `site` of `role` (the first when out of range: there is always one).
    pub fn probe(&self, role: ProbeRole, site: usize) -> &ResolvedProbe {
        let sites = self.prepared.sites(role);
        sites.get(site).unwrap_or(&sites[0])
    }

    /// Number of sites of `role`.
    pub fn sites(&self, role: ProbeRole) -> usize {
        self.prepared.sites(role).len()
    }

    /// Decoder layouts of the two probe events (the same for either kind of event).
    pub fn layouts(&self, clock: ClockChoice) -> Vec<Layout> {
        [ProbeRole::Begin, ProbeRole::End]
            .iter()
            .map(|&role| {
                let ev = uprobe::ProbeEvent::Tracepoint { id: 0 };
                let a =
                    uprobe::uprobe_attr(&ev, &self.attr_config(role, 0, clock, false, false)).expect("a tracepoint attr is always built");
                Layout {
                    sample_type: a.sample_type,
                    regs_user_mask: a.sample_regs_user,
                    sample_id_all: true,
                    default_period: 1,
                    ..Layout::default()
                }
            })
            .collect()
    }

    /// Open site `site` of one probe for `pid` on `cpu`.
    pub fn open(
        &self,
        role: ProbeRole,
        site: usize,
        pid: i32,
        cpu: i32,
        cfg: UprobeAttrConfig,
    ) -> Result<std::os::fd::OwnedFd, CollectError> {
        // A uprobe PMU event's path pointer outlives the call (the kernel copies the
        // string); inherited events are tracefs events ([`uprobe::ProbeVia::for_inherit`]).
        let a = uprobe::uprobe_attr(&self.prepared.event(role, site), &cfg).ok_or_else(|| CollectError::Open {
            event: format!("uprobe {}", self.probe(role, site).spec),
            hint: "an inherited uprobe PMU event would make the target's clone() fail (EFAULT); \
                   inherited probes must be tracefs events"
                .into(),
            source: io::Error::from_raw_os_error(libc::EINVAL),
        })?;
        sys::perf_event_open(&a, pid, cpu, -1, sys::PERF_FLAG_FD_CLOEXEC).map_err(|e| open_error(&e, self.probe(role, site)))
    }

    /// `TraceHeader.extra` entries describing the probes.
    pub fn header_extra(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("item_begin".to_string(), describe_sites(&self.prepared.begin)),
            ("item_end".to_string(), describe_sites(&self.prepared.end)),
            (
                "item_id".to_string(),
                match &self.prepared.id_reg {
                    Some(r) => format!("register:{r}"),
                    None if self.prepared.goroutine => {
                        format!("goroutine:{}", super::GOROUTINE_REG)
                    }
                    None => "sequence".to_string(),
                },
            ),
        ];
        if self.prepared.goroutine {
            // The join keys markers and samples by this register's value (the `g`).
            v.push(("item_key".to_string(), format!("goroutine:{}", super::GOROUTINE_REG)));
        }
        if let Some(c) = &self.prepared.class {
            v.push(("item_class".to_string(), c.clone()));
        }
        v
    }
}

/// Every site's definition, one per line.
fn describe_sites(sites: &[ResolvedProbe]) -> String {
    sites.iter().map(ResolvedProbe::describe).collect::<Vec<_>>().join("\n")
}

fn open_error(e: &io::Error, probe: &ResolvedProbe) -> CollectError {
    let event = format!("uprobe {}", probe.spec);
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => CollectError::Permission {
            event,
            paranoid: std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").ok().and_then(|s| s.trim().parse().ok()),
            hint: "uprobes need root (CAP_SYS_ADMIN), or CAP_PERFMON with access to the uprobe PMU".into(),
            source: io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)),
        },
        Some(libc::ENOENT) | Some(libc::EINVAL) => CollectError::Open {
            event,
            hint: format!(
                "the kernel refused the probe at offset {:#x} of {} (is the offset inside an executable segment, \
                 and does the kernel support uprobes on this file system?)",
                probe.offset,
                probe.path.display()
            ),
            source: io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)),
        },
        _ => CollectError::Open {
            event,
            hint: "perf_event_open failed".into(),
            source: io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)),
        },
    }
}
