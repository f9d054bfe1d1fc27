//! Item recording (issue 3 and later): everything that turns a profiled program's
//! requests into item records, next to the sampling events.
//!
//! * [`markers`]: the marker library's shared-memory regions (attach, drain, decode) and
//!   the follower that attaches marked processes starting later (`-a`, the agent).
//! * [`uprobe`]: `--item-begin/--item-end` uprobes on an unmodified binary (symbol
//!   resolution, the uprobe PMU and tracefs events) and opening them per (task, CPU).
//! * [`usdt`]: `usdt:BIN:PROVIDER:NAME` probe locations and their argument specs.
//! * [`classprobe`] / [`sqlshape`]: `--item-class-from` (a probed function's argument →
//!   its SQL shape or integer → an item class) and opening those probes.
//! * [`events`]: `--item-event`/`--item-span` (probe hits → events and spans inside
//!   items), opened and decoded with the class probes.
//!
//! The recorder (`session`) plans, opens and drains them; [`ItemOptions`] is what it is
//! asked for.

pub mod classprobe;
pub mod events;
pub mod markers;
pub mod preset;
pub mod sqlshape;
pub mod uprobe;
pub mod usdt;

use crate::attr::{parse_regs, reg_names};
use crate::session::RecordError;
use classprobe::ClassSpec;
use uprobe::ItemProbes;

/// What the recorder does about items, besides always collecting the marker library's
/// markers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemOptions {
    /// Item boundaries from uprobes on an unmodified binary (`--item-begin/--item-end`).
    pub probes: Option<ItemProbes>,
    /// Register-tag mode (`--item-reg r13`): capture this user register with every
    /// sample; its value is the sample's item id (0 = outside any item).
    pub item_reg: Option<String>,
    /// Item classes from an argument of a probed function (`--item-class-from`): each
    /// hit labels the thread's open item (or the next one it begins) with the value's
    /// class ([`crate::items::classprobe`]).
    pub class_from: Vec<ClassSpec>,
    /// Events and span ends inside items (`--item-event`, `--item-span`,
    /// [`crate::items::events`]).
    pub events: Vec<events::EventSpec>,
    /// Off-CPU time for items from the marker library without `--off-cpu` (issue 7 item
    /// 2): the context-switch and `sched:sched_switch` events are opened when the first
    /// marker shows up (at once when `-p`/`-a` attached a process with the marker library
    /// while setting up; [`OffCpuLater`]). Ignored with
    /// [`crate::stacks::StackOptions::off_cpu`] (then they are on from the start).
    pub off_cpu_on_markers: bool,
}

/// `--item-reg NAME` → (sample_regs_user bit, canonical name).
pub(crate) fn item_reg_mask(name: &str) -> Result<(u64, String), RecordError> {
    let m = parse_regs(name).map_err(|e| RecordError::Options(e.to_string()))?;
    if m.count_ones() != 1 {
        return Err(RecordError::Options(format!("--item-reg takes exactly one register (got '{name}')")));
    }
    Ok((m, reg_names(m).first().map(|s| s.to_string()).unwrap_or_else(|| name.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn item_reg_names() {
        assert_eq!(item_reg_mask("r13").unwrap(), (1 << 21, "r13".to_string()));
        assert!(item_reg_mask("r13,rdi").is_err());
        assert!(item_reg_mask("eax").is_err());
    }
}
