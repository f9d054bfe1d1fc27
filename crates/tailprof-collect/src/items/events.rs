//! `--item-event PROBE[:argN[:TYPE][,argM[:TYPE]...]]` and `--item-span START,END` (issue 22 item 2):
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

use tailprof_format::{EventAt, ItemEvent, ItemEventKind};

use crate::items::classprobe::{ArgType, ClassSpec};
use crate::items::uprobe::{ProbeSpec, UprobeError};

/// A parsed `--item-event` (or one side of `--item-span`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    pub probe: ProbeSpec,
    /// The arguments to fetch (the probe, its position and type each), as for
    /// `--item-class-from`, in the order given; at most [`ItemEvent::MAX_ARGS`].
    pub args: Vec<ClassSpec>,
    /// The event's name: the USDT probe's or function's name, a span's without
    /// `__start`/`__done`.
    pub name: String,
    pub kind: ItemEventKind,
    /// Whether its probe is also the item-begin or item-end probe (set when the
    /// recorder resolves the sites, [`EventAt::Free`] until then).
    pub at: EventAt,
}

fn bad(s: &str, reason: &str) -> UprobeError {
    UprobeError::BadSpec { spec: s.to_string(), reason: reason.to_string() }
}

/// `argN[:TYPE]`: (N as written, its type) when `s` is one.
fn arg_item(s: &str) -> Option<(&str, Option<ArgType>)> {
    let (a, ty) = match s.split_once(':') {
        Some((a, "string")) => (a, Some(ArgType::String)),
        Some((a, "u64")) => (a, Some(ArgType::U64)),
        Some((a, "s64")) => (a, Some(ArgType::S64)),
        Some(_) => return None,
        None => (s, None),
    };
    a.strip_prefix("arg").is_some_and(|n| !n.is_empty() && n.len() <= 3 && n.bytes().all(|b| b.is_ascii_digit())).then_some((a, ty))
}

fn type_name(t: ArgType) -> &'static str {
    match t {
        ArgType::String => "string",
        ArgType::U64 => "u64",
        ArgType::S64 => "s64",
    }
}

impl EventSpec {
    /// Parses `PROBE[:argN[:TYPE][,argM[:TYPE]...]]` where PROBE is
    /// `usdt:BIN:PROVIDER:NAME`, `BIN:FUNCTION` or `BIN:FUNCTION%return` and TYPE is
    /// `string`, `u64` or `s64`. `argN` counts from 0 for a USDT probe and from 1 for a
    /// function (`arg1` = the first argument register), as in `--item-class-from`.
    /// Without a type an argument is read as an unsigned integer. At most
    /// [`ItemEvent::MAX_ARGS`] arguments, each once.
    pub fn parse(s: &str) -> Result<EventSpec, UprobeError> {
        // `PROBE:argN[:T]` first, then `,argM[:T]` items.
        let mut parts = s.split(',');
        let head = parts.next().unwrap_or("");
        let more: Vec<&str> = parts.collect();
        let (rest, ty) = match head.rsplit_once(':') {
            Some((r, "string")) => (r, Some(ArgType::String)),
            Some((r, "u64")) => (r, Some(ArgType::U64)),
            Some((r, "s64")) => (r, Some(ArgType::S64)),
            _ => (head, None),
        };
        let first = rest.rsplit_once(':').filter(|(_, a)| arg_item(a).is_some());
        let (probe, args) = match first {
            Some((probe_text, a)) => {
                let probe = ProbeSpec::parse(probe_text)?;
                let mut args = Vec::with_capacity(1 + more.len());
                let mut items = vec![(a, ty)];
                for m in &more {
                    items.push(arg_item(m).ok_or_else(|| bad(s, "after the first argument: ,argN[:string|u64|s64] items only"))?);
                }
                if items.len() > ItemEvent::MAX_ARGS {
                    return Err(bad(s, &format!("at most {} arguments per event", ItemEvent::MAX_ARGS)));
                }
                for (i, (a, _)) in items.iter().enumerate() {
                    if items[..i].iter().any(|(b, _)| b == a) {
                        return Err(bad(s, &format!("{a} is asked for twice")));
                    }
                }
                for (a, ty) in items {
                    let ty = type_name(ty.unwrap_or(ArgType::U64));
                    let cs = ClassSpec::parse(&format!("{probe_text}:{a}:{ty}"))?;
                    args.push(cs);
                }
                (probe, args)
            }
            None if ty.is_some() => return Err(bad(s, "a type needs an argument: PROBE:argN:TYPE")),
            None if !more.is_empty() => return Err(bad(s, "a comma only separates arguments: PROBE:argN,argM")),
            None => (ProbeSpec::parse(rest)?, Vec::new()),
        };
        let full = if probe.ret { format!("{}.return", probe.symbol) } else { probe.symbol.clone() };
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
        Ok(EventSpec { probe, args, name, kind, at: EventAt::Free })
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

/// Splits `A,B` at the one comma that starts a probe (not an `argN` item of A's
/// argument list); more than one such comma is ambiguous (refused).
fn split_pair(s: &str) -> Option<(&str, &str)> {
    let mut probe_commas = s.match_indices(',').map(|(i, _)| i).filter(|&i| arg_item(s[i + 1..].split(',').next().unwrap_or("")).is_none());
    let i = probe_commas.next()?;
    if probe_commas.next().is_some() {
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
        t = t.chars().map(|c| if c.is_control() { '?' } else { c }).collect();
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_kinds_and_arguments() {
        let e = EventSpec::parse("usdt:/pg:postgresql:lock__wait__start:arg1").unwrap();
        assert_eq!((e.name.as_str(), e.kind), ("lock__wait", ItemEventKind::SpanStart));
        let a = &e.args[0];
        assert_eq!((e.args.len(), a.usdt_arg, a.ty), (1, Some(1), ArgType::U64));
        let e = EventSpec::parse("usdt:/pg:postgresql:lwlock__wait__done").unwrap();
        assert_eq!((e.name.as_str(), e.kind, e.args.len()), ("lwlock__wait", ItemEventKind::SpanEnd, 0));
        let e = EventSpec::parse("usdt:/pg:postgresql:lwlock__wait__start:arg0:string").unwrap();
        assert_eq!(e.args[0].ty, ArgType::String);
        let e = EventSpec::parse("/bin/x:flush").unwrap();
        assert_eq!((e.name.as_str(), e.kind), ("flush", ItemEventKind::Instant));
        let e = EventSpec::parse("/bin/x:flush%return").unwrap();
        assert_eq!(e.name, "flush.return");
        let e = EventSpec::parse("/bin/x:write:arg2:s64").unwrap();
        assert_eq!(e.args[0].reg, "si");
        assert!(EventSpec::parse("/bin/x:write:s64").is_err(), "a type without an argument");
        assert!(EventSpec::parse("usdt:/pg:postgresql").is_err());
        let [s, d] = EventSpec::parse_span("/bin/x:lock_acquire,/bin/x:lock_release").unwrap();
        assert_eq!((s.kind, d.kind), (ItemEventKind::SpanStart, ItemEventKind::SpanEnd));
        assert_eq!((s.name.as_str(), d.name.as_str()), ("lock_acquire", "lock_acquire"));
        assert!(EventSpec::parse_span("/bin/x:a").is_err());
        assert!(EventSpec::parse_span("/bin/x:a,/bin/y:b,/bin/z:c").is_err());
    }

    /// Several arguments (issue 22 part 3): PostgreSQL's `lock__wait__start(field1..4,
    /// type, mode)` as `arg0,arg1,arg5`, types per argument, bounded, and `--item-span`
    /// still finds the comma between its two probes.
    #[test]
    fn several_arguments_per_event() {
        let e = EventSpec::parse("usdt:/pg:postgresql:lock__wait__start:arg0,arg1,arg5").unwrap();
        let got: Vec<_> = e.args.iter().map(|a| (a.usdt_arg, a.ty)).collect();
        assert_eq!(got, vec![(Some(0), ArgType::U64), (Some(1), ArgType::U64), (Some(5), ArgType::U64)]);
        assert!(e.args.iter().all(|a| a.probe == e.probe));
        let e = EventSpec::parse("usdt:/pg:postgresql:lwlock__wait__start:arg0:string,arg1:s64").unwrap();
        let got: Vec<_> = e.args.iter().map(|a| (a.usdt_arg, a.ty)).collect();
        assert_eq!(got, vec![(Some(0), ArgType::String), (Some(1), ArgType::S64)]);
        let e = EventSpec::parse("/bin/x:write:arg1,arg3:s64").unwrap();
        let regs: Vec<_> = e.args.iter().map(|a| a.reg.as_str()).collect();
        assert_eq!(regs, ["di", "dx"]);
        for wrong in [
            "usdt:/pg:p:n:arg0,arg1,arg2,arg3,arg4,arg5,arg6",
            "usdt:/pg:p:n:arg0,arg0",
            "usdt:/pg:p:n:arg0,flush",
            "usdt:/pg:p:n,arg0",
            "usdt:/pg:p:n:arg0,arg1:text",
        ] {
            assert!(EventSpec::parse(wrong).is_err(), "{wrong}");
        }
        let [s, d] = EventSpec::parse_span("/bin/x:lock:arg1,arg2,/bin/x:unlock:arg1").unwrap();
        assert_eq!((s.args.len(), d.args.len()), (2, 1));
        assert_eq!(d.name, "lock");
    }

    #[test]
    fn text_is_cut_at_a_character_boundary() {
        let t = cut_text("é".repeat(200));
        assert!(t.len() <= ItemEvent::MAX_ARG_TEXT && t.chars().all(|c| c == 'é'));
        assert_eq!(cut_text("short".into()), "short");
        assert_eq!(cut_text("a\nb\x1b[2Jc".into()), "a?b?[2Jc");
    }
}
