//! Which event a record belongs to: the kernel ids of the events' fds, looked up in a
//! direct table while they are dense, else by a search.

use super::{rd_u64, sample_type, Decoder, ParseError, HEADER_LEN, MAX_DENSE_IDS};

impl Decoder {
    /// Register the id the kernel reports for an fd of event `event` (PERF_EVENT_IOC_ID).
    pub fn add_id(&mut self, id: u64, event: u16) {
        if let Err(i) = self.ids.binary_search_by_key(&id, |e| e.0) {
            self.ids.insert(i, (id, event));
            self.add_dense(id, event);
        }
    }

    /// Enter a new id into `dense` (growing it), or give `dense` up.
    fn add_dense(&mut self, id: u64, event: u16) {
        if self.sparse || event == u16::MAX {
            self.sparse = true;
            self.dense = Vec::new();
            return;
        }
        let (lo, hi) = (self.ids[0].0, self.ids[self.ids.len() - 1].0);
        if hi - lo >= MAX_DENSE_IDS as u64 {
            self.sparse = true;
            self.dense = Vec::new();
            return;
        }
        if self.dense.is_empty() || id < self.dense_base {
            // The first id, or one below the others (ids usually come in order): rebuild.
            self.dense_base = lo;
            self.dense = vec![0; (hi - lo + 1) as usize];
            for &(i, e) in &self.ids {
                self.dense[(i - lo) as usize] = e + 1;
            }
            return;
        }
        let at = (id - self.dense_base) as usize;
        if at >= self.dense.len() {
            self.dense.resize(at + 1, 0);
        }
        self.dense[at] = event + 1;
    }

    #[inline]
    pub(super) fn lookup(&self, id: u64) -> Result<u16, ParseError> {
        if let Some(&e) = self.dense.get(id.wrapping_sub(self.dense_base) as usize) {
            return e.checked_sub(1).ok_or(ParseError::UnknownId(id));
        }
        match self.ids.binary_search_by_key(&id, |e| e.0) {
            Ok(i) => Ok(self.ids[i].1),
            Err(_) => Err(ParseError::UnknownId(id)),
        }
    }

    /// Which event a sample belongs to (its first u64 is the IDENTIFIER when events > 1).
    pub(super) fn sample_event(&self, rec: &[u8]) -> Result<u16, ParseError> {
        if self.single() {
            return Ok(0);
        }
        self.lookup(rd_u64(rec, HEADER_LEN)?)
    }

    /// Which event a side-band record belongs to (its last u64 is the IDENTIFIER).
    pub(super) fn sideband_event(&self, rec: &[u8]) -> Result<Option<u16>, ParseError> {
        if self.single() {
            return Ok(Some(0));
        }
        let l0 = &self.events[0].abi;
        if !l0.sample_id_all() || !l0.has(sample_type::IDENTIFIER) {
            return Ok(None);
        }
        let at = rec.len().checked_sub(8).filter(|&a| a >= HEADER_LEN).ok_or(ParseError::Truncated)?;
        self.lookup(rd_u64(rec, at)?).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use crate::parse::sample_type as st;
    use crate::parse::test_records::*;
    use crate::parse::*;

    /// The direct id table answers as the search does: ids in order, out of order,
    /// duplicated, and spread too far for a table.
    #[test]
    fn id_lookup_table_agrees_with_the_search() {
        let l = Layout { sample_type: BASIC | st::IDENTIFIER, ..Layout::default() };
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for case in 0..4 {
            let mut d = Decoder::new(vec![l.clone(), l.clone(), l.clone()]);
            let mut reg: Vec<(u64, u16)> = Vec::new();
            for k in 0..300u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let id = match case {
                    0 => 1000 + 2 * k,
                    1 => 5000 + x % 600,
                    2 if k == 299 => 1 << 40,
                    _ => 70 + x % 900,
                };
                let ev = (x % 3) as u16;
                if !reg.iter().any(|r| r.0 == id) {
                    reg.push((id, ev));
                }
                d.add_id(id, ev);
            }
            assert_eq!(d.sparse, case == 2, "case {case}");
            for id in 0..7000u64 {
                let want = reg.iter().find(|r| r.0 == id).map(|r| r.1).ok_or(ParseError::UnknownId(id));
                assert_eq!(d.lookup(id), want, "case {case} id {id}");
            }
            assert_eq!(d.lookup(u64::MAX), Err(ParseError::UnknownId(u64::MAX)));
            assert_eq!(d.lookup(1 << 40), if case == 2 { Ok(reg[reg.len() - 1].1) } else { Err(ParseError::UnknownId(1 << 40)) });
        }
    }
}
