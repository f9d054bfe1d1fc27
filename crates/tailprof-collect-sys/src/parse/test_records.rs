//! Raw records built for the decoder's unit tests.

use super::sample_type as st;
use super::*;

/// Builds a raw record: header + body words, size filled in.
pub(super) struct B(Vec<u8>);
impl B {
    pub(super) fn new(kind: u32, misc: u16) -> B {
        let mut v = Vec::new();
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(&misc.to_ne_bytes());
        v.extend_from_slice(&0u16.to_ne_bytes());
        B(v)
    }
    pub(super) fn w(mut self, xs: &[u64]) -> B {
        for x in xs {
            self.0.extend_from_slice(&x.to_ne_bytes());
        }
        self
    }
    pub(super) fn u32s(mut self, a: u32, b: u32) -> B {
        self.0.extend_from_slice(&a.to_ne_bytes());
        self.0.extend_from_slice(&b.to_ne_bytes());
        self
    }
    pub(super) fn bytes(mut self, b: &[u8]) -> B {
        self.0.extend_from_slice(b);
        self
    }
    pub(super) fn str(mut self, s: &str) -> B {
        self.0.extend_from_slice(s.as_bytes());
        self.0.resize((self.0.len() + 8) & !7, 0); // NUL, then pad to 8
        self
    }
    pub(super) fn done(mut self) -> Vec<u8> {
        let n = self.0.len() as u16;
        self.0[6..8].copy_from_slice(&n.to_ne_bytes());
        self.0
    }
}

pub(super) const BASIC: u64 = st::IP | st::TID | st::TIME | st::CPU | st::PERIOD;

pub(super) fn one(sample_type: u64) -> Decoder {
    Decoder::new(vec![Layout { sample_type, sample_id_all: true, ..Layout::default() }])
}

pub(super) fn sample(d: &Decoder, rec: &[u8]) -> Sample {
    let p = d.peek(rec).unwrap();
    let mut s = Sample::default();
    assert_eq!(d.decode(rec, p.event, 7, &mut s).unwrap(), Decoded::Sample);
    assert_eq!(p.time, s.time);
    s
}

const TRAILER: u64 = st::TID | st::TIME | st::CPU | st::IDENTIFIER;

pub(super) fn sb_decoder() -> Decoder {
    let l = Layout { sample_type: st::IP | TRAILER, sample_id_all: true, ..Layout::default() };
    let mut d = Decoder::new(vec![l.clone(), l]);
    d.add_id(500, 0);
    d.add_id(501, 1);
    d
}

pub(super) fn trailer(b: B, time: u64, cpu: u32, id: u64) -> Vec<u8> {
    b.u32s(1, 1).w(&[time]).u32s(cpu, 0).w(&[id]).done()
}

pub(super) fn record(d: &Decoder, rec: &[u8]) -> (Peek, Record) {
    let p = d.peek(rec).unwrap();
    match d.decode(rec, p.event, 9, &mut Sample::default()).unwrap() {
        Decoded::Record(r) => {
            assert_eq!(r.time(), p.time);
            (p, r)
        }
        other => panic!("{other:?}"),
    }
}
