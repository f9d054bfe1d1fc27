//! Framing: the file header, the chunk header, chunk checksums, and finding the next
//! intact chunk after damage.
//!
//! Owns everything about *where* bytes are in a trace file; nothing here knows what a
//! chunk's payload means. Layouts are in `docs/FORMAT.md` §2–§3.
//!
//! Design constraints: a chunk is valid only if its header is complete, its declared
//! length is within [`MAX_PAYLOAD`] and inside the file, and the CRC-32C over header and
//! payload matches. Resynchronisation scans for [`CHUNK_MAGIC`] and accepts only a valid
//! chunk, so a stray magic inside compressed data cannot derail the reader.

/// First 8 bytes of every trace file.
pub const FILE_MAGIC: [u8; 8] = *b"TAILPROF";
/// Format version this build writes and the highest it reads (1: no stacks; 2: stacks
/// and switch records; 3: wakeups and the other task of CPU-wide switches; 4: JIT chunks
/// (kind 5), records as in 3; 5: switch marker kinds 3 and 4; 6: JIT chunks carry line
/// tables; FORMAT.md §11).
pub const FORMAT_VERSION: u16 = 6;
/// Length of the version-1 file header.
pub const FILE_HEADER_LEN: usize = 16;
/// First 4 bytes of every chunk header.
pub const CHUNK_MAGIC: [u8; 4] = *b"TPck";
/// Length of the version-1 chunk header.
pub const CHUNK_HEADER_LEN: usize = 24;
/// Largest payload (stored bytes after the chunk header) a reader accepts.
pub const MAX_PAYLOAD: usize = 64 << 20;
/// Largest decompressed chunk body a reader accepts.
pub const MAX_RAW_BODY: usize = 64 << 20;

/// Magic of perf's perf.data files ("PERFILE2"), recognised to give a better error.
pub const PERF_MAGIC: [u8; 8] = *b"PERFILE2";

/// Chunk header `flags` bit: the body is one zstd frame.
pub const FLAG_ZSTD: u8 = 1;

/// Chunk kinds. Readers skip kinds they do not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ChunkKind {
    /// The [`crate::TraceHeader`] as JSON. Always the first chunk.
    Header = 1,
    /// Samples and side-band records, columnar.
    Records = 2,
    /// Path → build-id entries.
    BuildIds = 3,
    /// Stats, duration and the clean-end marker. The last chunk of a cleanly closed trace.
    Trailer = 4,
    /// JIT code names ([`crate::JitEntry`]), version 4.
    Jit = 5,
}

impl ChunkKind {
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(ChunkKind::Header),
            2 => Some(ChunkKind::Records),
            3 => Some(ChunkKind::BuildIds),
            4 => Some(ChunkKind::Trailer),
            5 => Some(ChunkKind::Jit),
            _ => None,
        }
    }
}

/// The decoded 24-byte chunk header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Raw kind byte (may be a kind this build does not know).
    pub kind: u8,
    pub flags: u8,
    /// Length of the uncompressed meta block at the start of the payload.
    pub meta_len: u16,
    /// Sequence number of the chunk in the file (the header chunk is 0).
    pub seq: u32,
    /// Bytes after the chunk header: meta block + stored body.
    pub payload_len: u32,
    /// Length of the body after decompression (equals the stored body length when the
    /// body is not compressed).
    pub raw_body_len: u32,
    pub crc: u32,
}

impl ChunkHeader {
    fn bytes_without_crc(&self) -> [u8; CHUNK_HEADER_LEN - 4] {
        let mut b = [0u8; CHUNK_HEADER_LEN - 4];
        b[0..4].copy_from_slice(&CHUNK_MAGIC);
        b[4] = self.kind;
        b[5] = self.flags;
        b[6..8].copy_from_slice(&self.meta_len.to_le_bytes());
        b[8..12].copy_from_slice(&self.seq.to_le_bytes());
        b[12..16].copy_from_slice(&self.payload_len.to_le_bytes());
        b[16..20].copy_from_slice(&self.raw_body_len.to_le_bytes());
        b
    }

    /// Parses a header without checking the CRC or the payload.
    pub fn parse(b: &[u8]) -> Option<ChunkHeader> {
        if b.len() < CHUNK_HEADER_LEN || b[0..4] != CHUNK_MAGIC {
            return None;
        }
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(ChunkHeader {
            kind: b[4],
            flags: b[5],
            meta_len: u16_at(6),
            seq: u32_at(8),
            payload_len: u32_at(12),
            raw_body_len: u32_at(16),
            crc: u32_at(20),
        })
    }

    /// Total bytes of the chunk including its header.
    pub fn total_len(&self) -> usize {
        CHUNK_HEADER_LEN + self.payload_len as usize
    }
}

/// Builds the complete bytes of one chunk: header (with CRC) followed by `meta` and `body`.
pub fn frame_chunk(out: &mut Vec<u8>, kind: ChunkKind, flags: u8, seq: u32, meta: &[u8], body: &[u8], raw_body_len: usize) {
    let h = ChunkHeader {
        kind: kind as u8,
        flags,
        meta_len: meta.len() as u16,
        seq,
        payload_len: (meta.len() + body.len()) as u32,
        raw_body_len: raw_body_len as u32,
        crc: 0,
    };
    let hb = h.bytes_without_crc();
    let mut crc = crc32c::crc32c(&hb);
    crc = crc32c::crc32c_append(crc, meta);
    crc = crc32c::crc32c_append(crc, body);
    out.extend_from_slice(&hb);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(meta);
    out.extend_from_slice(body);
}

/// The version-1 file header.
pub fn file_header_bytes() -> [u8; FILE_HEADER_LEN] {
    let mut b = [0u8; FILE_HEADER_LEN];
    b[0..8].copy_from_slice(&FILE_MAGIC);
    b[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    b[10..12].copy_from_slice(&(FILE_HEADER_LEN as u16).to_le_bytes());
    b
}

/// A chunk found intact in the file.
#[derive(Debug, Clone, Copy)]
pub struct RawChunk<'a> {
    pub offset: usize,
    pub header: ChunkHeader,
    /// The uncompressed meta block.
    pub meta: &'a [u8],
    /// The stored (possibly compressed) body.
    pub body: &'a [u8],
}

/// What sits at an offset of the file.
#[derive(Debug, Clone, Copy)]
pub enum Probe<'a> {
    /// An intact chunk.
    Chunk(RawChunk<'a>),
    /// A complete chunk header whose declared payload lies inside the file and within
    /// limits, but whose checksum (or meta length) is wrong: damage.
    Corrupt { len: usize },
    /// The chunk would extend past the end of the file (or its header is incomplete).
    Incomplete,
    /// No chunk header here (no magic, or a declared length beyond the limits).
    NotAChunk,
}

/// Looks at `buf[offset..]` and classifies what is there.
pub fn probe(buf: &[u8], offset: usize) -> Probe<'_> {
    let rest = &buf[offset.min(buf.len())..];
    if rest.len() < CHUNK_HEADER_LEN {
        if CHUNK_MAGIC.starts_with(&rest[..rest.len().min(4)]) {
            return Probe::Incomplete;
        }
        return Probe::NotAChunk;
    }
    let Some(h) = ChunkHeader::parse(rest) else {
        return Probe::NotAChunk;
    };
    if h.payload_len as usize > MAX_PAYLOAD {
        return Probe::NotAChunk;
    }
    let total = h.total_len();
    if total > rest.len() {
        return Probe::Incomplete;
    }
    let payload = &rest[CHUNK_HEADER_LEN..total];
    let mut crc = crc32c::crc32c(&rest[..CHUNK_HEADER_LEN - 4]);
    crc = crc32c::crc32c_append(crc, payload);
    if crc != h.crc || h.meta_len as usize > payload.len() {
        return Probe::Corrupt { len: total };
    }
    let (meta, body) = payload.split_at(h.meta_len as usize);
    Probe::Chunk(RawChunk { offset, header: h, meta, body })
}

/// Finds the first offset `>= from` holding an intact chunk.
pub fn find_next_chunk(buf: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while at + CHUNK_HEADER_LEN <= buf.len() {
        let hay = &buf[at..];
        let i = hay.windows(4).position(|w| w == CHUNK_MAGIC)?;
        let cand = at + i;
        if let Probe::Chunk(_) = probe(buf, cand) {
            return Some(cand);
        }
        at = cand + 1;
    }
    None
}

/// Recomputes the checksum of every chunk found by walking the file from its first chunk
/// by declared lengths (stopping at the first non-chunk). For tests and fuzzing: it lets
/// mutated payloads reach the decoders instead of failing the CRC.
pub fn fix_checksums(buf: &mut [u8]) {
    let mut p = FILE_HEADER_LEN;
    while let Some(h) = buf.get(p..).and_then(ChunkHeader::parse) {
        let end = p.saturating_add(h.total_len());
        if h.payload_len as usize > MAX_PAYLOAD || end > buf.len() {
            return;
        }
        let mut crc = crc32c::crc32c(&buf[p..p + CHUNK_HEADER_LEN - 4]);
        crc = crc32c::crc32c_append(crc, &buf[p + CHUNK_HEADER_LEN..end]);
        buf[p + CHUNK_HEADER_LEN - 4..p + CHUNK_HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        p = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_then_probe() {
        let mut b = vec![0u8; 3];
        frame_chunk(&mut b, ChunkKind::Trailer, 0, 7, b"meta", b"body!", 5);
        let Probe::Chunk(c) = probe(&b, 3) else { panic!("not a chunk") };
        assert_eq!(c.header.kind, ChunkKind::Trailer as u8);
        assert_eq!(c.header.seq, 7);
        assert_eq!(c.meta, b"meta");
        assert_eq!(c.body, b"body!");
        assert_eq!(c.header.total_len(), b.len() - 3);
        for cut in 3..b.len() {
            assert!(matches!(probe(&b[..cut], 3), Probe::Incomplete), "cut {cut}");
        }
        let mut bad = b.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(matches!(probe(&bad, 3), Probe::Corrupt { .. }));
        assert_eq!(find_next_chunk(&b, 0), Some(3));
        assert_eq!(find_next_chunk(&bad, 0), None);
    }
}
