//! Opening a perf.data file: recognising it, sanity-checking the header before
//! `linux-perf-data` sees it, and a byte-counting reader for progress reports.
//!
//! The parsing itself is done by `linux-perf-data`. The checks here only make sure that
//! every size and offset it will trust lies inside the file, so a damaged header becomes a
//! clear [`ImportError`] instead of a huge allocation or a panic. They also recognise a
//! recording that was never finished (data size 0 in the header, or a file cut off inside
//! its data section); such a file can be imported up to its last complete record by
//! presenting the parser a corrected copy of the header.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::ImportError;

/// Size of the perf.data file header (`struct perf_file_header`).
const FILE_HEADER_SIZE: u64 = 104;
/// Size of the pipe-mode header (`struct perf_pipe_file_header`).
const PIPE_HEADER_SIZE: u64 = 16;
/// Smallest `perf_event_attr` (PERF_ATTR_SIZE_VER0).
const ATTR_SIZE_VER0: u64 = 64;
/// No attr layout comes close to this; anything larger is damage.
const ATTR_SIZE_MAX: u64 = 4096;
/// The sizes of `perf_event_attr` versions 0..=7 (PERF_ATTR_SIZE_VER*). `linux-perf-data`
/// reads whole versions: an attr whose own size lies between two of them is read short,
/// and everything after it in HEADER_EVENT_DESC is misframed (found by fuzzing: a
/// 644-byte file made it allocate 18 GB for an id list).
const ATTR_VERSION_SIZES: [u32; 8] = [64, 72, 80, 96, 104, 112, 120, 128];

/// Whether `linux-perf-data` consumes exactly `own` bytes for an attr of that size.
fn attr_size_is_a_version(own: u32) -> bool {
    own > 128 || ATTR_VERSION_SIZES.contains(&own)
}

const FEAT_CMDLINE: u32 = 11;
const FEAT_EVENT_DESC: u32 = 12;
const FEAT_PMU_MAPPINGS: u32 = 16;

const PERF_RECORD_HEADER_ATTR: u32 = 64;
const PERF_RECORD_HEADER_FEATURE: u32 = 80;

/// A corrected view of a perf.data file: a replacement header, the real bytes up to
/// `tail_at`, then `tail` (a feature table and feature sections) instead of the rest.
pub(crate) struct Overlay {
    header: Box<[u8; FILE_HEADER_SIZE as usize]>,
    tail_at: u64,
    tail: Vec<u8>,
}

/// What [`prepare`] found out about a file.
pub(crate) struct Prepared {
    pub pipe: bool,
    pub file_len: u64,
    /// Where the records are: `[start, end)` of the (corrected) file. Pipe mode: from
    /// the pipe header to the end of the file.
    pub records: (u64, u64),
    pub big_endian: bool,
    /// A corrected view of the file to show the parser instead of the real one.
    pub overlay: Option<Overlay>,
    pub warnings: Vec<String>,
}

/// Endian-aware reads from a byte slice; `None` when out of bounds.
#[derive(Clone, Copy)]
struct Bytes<'a> {
    data: &'a [u8],
    be: bool,
}

impl<'a> Bytes<'a> {
    fn u32(&self, off: u64) -> Option<u32> {
        let off = usize::try_from(off).ok()?;
        let b: [u8; 4] = self.data.get(off..off.checked_add(4)?)?.try_into().ok()?;
        Some(if self.be { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) })
    }
    fn u64(&self, off: u64) -> Option<u64> {
        let off = usize::try_from(off).ok()?;
        let b: [u8; 8] = self.data.get(off..off.checked_add(8)?)?.try_into().ok()?;
        Some(if self.be { u64::from_be_bytes(b) } else { u64::from_le_bytes(b) })
    }
    fn len(&self) -> u64 {
        self.data.len() as u64
    }
}

fn io_err(path: &Path, e: io::Error) -> ImportError {
    ImportError::Io { path: path.to_path_buf(), source: e }
}

fn corrupt(path: &Path, detail: impl Into<String>) -> ImportError {
    ImportError::Corrupt { path: path.to_path_buf(), detail: detail.into() }
}

fn read_at(file: &mut File, path: &Path, off: u64, len: u64) -> Result<Vec<u8>, ImportError> {
    let len = usize::try_from(len).map_err(|_| corrupt(path, "section too large"))?;
    let mut buf = vec![0; len];
    file.seek(SeekFrom::Start(off)).map_err(|e| io_err(path, e))?;
    file.read_exact(&mut buf).map_err(|e| io_err(path, e))?;
    Ok(buf)
}

/// Describe the first bytes of a file that is not a perf.data file.
fn describe_magic(head: &[u8]) -> String {
    let shown: String = head
        .iter()
        .take(8)
        .map(|&b| if b.is_ascii_graphic() || b == b' ' { (b as char).to_string() } else { format!("\\x{b:02x}") })
        .collect();
    format!("\"{shown}\"")
}

/// Recognise the file and check its header. `recover` allows importing an unfinished
/// recording up to its last complete record.
pub(crate) fn prepare(path: &Path, file: &mut File, recover: bool) -> Result<Prepared, ImportError> {
    let file_len = file.metadata().map_err(|e| io_err(path, e))?.len();
    let mut head = [0u8; FILE_HEADER_SIZE as usize];
    let have = {
        let mut n = 0;
        while n < head.len() {
            match file.read(&mut head[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(path, e)),
            }
        }
        n
    };
    if have == 0 {
        return Err(ImportError::NotPerfData { path: path.to_path_buf(), found: "an empty file".into() });
    }
    let be = match &head[..have.min(8)] {
        b"PERFILE2" => false,
        b"2ELIFREP" => true,
        b"PERFFILE" => {
            return Err(ImportError::Unsupported {
                path: path.to_path_buf(),
                detail: "perf.data version 1 (magic \"PERFFILE\", perf before 2.6.36)".into(),
            })
        }
        other if other.len() < 8 => {
            return Err(ImportError::NotPerfData {
                path: path.to_path_buf(),
                found: format!("only {have} bytes: {}", describe_magic(other)),
            })
        }
        other => return Err(ImportError::NotPerfData { path: path.to_path_buf(), found: format!("magic {}", describe_magic(other)) }),
    };
    if have < 16 {
        return Err(ImportError::Truncated { path: path.to_path_buf(), detail: "the file ends inside its header".into() });
    }
    let hb = Bytes { data: &head[..have], be };
    let header_size = hb.u64(8).unwrap_or(0);
    let mut prepared =
        Prepared { pipe: false, file_len, records: (PIPE_HEADER_SIZE, file_len), big_endian: be, overlay: None, warnings: Vec::new() };
    if header_size == PIPE_HEADER_SIZE {
        prepared.pipe = true;
        check_pipe_prefix(path, file, be, file_len)?;
        return Ok(prepared);
    }
    if !(FILE_HEADER_SIZE..=1 << 20).contains(&header_size) {
        return Err(corrupt(path, format!("implausible header size {header_size}")));
    }
    if (have as u64) < FILE_HEADER_SIZE || header_size > file_len {
        return Err(ImportError::Truncated { path: path.to_path_buf(), detail: "the file ends inside its header".into() });
    }
    check_file_header(path, file, hb, file_len, recover, &mut prepared)?;
    Ok(prepared)
}

fn section(hb: Bytes, at: u64) -> (u64, u64) {
    (hb.u64(at).unwrap_or(0), hb.u64(at + 8).unwrap_or(0))
}

fn within(off: u64, size: u64, len: u64) -> bool {
    off.checked_add(size).is_some_and(|end| end <= len)
}

fn check_file_header(
    path: &Path,
    file: &mut File,
    hb: Bytes,
    file_len: u64,
    recover: bool,
    prepared: &mut Prepared,
) -> Result<(), ImportError> {
    let attr_size = hb.u64(16).unwrap_or(0);
    let (attrs_off, attrs_size) = section(hb, 24);
    let (data_off, data_size) = section(hb, 40);
    let features: [u64; 4] = [72, 80, 88, 96].map(|o| hb.u64(o).unwrap_or(0));

    if !(ATTR_SIZE_VER0..=ATTR_SIZE_MAX).contains(&attr_size) {
        return Err(corrupt(path, format!("implausible perf_event_attr size {attr_size}")));
    }
    if !within(attrs_off, attrs_size, file_len) {
        return Err(ImportError::Truncated {
            path: path.to_path_buf(),
            detail: "the event attribute section lies beyond the end of the file".into(),
        });
    }
    if data_off < FILE_HEADER_SIZE || data_off > file_len {
        return Err(corrupt(path, format!("implausible data section offset {data_off}")));
    }

    let unfinished = data_size == 0 && file_len > data_off;
    let cut_off = !within(data_off, data_size, file_len);
    if unfinished || cut_off {
        let why = if unfinished {
            "the header's data size is 0: the recording was never finished (was `perf record` killed?)".to_string()
        } else {
            format!(
                "the file is cut off: its data section should end at byte {} but the file has {file_len} bytes",
                data_off.saturating_add(data_size)
            )
        };
        if !recover {
            return Err(ImportError::Truncated { path: path.to_path_buf(), detail: why });
        }
        // The feature sections (written last) are gone; keep the complete records and
        // describe the events from the attribute section.
        let usable = complete_records_len(path, file, hb.be, data_off, file_len)?;
        prepared.records = (data_off, data_off + usable);
        let desc = synth_event_desc(path, file, hb.be, attrs_off, attrs_size, attr_size, file_len)?;
        prepared.overlay = Some(overlay(hb, data_off + usable, vec![(FEAT_EVENT_DESC, desc)]));
        prepared.warnings.push(format!(
            "{why}; imported the {usable} bytes of complete records that are there (header features such as build-ids and event names are missing)"
        ));
        return Ok(());
    }

    prepared.records = (data_off, data_off + data_size);
    // Feature section table: one (offset, size) pair per set bit, right after the data.
    let n_features: u64 = features.iter().map(|w| u64::from(w.count_ones())).sum();
    let table_off = data_off + data_size;
    if !within(table_off, n_features * 16, file_len) {
        return Err(ImportError::Truncated {
            path: path.to_path_buf(),
            detail: "the feature section table lies beyond the end of the file".into(),
        });
    }
    let table = read_at(file, path, table_off, n_features * 16)?;
    let tb = Bytes { data: &table, be: hb.be };
    let mut idx = 0u64;
    let mut sections = Vec::new();
    for bit in 0..256u32 {
        if features[(bit / 64) as usize] & (1u64 << (bit % 64)) == 0 {
            continue;
        }
        let (off, size) = (tb.u64(idx * 16).unwrap_or(0), tb.u64(idx * 16 + 8).unwrap_or(0));
        idx += 1;
        if !within(off, size, file_len) {
            return Err(corrupt(path, format!("header feature {bit} lies beyond the end of the file")));
        }
        if matches!(bit, FEAT_CMDLINE | FEAT_EVENT_DESC | FEAT_PMU_MAPPINGS) {
            let data = read_at(file, path, off, size)?;
            check_feature(bit, Bytes { data: &data, be: hb.be }).map_err(|d| corrupt(path, format!("header feature {bit}: {d}")))?;
        }
        sections.push((bit, off, size));
    }

    if !sections.iter().any(|&(bit, _, _)| bit == FEAT_EVENT_DESC) {
        // Old perf (before HEADER_EVENT_DESC): the parser would take the event ids from
        // nowhere and misread the old event-type section as attributes. Describe the
        // events to it from the attribute section, with their id lists, instead.
        let mut moved = Vec::new();
        for &(bit, off, size) in &sections {
            moved.push((bit, read_at(file, path, off, size)?));
        }
        moved.push((FEAT_EVENT_DESC, synth_event_desc(path, file, hb.be, attrs_off, attrs_size, attr_size, file_len)?));
        moved.sort_by_key(|&(bit, _)| bit);
        prepared.overlay = Some(overlay(hb, table_off, moved));
    }
    Ok(())
}

/// A HEADER_EVENT_DESC section built from the attribute section: each entry of that is a
/// perf_event_attr followed by the (offset, size) of its id list. Names are left empty.
fn synth_event_desc(
    path: &Path,
    file: &mut File,
    be: bool,
    attrs_off: u64,
    attrs_size: u64,
    attr_size: u64,
    file_len: u64,
) -> Result<Vec<u8>, ImportError> {
    if attr_size < ATTR_SIZE_VER0 + 16 {
        return Err(corrupt(path, format!("implausible perf_file_attr size {attr_size}")));
    }
    let attrs = read_at(file, path, attrs_off, attrs_size)?;
    let ab = Bytes { data: &attrs, be };
    let n = attrs_size / attr_size;
    let u32b = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
    let mut out = Vec::new();
    out.extend_from_slice(&u32b(n as u32));
    out.extend_from_slice(&u32b((attr_size - 16) as u32));
    for i in 0..n {
        let at = (i * attr_size) as usize;
        let copy_at = out.len();
        out.extend_from_slice(&attrs[at..at + (attr_size - 16) as usize]);
        // An attr size between two versions (damage): say the largest version it holds,
        // so the parser reads whole fields and stays framed.
        let own = ab.u32(at as u64 + 4).unwrap_or(0);
        if !attr_size_is_a_version(own) {
            if let Some(&v) = ATTR_VERSION_SIZES.iter().rev().find(|&&v| v <= own) {
                out[copy_at + 4..copy_at + 8].copy_from_slice(&u32b(v));
            }
        }
        let ids_at = i * attr_size + attr_size - 16;
        let (ids_off, ids_size) = (ab.u64(ids_at).unwrap_or(0), ab.u64(ids_at + 8).unwrap_or(0));
        let ids = if ids_size % 8 == 0 && ids_size <= 8 << 20 && within(ids_off, ids_size, file_len) {
            read_at(file, path, ids_off, ids_size)?
        } else {
            Vec::new()
        };
        out.extend_from_slice(&u32b((ids.len() / 8) as u32));
        out.extend_from_slice(&u32b(0)); // empty name
        out.extend_from_slice(&ids);
    }
    Ok(out)
}

/// A view of the file with a corrected header whose data section ends at `data_end`,
/// followed by a new feature table and the given feature sections (by bit).
fn overlay(hb: Bytes, data_end: u64, sections: Vec<(u32, Vec<u8>)>) -> Overlay {
    let put = |p: &mut [u8], at: usize, v: u64| {
        let b = if hb.be { v.to_be_bytes() } else { v.to_le_bytes() };
        p[at..at + 8].copy_from_slice(&b);
    };
    let mut header = Box::new([0u8; FILE_HEADER_SIZE as usize]);
    header.copy_from_slice(&hb.data[..FILE_HEADER_SIZE as usize]);
    let data_off = hb.u64(40).unwrap_or(0);
    put(&mut header[..], 48, data_end - data_off);
    put(&mut header[..], 56, 0); // no event-type section
    put(&mut header[..], 64, 0);
    let mut bits = [0u64; 4];
    for &(bit, _) in &sections {
        bits[(bit / 64) as usize] |= 1 << (bit % 64);
    }
    for (i, w) in bits.iter().enumerate() {
        put(&mut header[..], 72 + 8 * i, *w);
    }
    let mut tail = vec![0u8; sections.len() * 16];
    let mut off = data_end + tail.len() as u64;
    for (i, (_, data)) in sections.iter().enumerate() {
        put(&mut tail, i * 16, off);
        put(&mut tail, i * 16 + 8, data.len() as u64);
        off += data.len() as u64;
    }
    for (_, data) in sections {
        tail.extend_from_slice(&data);
    }
    Overlay { header, tail_at: data_end, tail }
}

/// What is wrong in a header feature ([`check_feature`]): the detail of an
/// `ImportError::Corrupt`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct FeatureDamage(std::borrow::Cow<'static, str>);

impl From<&'static str> for FeatureDamage {
    fn from(s: &'static str) -> Self {
        FeatureDamage(s.into())
    }
}

impl From<String> for FeatureDamage {
    fn from(s: String) -> Self {
        FeatureDamage(s.into())
    }
}

/// Walk a perf header string (`u32 len; char s[len]`), returning the offset after it.
fn skip_string(b: Bytes, at: u64) -> Result<u64, FeatureDamage> {
    let len = b.u32(at).ok_or("string length past the end")?;
    let end = at + 4 + u64::from(len);
    if end > b.len() {
        return Err(format!("string of {len} bytes does not fit").into());
    }
    Ok(end)
}

/// Check the counts of the header features the parser allocates from.
fn check_feature(bit: u32, b: Bytes) -> Result<(), FeatureDamage> {
    match bit {
        FEAT_CMDLINE => {
            let n = b.u32(0).ok_or("too short")?;
            let mut at = 4;
            for _ in 0..n {
                at = skip_string(b, at)?;
            }
        }
        FEAT_PMU_MAPPINGS => {
            let n = b.u32(0).ok_or("too short")?;
            let mut at = 4;
            for _ in 0..n {
                b.u32(at).ok_or("entry past the end")?;
                at = skip_string(b, at + 4)?;
            }
        }
        FEAT_EVENT_DESC => {
            let n = b.u32(0).ok_or("too short")?;
            let attr_size = u64::from(b.u32(4).ok_or("too short")?);
            if n > 0 && !(ATTR_SIZE_VER0..=ATTR_SIZE_MAX).contains(&attr_size) {
                return Err(format!("implausible attr size {attr_size}").into());
            }
            let mut at = 8u64;
            for _ in 0..n {
                let own32 = b.u32(at + 4).ok_or("attr past the end")?;
                let own = u64::from(own32);
                if own > attr_size || at + attr_size > b.len() {
                    return Err("attr does not fit".into());
                }
                if !attr_size_is_a_version(own32) {
                    return Err(format!("perf_event_attr size {own} is not the size of any attr version").into());
                }
                at += attr_size;
                let nr_ids = u64::from(b.u32(at).ok_or("id count past the end")?);
                at = skip_string(b, at + 4)?;
                at += nr_ids * 8;
                if at > b.len() {
                    return Err(format!("{nr_ids} ids do not fit").into());
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// For an unfinished recording: the length of the run of complete records from
/// `data_off`, stopping at the end of the file or at the first impossible record size.
fn complete_records_len(path: &Path, file: &mut File, be: bool, data_off: u64, file_len: u64) -> Result<u64, ImportError> {
    let mut r = BufReader::with_capacity(1 << 16, &mut *file);
    r.seek(SeekFrom::Start(data_off)).map_err(|e| io_err(path, e))?;
    let mut pos = data_off;
    let mut hdr = [0u8; 8];
    loop {
        if pos + 8 > file_len || r.read_exact(&mut hdr).is_err() {
            break;
        }
        let size = if be { u16::from_be_bytes([hdr[6], hdr[7]]) } else { u16::from_le_bytes([hdr[6], hdr[7]]) };
        if size < 8 || pos + u64::from(size) > file_len {
            break;
        }
        r.seek_relative(i64::from(size) - 8).map_err(|e| io_err(path, e))?;
        pos += u64::from(size);
    }
    Ok(pos - data_off)
}

/// Pipe mode: check the leading HEADER_ATTR / HEADER_FEATURE records that the parser
/// reads up front.
fn check_pipe_prefix(path: &Path, file: &mut File, be: bool, file_len: u64) -> Result<(), ImportError> {
    let mut r = BufReader::new(&mut *file);
    r.seek(SeekFrom::Start(PIPE_HEADER_SIZE)).map_err(|e| io_err(path, e))?;
    let mut pos = PIPE_HEADER_SIZE;
    let mut hdr = [0u8; 8];
    while pos + 8 <= file_len {
        r.read_exact(&mut hdr).map_err(|e| io_err(path, e))?;
        let hb = Bytes { data: &hdr, be };
        let ty = hb.u32(0).unwrap_or(0);
        let size = u64::from(if be { u16::from_be_bytes([hdr[6], hdr[7]]) } else { u16::from_le_bytes([hdr[6], hdr[7]]) });
        if ty != PERF_RECORD_HEADER_ATTR && ty != PERF_RECORD_HEADER_FEATURE {
            break;
        }
        if size < 8 {
            return Err(corrupt(path, format!("record of size {size} at byte {pos} (smaller than its 8-byte header)")));
        }
        let mut body = vec![0u8; (size - 8) as usize];
        if r.read_exact(&mut body).is_err() {
            return Err(ImportError::Truncated {
                path: path.to_path_buf(),
                detail: format!("the file ends inside the record at byte {pos}"),
            });
        }
        if ty == PERF_RECORD_HEADER_FEATURE {
            let bb = Bytes { data: &body, be };
            let bit = bb.u64(0).unwrap_or(u64::MAX);
            if let Ok(bit) = u32::try_from(bit) {
                check_feature(bit, Bytes { data: &body[8.min(body.len())..], be })
                    .map_err(|d| corrupt(path, format!("header feature {bit}: {d}")))?;
            }
        }
        pos += size;
    }
    Ok(())
}

/// PERF_RECORD_AUXTRACE: its body starts with the size of the AUX data that follows the
/// record (outside the record's own 16-bit size).
const PERF_RECORD_AUXTRACE: u32 = 71;

/// Walks the record framing of the data section alongside the parser and bounds every
/// size the parser would allocate from that is not already bounded by the 16-bit record
/// size: today the AUX data size of PERF_RECORD_AUXTRACE, which `linux-perf-data` 0.13
/// allocates as declared (a damaged 24 KB file declaring 94 TB aborted the process). A
/// declared size larger than what remains of the data section is rewritten, in the bytes
/// handed to the parser, to what remains; the parser then reads those bytes, skips the
/// record, and reaches the end of the data. One warning says so.
struct FramingGuard {
    be: bool,
    /// Start of the next record not yet examined.
    next: u64,
    start: u64,
    end: u64,
    /// (file position, replacement bytes) of the AUX size field that was clamped.
    patch: Option<(u64, [u8; 8])>,
    warnings: Arc<Mutex<Vec<String>>>,
}

/// Warnings found while the parser reads (shared with [`SourceReader`]).
pub(crate) type StreamWarnings = Arc<Mutex<Vec<String>>>;

/// The reader handed to `linux-perf-data`: buffered, optionally showing an [`Overlay`],
/// bounding AUX sizes ([`FramingGuard`]), and publishing its position for progress
/// reports.
pub(crate) struct SourceReader {
    inner: BufReader<File>,
    pos: u64,
    overlay: Option<Overlay>,
    position: Arc<AtomicU64>,
    guard: FramingGuard,
}

impl SourceReader {
    pub fn new(
        mut file: File,
        overlay: Option<Overlay>,
        records: (u64, u64),
        big_endian: bool,
    ) -> io::Result<(Self, Arc<AtomicU64>, StreamWarnings)> {
        file.seek(SeekFrom::Start(0))?;
        let position = Arc::new(AtomicU64::new(0));
        let warnings: StreamWarnings = Arc::default();
        let guard =
            FramingGuard { be: big_endian, next: records.0, start: records.0, end: records.1, patch: None, warnings: warnings.clone() };
        let r = SourceReader { inner: BufReader::with_capacity(1 << 18, file), pos: 0, overlay, position: position.clone(), guard };
        Ok((r, position, warnings))
    }

    /// `len` bytes of the real file at `at`: from `buf` (holding the bytes at `p0`) when
    /// there, else read directly (positional, so the stream position is untouched).
    fn fetch(&self, at: u64, len: usize, p0: u64, buf: &[u8]) -> Option<[u8; 8]> {
        let mut out = [0u8; 8];
        let out = &mut out[..len];
        let in_buf = at.checked_sub(p0).and_then(|o| usize::try_from(o).ok()).and_then(|o| buf.get(o..o.checked_add(len)?));
        match in_buf {
            Some(b) => out.copy_from_slice(b),
            None => self.inner.get_ref().read_exact_at(out, at).ok()?,
        }
        let mut r = [0u8; 8];
        r[..len].copy_from_slice(out);
        Some(r)
    }

    /// Examine the record headers that `buf` (the bytes at `p0` just read) reaches, then
    /// apply the patch, if any, to `buf`.
    fn guard(&mut self, p0: u64, buf: &mut [u8]) {
        let end_read = p0.saturating_add(buf.len() as u64);
        let g = &self.guard;
        // Only reads that touch the data section walk it (the parser reads the header and
        // feature sections first, with seeks).
        if end_read > g.start && p0 < g.end {
            loop {
                let (next, end, be) = (self.guard.next, self.guard.end, self.guard.be);
                if next >= end_read || next >= end || next.saturating_add(8) > end {
                    break;
                }
                let Some(h) = self.fetch(next, 8, p0, buf) else { break };
                let ty = if be { u32::from_be_bytes([h[0], h[1], h[2], h[3]]) } else { u32::from_le_bytes([h[0], h[1], h[2], h[3]]) };
                let size = u64::from(if be { u16::from_be_bytes([h[6], h[7]]) } else { u16::from_le_bytes([h[6], h[7]]) });
                if size < 8 {
                    // The parser reports this record; nothing after it is framed.
                    self.guard.next = u64::MAX;
                    break;
                }
                let rec_end = next + size;
                if ty != PERF_RECORD_AUXTRACE || size < 16 {
                    self.guard.next = rec_end;
                    continue;
                }
                let Some(a) = self.fetch(next + 8, 8, p0, buf) else { break };
                let aux = if be { u64::from_be_bytes(a) } else { u64::from_le_bytes(a) };
                let remaining = end.saturating_sub(rec_end);
                if aux <= remaining {
                    self.guard.next = rec_end + aux;
                    continue;
                }
                let bytes = if be { remaining.to_be_bytes() } else { remaining.to_le_bytes() };
                self.guard.patch = Some((next + 8, bytes));
                self.guard.next = end;
                if let Ok(mut w) = self.guard.warnings.lock() {
                    w.push(format!(
                        "damaged AUXTRACE record at byte {next}: it declares {aux} bytes of AUX data but only {remaining} bytes \
                         of the data section remain; read those as its data and stopped there (the records after it, if any, \
                         are lost)"
                    ));
                }
            }
        }
        if let Some((at, bytes)) = self.guard.patch {
            for (i, b) in bytes.iter().enumerate() {
                let q = at + i as u64;
                if q >= p0 && q < end_read {
                    buf[(q - p0) as usize] = *b;
                }
            }
        }
    }

    fn advance(&mut self, n: usize) {
        self.pos += n as u64;
        self.position.store(self.pos, Ordering::Relaxed);
    }
}

impl Read for SourceReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut limit = buf.len();
        if let Some(ov) = &self.overlay {
            let synthetic = if self.pos < FILE_HEADER_SIZE {
                Some(&ov.header[self.pos as usize..])
            } else if self.pos >= ov.tail_at {
                let start = usize::try_from(self.pos - ov.tail_at).unwrap_or(usize::MAX);
                Some(ov.tail.get(start..).unwrap_or(&[]))
            } else {
                limit = limit.min(usize::try_from(ov.tail_at - self.pos).unwrap_or(usize::MAX));
                None
            };
            if let Some(src) = synthetic {
                let n = buf.len().min(src.len());
                buf[..n].copy_from_slice(&src[..n]);
                self.advance(n);
                self.inner.seek(SeekFrom::Start(self.pos))?;
                return Ok(n);
            }
        }
        let p0 = self.pos;
        let n = self.inner.read(&mut buf[..limit])?;
        self.guard(p0, &mut buf[..n]);
        self.advance(n);
        Ok(n)
    }
}

impl Seek for SourceReader {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(p) => p,
            SeekFrom::Current(d) => self
                .pos
                .checked_add_signed(d)
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start of the file"))?,
            SeekFrom::End(d) => {
                let end = match &self.overlay {
                    Some(ov) => ov.tail_at + ov.tail.len() as u64,
                    None => self.inner.get_ref().metadata()?.len(),
                };
                end.checked_add_signed(d).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start of the file"))?
            }
        };
        // BufReader keeps its own position; move it relative to ours to keep its buffer.
        let delta = target as i128 - self.pos as i128;
        match i64::try_from(delta) {
            Ok(d) => self.inner.seek_relative(d)?,
            Err(_) => {
                self.inner.seek(SeekFrom::Start(target))?;
            }
        }
        self.pos = target;
        self.position.store(target, Ordering::Relaxed);
        Ok(target)
    }
}
