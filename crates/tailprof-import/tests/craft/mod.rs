//! Hand-built perf.data files for tests of damaged input (shared by
//! `tailprof-import/tests/hostile.rs`, the CLI security tests and the fuzz seeds).
#![allow(dead_code)]

pub const PERF_RECORD_SAMPLE: u32 = 9;
pub const PERF_RECORD_AUXTRACE: u32 = 71;
pub const ATTR_SIZE: usize = 128;

pub fn rec(out: &mut Vec<u8>, ty: u32, misc: u16, body: &[u8]) {
    out.extend_from_slice(&ty.to_le_bytes());
    out.extend_from_slice(&misc.to_le_bytes());
    out.extend_from_slice(&((8 + body.len()) as u16).to_le_bytes());
    out.extend_from_slice(body);
}

pub fn sample(out: &mut Vec<u8>, ip: u64, time: u64) {
    let mut b = Vec::new();
    b.extend_from_slice(&ip.to_le_bytes());
    b.extend_from_slice(&42u32.to_le_bytes()); // pid
    b.extend_from_slice(&42u32.to_le_bytes()); // tid
    b.extend_from_slice(&time.to_le_bytes());
    rec(out, PERF_RECORD_SAMPLE, 2, &b);
}

/// An AUXTRACE record declaring `aux` bytes of AUX data (which follow it in the file).
pub fn auxtrace(out: &mut Vec<u8>, aux: u64) {
    let mut b = Vec::new();
    b.extend_from_slice(&aux.to_le_bytes()); // size
    b.extend_from_slice(&0u64.to_le_bytes()); // offset
    b.extend_from_slice(&7u64.to_le_bytes()); // reference
    b.extend_from_slice(&0u32.to_le_bytes()); // idx
    b.extend_from_slice(&42u32.to_le_bytes()); // tid
    b.extend_from_slice(&0u32.to_le_bytes()); // cpu
    b.extend_from_slice(&0u32.to_le_bytes()); // reserved
    rec(out, PERF_RECORD_AUXTRACE, 0, &b);
}

/// A file-mode perf.data (one cpu-clock event sampling IP|TID|TIME) around `data`.
pub fn perf_data_file(data: &[u8]) -> Vec<u8> {
    let mut attr = vec![0u8; ATTR_SIZE];
    attr[0..4].copy_from_slice(&1u32.to_le_bytes()); // PERF_TYPE_SOFTWARE
    attr[4..8].copy_from_slice(&(ATTR_SIZE as u32).to_le_bytes());
    attr[16..24].copy_from_slice(&100_000u64.to_le_bytes()); // sample_period
    attr[24..32].copy_from_slice(&7u64.to_le_bytes()); // IP | TID | TIME
    let file_attr_size = ATTR_SIZE + 16;
    let attrs_off = 104u64;
    let data_off = attrs_off + file_attr_size as u64;
    let mut f = Vec::new();
    f.extend_from_slice(b"PERFILE2");
    for v in [104u64, file_attr_size as u64, attrs_off, file_attr_size as u64, data_off, data.len() as u64, 0, 0, 0, 0, 0, 0] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    assert_eq!(f.len(), 104);
    f.extend_from_slice(&attr);
    f.extend_from_slice(&[0u8; 16]); // no id list
    f.extend_from_slice(data);
    f
}

/// A 24 KB file whose AUXTRACE record declares `declared` bytes.
pub fn huge_auxtrace_file(declared: u64) -> Vec<u8> {
    let mut data = Vec::new();
    for i in 0..10 {
        sample(&mut data, 0x1000 + i, 1_000 + i);
    }
    auxtrace(&mut data, declared);
    data.resize(24 * 1024, 0);
    perf_data_file(&data)
}

/// A small intact perf.data: 10 samples.
pub fn small_valid_file() -> Vec<u8> {
    let mut data = Vec::new();
    for i in 0..10 {
        sample(&mut data, 0x1000 + i, 1_000 + i);
    }
    perf_data_file(&data)
}
