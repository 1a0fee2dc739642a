//! Listing a directory: READDIR and READDIRPLUS with cookie iteration
//! (RFC 1813 §3.3.16, §3.3.17).
//!
//! §3.3.16: the first request has cookie 0 and a zero `cookieverf`; each following
//! request sends the cookie of the last entry received "and the cookieverf as returned
//! by the server". The listing ends when the server says `eof`. A server that returns
//! neither an entry nor `eof` would make us loop, so that is
//! [`ProtocolViolation::EmptyReaddir`]. A verifier the server no longer honours is
//! NFS3ERR_BAD_COOKIE, returned to the caller (who may restart from cookie 0).

use nfs3::{CookieVerf3, Fattr3, NfsFh3};
use xdr::Bytes;

use crate::error::{Error, ProtocolViolation, Result};
use crate::nfs::NfsClient;

/// One directory entry, from READDIR (name, fileid, cookie) or READDIRPLUS (also
/// attributes and handle, when the server returns them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// File number.
    pub fileid: u64,
    /// Name, raw bytes (a slice of the reply buffer).
    pub name: Bytes,
    /// Cookie to resume after this entry.
    pub cookie: u64,
    /// Attributes (READDIRPLUS only, and only if the server sent them).
    pub attributes: Option<Fattr3>,
    /// Handle (READDIRPLUS only, and only if the server sent it).
    pub handle: Option<NfsFh3>,
}

/// Sizes of READDIR / READDIRPLUS requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadDirSizes {
    /// READDIR `count` and READDIRPLUS `dircount`: bytes of directory information.
    pub dircount: u32,
    /// READDIRPLUS `maxcount`: bytes of the whole reply.
    pub maxcount: u32,
}

impl ReadDirSizes {
    /// Sizes from FSINFO's `dtpref`: `dircount` = `dtpref`, `maxcount` = 8 × that
    /// (room for attributes and handles), at most `rtmax`.
    pub fn from_dtpref(dtpref: u32, rtmax: u32) -> Self {
        let dircount = dtpref.clamp(1024, 64 * 1024);
        ReadDirSizes {
            dircount,
            maxcount: dircount.saturating_mul(8).min(rtmax.max(dircount)),
        }
    }
}

impl Default for ReadDirSizes {
    fn default() -> Self {
        ReadDirSizes::from_dtpref(8192, 1024 * 1024)
    }
}

/// A cursor over a directory's entries, one READDIR(PLUS) reply at a time.
#[derive(Debug)]
pub struct DirReader {
    nfs: NfsClient,
    dir: NfsFh3,
    plus: bool,
    sizes: ReadDirSizes,
    cookie: u64,
    verf: CookieVerf3,
    eof: bool,
}

impl DirReader {
    /// A cursor at the start of `dir`; `plus` selects READDIRPLUS.
    pub fn new(nfs: NfsClient, dir: NfsFh3, plus: bool, sizes: ReadDirSizes) -> Self {
        DirReader {
            nfs,
            dir,
            plus,
            sizes,
            cookie: 0,
            verf: [0; nfs3::NFS3_COOKIEVERFSIZE],
            eof: false,
        }
    }

    /// The cookie the next request will resume after (0 at the start).
    pub fn cookie(&self) -> u64 {
        self.cookie
    }

    /// The next batch of entries, or `None` once the server has said `eof`.
    /// `.` and `..` are returned as the server sends them.
    pub async fn next_batch(&mut self) -> Result<Option<Vec<DirEntry>>> {
        if self.eof {
            return Ok(None);
        }
        let (verf, entries, eof) = if self.plus {
            let ok = self
                .nfs
                .readdirplus(
                    &self.dir,
                    self.cookie,
                    self.verf,
                    self.sizes.dircount,
                    self.sizes.maxcount,
                )
                .await?;
            let entries: Vec<DirEntry> = ok
                .reply
                .entries
                .into_iter()
                .map(|e| DirEntry {
                    fileid: e.fileid,
                    name: e.name.0,
                    cookie: e.cookie,
                    attributes: e.name_attributes,
                    handle: e.name_handle,
                })
                .collect();
            (ok.cookieverf, entries, ok.reply.eof)
        } else {
            let ok = self
                .nfs
                .readdir(&self.dir, self.cookie, self.verf, self.sizes.dircount)
                .await?;
            let entries: Vec<DirEntry> = ok
                .reply
                .entries
                .into_iter()
                .map(|e| DirEntry {
                    fileid: e.fileid,
                    name: e.name.0,
                    cookie: e.cookie,
                    attributes: None,
                    handle: None,
                })
                .collect();
            (ok.cookieverf, entries, ok.reply.eof)
        };
        match entries.last() {
            Some(last) => self.cookie = last.cookie,
            None if !eof => return Err(Error::Protocol(ProtocolViolation::EmptyReaddir)),
            None => {}
        }
        self.verf = verf;
        self.eof = eof;
        Ok(Some(entries))
    }

    /// Every remaining entry.
    pub async fn collect_all(mut self) -> Result<Vec<DirEntry>> {
        let mut all = Vec::new();
        while let Some(batch) = self.next_batch().await? {
            all.extend(batch);
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_from_dtpref_are_bounded() {
        let s = ReadDirSizes::from_dtpref(8192, 1 << 20);
        assert_eq!(
            s,
            ReadDirSizes {
                dircount: 8192,
                maxcount: 65536
            }
        );
        // A tiny or huge dtpref is clamped; maxcount never exceeds rtmax (but is at
        // least dircount).
        assert_eq!(ReadDirSizes::from_dtpref(0, 1 << 20).dircount, 1024);
        assert_eq!(ReadDirSizes::from_dtpref(u32::MAX, 1 << 20).dircount, 65536);
        let small = ReadDirSizes::from_dtpref(8192, 4096);
        assert_eq!(small.maxcount, 8192);
    }
}
