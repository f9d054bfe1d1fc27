//! Call stacks: interned stack ids, frames, and how complete a stack is.

use super::*;

/// Id of an interned call stack: a node of a [`crate::StackTable`], i.e. a frame plus
/// the id of its caller's node. Ids are only meaningful together with the table that
/// made them (the writer's while writing; the one fed by [`Sink::handle_stack`] while
/// reading). [`StackId::NONE`] (0) means "no stack".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct StackId(pub u32);

impl StackId {
    /// No stack (also the parent of an outermost frame).
    pub const NONE: StackId = StackId(0);
    pub fn is_none(self) -> bool {
        self.0 == 0
    }
}

/// Which address space a frame's `ip` is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum FrameKind {
    #[default]
    User = 0,
    Kernel = 1,
}

impl FrameKind {
    /// From the on-disk code (FORMAT.md §5.5); `None` for a code this build does not know.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(FrameKind::User),
            1 => Some(FrameKind::Kernel),
            _ => None,
        }
    }
}

/// One frame of a call stack.
///
/// For the leaf (innermost) frame `ip` is the sampled instruction address. For every other
/// frame it is the **return address** as the kernel or the unwinder reported it, i.e. the
/// instruction after the call: analyses look up `ip - 1` for non-leaf frames so a call
/// that ends a function is attributed to the caller's right function and line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct Frame {
    pub ip: u64,
    pub kind: FrameKind,
}

impl Frame {
    pub fn user(ip: u64) -> Self {
        Frame { ip, kind: FrameKind::User }
    }
    pub fn kernel(ip: u64) -> Self {
        Frame { ip, kind: FrameKind::Kernel }
    }
}

/// Whether a recorded stack reached the outermost frame, and if not, why. Stored as a
/// `u8` with the stable codes below (FORMAT.md §5.5); a reader maps codes it does not
/// know to [`StackStatus::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum StackStatus {
    /// No stack was asked for (or the record cannot have one).
    #[default]
    None = 0,
    /// The stack reached the outermost frame.
    Complete = 1,
    /// DWARF unwinding ran off the end of the copied user stack (the copy was too small).
    CopyExhausted = 2,
    /// A frame's code had no unwind information (`.eh_frame`/`.debug_frame`).
    NoUnwindInfo = 3,
    /// Unwinding failed: bad frame, bad CFI, unreadable memory, a loop.
    UnwindError = 4,
    /// The kernel's or our depth limit was reached.
    MaxDepth = 5,
    /// Only the kernel part is present (no user registers / user chain).
    UserMissing = 6,
    /// A stack whose completeness cannot be decided (e.g. frame-pointer chains), or a
    /// status code this build does not know.
    Unknown = 7,
}

impl StackStatus {
    /// Every status, in code order.
    pub const ALL: [StackStatus; 8] = [
        StackStatus::None,
        StackStatus::Complete,
        StackStatus::CopyExhausted,
        StackStatus::NoUnwindInfo,
        StackStatus::UnwindError,
        StackStatus::MaxDepth,
        StackStatus::UserMissing,
        StackStatus::Unknown,
    ];

    /// From the on-disk code; codes this build does not know read as `Unknown`.
    pub fn from_u8(v: u8) -> Self {
        StackStatus::ALL.get(v as usize).copied().unwrap_or(StackStatus::Unknown)
    }

    /// A stable short name (also the JSON name), e.g. `copy_exhausted`.
    pub fn name(self) -> &'static str {
        match self {
            StackStatus::None => "none",
            StackStatus::Complete => "complete",
            StackStatus::CopyExhausted => "copy_exhausted",
            StackStatus::NoUnwindInfo => "no_unwind_info",
            StackStatus::UnwindError => "unwind_error",
            StackStatus::MaxDepth => "max_depth",
            StackStatus::UserMissing => "user_missing",
            StackStatus::Unknown => "unknown",
        }
    }

    /// The reason in words, for people (e.g. `copy exhausted`).
    pub fn reason(self) -> &'static str {
        match self {
            StackStatus::None => "no stack",
            StackStatus::Complete => "complete",
            StackStatus::CopyExhausted => "copy exhausted",
            StackStatus::NoUnwindInfo => "no unwind info",
            StackStatus::UnwindError => "unwind error",
            StackStatus::MaxDepth => "max depth",
            StackStatus::UserMissing => "user stack missing",
            StackStatus::Unknown => "completeness unknown",
        }
    }

    /// A stack was recorded (complete or not).
    pub fn has_stack(self) -> bool {
        self != StackStatus::None
    }

    /// Truncated or failed: a stack was asked for and did not reach the outermost frame
    /// (`Unknown` is not counted as truncated).
    pub fn is_truncated(self) -> bool {
        !matches!(self, StackStatus::None | StackStatus::Complete | StackStatus::Unknown)
    }
}

/// The definition of one interned stack node, delivered by the reader through
/// [`Sink::handle_stack`] before the first record that uses `id`, callers (ancestors)
/// first. `parent` is [`StackId::NONE`] for an outermost frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StackDef {
    pub id: StackId,
    pub parent: StackId,
    pub frame: Frame,
}
