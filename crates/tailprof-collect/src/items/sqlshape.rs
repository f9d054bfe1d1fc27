//! The shape of an SQL statement: its text with every literal replaced by `?`, so that
//! queries that differ only in their constants fall into one item class (the grouping
//! PostgreSQL's `pg_stat_statements` makes; it works on the parse tree, we work on the
//! text because the recorder only sees the string a probed function received).
//!
//! Rules, applied in one left-to-right pass over at most [`MAX_INPUT`] bytes:
//! - string literals `'…'` (with `''` escapes), `E'…'` (with `\'` escapes), `B'…'`, `X'…'`,
//!   `N'…'`, `U&'…'` and dollar-quoted `$tag$…$tag$` become `?`;
//! - numbers (`42`, `-3.5e7`, `.5`, `0x1F`) become `?`; a leading `-` joins the number when
//!   it cannot be a binary minus (after an operator, `(`, `,`, a keyword or at the start);
//! - `IN (?, ?, …)` lists of literals collapse to `IN (?)`, so the count of constants does
//!   not split a class (what pg_stat_statements does since PostgreSQL 18);
//! - comments (`-- …` and nested `/* … */`) are dropped; tokens are re-spaced by one rule
//!   (one space between tokens, none inside parentheses, before `,` `;` `)`, around `.`, or
//!   between a function name and its `(`, none around the cast `::`), so the
//!   original white space does not matter; final semicolons are dropped (a client may send
//!   `q` or `q;`);
//!   text outside quotes is lower-cased; quoted identifiers `"…"` are kept as they are;
//!   parameters `$1` stay;
//! - the result is cut at [`MAX_SHAPE`] bytes (on a character boundary) and marked `…`.
//!
//! The input comes from an untrusted process: the function is linear in the input, never
//! panics, and its output is bounded.

/// Bytes of input looked at; the rest is ignored (and the shape marked as cut).
pub const MAX_INPUT: usize = 4096;
/// Longest shape returned, in bytes (before the `…` mark).
pub const MAX_SHAPE: usize = 160;

/// The shape of `sql`. Empty or blank input gives `"?"` (nothing to group by).
///
/// ```
/// use tailprof_collect::items::sqlshape::shape;
/// assert_eq!(shape("SELECT abalance FROM pgbench_accounts WHERE aid = 4711;"),
///            "select abalance from pgbench_accounts where aid = ?");
/// assert_eq!(shape("update t set v = v + -3 where k in (1, 2, 3) -- hot"),
///            "update t set v = v + ? where k in (?)");
/// ```
pub fn shape(sql: &str) -> String {
    let cut_input = sql.len() > MAX_INPUT;
    let mut end = sql.len().min(MAX_INPUT);
    while !sql.is_char_boundary(end) {
        end -= 1;
    }
    let b = &sql.as_bytes()[..end];
    let mut out = String::with_capacity(b.len().min(MAX_SHAPE + 8));
    let mut i = 0;
    // The previous token, for spacing and for deciding whether `-` can be a sign.
    let mut prev = Tok::Start;
    while i < b.len() && out.len() <= MAX_SHAPE * 4 {
        let c = b[i];
        // White space and comments.
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'-' && b.get(i + 1) == Some(&b'-') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0usize;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            continue;
        }
        // String literals, with their prefixes.
        let prefix = match c.to_ascii_lowercase() {
            b'e' | b'b' | b'x' | b'n' if b.get(i + 1) == Some(&b'\'') && !prev_is_word(b, i) => 1,
            b'u' if b.get(i + 1) == Some(&b'&') && b.get(i + 2) == Some(&b'\'') && !prev_is_word(b, i) => 2,
            _ => 0,
        };
        if c == b'\'' || prefix > 0 {
            let backslash = c.eq_ignore_ascii_case(&b'e');
            i = skip_quoted(b, i + prefix, b'\'', backslash);
            prev = emit(&mut out, prev, Tok::Literal, "?");
            continue;
        }
        if c == b'"' {
            let start = i;
            i = skip_quoted(b, i, b'"', false);
            prev = emit(&mut out, prev, Tok::Word, &sql[start..i]);
            continue;
        }
        // Dollar quoting ($tag$…$tag$) or a parameter ($1).
        if c == b'$' {
            if b.get(i + 1).is_some_and(u8::is_ascii_digit) {
                let start = i;
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                prev = emit(&mut out, prev, Tok::Literal, &sql[start..i]);
                continue;
            }
            let mut j = i + 1;
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                j += 1;
            }
            if j < b.len() && b[j] == b'$' {
                let tag = &b[i..=j];
                i = find(b, j + 1, tag).map_or(b.len(), |k| k + tag.len());
                prev = emit(&mut out, prev, Tok::Literal, "?");
                continue;
            }
        }
        // Numbers, with a sign where it cannot be a binary minus.
        let sign_ok = matches!(prev, Tok::Start | Tok::Op | Tok::Open | Tok::Comma | Tok::Keyword);
        let signed = (c == b'-' || c == b'+') && sign_ok && starts_number(b, i + 1);
        if signed || (starts_number(b, i) && !prev_is_word(b, i)) {
            i = skip_number(b, if signed { i + 1 } else { i });
            prev = emit(&mut out, prev, Tok::Literal, "?");
            continue;
        }
        // Words (keywords, identifiers): lower-cased.
        if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$' || b[i] >= 0x80) {
                i += 1;
            }
            let word = sql[start..i].to_lowercase();
            let tok = if is_keyword(&word) { Tok::Keyword } else { Tok::Word };
            prev = emit(&mut out, prev, tok, &word);
            continue;
        }
        // Punctuation, and runs of operator characters as one token (`<=`, `::`, `||`),
        // stopping before a comment or a signed number.
        let tok = match c {
            b'(' | b'[' => Tok::Open,
            b')' | b']' => Tok::Close,
            b',' => Tok::Comma,
            b';' => Tok::Semi,
            b'.' => Tok::Dot,
            _ => Tok::Op,
        };
        let start = i;
        i += 1;
        if tok == Tok::Op {
            while i < b.len()
                && b"+-*/<>=~!@#%^&|`?:".contains(&b[i])
                && !(b[i] == b'-' && b.get(i + 1) == Some(&b'-'))
                && !(b[i] == b'/' && b.get(i + 1) == Some(&b'*'))
                && !((b[i] == b'-' || b[i] == b'+') && starts_number(b, i + 1))
            {
                i += 1;
            }
        }
        while i < b.len() && !b[i].is_ascii() && !sql.is_char_boundary(i) {
            i += 1;
        }
        // A cast `::` binds like `.`: no space around it (`v::text`).
        let tok = if &sql[start..i] == "::" { Tok::Dot } else { tok };
        prev = emit(&mut out, prev, tok, &sql[start..i]);
    }
    // Final `;`s do not make a class (`psql -c 'q'` and `psql -f` sending `q;`).
    let kept = out.trim_end_matches([';', ' ']).len();
    out.truncate(kept);
    let mut out = collapse_in_lists(&out);
    if out.is_empty() {
        return "?".into();
    }
    if out.len() > MAX_SHAPE || cut_input {
        let mut cut = out.len().min(MAX_SHAPE);
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push('…');
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tok {
    Start,
    Word,
    Keyword,
    Literal,
    Op,
    Open,
    Close,
    Comma,
    Semi,
    Dot,
}

/// Appends `text` (a token of kind `tok`) after `prev` with the one spacing rule.
fn emit(out: &mut String, prev: Tok, tok: Tok, text: &str) -> Tok {
    let space = match (prev, tok) {
        (Tok::Start | Tok::Open | Tok::Dot, _) => false,
        (_, Tok::Close | Tok::Comma | Tok::Semi | Tok::Dot) => false,
        // A function call: `count(`, `f(`; a keyword or operator keeps its space: `in (`.
        (Tok::Word | Tok::Close, Tok::Open) => false,
        _ => true,
    };
    if space {
        out.push(' ');
    }
    out.push_str(text);
    tok
}

fn prev_is_word(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] >= 0x80)
}

fn starts_number(b: &[u8], i: usize) -> bool {
    match b.get(i) {
        Some(d) if d.is_ascii_digit() => true,
        Some(b'.') => b.get(i + 1).is_some_and(u8::is_ascii_digit),
        _ => false,
    }
}

fn skip_number(b: &[u8], mut i: usize) -> usize {
    if b.get(i) == Some(&b'0') && matches!(b.get(i + 1), Some(b'x' | b'X' | b'o' | b'O' | b'b' | b'B')) {
        i += 2;
        while i < b.len() && (b[i].is_ascii_hexdigit() || b[i] == b'_') {
            i += 1;
        }
        return i;
    }
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.' || b[i] == b'_') {
        i += 1;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            i = j;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
        }
    }
    i
}

/// Index just past the closing quote of the literal opening at `i` (or the end).
fn skip_quoted(b: &[u8], i: usize, q: u8, backslash: bool) -> usize {
    let mut j = i + 1;
    while j < b.len() {
        if backslash && b[j] == b'\\' {
            j += 2;
            continue;
        }
        if b[j] == q {
            if b.get(j + 1) == Some(&q) {
                j += 2;
                continue;
            }
            return j + 1;
        }
        j += 1;
    }
    b.len()
}

fn find(b: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    if from > b.len() {
        return None;
    }
    b[from..].windows(needle.len()).position(|w| w == needle).map(|k| from + k)
}

/// Words after which a `-` starts a negative number rather than a subtraction.
fn is_keyword(w: &str) -> bool {
    matches!(
        w,
        "select"
            | "where"
            | "and"
            | "or"
            | "not"
            | "set"
            | "values"
            | "in"
            | "between"
            | "when"
            | "then"
            | "else"
            | "return"
            | "limit"
            | "offset"
            | "by"
            | "like"
            | "is"
            | "as"
            | "on"
            | "having"
            | "from"
            | "join"
            | "exists"
            | "any"
            | "all"
            | "using"
            | "into"
            | "case"
            | "update"
            | "insert"
            | "delete"
            | "with"
            | "returning"
            | "some"
            | "array"
            | "over"
            | "filter"
            | "ilike"
    )
}

/// `in (?, ?, ?)` → `in (?)`.
fn collapse_in_lists(s: &str) -> String {
    const OPEN: &str = "in (?";
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(k) = rest.find(OPEN) {
        let (head, tail) = rest.split_at(k + OPEN.len());
        out.push_str(head);
        let mut t = tail;
        while let Some(r) = t.strip_prefix(", ?").or_else(|| t.strip_prefix(",?")) {
            t = r;
        }
        rest = t;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_become_placeholders() {
        assert_eq!(shape("SELECT * FROM t WHERE name = 'O''Brien' AND id = 17"), "select * from t where name = ? and id = ?");
        assert_eq!(shape("select E'it\\'s', X'1F', B'101', $$a 'b' c$$, $q$x$q$"), "select ?, ?, ?, ?, ?");
        assert_eq!(shape("select 1.5e-3, .5, 0x1F, 1_000"), "select ?, ?, ?, ?");
    }

    #[test]
    fn the_same_shape_whatever_the_constants_whitespace_and_case() {
        let a = shape("SELECT abalance FROM pgbench_accounts WHERE aid = 1;");
        let b = shape("select  abalance\n\tfrom pgbench_accounts where aid=  99887 ;");
        let c = shape("select abalance from pgbench_accounts where aid = 99887; -- comment");
        assert_eq!(shape(&a), a, "a shape is its own shape");
        assert_eq!(a, "select abalance from pgbench_accounts where aid = ?");
        assert_eq!(shape("select 1; select 2 ;; "), "select ?; select ?", "only final semicolons go");
        assert_eq!(c, a);
        assert_eq!(b, a);
        assert_eq!(
            shape("select count(*) from t where a<=3 and b::text||'x' = c"),
            "select count(*) from t where a <= ? and b::text || ? = c"
        );
    }

    #[test]
    fn signs_join_numbers_only_where_they_cannot_be_minus() {
        assert_eq!(shape("select a - 1, -2, (-3), x * -4"), "select a - ?, ?, (?), x * ?");
        assert_eq!(shape("update t set v = v - 5 where k = -6"), "update t set v = v - ? where k = ?");
    }

    #[test]
    fn identifiers_parameters_and_in_lists() {
        assert_eq!(
            shape("SELECT \"MixedCase\", t1.c2 FROM t1 WHERE c = $1 AND d IN (1, 2, 3)"),
            "select \"MixedCase\", t1.c2 from t1 where c = $1 and d in (?)"
        );
        assert_eq!(shape("select * from t where d in ( 'a' ,'b' )"), "select * from t where d in (?)");
        assert_eq!(shape("/* a /* nested */ comment */ select 1"), "select ?");
    }

    #[test]
    fn hostile_input_is_bounded_and_never_panics() {
        assert_eq!(shape(""), "?");
        assert_eq!(shape("   -- only a comment"), "?");
        let long = "select ".to_string() + &"a, ".repeat(10_000);
        let s = shape(&long);
        assert!(s.len() <= MAX_SHAPE + '…'.len_utf8() && s.ends_with('…'), "{}", s.len());
        // Unterminated quotes, stray bytes, multi-byte characters at every cut position.
        for q in ["'abc", "E'\\", "$tag$ never closed", "\"x", "/* open", "0x", "1e", "-", "ünïcödé = 'ß'"] {
            let _ = shape(q);
        }
        let multi = "é".repeat(MAX_INPUT);
        let _ = shape(&multi);
        let s = shape(&"ü".repeat(200));
        assert!(s.is_char_boundary(s.len()));
    }
}
