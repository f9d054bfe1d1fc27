//! Byte order of a record stream, and [`U64s`], a borrowed array of `u64` in that order.

/// Byte order of the records: the recording machine's. The kernel writes host order, so
/// the recorder always decodes [`Endian::NATIVE`]; perf.data files say theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Endian {
    #[default]
    Little,
    Big,
}

impl Endian {
    #[cfg(target_endian = "little")]
    pub const NATIVE: Endian = Endian::Little;
    #[cfg(target_endian = "big")]
    pub const NATIVE: Endian = Endian::Big;

    #[inline(always)]
    pub fn u64(self, b: [u8; 8]) -> u64 {
        match self {
            Endian::Little => u64::from_le_bytes(b),
            Endian::Big => u64::from_be_bytes(b),
        }
    }

    #[inline(always)]
    pub fn u32(self, b: [u8; 4]) -> u32 {
        match self {
            Endian::Little => u32::from_le_bytes(b),
            Endian::Big => u32::from_be_bytes(b),
        }
    }

    #[inline(always)]
    pub fn u16(self, b: [u8; 2]) -> u16 {
        match self {
            Endian::Little => u16::from_le_bytes(b),
            Endian::Big => u16::from_be_bytes(b),
        }
    }

    /// The `u64` at byte `at` of `b`, if `b` holds it.
    #[inline(always)]
    pub fn u64_at(self, b: &[u8], at: usize) -> Option<u64> {
        let w = b.get(at..at.checked_add(8)?)?;
        Some(self.u64(w.try_into().ok()?))
    }

    /// The `u32` at byte `at` of `b`, if `b` holds it.
    #[inline(always)]
    pub fn u32_at(self, b: &[u8], at: usize) -> Option<u32> {
        let w = b.get(at..at.checked_add(4)?)?;
        Some(self.u32(w.try_into().ok()?))
    }

    #[inline]
    pub fn put_u64(self, out: &mut Vec<u8>, v: u64) {
        out.extend_from_slice(&match self {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        });
    }

    #[inline]
    pub fn put_u32(self, out: &mut Vec<u8>, v: u32) {
        out.extend_from_slice(&match self {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        });
    }

    #[inline]
    pub fn put_u16(self, out: &mut Vec<u8>, v: u16) {
        out.extend_from_slice(&match self {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        });
    }
}

/// A borrowed array of `u64` words in the records' byte order (a callchain, register
/// values, counters). Zero-copy: it is the record's bytes; words are converted when read.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct U64s<'a> {
    bytes: &'a [u8],
    endian: Endian,
}

impl<'a> U64s<'a> {
    /// `bytes.len()` must be a multiple of 8 (trailing bytes are ignored).
    #[inline]
    pub fn new(bytes: &'a [u8], endian: Endian) -> U64s<'a> {
        U64s { bytes: &bytes[..bytes.len() / 8 * 8], endian }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.bytes.len() / 8
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    #[inline]
    pub fn get(&self, i: usize) -> Option<u64> {
        self.endian.u64_at(self.bytes, i.checked_mul(8)?)
    }

    /// The words in order.
    #[inline]
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = u64> + ExactSizeIterator + 'a {
        let e = self.endian;
        self.bytes.chunks_exact(8).map(move |w| e.u64(w.try_into().expect("8-byte chunk")))
    }

    #[inline]
    pub fn to_vec(&self) -> Vec<u64> {
        let mut v = Vec::with_capacity(self.len());
        self.append_to(&mut v);
        v
    }

    /// Push the words onto `out` (the byte order is decided once, not per word).
    #[inline]
    pub fn append_to(&self, out: &mut Vec<u64>) {
        let words = self.bytes.chunks_exact(8);
        match self.endian {
            Endian::Little => out.extend(words.map(|w| u64::from_le_bytes(w.try_into().expect("8-byte chunk")))),
            Endian::Big => out.extend(words.map(|w| u64::from_be_bytes(w.try_into().expect("8-byte chunk")))),
        }
    }

    /// The underlying bytes (in the records' byte order).
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    #[inline]
    pub fn endian(&self) -> Endian {
        self.endian
    }
}

impl std::fmt::Debug for U64s<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter().map(|w| format!("{w:#x}"))).finish()
    }
}
