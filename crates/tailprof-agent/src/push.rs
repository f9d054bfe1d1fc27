//! `--push URL`: each window as a gzipped pprof profile to a Pyroscope-compatible
//! ingest endpoint: `POST URL/ingest?name=tailprof.cpu{host=H}&from=S&until=S&format=pprof`
//! with the profile in the multipart/form-data field `profile` (what Pyroscope's
//! `/ingest` and Grafana Alloy's pyroscope receiver take). Plain HTTP/1.1 over a TCP
//! socket, no dependency; a push that fails is counted by the writer, never retried,
//! never fatal. Frames are named from the store's symbol tables; a binary whose table
//! is still being written shows as `[binary+0xOFFSET]` in that push.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use std::collections::HashMap;

use tailprof_analyze::store_query::{group_stacks, StackExport};
use tailprof_store::schema::KERNEL_BUILD_ID;
use tailprof_store::Store;

use crate::writer::WindowBatch;

/// Why a window could not be pushed (to a Pyroscope/Parca endpoint or an OTLP receiver).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PushError {
    /// The URL is not one we can send to (not `http://`, no host).
    #[error("{0}")]
    Url(&'static str),
    /// The window could not be encoded.
    #[error("{0}")]
    Encode(String),
    /// Resolving, connecting, sending or receiving failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The exchange did not complete in time.
    #[error("no complete exchange within {0} s")]
    Timeout(f64),
    /// The receiver broke the protocol (closed early, a head too long, no address).
    #[error("{0}")]
    Protocol(&'static str),
    /// The receiver answered with an error status, or rejected profiles.
    #[error("{0}")]
    Rejected(String),
}

/// Splits `http://host:port/path` into (host:port, path without trailing slash).
pub fn parse_url(url: &str) -> Result<(String, String), PushError> {
    let rest = url.strip_prefix("http://").ok_or(PushError::Url("only http:// URLs are supported"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if hostport.is_empty() {
        return Err(PushError::Url("no host in the URL"));
    }
    let hostport = if hostport.contains(':') { hostport.to_string() } else { format!("{hostport}:80") };
    Ok((hostport, path.to_string()))
}

fn pct_encode(s: &str) -> String {
    s.bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b"-._~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

/// The window's stacks named as `tailprof_analyze::store_query::stacks_of_rows` names
/// them (root first, the process name on top; `[binary+0xOFFSET]` when the binary's
/// table is not written yet), from the writer thread's table cache.
fn export_of(names: &mut crate::names::NameCache, w: &WindowBatch) -> StackExport {
    let mut paths: HashMap<&str, &str> = HashMap::new();
    for r in &w.rows {
        if let Some(f) = r.frames.first() {
            paths.entry(f.build_id.as_str()).or_insert(r.binary.as_str());
        }
    }
    let binary = |names: &mut crate::names::NameCache, bid: &str| -> String {
        match bid {
            KERNEL_BUILD_ID => "[kernel]".into(),
            "" => "[unknown]".into(),
            _ => paths
                .get(bid)
                .map(|p| p.to_string())
                .or_else(|| names.table(bid).map(|t| t.binary.clone()))
                .unwrap_or_else(|| bid.to_string()),
        }
    };
    let mut export = group_stacks(&w.rows, |f| {
        let bin = binary(names, &f.build_id);
        let name = match f.build_id.as_str() {
            KERNEL_BUILD_ID => "[kernel]".to_string(),
            "" => "[unknown]".to_string(),
            b => names.name(b, f.offset).unwrap_or_else(|| format!("[{}+0x{:x}]", bin.rsplit('/').next().unwrap_or(&bin), f.offset)),
        };
        (name, bin)
    });
    (export.from_us, export.to_us) = (w.start_us, w.end_us);
    export
}

/// The window as gzipped pprof, named from this thread's [`crate::names`] cache.
pub fn window_profile(store: &Store, w: &WindowBatch) -> Result<Vec<u8>, PushError> {
    let export = crate::names::with_cache(store, |names| {
        names.begin_window();
        export_of(names, w)
    });
    tailprof_present::store_view::pprof_gzip(&export).map_err(|e| PushError::Encode(e.to_string()))
}

/// Pushes one window. Errors are counted by the writer, never fatal.
pub fn push_window(url: &str, store: &Store, w: &WindowBatch) -> Result<(), PushError> {
    if w.rows.is_empty() {
        return Ok(());
    }
    let profile = window_profile(store, w)?;
    let (hostport, path) = parse_url(url)?;
    let name = format!("tailprof.cpu{{host={}}}", w.host);
    let target = format!(
        "{path}/ingest?name={}&from={}&until={}&format=pprof&spyName=tailprof",
        pct_encode(&name),
        w.start_us / 1_000_000,
        (w.end_us + 999_999) / 1_000_000
    );
    let boundary = format!("tailprof{:016x}", w.start_us);
    let mut body = Vec::with_capacity(profile.len() + 256);
    body.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes(),
    );
    body.extend_from_slice(&profile);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let (code, line, _) = http_post(&hostport, &target, &format!("multipart/form-data; boundary={boundary}"), &body, 0)?;
    if (200..300).contains(&code) {
        Ok(())
    } else {
        Err(PushError::Rejected(format!("endpoint answered {line:?}")))
    }
}

/// Largest response head read.
const MAX_RESPONSE_HEAD: usize = 16 * 1024;
/// Time allowed for one exchange after connecting: sending the request and reading the
/// whole answer.
const EXCHANGE_DEADLINE: Duration = Duration::from_secs(30);

/// A socket timeout (EAGAIN or ETIMEDOUT from SO_RCVTIMEO/SO_SNDTIMEO).
fn timed_out(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
}

/// One `POST target` over a new connection (`Connection: close`). Answers the status
/// code, the status line and the response body (at most `max_body` bytes, as far as
/// `Content-Length` says; 0: the body is not read). Connecting may take 5 s, the rest
/// at most [`EXCHANGE_DEADLINE`] in all.
pub fn http_post(
    hostport: &str,
    target: &str,
    content_type: &str,
    body: &[u8],
    max_body: usize,
) -> Result<(u32, String, Vec<u8>), PushError> {
    http_post_within(hostport, target, content_type, body, max_body, EXCHANGE_DEADLINE)
}

fn http_post_within(
    hostport: &str,
    target: &str,
    content_type: &str,
    body: &[u8],
    max_body: usize,
    limit: Duration,
) -> Result<(u32, String, Vec<u8>), PushError> {
    let head = format!(
        "POST {target} HTTP/1.1\r\nHost: {hostport}\r\nUser-Agent: tailprof/{}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    let addr = std::net::ToSocketAddrs::to_socket_addrs(hostport)?.next().ok_or(PushError::Protocol("no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    // One deadline for the whole exchange: a receiver that reads or answers a byte at a
    // time cannot hold the writer thread (and the windows queued behind it) longer.
    let deadline = std::time::Instant::now() + limit;
    let expired = || PushError::Timeout(limit.as_secs_f64());
    let left = || {
        let l = deadline.saturating_duration_since(std::time::Instant::now());
        (!l.is_zero()).then_some(l)
    };
    for part in [head.as_bytes(), body] {
        for piece in part.chunks(64 * 1024) {
            let mut piece = piece;
            while !piece.is_empty() {
                s.set_write_timeout(Some(left().ok_or_else(expired)?)).ok();
                match s.write(piece) {
                    Ok(0) => return Err(PushError::Protocol("connection closed while sending")),
                    Ok(n) => piece = &piece[n..],
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) if timed_out(&e) => return Err(expired()),
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    let read = |s: &mut TcpStream, chunk: &mut [u8]| -> Result<usize, PushError> {
        s.set_read_timeout(Some(left().ok_or_else(expired)?)).ok();
        s.read(chunk).map_err(|e| if timed_out(&e) { expired() } else { e.into() })
    };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break Some(i + 4);
        }
        if buf.len() > MAX_RESPONSE_HEAD {
            return Err(PushError::Protocol("response head too long"));
        }
        let n = read(&mut s, &mut chunk)?;
        if n == 0 {
            break None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head_text = String::from_utf8_lossy(&buf[..head_end.unwrap_or(buf.len())]).to_string();
    let line = head_text.lines().next().unwrap_or("").to_string();
    let code: u32 = line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let mut resp = Vec::new();
    if let (Some(he), true) = (head_end, max_body > 0) {
        let len = head_text
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").and_then(|v| v.trim().parse::<usize>().ok()))
            .unwrap_or(0)
            .min(max_body);
        resp.extend_from_slice(&buf[he..buf.len().min(he + len)]);
        while resp.len() < len {
            match read(&mut s, &mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => resp.extend_from_slice(&chunk[..n.min(len - resp.len())]),
            }
        }
    }
    Ok((code, line, resp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(parse_url("http://127.0.0.1:4040").unwrap(), ("127.0.0.1:4040".into(), "".into()));
        assert_eq!(parse_url("http://pyro/x/").unwrap(), ("pyro:80".into(), "/x".into()));
        assert!(parse_url("https://x").is_err());
        assert_eq!(pct_encode("a{b=c}"), "a%7Bb%3Dc%7D");
    }

    /// The push names stacks from the cache exactly as `stacks_of_rows` names them from
    /// the store.
    #[test]
    fn cached_export_equals_stacks_of_rows() {
        use tailprof_store::schema::{stack_id, SampleRow, StoreFrame, SymbolRow};
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path()).unwrap();
        store.ensure_dir(&store.symbols_dir()).unwrap();
        let t = |b: &str, s, z, n: &str| SymbolRow { build_id: b.into(), binary: "/x/app".into(), start: s, size: z, name: n.into() };
        tailprof_store::write_symbols(
            &store.symbols_file("ab").unwrap(),
            &[t("ab", 0x10, 0x10, "main"), t("ab", 0x20, 0, "work"), t("ab", 0x40, 0x8, "leaf")],
        )
        .unwrap();
        let row = |pid, comm: &str, bin: &str, fr: &[(&str, u64)], count| {
            let frames: Vec<StoreFrame> = fr.iter().map(|&(b, o)| StoreFrame { build_id: b.into(), offset: o }).collect();
            SampleRow {
                window_start_us: 0,
                window_end_us: 1,
                pid,
                comm: comm.into(),
                event: "cpu-clock".into(),
                binary: bin.into(),
                stack_id: stack_id(&frames),
                frames,
                truncated: false,
                count,
                period: count * 10,
            }
        };
        let rows = vec![
            row(1, "app", "/x/app", &[("ab", 0x44), ("ab", 0x25), ("ab", 0x12)], 5),
            row(1, "app", "/x/app", &[("ab", 0x4c), ("ab", 0x12)], 2),
            row(2, "", "/y/lib", &[("cd", 0x99), ("ab", 0x12)], 3),
            row(3, "k", "[kernel]", &[(KERNEL_BUILD_ID, 7), ("", 9)], 1),
        ];
        let w = WindowBatch {
            host: "h".into(),
            start_us: 0,
            end_us: 1,
            samples: 11,
            lost_samples: 0,
            losses: Default::default(),
            dropped_rows: 0,
            events: vec![],
            rows: rows.clone(),
            items: vec![],
            latency: vec![],
        };
        let want = tailprof_analyze::store_query::stacks_of_rows(
            &tailprof_store::StoreReader::new(store.clone()),
            &rows,
            0,
            1,
            tailprof_store::ReadStats::default(),
        );
        let got = crate::names::with_cache(&store, |c| {
            c.begin_window();
            export_of(c, &w)
        });
        let key = |e: &StackExport| e.stacks.iter().map(|s| (s.frames.clone(), s.binaries.clone(), s.count, s.period)).collect::<Vec<_>>();
        assert_eq!(key(&got), key(&want));
        assert_eq!((got.samples, got.event.as_str()), (want.samples, want.event.as_str()));
        assert!(key(&got).iter().any(|s| s.0.contains(&"leaf".to_string())));
    }

    /// A receiver that answers one byte at a time, forever, does not hold the sender
    /// past its deadline; a well-formed answer is read with its body.
    #[test]
    fn a_dripping_receiver_is_cut_off_and_answers_are_parsed() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            for (i, c) in l.incoming().take(2).enumerate() {
                let mut c = c.unwrap();
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                while !got.ends_with(b"body") {
                    let n = c.read(&mut buf).unwrap();
                    assert!(n > 0);
                    got.extend_from_slice(&buf[..n]);
                }
                if i == 0 {
                    while c.write_all(b"H").is_ok() {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                } else {
                    c.write_all(b"HTTP/1.1 202 Accepted\r\nContent-Length: 3\r\n\r\nabcdef").unwrap();
                }
            }
        });
        let e = http_post_within(&addr, "/x", "text/plain", b"body", 100, Duration::from_millis(500)).unwrap_err();
        assert!(matches!(e, PushError::Timeout(_)) && e.to_string().contains("no complete exchange"), "{e}");
        let (code, line, body) = http_post_within(&addr, "/x", "text/plain", b"body", 100, Duration::from_secs(30)).unwrap();
        assert_eq!((code, line.as_str(), body.as_slice()), (202, "HTTP/1.1 202 Accepted", &b"abc"[..]));
        server.join().unwrap();
    }
}
