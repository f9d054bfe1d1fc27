//! The records-chunk decoder: turns one intact records chunk back into records
//! (FORMAT.md §5).
//!
//! Owns validation of a chunk body. A chunk is decoded completely into reusable column
//! buffers *before* any record is handed out, so a chunk whose checksum is right but whose
//! contents are inconsistent (a crafted file, a writer bug) is rejected as a whole and
//! never delivers half its records. Every count is checked against the bytes that back
//! it before anything is allocated.
//!
//! Stacks (version 2, FORMAT.md §5.5): a chunk's stack section is validated with the rest
//! of the chunk; only a fully valid chunk's nodes are then interned into the decoder's
//! one [`StackTable`] for the whole read, and the new nodes are handed to the sink
//! ([`Sink::handle_stack`]) before the chunk's first record. A damaged chunk therefore adds
//! nothing, and a later chunk never depends on it.

use crate::chunk::{RawChunk, FLAG_ZSTD, MAX_RAW_BODY};
use crate::columns::{Col, OptCol, Unpacker};
use crate::encode::nodes_within_limits;
use crate::meta::{RecordsMeta, MAX_CHUNK_RECORDS};
use crate::record::{CpuMode, Flow, Frame, FrameKind, Record, Sample, Sink, StackDef, StackId, StackStatus};
use crate::sideband::get_sideband;
use crate::stack::StackTable;
use crate::timecode::TimeCodec;
use crate::varint::{unzigzag, ByteReader};

/// Reusable state for decoding records chunks.
pub struct ChunkDecoder {
    dctx: Option<zstd::bulk::Decompressor<'static>>,
    raw: Vec<u8>,
    up: Unpacker,
    n: usize,
    times: Vec<u64>,
    events: Col,
    threads: Vec<(u32, u32)>,
    thread_idx: Col,
    cpus: Col,
    periods: Col,
    cpumodes: Col,
    ip_table: Vec<u64>,
    ips: Vec<u64>,
    ip_idx: Col,
    addr: OptCol,
    weight: OptCol,
    data_src: OptCol,
    regs_count: Col,
    regs: Vec<u64>,
    sideband: Vec<(u32, Record)>,
    /// Side-band rows of kinds this build does not know, skipped, in the last chunk.
    pub skipped_rows: u64,
    /// The record handed to sinks; reused so samples cost no allocation.
    rec: Record,
    /// Format version of the trace being read (1: no stacks).
    pub version: u16,
    /// Every stack node of the chunks decoded since [`Self::reset_stacks`].
    pub stacks: StackTable,
    /// The last chunk's stack section: per local node, (parent local id, frame).
    local_nodes: Vec<(u32, Frame)>,
    frame_table: Vec<Frame>,
    frame_kinds: Col,
    /// The last chunk's stack list (local node ids), then per reference (index 0 = none)
    /// the global id.
    local_slots: Vec<u32>,
    slot_global: Vec<StackId>,
    local_to_global: Vec<StackId>,
    stack_col: Col,
    status_col: Col,
    /// Global ids first defined by the last chunk.
    new_defs: std::ops::Range<u32>,
}

impl Default for ChunkDecoder {
    fn default() -> Self {
        ChunkDecoder {
            dctx: None,
            raw: Vec::new(),
            up: Unpacker::default(),
            n: 0,
            times: Vec::new(),
            events: Col::default(),
            threads: Vec::new(),
            thread_idx: Col::default(),
            cpus: Col::default(),
            periods: Col::default(),
            cpumodes: Col::default(),
            ip_table: Vec::new(),
            ips: Vec::new(),
            ip_idx: Col::default(),
            addr: OptCol::default(),
            weight: OptCol::default(),
            data_src: OptCol::default(),
            regs_count: Col::default(),
            regs: Vec::new(),
            sideband: Vec::new(),
            skipped_rows: 0,
            rec: Record::Sample(Sample::default()),
            version: crate::chunk::FORMAT_VERSION,
            stacks: StackTable::new(),
            local_nodes: Vec::new(),
            frame_table: Vec::new(),
            frame_kinds: Col::default(),
            local_slots: Vec::new(),
            slot_global: Vec::new(),
            local_to_global: Vec::new(),
            stack_col: Col::default(),
            status_col: Col::default(),
            new_defs: 0..0,
        }
    }
}

/// Returns the decompressed (or stored) body of an intact chunk into `raw`.
/// `None` when the declared or actual sizes are wrong.
pub fn chunk_body<'a>(c: &RawChunk<'a>, dctx: &mut Option<zstd::bulk::Decompressor<'static>>, raw: &'a mut Vec<u8>) -> Option<&'a [u8]> {
    let want = c.header.raw_body_len as usize;
    if want > MAX_RAW_BODY {
        return None;
    }
    if c.header.flags & FLAG_ZSTD == 0 {
        return (c.body.len() == want).then_some(c.body);
    }
    if dctx.is_none() {
        *dctx = Some(zstd::bulk::Decompressor::new().ok()?);
    }
    let d = dctx.as_mut()?;
    raw.clear();
    // Exactly `want` bytes of room: a frame that decodes to more fails instead of growing.
    raw.reserve_exact(want);
    let res = d.decompress_to_buffer(c.body, &mut *raw);
    let raw: &'a Vec<u8> = raw;
    match res {
        Ok(got) if got == want && raw.len() == want => Some(&raw[..]),
        _ => None,
    }
}

impl ChunkDecoder {
    /// Forgets every stack node (at the start of a read).
    pub fn reset_stacks(&mut self) {
        self.stacks.clear();
        self.new_defs = 0..0;
    }

    /// Decodes an intact records chunk into the internal buffers. `None` on damage.
    pub fn decode(&mut self, c: &RawChunk<'_>) -> Option<RecordsMeta> {
        self.new_defs = 0..0;
        let meta = RecordsMeta::parse(c.meta, self.version)?;
        let mut raw = std::mem::take(&mut self.raw);
        let res = match chunk_body(c, &mut self.dctx, &mut raw) {
            Some(body) => self.decode_body(body, &meta, c.header.payload_len as usize),
            None => None,
        };
        self.raw = raw;
        res?;
        self.intern_stacks();
        Some(meta)
    }

    fn decode_body(&mut self, body: &[u8], meta: &RecordsMeta, payload_len: usize) -> Option<()> {
        let r = &mut ByteReader::new(body);
        let mut up = std::mem::take(&mut self.up);
        up.budget = MAX_RAW_BODY;
        let res = self.decode_with(r, &mut up, meta, payload_len);
        self.up = up;
        res
    }

    fn decode_with(&mut self, r: &mut ByteReader<'_>, up: &mut Unpacker, meta: &RecordsMeta, payload_len: usize) -> Option<()> {
        self.local_nodes.clear();
        self.local_slots.clear();
        if self.version >= 2 {
            self.decode_stacks(r, up, payload_len)?;
        }
        let n = r.len_at_most(MAX_CHUNK_RECORDS)?;
        if n != meta.samples as usize {
            return None;
        }
        self.n = n;
        self.times.clear();
        self.ips.clear();
        self.regs.clear();
        self.sideband.clear();
        self.skipped_rows = 0;
        let mut base = 0;
        if n > 0 {
            base = self.decode_samples(r, up, n)?;
        }
        let nsb = r.len_at_most(MAX_CHUNK_RECORDS)?;
        if n + nsb != meta.records as usize {
            return None;
        }
        let rows = up.blob(r)?;
        if nsb > rows.len() {
            return None;
        }
        let rr = &mut ByteReader::new(rows);
        let mut pos = 0u32;
        let mut prev_time = base;
        let max_ref = self.local_slots.len() as u64;
        for _ in 0..nsb {
            let (delta, rec) = get_sideband(rr, &mut prev_time, self.version, max_ref)?;
            pos = pos.checked_add(delta)?;
            if pos as usize > n {
                return None;
            }
            match rec {
                Some(rec) => self.sideband.push((pos, rec)),
                None => self.skipped_rows += 1,
            }
        }
        (rr.is_empty() && r.is_empty()).then_some(())
    }

    /// Reads and validates a stack section (FORMAT.md §5.5) into `local_nodes` and
    /// `local_slots`.
    fn decode_stacks(&mut self, r: &mut ByteReader<'_>, up: &mut Unpacker, payload_len: usize) -> Option<()> {
        let nn = r.uleb()?;
        if nn == 0 {
            return Some(());
        }
        let nn = usize::try_from(nn).ok()?;
        if !nodes_within_limits(nn, payload_len) {
            return None;
        }
        let nframes = r.uleb()?;
        if nframes == 0 || nframes > nn as u64 {
            return None;
        }
        let nframes = nframes as usize;
        let table = up.blob(r)?;
        if nframes > table.len() {
            return None;
        }
        self.frame_table.clear();
        let tr = &mut ByteReader::new(table);
        let mut ip = 0u64;
        for _ in 0..nframes {
            ip = ip.wrapping_add(tr.uleb()?);
            self.frame_table.push(Frame { ip, kind: FrameKind::User });
        }
        if !tr.is_empty() {
            return None;
        }
        self.frame_kinds.read_max(r, up, nframes, u8::MAX as u64)?;
        for (i, f) in self.frame_table.iter_mut().enumerate() {
            f.kind = FrameKind::from_u8(self.frame_kinds.get(i) as u8)?;
        }
        // Parent distances.
        let pb = up.blob(r)?;
        if nn > pb.len() {
            return None; // every node takes at least one byte
        }
        self.local_nodes.reserve(nn);
        let pr = &mut ByteReader::new(pb);
        for i in 0..nn as u64 {
            let d = pr.uleb()?;
            if d > i {
                return None; // a parent must come before its child
            }
            let parent = if d == 0 { 0 } else { (i + 1 - d) as u32 };
            self.local_nodes.push((parent, Frame::default()));
        }
        if !pr.is_empty() {
            return None;
        }
        let fb = up.blob(r)?;
        if nn > fb.len() {
            return None;
        }
        let fr = &mut ByteReader::new(fb);
        for node in self.local_nodes.iter_mut() {
            node.1 = *self.frame_table.get(usize::try_from(fr.uleb()?).ok()?)?;
        }
        if !fr.is_empty() {
            return None;
        }
        // Stack list.
        let ns = r.uleb()?;
        if ns > nn as u64 {
            return None;
        }
        let sb = up.blob(r)?;
        if ns as usize > sb.len() {
            return None;
        }
        let sr = &mut ByteReader::new(sb);
        for _ in 0..ns {
            let id = sr.uleb()?;
            if id == 0 || id > nn as u64 {
                return None;
            }
            self.local_slots.push(id as u32);
        }
        sr.is_empty().then_some(())
    }

    /// Interns the validated stack section of the last chunk into the global table and
    /// maps its references; remaps `Switch` and `Wakeup` stacks.
    fn intern_stacks(&mut self) {
        let start = self.stacks.len() as u32 + 1;
        self.local_to_global.clear();
        self.local_to_global.push(StackId::NONE);
        for &(parent, frame) in &self.local_nodes {
            let p = self.local_to_global[parent as usize];
            let g = self.stacks.intern(p, frame);
            self.local_to_global.push(g);
        }
        self.new_defs = start..self.stacks.len() as u32 + 1;
        self.slot_global.clear();
        self.slot_global.push(StackId::NONE);
        for &l in &self.local_slots {
            self.slot_global.push(self.local_to_global[l as usize]);
        }
        for (_, r) in self.sideband.iter_mut() {
            match r {
                Record::Switch(w) => w.stack = self.slot_global[w.stack.0 as usize],
                Record::Wakeup(w) => w.stack = self.slot_global[w.stack.0 as usize],
                _ => {}
            }
        }
        if self.version < 2 || self.n == 0 {
            self.stack_col = Col { konst: true, c: 0, v: Vec::new() };
            self.status_col = Col { konst: true, c: 0, v: Vec::new() };
        }
    }

    /// Hands the stack nodes first defined by the last chunk to `sink`, callers first.
    fn emit_defs(&self, sink: &mut dyn Sink) {
        for id in self.new_defs.clone() {
            if let Some((parent, frame)) = self.stacks.get(StackId(id)) {
                sink.handle_stack(&StackDef { id: StackId(id), parent, frame });
            }
        }
    }

    /// Decodes the sample columns; returns the base time.
    fn decode_samples(&mut self, r: &mut ByteReader<'_>, up: &mut Unpacker, n: usize) -> Option<u64> {
        let base = r.u64()?;
        let codec = TimeCodec::from_u8(r.u8()?)?;
        codec.decode_times(up.blob(r)?, n, base, &mut self.times)?;
        self.events.read_max(r, up, n, u16::MAX as u64)?;
        let nthreads = r.len_at_most(r.remaining() / 2)?;
        self.threads.clear();
        for _ in 0..nthreads {
            self.threads.push((r.uleb_u32()?, r.uleb_u32()?));
        }
        if nthreads == 0 {
            return None;
        }
        self.thread_idx.read_max(r, up, n, nthreads as u64 - 1)?;
        self.cpus.read_max(r, up, n, u32::MAX as u64)?;
        self.periods.read(r, up, n)?;
        self.cpumodes.read_max(r, up, n, u8::MAX as u64)?;
        let nips = r.uleb()?;
        let table = up.blob(r)?;
        if nips > table.len() as u64 {
            return None;
        }
        self.ip_table.clear();
        let tr = &mut ByteReader::new(table);
        let mut ip = 0u64;
        for _ in 0..nips {
            ip = ip.wrapping_add(unzigzag(tr.uleb()?) as u64);
            self.ip_table.push(ip);
        }
        if !tr.is_empty() {
            return None;
        }
        if self.version >= 2 && !self.local_nodes.is_empty() {
            // Index 0: the stack's leaf ip (resolved once the stack column is read).
            self.ip_table.insert(0, 0);
            self.ip_idx.read_max(r, up, n, nips)?;
        } else {
            if nips == 0 {
                return None;
            }
            self.ip_idx.read_max(r, up, n, nips - 1)?;
        }
        self.ips.reserve(n);
        if self.ip_idx.konst {
            self.ips.resize(n, self.ip_table[self.ip_idx.c as usize]);
        } else {
            let t = &self.ip_table;
            self.ips.extend(self.ip_idx.v.iter().map(|&i| t[i as usize]));
        }
        self.addr.read(r, up, n, true)?;
        self.weight.read(r, up, n, false)?;
        self.data_src.read(r, up, n, false)?;
        self.regs_count.read(r, up, n)?;
        let total = if self.regs_count.konst {
            self.regs_count.c.checked_mul(n as u64)?
        } else {
            self.regs_count.v.iter().try_fold(0u64, |a, &c| a.checked_add(c))?
        };
        let rb = up.blob(r)?;
        if total > rb.len() as u64 {
            return None;
        }
        self.regs.reserve(total as usize);
        let mut rr = ByteReader::new(rb);
        for _ in 0..total {
            self.regs.push(rr.uleb()?);
        }
        if !rr.is_empty() {
            return None;
        }
        if self.version >= 2 {
            self.stack_col.read_max(r, up, n, self.local_slots.len() as u64)?;
            self.status_col.read_max(r, up, n, u8::MAX as u64)?;
            // Samples whose ip is their stack's leaf ip.
            for i in 0..n {
                if !self.local_nodes.is_empty() && self.ip_idx.get(i) == 0 {
                    let slot = self.stack_col.get(i) as usize;
                    let local = *self.local_slots.get(slot.checked_sub(1)?)?;
                    self.ips[i] = self.local_nodes[local as usize - 1].1.ip;
                }
            }
        }
        Some(base)
    }

    /// Fills `s` with sample `i` of the decoded chunk. `k` holds the running indices of
    /// the optional columns and of the register array.
    #[inline]
    fn fill(&self, s: &mut Sample, i: usize, k: &mut [usize; 4]) {
        s.time = self.times[i];
        s.event = self.events.get(i) as u16;
        let (pid, tid) = self.threads[self.thread_idx.get(i) as usize];
        s.pid = pid;
        s.tid = tid;
        s.cpu = self.cpus.get(i) as u32;
        s.period = self.periods.get(i);
        s.cpumode = CpuMode::from_u8(self.cpumodes.get(i) as u8);
        s.ip = self.ips[i];
        s.addr = self.addr.get(i, &mut k[0]);
        s.weight = self.weight.get(i, &mut k[1]);
        s.data_src = self.data_src.get(i, &mut k[2]);
        let nr = self.regs_count.get(i) as usize;
        s.regs.clear();
        if nr != 0 {
            s.regs.extend_from_slice(&self.regs[k[3]..k[3] + nr]);
            k[3] += nr;
        }
        s.stack = self.slot_global[self.stack_col.get(i) as usize];
        s.stack_status = StackStatus::from_u8(self.status_col.get(i) as u8);
    }

    /// Hands every record of the decoded chunk to `sink`, in the original order, until
    /// the sink answers [`Flow::Stop`] (returned: the rest of the chunk is not delivered).
    pub fn emit(&mut self, sink: &mut dyn Sink) -> Flow {
        self.emit_defs(sink);
        let mut rec = std::mem::replace(&mut self.rec, Record::Sample(Sample::default()));
        let mut k = [0usize; 4];
        let mut sb = 0;
        let mut flow = Flow::Continue;
        'records: for i in 0..self.n {
            while let Some((pos, r)) = self.sideband.get(sb) {
                if *pos as usize != i {
                    break;
                }
                sb += 1;
                if sink.handle_record(r).is_stop() {
                    flow = Flow::Stop;
                    break 'records;
                }
            }
            if let Record::Sample(s) = &mut rec {
                self.fill(s, i, &mut k);
            }
            if sink.handle_record(&rec).is_stop() {
                flow = Flow::Stop;
                break;
            }
        }
        if !flow.is_stop() {
            for (_, r) in &self.sideband[sb..] {
                if sink.handle_record(r).is_stop() {
                    flow = Flow::Stop;
                    break;
                }
            }
        }
        self.rec = rec;
        flow
    }

    /// Hands every sample of the decoded chunk to `f`, in order.
    pub fn emit_samples(&mut self, f: &mut dyn FnMut(&Sample)) {
        let mut rec = std::mem::replace(&mut self.rec, Record::Sample(Sample::default()));
        if let Record::Sample(s) = &mut rec {
            let mut k = [0usize; 4];
            for i in 0..self.n {
                self.fill(s, i, &mut k);
                f(s);
            }
        }
        self.rec = rec;
    }
}
