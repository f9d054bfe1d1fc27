//! Positioned reads from an open file (or bytes in tests): nothing is mapped.

use std::fs::File;
use std::io;

use crate::{Error, Result};

/// Positioned reads (`pread`) and the length, from an open file or (tests) bytes.
pub trait ReadAt {
    /// Reads up to `buf.len()` bytes at `offset`; 0 at the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// The length now (a file's, from `fstat`).
    fn size(&self) -> io::Result<u64>;
    /// Bytes really stored (a file's `st_blocks` × 512; a sparse file's holes hold none),
    /// when known.
    fn allocated(&self) -> Option<u64> {
        None
    }
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn allocated(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        self.metadata().ok().map(|m| m.blocks().saturating_mul(512))
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let Some(rest) = usize::try_from(offset).ok().and_then(|o| self.get(o..)) else { return Ok(0) };
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }
}

impl ReadAt for Vec<u8> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.as_slice().read_at(buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for &T {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        (**self).read_at(buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        (**self).size()
    }
    fn allocated(&self) -> Option<u64> {
        (**self).allocated()
    }
}

/// Fills `buf` from `offset`; a short file is [`Error::Truncated`].
pub fn read_exact_at<R: ReadAt + ?Sized>(r: &R, buf: &mut [u8], offset: u64) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let at = offset.saturating_add(done as u64);
        match r.read_at(&mut buf[done..], at) {
            Ok(0) => return Err(Error::Truncated { offset }),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(Error::Truncated { offset }),
            Err(source) => return Err(Error::Io { offset, source }),
        }
    }
    Ok(())
}

/// Reads a prefix of the file (up to `buf.len()` bytes); returns how many were read.
pub(crate) fn read_prefix<R: ReadAt + ?Sized>(r: &R, buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(Error::Io { offset: n as u64, source }),
        }
    }
    Ok(n)
}
