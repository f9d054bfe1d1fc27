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
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::ImportError;

/// Size of the perf.data file header (`struct perf_file_header`).
const FILE_HEADER_SIZE: u64 = 104;
/// Size of the pipe-mode header (`struct perf_pipe_file_header`).
const PIPE_HEADER_SIZE: u64 = 16;
/// Smallest `perf_event_attr` (PERF_ATTR_SIZE_VER0).
const ATTR_SIZE_VER0: u64 = 64;
/// No attr layout comes close to this; anything larger is damage.
const ATTR_SIZE_MAX: u64 = 4096;

const FEAT_CMDLINE: u32 = 11;
const FEAT_EVENT_DESC: u32 = 12;
const FEAT_PMU_MAPPINGS: u32 = 16;

const PERF_RECORD_HEADER_ATTR: u32 = 64;
const PERF_RECORD_HEADER_FEATURE: u32 = 80;

/// What [`prepare`] found out about a file.
pub(crate) struct Prepared {
    pub pipe: bool,
    pub file_len: u64,
    /// A corrected file header to show the parser instead of the real one.
    pub header_patch: Option<Box<[u8; FILE_HEADER_SIZE as usize]>>,
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
        .map(|&b| if b.is_ascii_graphic() { (b as char).to_string() } else { format!("\\x{b:02x}") })
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
        other => {
            return Err(ImportError::NotPerfData {
                path: path.to_path_buf(),
                found: format!("magic {}", describe_magic(other)),
            })
        }
    };
    if have < 16 {
        return Err(ImportError::Truncated { path: path.to_path_buf(), detail: "the file ends inside its header".into() });
    }
    let hb = Bytes { data: &head[..have], be };
    let header_size = hb.u64(8).unwrap_or(0);
    let mut prepared = Prepared { pipe: false, file_len, header_patch: None, warnings: Vec::new() };
    if header_size == PIPE_HEADER_SIZE {
        prepared.pipe = true;
        check_pipe_prefix(path, file, be, file_len)?;
        return Ok(prepared);
    }
    if header_size < FILE_HEADER_SIZE || header_size > file_len {
        return Err(corrupt(path, format!("implausible header size {header_size}")));
    }
    if (have as u64) < FILE_HEADER_SIZE {
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
    let (types_off, types_size) = section(hb, 56);
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
    if types_size != 0 && !within(types_off, types_size, file_len) {
        return Err(corrupt(path, "the event type section lies beyond the end of the file"));
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
        let usable = complete_records_len(path, file, hb.be, data_off, file_len)?;
        let mut patch = Box::new([0u8; FILE_HEADER_SIZE as usize]);
        patch.copy_from_slice(&hb.data[..FILE_HEADER_SIZE as usize]);
        let put = |p: &mut [u8], at: usize, v: u64| {
            let b = if hb.be { v.to_be_bytes() } else { v.to_le_bytes() };
            p[at..at + 8].copy_from_slice(&b);
        };
        put(&mut patch[..], 48, usable);
        for at in [72, 80, 88, 96] {
            put(&mut patch[..], at, 0); // the feature sections are gone
        }
        prepared.warnings.push(format!(
            "{why}; imported the {usable} bytes of complete records that are there (header features such as build-ids and event names are missing)"
        ));
        prepared.header_patch = Some(patch);
        return Ok(());
    }

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
    let mut has_event_desc = false;
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
            check_feature(bit, Bytes { data: &data, be: hb.be })
                .map_err(|d| corrupt(path, format!("header feature {bit}: {d}")))?;
            has_event_desc |= bit == FEAT_EVENT_DESC;
        }
    }

    // Without EVENT_DESC the parser follows the per-event id lists of the event type section.
    if !has_event_desc && types_size != 0 {
        check_id_sections(path, file, hb.be, types_off, types_size, attr_size, file_len)?;
    }
    Ok(())
}

/// Each event-type entry is an attr followed by an (offset, size) pair pointing at its ids.
fn check_id_sections(
    path: &Path,
    file: &mut File,
    be: bool,
    off: u64,
    size: u64,
    attr_size: u64,
    file_len: u64,
) -> Result<(), ImportError> {
    let data = read_at(file, path, off, size)?;
    let b = Bytes { data: &data, be };
    let entry = attr_size + 16;
    for i in 0..(size / entry) {
        let at = i * entry + attr_size;
        let (ids_off, ids_size) = (b.u64(at).unwrap_or(0), b.u64(at + 8).unwrap_or(0));
        if !within(ids_off, ids_size, file_len) {
            return Err(corrupt(path, format!("the id list of event {i} lies beyond the end of the file")));
        }
    }
    Ok(())
}

/// Walk a perf header string (`u32 len; char s[len]`), returning the offset after it.
fn skip_string(b: Bytes, at: u64) -> Result<u64, String> {
    let len = b.u32(at).ok_or("string length past the end")?;
    let end = at + 4 + u64::from(len);
    if end > b.len() {
        return Err(format!("string of {len} bytes does not fit"));
    }
    Ok(end)
}

/// Check the counts of the header features the parser allocates from.
fn check_feature(bit: u32, b: Bytes) -> Result<(), String> {
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
                return Err(format!("implausible attr size {attr_size}"));
            }
            let mut at = 8u64;
            for _ in 0..n {
                let own = u64::from(b.u32(at + 4).ok_or("attr past the end")?);
                if own > attr_size || at + attr_size > b.len() {
                    return Err("attr does not fit".into());
                }
                at += attr_size;
                let nr_ids = u64::from(b.u32(at).ok_or("id count past the end")?);
                at = skip_string(b, at + 4)?;
                at += nr_ids * 8;
                if at > b.len() {
                    return Err(format!("{nr_ids} ids do not fit"));
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
            return Err(ImportError::Truncated { path: path.to_path_buf(), detail: format!("the file ends inside the record at byte {pos}") });
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

/// The reader handed to `linux-perf-data`: buffered, optionally showing a corrected file
/// header, and publishing its position for progress reports.
pub(crate) struct SourceReader {
    inner: BufReader<File>,
    pos: u64,
    patch: Option<Box<[u8; FILE_HEADER_SIZE as usize]>>,
    position: Arc<AtomicU64>,
}

impl SourceReader {
    pub fn new(mut file: File, patch: Option<Box<[u8; FILE_HEADER_SIZE as usize]>>) -> io::Result<(Self, Arc<AtomicU64>)> {
        file.seek(SeekFrom::Start(0))?;
        let position = Arc::new(AtomicU64::new(0));
        let r = SourceReader { inner: BufReader::with_capacity(1 << 18, file), pos: 0, patch, position: position.clone() };
        Ok((r, position))
    }

    fn advance(&mut self, n: usize) {
        self.pos += n as u64;
        self.position.store(self.pos, Ordering::Relaxed);
    }
}

impl Read for SourceReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(patch) = &self.patch {
            if self.pos < FILE_HEADER_SIZE {
                let start = self.pos as usize;
                let n = buf.len().min(patch.len() - start);
                buf[..n].copy_from_slice(&patch[start..start + n]);
                self.advance(n);
                self.inner.seek(SeekFrom::Start(self.pos))?;
                return Ok(n);
            }
        }
        let n = self.inner.read(buf)?;
        self.advance(n);
        Ok(n)
    }
}

impl Seek for SourceReader {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        // BufReader keeps its own notion of position; translate relative seeks through ours.
        let target = match to {
            SeekFrom::Start(p) => p,
            SeekFrom::Current(d) => self
                .pos
                .checked_add_signed(d)
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start of the file"))?,
            SeekFrom::End(_) => {
                let t = self.inner.seek(to)?;
                self.pos = t;
                self.position.store(t, Ordering::Relaxed);
                return Ok(t);
            }
        };
        let delta = target as i128 - self.pos as i128;
        if let Ok(d) = i64::try_from(delta) {
            self.inner.seek_relative(d)?;
        } else {
            self.inner.seek(SeekFrom::Start(target))?;
        }
        self.pos = target;
        self.position.store(target, Ordering::Relaxed);
        Ok(target)
    }
}
