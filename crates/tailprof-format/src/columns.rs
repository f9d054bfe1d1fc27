//! Column encodings shared by the records-chunk writer and reader (FORMAT.md §5.2).
//!
//! Owns: the *plain column* (constant, or one ULEB128 per row behind a byte-length
//! prefix), the *optional column* (presence: none / all / bitmap, then a plain column of
//! the present values), and the decoded forms [`Col`] and [`OptCol`].
//!
//! Design constraint: a constant column costs 2–11 bytes per chunk regardless of row
//! count, which is what makes constant period/cpu/event/cpumode (the common case) free.

use crate::varint::{put_uleb, unzigzag, zigzag, ByteReader};

pub const COL_CONST: u8 = 0;
pub const COL_ULEB: u8 = 1;

pub const OPT_NONE: u8 = 0;
pub const OPT_ALL: u8 = 1;
pub const OPT_BITMAP: u8 = 2;

/// Appends a plain column of `n` rows; row `i` is `get(i)`. `n` must be at least 1.
pub fn put_column(out: &mut Vec<u8>, n: usize, get: impl Fn(usize) -> u64) {
    let first = get(0);
    if (1..n).all(|i| get(i) == first) {
        out.push(COL_CONST);
        put_uleb(out, first);
        return;
    }
    out.push(COL_ULEB);
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    for i in 0..n {
        put_uleb(out, get(i));
    }
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// Appends an optional column: `present(i)` says whether row `i` has a value, `values`
/// holds the present values in row order. With `delta`, values are stored as zigzag
/// differences from the previous present value (good for addresses).
pub fn put_opt_column(
    out: &mut Vec<u8>,
    n: usize,
    present: impl Fn(usize) -> bool,
    values: &[u64],
    delta: bool,
) {
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
        out.extend_from_slice(&bits);
    }
    if delta {
        put_column(out, values.len(), |i| {
            let prev = if i == 0 { 0 } else { values[i - 1] };
            zigzag(values[i].wrapping_sub(prev) as i64)
        });
    } else {
        put_column(out, values.len(), |i| values[i]);
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
    pub fn read(&mut self, r: &mut ByteReader<'_>, n: usize) -> Option<()> {
        self.v.clear();
        match r.u8()? {
            COL_CONST => {
                self.konst = true;
                self.c = r.uleb()?;
                Some(())
            }
            COL_ULEB => {
                self.konst = false;
                let len = r.u32()? as usize;
                let bytes = r.take(len)?;
                if n > bytes.len() {
                    return None; // every row takes at least one byte
                }
                self.v.reserve(n);
                let mut cr = ByteReader::new(bytes);
                for _ in 0..n {
                    self.v.push(cr.uleb()?);
                }
                cr.is_empty().then_some(())
            }
            _ => None,
        }
    }

    /// Largest value in the column (0 for an empty non-constant column).
    pub fn max(&self) -> u64 {
        if self.konst {
            self.c
        } else {
            self.v.iter().copied().max().unwrap_or(0)
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
    pub fn read(&mut self, r: &mut ByteReader<'_>, n: usize, delta: bool) -> Option<()> {
        self.mode = r.u8()?;
        let count = match self.mode {
            OPT_NONE => return Some(()),
            OPT_ALL => n,
            OPT_BITMAP => {
                let b = r.take(n.div_ceil(8))?;
                self.bits.clear();
                self.bits.extend_from_slice(b);
                if n % 8 != 0 && b[b.len() - 1] >> (n % 8) != 0 {
                    return None; // bits past the last row must be zero
                }
                b.iter().map(|x| x.count_ones() as usize).sum()
            }
            _ => return None,
        };
        self.vals.read(r, count)?;
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
        put_column(&mut b, 100_000, |_| 250_000);
        assert_eq!(b.len(), 1 + 3);
        let mut c = Col::default();
        c.read(&mut ByteReader::new(&b), 100_000).unwrap();
        assert!(c.konst);
        assert_eq!(c.get(99_999), 250_000);
    }

    #[test]
    fn opt_column_round_trip() {
        let n = 21;
        let present = |i: usize| i % 3 == 0;
        let vals: Vec<u64> = (0..n).filter(|&i| present(i)).map(|i| 1000 - i as u64 * 7).collect();
        for delta in [false, true] {
            let mut b = Vec::new();
            put_opt_column(&mut b, n, present, &vals, delta);
            let mut c = OptCol::default();
            let mut r = ByteReader::new(&b);
            c.read(&mut r, n, delta).unwrap();
            assert!(r.is_empty());
            let mut k = 0;
            let got: Vec<Option<u64>> = (0..n).map(|i| c.get(i, &mut k)).collect();
            let want: Vec<Option<u64>> =
                (0..n).map(|i| present(i).then(|| 1000 - i as u64 * 7)).collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn constant_delta_column() {
        let vals = [5u64, 10, 15, 20];
        let mut b = Vec::new();
        put_opt_column(&mut b, 4, |_| true, &vals, true);
        let mut c = OptCol::default();
        c.read(&mut ByteReader::new(&b), 4, true).unwrap();
        let mut k = 0;
        assert_eq!((0..4).map(|i| c.get(i, &mut k).unwrap()).collect::<Vec<_>>(), vals);
    }
}
