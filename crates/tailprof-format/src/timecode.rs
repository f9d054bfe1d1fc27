//! Time-delta codes for the sample time column.
//!
//! Owns the **16-bit-word variable-length code** of Larysch, "Fine-grained estimation of
//! memory bandwidth utilization" (2016), §4.6/§4.8, extended to 64-bit values, and the
//! alternative codes the format can select per chunk (see [`TimeCodec`]). `docs/FORMAT.md`
//! has the byte-level definition and the measurements that chose the writer's default.
//!
//! The 16-bit-word code ("paper16"), every word stored little-endian:
//!
//! | value                       | words                                             |
//! |-----------------------------|---------------------------------------------------|
//! | `0 ..= 0x7fff`              | `v`                                               |
//! | `0x8000 ..= 0x7fff_fffe`    | `0x8000 \| v >> 16`, `v & 0xffff`                 |
//! | `0x7fff_ffff ..= u64::MAX`  | `0xffff`, `0xffff`, then `v` as 4 words, high first |
//!
//! The paper's escape carries a 32-bit literal; ours carries 64 bits because nanosecond
//! deltas across idle gaps exceed 2^32 (4.3 s).

use crate::varint::{put_uleb, ByteReader};

/// How a chunk's sample time deltas are encoded. Stored as one byte in the chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum TimeCodec {
    /// The paper's 16-bit-word code, extended to 64-bit literals.
    Paper16 = 0,
    /// Unsigned LEB128 per delta.
    #[default]
    Leb128 = 1,
}

impl TimeCodec {
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(TimeCodec::Paper16),
            1 => Some(TimeCodec::Leb128),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            TimeCodec::Paper16 => "paper16",
            TimeCodec::Leb128 => "leb128",
        }
    }
    /// Appends one delta.
    #[inline]
    pub fn put(self, out: &mut Vec<u8>, v: u64) {
        match self {
            TimeCodec::Paper16 => put_paper16(out, v),
            TimeCodec::Leb128 => put_uleb(out, v),
        }
    }
    /// Reads one delta.
    #[inline]
    pub fn get(self, r: &mut ByteReader<'_>) -> Option<u64> {
        match self {
            TimeCodec::Paper16 => get_paper16(r),
            TimeCodec::Leb128 => r.uleb(),
        }
    }
    /// Smallest number of bytes one delta can take (bounds allocations when decoding).
    pub fn min_len(self) -> usize {
        match self {
            TimeCodec::Paper16 => 2,
            TimeCodec::Leb128 => 1,
        }
    }
}

/// The escape word pair that announces a 64-bit literal.
const ESCAPE: u16 = 0xffff;

/// Appends `v` in the 16-bit-word code.
#[inline]
pub fn put_paper16(out: &mut Vec<u8>, v: u64) {
    if v < 0x8000 {
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else if v < 0x7fff_ffff {
        let hi = 0x8000 | (v >> 16) as u16;
        out.extend_from_slice(&hi.to_le_bytes());
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&ESCAPE.to_le_bytes());
        out.extend_from_slice(&ESCAPE.to_le_bytes());
        for shift in [48u32, 32, 16, 0] {
            out.extend_from_slice(&((v >> shift) as u16).to_le_bytes());
        }
    }
}

/// Number of bytes [`put_paper16`] appends for `v`.
pub fn paper16_len(v: u64) -> usize {
    if v < 0x8000 {
        2
    } else if v < 0x7fff_ffff {
        4
    } else {
        12
    }
}

/// Reads one value of the 16-bit-word code.
#[inline]
pub fn get_paper16(r: &mut ByteReader<'_>) -> Option<u64> {
    let w0 = r.u16()?;
    if w0 < 0x8000 {
        return Some(w0 as u64);
    }
    let w1 = r.u16()?;
    if w0 == ESCAPE && w1 == ESCAPE {
        let mut v = 0u64;
        for _ in 0..4 {
            v = (v << 16) | r.u16()? as u64;
        }
        return Some(v);
    }
    Some((((w0 & 0x7fff) as u64) << 16) | w1 as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: u64) -> Vec<u8> {
        let mut b = Vec::new();
        put_paper16(&mut b, v);
        b
    }

    #[test]
    fn paper16_examples_match_the_spec() {
        // These are the examples in docs/FORMAT.md.
        assert_eq!(enc(0), [0x00, 0x00]);
        assert_eq!(enc(1000), [0xe8, 0x03]);
        assert_eq!(enc(0x7fff), [0xff, 0x7f]);
        assert_eq!(enc(0x8000), [0x00, 0x80, 0x00, 0x80]);
        assert_eq!(enc(250_000), [0x03, 0x80, 0x90, 0xd0]); // 0x3d090
        assert_eq!(enc(0x7fff_fffe), [0xff, 0xff, 0xfe, 0xff]);
        assert_eq!(
            enc(0x7fff_ffff),
            [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0xff, 0x7f, 0xff, 0xff]
        );
        assert_eq!(
            enc(10_000_000_000), // 10 s = 0x2_540b_e400
            [0xff, 0xff, 0xff, 0xff, 0, 0, 0x02, 0, 0x0b, 0x54, 0x00, 0xe4]
        );
    }

    #[test]
    fn paper16_round_trip_edges() {
        let vals = [
            0u64, 1, 0x7fff, 0x8000, 0xffff, 0x1_0000, 0x7fff_fffe, 0x7fff_ffff, 0x8000_0000,
            u32::MAX as u64, 1 << 32, u64::MAX, u64::MAX - 1,
        ];
        for codec in [TimeCodec::Paper16, TimeCodec::Leb128] {
            let mut b = Vec::new();
            for &v in &vals {
                let before = b.len();
                codec.put(&mut b, v);
                if codec == TimeCodec::Paper16 {
                    assert_eq!(b.len() - before, paper16_len(v));
                }
            }
            let mut r = ByteReader::new(&b);
            for &v in &vals {
                assert_eq!(codec.get(&mut r), Some(v), "{codec:?} {v:#x}");
            }
            assert!(r.is_empty());
        }
    }

    #[test]
    fn paper16_truncated_input_is_none() {
        let b = enc(u64::MAX);
        for cut in 0..b.len() {
            assert_eq!(get_paper16(&mut ByteReader::new(&b[..cut])), None, "cut {cut}");
        }
    }
}
