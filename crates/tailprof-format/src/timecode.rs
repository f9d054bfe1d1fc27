//! Time-delta codes for the sample time column.
//!
//! Owns the **16-bit-word variable-length code** of Larysch, "Fine-grained estimation of
//! memory bandwidth utilization" (2016), §4.6/§4.8, extended to 64-bit values, and the
//! the alternative codes the format can select per chunk (see [`TimeCodec`]), among them
//! the byte-plane code the writer uses by default. `docs/FORMAT.md`
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
    Leb128 = 1,
    /// Byte planes: every delta as a `W`-byte little-endian integer, all first bytes,
    /// then all second bytes, ...; deltas too large for `W` bytes are escaped. Compresses
    /// best after zstd (FORMAT.md §5.3), hence the default.
    #[default]
    Planes = 2,
}

impl TimeCodec {
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(TimeCodec::Paper16),
            1 => Some(TimeCodec::Leb128),
            2 => Some(TimeCodec::Planes),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            TimeCodec::Paper16 => "paper16",
            TimeCodec::Leb128 => "leb128",
            TimeCodec::Planes => "planes",
        }
    }

    /// Appends the encoding of `deltas` to `out`.
    pub fn encode(self, deltas: &[u64], out: &mut Vec<u8>) {
        match self {
            TimeCodec::Planes => put_planes(deltas, out),
            _ => self.encode_max(deltas, 0, out),
        }
    }

    /// [`Self::encode`] given the largest delta `max` (0 for none; only the planes code
    /// uses it).
    pub fn encode_max(self, deltas: &[u64], max: u64, out: &mut Vec<u8>) {
        match self {
            TimeCodec::Paper16 => deltas.iter().for_each(|&d| put_paper16(out, d)),
            TimeCodec::Leb128 => deltas.iter().for_each(|&d| put_uleb(out, d)),
            TimeCodec::Planes => put_planes_max(deltas, max, out),
        }
    }

    /// Decodes exactly `n` deltas from all of `b` and appends the running sum, starting
    /// at `base`, to `times`. `None` when `b` is not exactly `n` deltas or a time
    /// overflows.
    pub fn decode_times(self, b: &[u8], n: usize, base: u64, times: &mut Vec<u64>) -> Option<()> {
        let min_len = match self {
            TimeCodec::Paper16 => 2,
            TimeCodec::Leb128 | TimeCodec::Planes => 1,
        };
        if n > b.len() / min_len {
            return None;
        }
        times.reserve(n);
        let mut t = base;
        match self {
            TimeCodec::Planes => get_planes(b, n, base, times),
            TimeCodec::Paper16 => {
                let r = &mut ByteReader::new(b);
                for _ in 0..n {
                    t = t.checked_add(get_paper16(r)?)?;
                    times.push(t);
                }
                r.is_empty().then_some(())
            }
            TimeCodec::Leb128 => {
                let r = &mut ByteReader::new(b);
                for _ in 0..n {
                    t = t.checked_add(r.uleb()?)?;
                    times.push(t);
                }
                r.is_empty().then_some(())
            }
        }
    }
}

/// Byte-plane encoding: one width byte `W` (1..=4), `W` planes of `deltas.len()` bytes
/// (plane `k` holds byte `k` of every delta, little-endian), then one ULEB128 per delta
/// that is `>= 2^(8W) - 1`, in order; such deltas store the marker `2^(8W) - 1` in the
/// planes.
pub fn put_planes(deltas: &[u64], out: &mut Vec<u8>) {
    put_planes_max(deltas, deltas.iter().copied().max().unwrap_or(0), out);
}

/// [`put_planes`] given the largest delta `max` (0 for none), e.g. found while the
/// deltas were computed.
pub fn put_planes_max(deltas: &[u64], max: u64, out: &mut Vec<u8>) {
    debug_assert_eq!(max, deltas.iter().copied().max().unwrap_or(0));
    let w = (((64 - max.leading_zeros()) as usize).div_ceil(8)).clamp(1, 4);
    let marker = (1u64 << (8 * w)) - 1;
    out.push(w as u8);
    match w {
        1 => put_planes_w::<1>(deltas, max, marker, out),
        2 => put_planes_w::<2>(deltas, max, marker, out),
        3 => put_planes_w::<3>(deltas, max, marker, out),
        _ => put_planes_w::<4>(deltas, max, marker, out),
    }
    if max >= marker {
        for &d in deltas {
            if d >= marker {
                put_uleb(out, d);
            }
        }
    }
}

/// The `W` planes of [`put_planes`], one pass over the deltas per plane (a loop the
/// compiler vectorizes); the deltas are clamped to `marker` only when one reaches it.
fn put_planes_w<const W: usize>(deltas: &[u64], max: u64, marker: u64, out: &mut Vec<u8>) {
    let n = deltas.len();
    if n == 0 {
        return;
    }
    out.reserve(W * n);
    let spare = &mut out.spare_capacity_mut()[..W * n];
    for (k, plane) in spare.chunks_exact_mut(n).enumerate() {
        let shift = 8 * k as u32;
        if max < marker {
            for (b, &d) in plane.iter_mut().zip(deltas) {
                b.write((d >> shift) as u8);
            }
        } else {
            for (b, &d) in plane.iter_mut().zip(deltas) {
                b.write((d.min(marker) >> shift) as u8);
            }
        }
    }
    // SAFETY: the `W * n` bytes after the current length were initialised above (the
    // `W` chunks of `n` bytes cover all of `spare`).
    unsafe { out.set_len(out.len() + W * n) };
}

fn get_planes(b: &[u8], n: usize, base: u64, times: &mut Vec<u64>) -> Option<()> {
    let (&w, rest) = b.split_first()?;
    let w = w as usize;
    if !(1..=4).contains(&w) || rest.len() < w * n {
        return None;
    }
    let marker = (1u64 << (8 * w)) - 1;
    let (planes, exc) = rest.split_at(w * n);
    let exc = &mut ByteReader::new(exc);
    let mut t = base;
    let p0 = &planes[..n];
    macro_rules! run {
        ($get:expr) => {
            for i in 0..n {
                let mut d: u64 = $get(i);
                if d == marker {
                    d = exc.uleb()?;
                    if d < marker {
                        return None;
                    }
                }
                t = t.checked_add(d)?;
                times.push(t);
            }
        };
    }
    match w {
        1 => run!(|i: usize| p0[i] as u64),
        2 => {
            let p1 = &planes[n..2 * n];
            run!(|i: usize| p0[i] as u64 | (p1[i] as u64) << 8)
        }
        3 => {
            let (p1, p2) = (&planes[n..2 * n], &planes[2 * n..3 * n]);
            run!(|i: usize| p0[i] as u64 | (p1[i] as u64) << 8 | (p2[i] as u64) << 16)
        }
        _ => {
            let (p1, p2, p3) = (&planes[n..2 * n], &planes[2 * n..3 * n], &planes[3 * n..4 * n]);
            run!(|i: usize| p0[i] as u64 | (p1[i] as u64) << 8 | (p2[i] as u64) << 16 | (p3[i] as u64) << 24)
        }
    }
    exc.is_empty().then_some(())
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
        assert_eq!(enc(0x7fff_ffff), [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0xff, 0x7f, 0xff, 0xff]);
        assert_eq!(
            enc(10_000_000_000), // 10 s = 0x2_540b_e400
            [0xff, 0xff, 0xff, 0xff, 0, 0, 0x02, 0, 0x0b, 0x54, 0x00, 0xe4]
        );
    }

    #[test]
    fn paper16_round_trip_edges() {
        let vals = [
            0u64,
            1,
            0x7fff,
            0x8000,
            0xffff,
            0x1_0000,
            0x7fff_fffe,
            0x7fff_ffff,
            0x8000_0000,
            u32::MAX as u64,
            1 << 32,
            u64::MAX,
            u64::MAX - 1,
        ];
        let mut b = Vec::new();
        for &v in &vals {
            let before = b.len();
            put_paper16(&mut b, v);
            assert_eq!(b.len() - before, paper16_len(v));
        }
        let mut r = ByteReader::new(&b);
        for &v in &vals {
            assert_eq!(get_paper16(&mut r), Some(v), "{v:#x}");
        }
        assert!(r.is_empty());
    }

    #[test]
    fn every_codec_round_trips_times() {
        let sets: [&[u64]; 5] = [
            &[0, 0, 0],
            &[5, 255, 254, 3],
            &[0x7fff, 0x8000, 0xffff_fffe, 0xffff_ffff, 1 << 32, 7],
            &[1, 2, u64::MAX / 2],
            &[300, 65_535, 65_536, 16_777_215, 16_777_216],
        ];
        for codec in [TimeCodec::Paper16, TimeCodec::Leb128, TimeCodec::Planes] {
            for deltas in sets {
                let mut b = Vec::new();
                codec.encode(deltas, &mut b);
                let mut times = Vec::new();
                codec.decode_times(&b, deltas.len(), 10, &mut times).unwrap();
                let mut t = 10u64;
                let want: Vec<u64> = deltas
                    .iter()
                    .map(|d| {
                        t += d;
                        t
                    })
                    .collect();
                assert_eq!(times, want, "{codec:?}");
                // Too few or too many bytes are damage, never a panic.
                for cut in 0..b.len() {
                    assert!(codec.decode_times(&b[..cut], deltas.len(), 10, &mut Vec::new()).is_none());
                }
                let mut longer = b.clone();
                longer.push(0);
                assert!(codec.decode_times(&longer, deltas.len(), 10, &mut Vec::new()).is_none());
            }
        }
    }

    #[test]
    fn planes_layout() {
        let mut b = Vec::new();
        put_planes(&[0x0102, 0x0304, 0x1_0000], &mut b);
        // width 3; no value reaches the marker 0xff_ffff.
        assert_eq!(b, [3, 0x02, 0x04, 0x00, 0x01, 0x03, 0x00, 0x00, 0x00, 0x01]);
        let mut b = Vec::new();
        put_planes(&[1, 300], &mut b);
        assert_eq!(b, [2, 1, 0x2c, 0, 0x01]);
        let mut b = Vec::new();
        put_planes(&[1, 1 << 40], &mut b);
        assert_eq!(&b[..9], [4, 1, 0xff, 0, 0xff, 0, 0xff, 0, 0xff]);
        // The largest delta equals the marker: stored as the marker, then in full.
        let mut b = Vec::new();
        put_planes(&[255, 3, 254], &mut b);
        assert_eq!(b, [1, 0xff, 3, 0xfe, 0xff, 0x01]);
        let mut b = Vec::new();
        put_planes(&[], &mut b);
        assert_eq!(b, [1]);
    }

    #[test]
    fn paper16_truncated_input_is_none() {
        let b = enc(u64::MAX);
        for cut in 0..b.len() {
            assert_eq!(get_paper16(&mut ByteReader::new(&b[..cut])), None, "cut {cut}");
        }
    }
}
