//! Column encodings shared by the records-chunk writer and reader (FORMAT.md §5.1).
//!
//! Owns: the *blob* (a byte string zstd-compressed on its own when that helps:
//! [`Packer`] / [`Unpacker`]), the *plain column* (constant, or a blob of one ULEB128 per
//! row), the *optional column* (presence: none / all / bitmap, then a plain column of the
//! present values), and the decoded forms [`Col`] and [`OptCol`].
//!
//! Design constraint: a constant column costs 2–11 bytes per chunk regardless of row
//! count, which is what makes constant period/cpu/event/cpumode (the common case) free.

use crate::varint::{put_uleb, uleb_len, unzigzag, zigzag, ByteReader};

pub const COL_CONST: u8 = 0;
pub const COL_ULEB: u8 = 1;

pub const OPT_NONE: u8 = 0;
pub const OPT_ALL: u8 = 1;
pub const OPT_BITMAP: u8 = 2;

pub const BLOB_STORED: u8 = 0;
pub const BLOB_ZSTD: u8 = 1;

/// Blobs shorter than this are never compressed (a zstd frame costs ~10 bytes).
const MIN_COMPRESS: usize = 64;

/// Writes *blobs*: byte strings that are zstd-compressed on their own when that makes
/// them smaller. Each column compressed alone gets its own entropy tables, which beats
/// one frame over the whole chunk (FORMAT.md §5.1).
pub struct Packer {
    level: i32,
    cctx: Option<zstd::bulk::Compressor<'static>>,
    zbuf: Vec<u8>,
    /// Scratch space for building a blob before it is packed.
    pub scratch: Vec<u8>,
}

impl Packer {
    /// `level` 0 stores every blob uncompressed.
    pub fn new(level: i32) -> Self {
        Packer { level, cctx: None, zbuf: Vec::new(), scratch: Vec::new() }
    }

    /// Appends `[enc u8][ULEB stored_len]([ULEB raw_len] if zstd)[bytes]` for the bytes in
    /// `self.scratch`, and clears the scratch.
    pub fn put_scratch(&mut self, out: &mut Vec<u8>) {
        let raw = std::mem::take(&mut self.scratch);
        self.put_blob(out, &raw);
        self.scratch = raw;
        self.scratch.clear();
    }

    /// Appends `b` as a blob.
    pub fn put_blob(&mut self, out: &mut Vec<u8>, b: &[u8]) {
        if self.level != 0 && b.len() >= MIN_COMPRESS {
            if self.cctx.is_none() {
                self.cctx = zstd::bulk::Compressor::new(self.level).ok();
            }
            if let Some(c) = self.cctx.as_mut() {
                self.zbuf.clear();
                self.zbuf.reserve(zstd::zstd_safe::compress_bound(b.len()));
                if let Ok(n) = c.compress_to_buffer(b, &mut self.zbuf) {
                    if n + uleb_len(b.len() as u64) < b.len() {
                        out.push(BLOB_ZSTD);
                        put_uleb(out, n as u64);
                        put_uleb(out, b.len() as u64);
                        out.extend_from_slice(&self.zbuf);
                        return;
                    }
                }
            }
        }
        out.push(BLOB_STORED);
        put_uleb(out, b.len() as u64);
        out.extend_from_slice(b);
    }
}

/// Reads blobs, decompressing into a reusable buffer, within a per-chunk budget of
/// decompressed bytes.
#[derive(Default)]
pub struct Unpacker {
    dctx: Option<zstd::bulk::Decompressor<'static>>,
    buf: Vec<u8>,
    /// Decompressed bytes still allowed in this chunk.
    pub budget: usize,
}

impl Unpacker {
    /// Reads one blob from `r` and returns its bytes (borrowed from `r` or from the
    /// internal buffer). `None` on damage or when the budget is exceeded.
    pub fn blob<'s, 'b: 's>(&'s mut self, r: &mut ByteReader<'b>) -> Option<&'s [u8]> {
        match r.u8()? {
            BLOB_STORED => {
                let n = r.len_at_most(r.remaining())?;
                r.take(n)
            }
            BLOB_ZSTD => {
                let n = r.len_at_most(r.remaining())?;
                let raw_len = r.len_at_most(self.budget)?;
                let src = r.take(n)?;
                self.budget -= raw_len;
                if self.dctx.is_none() {
                    self.dctx = zstd::bulk::Decompressor::new().ok();
                }
                let d = self.dctx.as_mut()?;
                self.buf.clear();
                self.buf.reserve_exact(raw_len);
                match d.decompress_to_buffer(src, &mut self.buf) {
                    Ok(got) if got == raw_len && self.buf.len() == raw_len => Some(&self.buf[..]),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

/// Appends a plain column of `n` rows; row `i` is `get(i)`. `n` must be at least 1.
/// Layout: `COL_CONST, ULEB value` or `COL_ULEB, blob of n ULEB values`.
pub fn put_column(out: &mut Vec<u8>, pk: &mut Packer, n: usize, get: impl Fn(usize) -> u64) {
    let first = get(0);
    if (1..n).all(|i| get(i) == first) {
        out.push(COL_CONST);
        put_uleb(out, first);
        return;
    }
    out.push(COL_ULEB);
    pk.scratch.clear();
    put_ulebs(&mut pk.scratch, n, get);
    pk.put_scratch(out);
}

/// [`put_column`] of `vals` (at least one): the same bytes, but a column whose rows are
/// all below 128 (thread, CPU and cpumode columns, usually) is copied as bytes in one
/// pass instead of ULEB-encoded row by row.
pub fn put_column_of<T: Copy + Into<u64>>(out: &mut Vec<u8>, pk: &mut Packer, vals: &[T]) {
    put_column_by(out, pk, vals, |&v| v.into());
}

/// [`put_column`] of `f(row)` for each of `rows` (at least one): the same bytes. One pass
/// writes every value as a byte while checking that all are below 128 (then the bytes
/// are the ULEBs) and whether all are equal (a constant column); only a column with a
/// value of 128 or more takes a second, ULEB-encoding pass.
pub fn put_column_by<R>(out: &mut Vec<u8>, pk: &mut Packer, rows: &[R], f: impl Fn(&R) -> u64) {
    let first = f(&rows[0]);
    let (mut or, mut diff) = (0u64, 0u64);
    pk.scratch.clear();
    pk.scratch.extend(rows.iter().map(|r| {
        let v = f(r);
        or |= v;
        diff |= v ^ first;
        v as u8
    }));
    if diff == 0 {
        out.push(COL_CONST);
        put_uleb(out, first);
        return;
    }
    out.push(COL_ULEB);
    if or >= 0x80 {
        pk.scratch.clear();
        put_ulebs(&mut pk.scratch, rows.len(), |i| f(&rows[i]));
    }
    pk.put_scratch(out);
}

/// Appends `get(0) .. get(n - 1)` as ULEB128, as `put_uleb` would, but with one
/// capacity check for all of them.
pub fn put_ulebs(buf: &mut Vec<u8>, n: usize, get: impl Fn(usize) -> u64) {
    buf.reserve(n.saturating_mul(10));
    let spare = &mut buf.spare_capacity_mut()[..n.saturating_mul(10)];
    let mut k = 0;
    for i in 0..n {
        let mut v = get(i);
        while v >= 0x80 {
            spare[k].write(v as u8 | 0x80);
            k += 1;
            v >>= 7;
        }
        spare[k].write(v as u8);
        k += 1;
    }
    // SAFETY: the first `k` bytes of the spare capacity were initialised above.
    unsafe { buf.set_len(buf.len() + k) };
}

/// Appends an optional column: `present(i)` says whether row `i` has a value, `values`
/// holds the present values in row order. With `delta`, values are stored as zigzag
/// differences from the previous present value (good for addresses).
pub fn put_opt_column(out: &mut Vec<u8>, pk: &mut Packer, n: usize, present: impl Fn(usize) -> bool, values: &[u64], delta: bool) {
    if values.is_empty() {
        out.push(OPT_NONE);
        return;
    }
    if values.len() == n {
        out.push(OPT_ALL);
    } else {
        out.push(OPT_BITMAP);
        let mut bits = vec![0u8; n.div_ceil(8)];
        for (i, b) in (0..n).filter(|&i| present(i)).map(|i| (i, 1u8 << (i % 8))) {
            bits[i / 8] |= b;
        }
        pk.put_blob(out, &bits);
    }
    if delta {
        put_column(out, pk, values.len(), |i| {
            let prev = if i == 0 { 0 } else { values[i - 1] };
            zigzag(values[i].wrapping_sub(prev) as i64)
        });
    } else {
        put_column(out, pk, values.len(), |i| values[i]);
    }
}

/// A decoded plain column.
#[derive(Debug, Default, Clone)]
pub struct Col {
    pub konst: bool,
    pub c: u64,
    pub v: Vec<u64>,
}

impl Col {
    #[inline]
    pub fn get(&self, i: usize) -> u64 {
        if self.konst {
            self.c
        } else {
            self.v[i]
        }
    }

    /// Reads a plain column of exactly `n` rows. `None` on damage.
    pub fn read(&mut self, r: &mut ByteReader<'_>, up: &mut Unpacker, n: usize) -> Option<()> {
        self.read_max(r, up, n, u64::MAX)
    }

    /// Reads a plain column of exactly `n` rows whose values must not exceed `max`.
    pub fn read_max(&mut self, r: &mut ByteReader<'_>, up: &mut Unpacker, n: usize, max: u64) -> Option<()> {
        self.v.clear();
        match r.u8()? {
            COL_CONST => {
                self.konst = true;
                self.c = r.uleb()?;
                (self.c <= max).then_some(())
            }
            COL_ULEB => {
                self.konst = false;
                let bytes = up.blob(r)?;
                if n > bytes.len() {
                    return None; // every row takes at least one byte
                }
                self.v.reserve(n);
                let mut i = 0;
                for _ in 0..n {
                    // One-byte values are the common case; longer ones take the checked path.
                    let b = *bytes.get(i)?;
                    let v = if b < 0x80 {
                        i += 1;
                        b as u64
                    } else {
                        let mut cr = ByteReader::new(&bytes[i..]);
                        let v = cr.uleb()?;
                        i = bytes.len() - cr.remaining();
                        v
                    };
                    if v > max {
                        return None;
                    }
                    self.v.push(v);
                }
                (i == bytes.len()).then_some(())
            }
            _ => None,
        }
    }
}

/// A decoded optional column.
#[derive(Debug, Default, Clone)]
pub struct OptCol {
    pub mode: u8,
    pub bits: Vec<u8>,
    pub vals: Col,
}

impl OptCol {
    /// Reads an optional column of `n` rows. `None` on damage.
    pub fn read(&mut self, r: &mut ByteReader<'_>, up: &mut Unpacker, n: usize, delta: bool) -> Option<()> {
        self.mode = r.u8()?;
        let count = match self.mode {
            OPT_NONE => return Some(()),
            OPT_ALL => n,
            OPT_BITMAP => {
                let b = up.blob(r)?;
                if b.len() != n.div_ceil(8) {
                    return None;
                }
                self.bits.clear();
                self.bits.extend_from_slice(b);
                if n & 7 != 0 && b[b.len() - 1] >> (n & 7) != 0 {
                    return None; // bits past the last row must be zero
                }
                b.iter().map(|x| x.count_ones() as usize).sum()
            }
            _ => return None,
        };
        self.vals.read(r, up, count)?;
        if delta && !self.vals.konst {
            let mut prev = 0u64;
            for v in self.vals.v.iter_mut() {
                prev = prev.wrapping_add(unzigzag(*v) as u64);
                *v = prev;
            }
        } else if delta {
            // A constant delta column: materialise the running sum.
            let d = unzigzag(self.vals.c) as u64;
            if d != 0 || self.vals.c != 0 {
                self.vals.konst = false;
                let mut prev = 0u64;
                self.vals.v.clear();
                for _ in 0..count {
                    prev = prev.wrapping_add(d);
                    self.vals.v.push(prev);
                }
            }
        }
        Some(())
    }

    /// The value of row `i`, given `k`, the number of present rows before it; advances
    /// `k` when the row is present.
    #[inline]
    pub fn get(&self, i: usize, k: &mut usize) -> Option<u64> {
        match self.mode {
            OPT_NONE => None,
            OPT_ALL => Some(self.vals.get(i)),
            _ => {
                if self.bits[i / 8] >> (i % 8) & 1 != 0 {
                    let v = self.vals.get(*k);
                    *k += 1;
                    Some(v)
                } else {
                    None
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_column_is_tiny() {
        let mut b = Vec::new();
        put_column(&mut b, &mut Packer::new(1), 100_000, |_| 250_000);
        assert_eq!(b.len(), 1 + 3);
        let mut c = Col::default();
        c.read(&mut ByteReader::new(&b), &mut Unpacker::default(), 100_000).unwrap();
        assert!(c.konst);
        assert_eq!(c.get(99_999), 250_000);
    }

    #[test]
    fn opt_column_round_trip() {
        let n = 21;
        let present = |i: usize| [0, 3, 6, 9, 12, 15, 18].contains(&i);
        let vals: Vec<u64> = (0..n).filter(|&i| present(i)).map(|i| 1000 - i as u64 * 7).collect();
        for delta in [false, true] {
            let mut b = Vec::new();
            put_opt_column(&mut b, &mut Packer::new(0), n, present, &vals, delta);
            let mut c = OptCol::default();
            let mut r = ByteReader::new(&b);
            c.read(&mut r, &mut Unpacker::default(), n, delta).unwrap();
            assert!(r.is_empty());
            let mut k = 0;
            let got: Vec<Option<u64>> = (0..n).map(|i| c.get(i, &mut k)).collect();
            let want: Vec<Option<u64>> = (0..n).map(|i| present(i).then(|| 1000 - i as u64 * 7)).collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn blobs_compress_and_respect_the_budget() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 7) as u8).collect();
        let mut out = Vec::new();
        Packer::new(1).put_blob(&mut out, &data);
        assert!(out.len() < 200, "{}", out.len());
        assert_eq!(out[0], BLOB_ZSTD);
        let mut up = Unpacker { budget: 10_000, ..Default::default() };
        assert_eq!(up.blob(&mut ByteReader::new(&out)), Some(&data[..]));
        assert_eq!(up.budget, 0);
        let mut up = Unpacker { budget: 9_999, ..Default::default() };
        assert_eq!(up.blob(&mut ByteReader::new(&out)), None);
        // Small blobs are stored.
        let mut out = Vec::new();
        Packer::new(1).put_blob(&mut out, b"abc");
        assert_eq!(out, [BLOB_STORED, 3, b'a', b'b', b'c']);
    }

    #[test]
    fn put_column_of_matches_put_column() {
        let cases: Vec<Vec<u32>> = vec![
            vec![5; 300],
            vec![0],
            (0..500).map(|i| i % 3).collect(),
            (0..500).map(|i| (i * 7) % 127).collect(),
            (0..500).map(|i| if i == 250 { 128 } else { i % 5 }).collect(),
            (0..500).map(|i| i * 1000).collect(),
            // Equal low bytes, different values: neither constant nor one byte per row.
            (0..500).map(|i| if i == 3 { 256 } else { 0 }).collect(),
            vec![256; 200],
            vec![128, 128],
        ];
        for (k, v) in cases.iter().enumerate() {
            for level in [0, 1] {
                let (mut a, mut b) = (vec![1u8], vec![1u8]);
                put_column_of(&mut a, &mut Packer::new(level), v);
                put_column(&mut b, &mut Packer::new(level), v.len(), |i| v[i] as u64);
                assert_eq!(a, b, "case {k}");
            }
        }
    }

    #[test]
    fn put_ulebs_matches_put_uleb() {
        let vals: Vec<u64> =
            (0..2000u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (i % 64)).chain([0, 127, 128, u64::MAX]).collect();
        let mut a = vec![9u8];
        put_ulebs(&mut a, vals.len(), |i| vals[i]);
        let mut b = vec![9u8];
        vals.iter().for_each(|&v| put_uleb(&mut b, v));
        assert_eq!(a, b);
        put_ulebs(&mut a, 0, |_| unreachable!());
        assert_eq!(a, b);
    }

    #[test]
    fn constant_delta_column() {
        let vals = [5u64, 10, 15, 20];
        let mut b = Vec::new();
        put_opt_column(&mut b, &mut Packer::new(0), 4, |_| true, &vals, true);
        let mut c = OptCol::default();
        c.read(&mut ByteReader::new(&b), &mut Unpacker::default(), 4, true).unwrap();
        let mut k = 0;
        assert_eq!((0..4).map(|i| c.get(i, &mut k).unwrap()).collect::<Vec<_>>(), vals);
    }
}
