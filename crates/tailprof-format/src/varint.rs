//! Byte-level primitives: unsigned LEB128, zigzag, fixed little-endian integers, and the
//! bounds-checked [`ByteReader`] every decoder in this crate reads through.
//!
//! Design constraint: decoding must never panic and never read out of bounds on arbitrary
//! input, so every read returns `Option` and callers turn `None` into "chunk damaged".

/// Appends `v` as unsigned LEB128 (7 bits per byte, low group first, high bit = "more").
#[inline]
pub fn put_uleb(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Number of bytes `put_uleb(v)` appends.
#[inline]
pub fn uleb_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Maps a signed value to an unsigned one with small magnitudes first: 0, -1, 1, -2, ...
#[inline]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline]
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[inline]
pub fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}
#[inline]
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
#[inline]
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends a length-prefixed byte string (ULEB128 length, then the bytes).
pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_uleb(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A bounds-checked cursor over a byte slice. Every method returns `None` instead of
/// reading past the end or accepting an over-long encoding.
#[derive(Debug, Clone)]
pub struct ByteReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> ByteReader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        ByteReader { buf, pos: 0 }
    }
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pos == self.buf.len()
    }
    #[inline]
    pub fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }
    #[inline]
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.remaining() {
            return None;
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Some(s)
    }
    #[inline]
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    #[inline]
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    #[inline]
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    /// Unsigned LEB128, at most 10 bytes; rejects encodings that overflow 64 bits.
    #[inline]
    pub fn uleb(&mut self) -> Option<u64> {
        // Fast path: one byte.
        let b = *self.buf.get(self.pos)?;
        if b < 0x80 {
            self.pos += 1;
            return Some(b as u64);
        }
        let mut v = 0u64;
        let mut shift = 0u32;
        loop {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            if shift == 63 && b > 1 {
                return None;
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                return Some(v);
            }
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
    }
    /// A ULEB128 that must fit in `u32`.
    #[inline]
    pub fn uleb_u32(&mut self) -> Option<u32> {
        u32::try_from(self.uleb()?).ok()
    }
    /// A ULEB128 count/length that must not exceed `max`.
    #[inline]
    pub fn len_at_most(&mut self, max: usize) -> Option<usize> {
        let v = self.uleb()?;
        if v > max as u64 {
            return None;
        }
        Some(v as usize)
    }
    /// A length-prefixed byte string (see [`put_bytes`]).
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.len_at_most(self.remaining())?;
        self.take(n)
    }
    /// A length-prefixed UTF-8 string.
    pub fn string(&mut self) -> Option<String> {
        let b = self.bytes()?;
        std::str::from_utf8(b).ok().map(str::to_owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uleb_round_trip_and_len() {
        let vals = [0u64, 1, 127, 128, 300, 16383, 16384, u32::MAX as u64, u64::MAX - 1, u64::MAX];
        let mut buf = Vec::new();
        for &v in &vals {
            let before = buf.len();
            put_uleb(&mut buf, v);
            assert_eq!(buf.len() - before, uleb_len(v), "len of {v}");
        }
        let mut r = ByteReader::new(&buf);
        for &v in &vals {
            assert_eq!(r.uleb(), Some(v));
        }
        assert!(r.is_empty());
        assert_eq!(r.uleb(), None);
    }

    #[test]
    fn uleb_rejects_overflow() {
        let mut r = ByteReader::new(&[0xff; 11]);
        assert_eq!(r.uleb(), None);
        // 10th byte may only carry one bit.
        let mut b = vec![0xff; 9];
        b.push(0x02);
        assert_eq!(ByteReader::new(&b).uleb(), None);
        let mut b = vec![0xff; 9];
        b.push(0x01);
        assert_eq!(ByteReader::new(&b).uleb(), Some(u64::MAX));
    }

    #[test]
    fn zigzag_round_trip() {
        for v in [0i64, -1, 1, -2, 2, i64::MIN, i64::MAX, 12345, -98765] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(0), 0);
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
    }

    #[test]
    fn strings_are_bounds_checked() {
        let mut b = Vec::new();
        put_uleb(&mut b, 10);
        b.extend_from_slice(b"abc");
        assert_eq!(ByteReader::new(&b).string(), None);
        let mut b = Vec::new();
        put_bytes(&mut b, "héllo ✓".as_bytes());
        assert_eq!(ByteReader::new(&b).string().as_deref(), Some("héllo ✓"));
        let mut b = Vec::new();
        put_bytes(&mut b, &[0xff, 0xfe]);
        assert_eq!(ByteReader::new(&b).string(), None);
    }
}
