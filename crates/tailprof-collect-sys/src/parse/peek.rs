//! Timestamp and event of a record without decoding the rest (the merge orders records
//! by it).

use super::{rd_u64, record_type, Decoder, ParseError, Peek, HEADER_LEN};

impl Decoder {
    /// Timestamp and event of a record, without decoding the rest.
    #[inline]
    pub fn peek(&self, rec: &[u8]) -> Result<Peek, ParseError> {
        // The common case, a sample of a recording with one event: the same checks as
        // below, inlined.
        if let (Some(at), Some(h)) = (self.single_time_at, rec.get(..HEADER_LEN)) {
            let kind = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]);
            let size = u16::from_ne_bytes([h[6], h[7]]) as usize;
            if kind == record_type::SAMPLE && size == rec.len() {
                if let Some(t) = rec.get(at..at + 8) {
                    let time = u64::from_ne_bytes(t.try_into().expect("8 bytes"));
                    return Ok(Peek { kind, time, event: Some(0) });
                }
            }
        }
        self.peek_any(rec)
    }

    fn peek_any(&self, rec: &[u8]) -> Result<Peek, ParseError> {
        let (kind, _) = Self::check(rec)?;
        if kind == record_type::SAMPLE {
            let ev = self.sample_event(rec)?;
            let time = match self.event(Some(ev)).sample_time_at {
                Some(at) => rd_u64(rec, at)?,
                None => 0,
            };
            return Ok(Peek { kind, time, event: Some(ev) });
        }
        let ev = self.sideband_event(rec)?;
        let mut time = 0;
        if let Some(from_end) = self.event(ev).sideband_time_from_end {
            let at = rec.len().checked_sub(from_end).filter(|&a| a >= HEADER_LEN);
            time = rd_u64(rec, at.ok_or(ParseError::Truncated)?)?;
        } else if kind == record_type::FORK || kind == record_type::EXIT {
            time = rd_u64(rec, HEADER_LEN + 16)?;
        } else if kind == record_type::THROTTLE || kind == record_type::UNTHROTTLE {
            time = rd_u64(rec, HEADER_LEN)?;
        }
        Ok(Peek { kind, time, event: ev })
    }
}
