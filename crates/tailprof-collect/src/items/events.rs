//! `--item-event PROBE[:argN[:TYPE]]` and `--item-span START,END` (issue 22 item 2):
//! timestamped events inside items, from USDT probes or function uprobes.
//!
//! Each hit becomes an [`ItemEvent`](tailprof_format::ItemEvent) record on the hitting
//! thread; the analysis puts it in the item open there. A probe named `NAME__start` is
//! the start of span `NAME`, one named `NAME__done` its end (PostgreSQL's
//! `lock__wait__start`/`lock__wait__done`), and `--item-span START,END` pairs any two
//! probes under START's name. Everything else is an instant.
//!
//! The probes are tracefs uprobe events opened next to the `--item-class-from` ones
//! ([`crate::items::classprobe::ClassProbes`] opens and decodes both): an argument is
//! read with the same fetch rule as a class argument (a USDT probe's `argN` from its
//! note, a function's `arg1..arg6` or register), by default as an integer; `:string`
//! reads the C string it points to, cut at [`ItemEvent::MAX_ARG_TEXT`] bytes, control
//! characters replaced by `?`, and otherwise stored as it is (unlike a class, not reduced
//! to an SQL shape: ask only for arguments that may be stored).

use tailprof_format::{ItemEvent, ItemEventKind};

use crate::items::classprobe::{ArgType, ClassSpec};
use crate::items::uprobe::{ProbeSpec, UprobeError};

/// A parsed `--item-event` (or one side of `--item-span`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    pub probe: ProbeSpec,
    /// The argument to fetch (the probe, its position and type), as for
    /// `--item-class-from`; `None`: no argument.
    pub arg: Option<ClassSpec>,
    /// The event's name: the USDT probe's or function's name, a span's without
    /// `__start`/`__done`.
    pub name: String,
    pub kind: ItemEventKind,
}

fn bad(s: &str, reason: &str) -> UprobeError {
    UprobeError::BadSpec {
        spec: s.to_string(),
        reason: reason.to_string(),
    }
}

impl EventSpec {
    /// Parses `PROBE[:argN[:string|u64|s64]]` where PROBE is `usdt:BIN:PROVIDER:NAME`,
    /// `BIN:FUNCTION` or `BIN:FUNCTION%return`. `argN` counts from 0 for a USDT probe and
    /// from 1 for a function (`arg1` = the first argument register), as in
    /// `--item-class-from`. Without a type the argument is read as an unsigned integer.
    pub fn parse(s: &str) -> Result<EventSpec, UprobeError> {
        let (rest, ty) = match s.rsplit_once(':') {
            Some((r, "string")) => (r, Some(ArgType::String)),
            Some((r, "u64")) => (r, Some(ArgType::U64)),
            Some((r, "s64")) => (r, Some(ArgType::S64)),
            _ => (s, None),
        };
        let has_arg = rest.rsplit_once(':').is_some_and(|(_, a)| {
            a.strip_prefix("arg")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        });
        let (probe, arg) = if has_arg {
            let ty = match ty.unwrap_or(ArgType::U64) {
                ArgType::String => "string",
                ArgType::U64 => "u64",
                ArgType::S64 => "s64",
            };
            let cs = ClassSpec::parse(&format!("{rest}:{ty}"))?;
            (cs.probe.clone(), Some(cs))
        } else if ty.is_some() {
            return Err(bad(s, "a type needs an argument: PROBE:argN:TYPE"));
        } else {
            (ProbeSpec::parse(rest)?, None)
        };
        let full = if probe.ret {
            format!("{}.return", probe.symbol)
        } else {
            probe.symbol.clone()
        };
        let (name, kind) = if let Some(n) = full.strip_suffix("__start").filter(|n| !n.is_empty()) {
            (n.to_string(), ItemEventKind::SpanStart)
        } else if let Some(n) = full.strip_suffix("__done").filter(|n| !n.is_empty()) {
            (n.to_string(), ItemEventKind::SpanEnd)
        } else {
            (full, ItemEventKind::Instant)
        };
        if name.len() > ItemEvent::MAX_NAME {
            return Err(bad(s, "the probe's name is too long for an event"));
        }
        Ok(EventSpec {
            probe,
            arg,
            name,
            kind,
        })
    }

    /// `--item-span START,END`: START begins and END ends a span named after START
    /// (without `__start`).
    pub fn parse_span(s: &str) -> Result<[EventSpec; 2], UprobeError> {
        let (a, b) = split_pair(s).ok_or_else(|| bad(s, "expected START,END (two probes)"))?;
        let mut start = EventSpec::parse(a)?;
        let mut end = EventSpec::parse(b)?;
        start.kind = ItemEventKind::SpanStart;
        end.kind = ItemEventKind::SpanEnd;
        end.name = start.name.clone();
        Ok([start, end])
    }
}

/// Splits `A,B` at the comma that starts a probe (`usdt:` or a path), so commas inside
/// neither side are ambiguous only when both sides have one (refused).
fn split_pair(s: &str) -> Option<(&str, &str)> {
    let mut commas = s.match_indices(',').map(|(i, _)| i);
    let i = commas.next()?;
    if commas.next().is_some() {
        return None;
    }
    let (a, b) = (&s[..i], &s[i + 1..]);
    (!a.is_empty() && !b.is_empty()).then_some((a, b))
}

/// Cuts a fetched string to [`ItemEvent::MAX_ARG_TEXT`] bytes at a character boundary
/// and replaces control characters (new lines, terminal escapes from the untrusted
/// target) with `?`, so the text prints as one harmless line.
pub fn cut_text(mut t: String) -> String {
    if t.len() > ItemEvent::MAX_ARG_TEXT {
        let mut n = ItemEvent::MAX_ARG_TEXT;
        while !t.is_char_boundary(n) {
            n -= 1;
        }
        t.truncate(n);
    }
    if t.chars().any(char::is_control) {
        t = t
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_kinds_and_arguments() {
        let e = EventSpec::parse("usdt:/pg:postgresql:lock__wait__start:arg1").unwrap();
        assert_eq!(
            (e.name.as_str(), e.kind),
            ("lock__wait", ItemEventKind::SpanStart)
        );
        let a = e.arg.unwrap();
        assert_eq!((a.usdt_arg, a.ty), (Some(1), ArgType::U64));
        let e = EventSpec::parse("usdt:/pg:postgresql:lwlock__wait__done").unwrap();
        assert_eq!(
            (e.name.as_str(), e.kind, e.arg),
            ("lwlock__wait", ItemEventKind::SpanEnd, None)
        );
        let e = EventSpec::parse("usdt:/pg:postgresql:lwlock__wait__start:arg0:string").unwrap();
        assert_eq!(e.arg.unwrap().ty, ArgType::String);
        let e = EventSpec::parse("/bin/x:flush").unwrap();
        assert_eq!((e.name.as_str(), e.kind), ("flush", ItemEventKind::Instant));
        let e = EventSpec::parse("/bin/x:flush%return").unwrap();
        assert_eq!(e.name, "flush.return");
        let e = EventSpec::parse("/bin/x:write:arg2:s64").unwrap();
        assert_eq!(e.arg.unwrap().reg, "si");
        assert!(
            EventSpec::parse("/bin/x:write:s64").is_err(),
            "a type without an argument"
        );
        assert!(EventSpec::parse("usdt:/pg:postgresql").is_err());
        let [s, d] = EventSpec::parse_span("/bin/x:lock_acquire,/bin/x:lock_release").unwrap();
        assert_eq!(
            (s.kind, d.kind),
            (ItemEventKind::SpanStart, ItemEventKind::SpanEnd)
        );
        assert_eq!(
            (s.name.as_str(), d.name.as_str()),
            ("lock_acquire", "lock_acquire")
        );
        assert!(EventSpec::parse_span("/bin/x:a").is_err());
        assert!(EventSpec::parse_span("/bin/x:a,/bin/y:b,/bin/z:c").is_err());
    }

    #[test]
    fn text_is_cut_at_a_character_boundary() {
        let t = cut_text("é".repeat(200));
        assert!(t.len() <= ItemEvent::MAX_ARG_TEXT && t.chars().all(|c| c == 'é'));
        assert_eq!(cut_text("short".into()), "short");
        assert_eq!(cut_text("a\nb\x1b[2Jc".into()), "a?b?[2Jc");
    }
}
