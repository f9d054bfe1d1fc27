//! A page reader for one column chunk, fed to the parquet crate's column readers in place
//! of its own: the chunk is read with one `pread`, and zstd pages are decompressed with
//! one decompression context per thread, reused. The crate's reader builds a new
//! streaming zstd decoder (a fresh context of ~100 KiB) for every page, which was the
//! largest single cost of reading the store (a day of windows is ~120,000 pages).
//!
//! Bounded like the rest of the reader: a page must lie inside its chunk, and a page's
//! declared uncompressed size is capped at [`MAX_PAGE_BYTES`] before anything is
//! allocated. Pages other than dictionary and data pages (index pages) are skipped.
//! Other compressions than zstd and none are left to the crate's reader (the caller
//! checks [`supported`]).

use std::cell::RefCell;
use std::fs::File;
use std::os::unix::fs::FileExt;

use bytes::Bytes;
use parquet::basic::{Compression, Encoding};
use parquet::column::page::{Page, PageMetadata, PageReader};
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::format::{PageHeader, PageType};
use parquet::thrift::TSerializable;
use thrift::protocol::TCompactInputProtocol;

/// Largest uncompressed page accepted (the agent writes pages of at most ~1 MiB).
pub const MAX_PAGE_BYTES: usize = 256 << 20;

thread_local! {
    static DCTX: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

fn err(msg: impl Into<String>) -> ParquetError {
    ParquetError::General(msg.into())
}

/// Whether [`ChunkPages`] reads this chunk's compression.
pub fn supported(c: &ColumnChunkMetaData) -> bool {
    matches!(c.compression(), Compression::ZSTD(_) | Compression::UNCOMPRESSED)
}

/// The pages of one column chunk.
pub struct ChunkPages {
    data: Bytes,
    pos: usize,
    zstd: bool,
}

impl ChunkPages {
    /// Reads the chunk's bytes from `file` (of `file_len` bytes).
    pub fn new(file: &File, file_len: u64, c: &ColumnChunkMetaData) -> Result<Self> {
        let (start, len) = c.byte_range();
        if start.checked_add(len).is_none_or(|end| end > file_len) {
            return Err(err(format!("column chunk at {start}+{len} is past the end of the file ({file_len} bytes)")));
        }
        let mut buf = vec![0u8; len as usize];
        file.read_exact_at(&mut buf, start).map_err(|e| err(format!("reading a column chunk: {e}")))?;
        Ok(ChunkPages { data: Bytes::from(buf), pos: 0, zstd: matches!(c.compression(), Compression::ZSTD(_)) })
    }

    /// The next page's header and the header's length, without consuming it.
    fn header(&self) -> Result<Option<(PageHeader, usize)>> {
        if self.pos >= self.data.len() {
            return Ok(None);
        }
        let mut cur: &[u8] = &self.data[self.pos..];
        let before = cur.len();
        let h = {
            let mut prot = TCompactInputProtocol::new(&mut cur);
            PageHeader::read_from_in_protocol(&mut prot)?
        };
        Ok(Some((h, before - cur.len())))
    }

    /// Consumes the page whose header is `(h, hl)`: its (compressed) body.
    fn body(&mut self, h: &PageHeader, hl: usize) -> Result<Bytes> {
        let size = usize::try_from(h.compressed_page_size).map_err(|_| err("negative page size"))?;
        let start = self.pos + hl;
        let end = start.checked_add(size).filter(|&e| e <= self.data.len()).ok_or_else(|| err("page past the end of its column chunk"))?;
        self.pos = end;
        Ok(self.data.slice(start..end))
    }

    /// The page's bytes uncompressed; the first `keep` bytes are stored uncompressed (the
    /// levels of a v2 data page).
    fn inflate(&self, raw: Bytes, keep: usize, h: &PageHeader) -> Result<Bytes> {
        if !self.zstd {
            return Ok(raw);
        }
        let total = usize::try_from(h.uncompressed_page_size).map_err(|_| err("negative page size"))?;
        if total > MAX_PAGE_BYTES || keep > total || keep > raw.len() {
            return Err(err(format!("implausible page: {total} bytes uncompressed, {keep} of levels")));
        }
        let mut out = vec![0u8; total];
        out[..keep].copy_from_slice(&raw[..keep]);
        let n = DCTX.with(|d| -> Result<usize> {
            let mut d = d.borrow_mut();
            if d.is_none() {
                *d = Some(zstd::bulk::Decompressor::new().map_err(|e| err(format!("zstd: {e}")))?);
            }
            let dc = d.as_mut().ok_or_else(|| err("zstd context"))?;
            dc.decompress_to_buffer(&raw[keep..], &mut out[keep..]).map_err(|e| err(format!("zstd: {e}")))
        })?;
        if keep + n != total {
            return Err(err(format!("page decompressed to {} bytes, its header says {total}", keep + n)));
        }
        Ok(Bytes::from(out))
    }
}

impl Iterator for ChunkPages {
    type Item = Result<Page>;
    fn next(&mut self) -> Option<Self::Item> {
        self.get_next_page().transpose()
    }
}

impl PageReader for ChunkPages {
    fn get_next_page(&mut self) -> Result<Option<Page>> {
        loop {
            let Some((h, hl)) = self.header()? else { return Ok(None) };
            let raw = self.body(&h, hl)?;
            match h.type_ {
                PageType::DICTIONARY_PAGE => {
                    let d = h.dictionary_page_header.as_ref().ok_or_else(|| err("dictionary page without its header"))?;
                    let (n, enc, sorted) = (d.num_values, d.encoding, d.is_sorted.unwrap_or(false));
                    return Ok(Some(Page::DictionaryPage {
                        buf: self.inflate(raw, 0, &h)?,
                        num_values: n.try_into().map_err(|_| err("negative value count"))?,
                        encoding: Encoding::try_from(enc)?,
                        is_sorted: sorted,
                    }));
                }
                PageType::DATA_PAGE => {
                    let d = h.data_page_header.as_ref().ok_or_else(|| err("data page without its header"))?;
                    let (n, e, de, re) = (d.num_values, d.encoding, d.definition_level_encoding, d.repetition_level_encoding);
                    return Ok(Some(Page::DataPage {
                        buf: self.inflate(raw, 0, &h)?,
                        num_values: n.try_into().map_err(|_| err("negative value count"))?,
                        encoding: Encoding::try_from(e)?,
                        def_level_encoding: Encoding::try_from(de)?,
                        rep_level_encoding: Encoding::try_from(re)?,
                        statistics: None,
                    }));
                }
                PageType::DATA_PAGE_V2 => {
                    let d = h.data_page_header_v2.as_ref().ok_or_else(|| err("v2 data page without its header"))?;
                    let (dl, rl) = (d.definition_levels_byte_length, d.repetition_levels_byte_length);
                    if dl < 0 || rl < 0 {
                        return Err(err("negative level lengths"));
                    }
                    let compressed = d.is_compressed.unwrap_or(true);
                    let conv = |v: i32| u32::try_from(v).map_err(|_| err("negative count in a v2 page header"));
                    let page = Page::DataPageV2 {
                        num_values: conv(d.num_values)?,
                        encoding: Encoding::try_from(d.encoding)?,
                        num_nulls: conv(d.num_nulls)?,
                        num_rows: conv(d.num_rows)?,
                        def_levels_byte_len: conv(dl)?,
                        rep_levels_byte_len: conv(rl)?,
                        is_compressed: compressed,
                        statistics: None,
                        buf: if compressed { self.inflate(raw, (dl as usize).saturating_add(rl as usize), &h)? } else { raw },
                    };
                    return Ok(Some(page));
                }
                // Index pages and unknown types: skipped.
                _ => continue,
            }
        }
    }

    fn peek_next_page(&mut self) -> Result<Option<PageMetadata>> {
        loop {
            let Some((h, hl)) = self.header()? else { return Ok(None) };
            match h.type_ {
                PageType::DICTIONARY_PAGE | PageType::DATA_PAGE | PageType::DATA_PAGE_V2 => {
                    if h.type_ == PageType::DATA_PAGE && h.data_page_header.is_none()
                        || h.type_ == PageType::DATA_PAGE_V2 && h.data_page_header_v2.is_none()
                    {
                        return Err(err("data page without its header"));
                    }
                    return Ok(Some(PageMetadata::try_from(&h)?));
                }
                _ => {
                    self.body(&h, hl)?;
                }
            }
        }
    }

    fn skip_next_page(&mut self) -> Result<()> {
        if let Some((h, hl)) = self.header()? {
            self.body(&h, hl)?;
        }
        Ok(())
    }
}
