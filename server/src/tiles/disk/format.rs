//! One disk-tier entry as bytes: a fixed header (magic, format, the key's digest, the
//! payload's length and CRC-32) and the compressed tile. Pure: no I/O.
//!
//! A file is served only when its header names the key asked for and its payload has the
//! length and checksum the header promises, so a torn or half-written file (a crash
//! between write and rename, a disk that lost the tail) is detected and never decoded.
//! Keys are stored as a SHA-256 digest: no URL (which may carry a signature) ever reaches
//! the disk.

use sha2::{Digest as _, Sha256};

use crate::tiles::TileKey;

/// The key of an entry: SHA-256 of its object's URL and version, level and block.
pub type Digest = [u8; 32];

const MAGIC: &[u8; 4] = b"CFGT";
const FORMAT: u32 = 1;
/// Bytes before the payload.
pub const HEADER_LEN: usize = 4 + 4 + 32 + 8 + 4;

/// Why a file is not a valid entry for the key asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Corrupt {
    #[error("entry shorter than its header")]
    Short,
    #[error("not a cogfeed tile entry (magic or format)")]
    Foreign,
    #[error("entry is for another tile")]
    OtherKey,
    #[error("payload length {found} where the header says {expected}")]
    Length { expected: u64, found: u64 },
    #[error("payload checksum mismatch")]
    Checksum,
}

/// The digest naming `key` on disk (length-prefixed fields: no two keys share one text).
pub fn digest(key: &TileKey) -> Digest {
    let mut h = Sha256::new();
    h.update(b"cogfeed-tile\0");
    for part in [key.object.as_bytes(), key.version.as_bytes()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.update(key.level.to_le_bytes());
    h.update(key.block.to_le_bytes());
    h.finalize().into()
}

/// The file name of `digest`: its hex, under a two-hex-digit directory.
pub fn relative_path(digest: &Digest) -> (String, String) {
    let name = hex::encode(digest);
    (name[..2].to_string(), name)
}

/// The digest a file name spells, if it is one of ours.
pub fn parse_name(name: &str) -> Option<Digest> {
    let mut out = [0u8; 32];
    (name.len() == 64 && hex::decode_to_slice(name, &mut out).is_ok()).then_some(out)
}

/// The header of an entry holding `payload` for `digest`.
pub fn header(digest: &Digest, payload: &[u8]) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    out[..4].copy_from_slice(MAGIC);
    out[4..8].copy_from_slice(&FORMAT.to_le_bytes());
    out[8..40].copy_from_slice(digest);
    out[40..48].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    out[48..52].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out
}

/// The payload of `file` if it is a whole, intact entry for `digest`.
pub fn payload<'a>(file: &'a [u8], digest: &Digest) -> Result<&'a [u8], Corrupt> {
    if file.len() < HEADER_LEN {
        return Err(Corrupt::Short);
    }
    if &file[..4] != MAGIC || file[4..8] != FORMAT.to_le_bytes() {
        return Err(Corrupt::Foreign);
    }
    if file[8..40] != digest[..] {
        return Err(Corrupt::OtherKey);
    }
    let expected = u64::from_le_bytes(file[40..48].try_into().unwrap_or_default());
    let body = &file[HEADER_LEN..];
    if body.len() as u64 != expected {
        return Err(Corrupt::Length {
            expected,
            found: body.len() as u64,
        });
    }
    let crc = u32::from_le_bytes(file[48..52].try_into().unwrap_or_default());
    if crc32fast::hash(body) != crc {
        return Err(Corrupt::Checksum);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn key(url: &str, version: &str, block: usize) -> TileKey {
        TileKey::new(&Arc::from(url), &Arc::from(version), 0, block)
    }

    fn entry(d: &Digest, payload: &[u8]) -> Vec<u8> {
        let mut f = header(d, payload).to_vec();
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn an_intact_entry_gives_back_its_payload() {
        let d = digest(&key("s3://b/a.tif", "e1", 4));
        let f = entry(&d, b"tile bytes");
        assert_eq!(payload(&f, &d).unwrap(), b"tile bytes");
        assert_eq!(payload(&entry(&d, b""), &d).unwrap(), b"");
    }

    #[test]
    fn torn_damaged_and_foreign_files_are_refused() {
        let d = digest(&key("s3://b/a.tif", "e1", 4));
        let f = entry(&d, &[9u8; 1000]);
        for cut in [0, 10, HEADER_LEN, HEADER_LEN + 999] {
            assert!(payload(&f[..cut], &d).is_err(), "torn at {cut}");
        }
        let mut flipped = f.clone();
        flipped[HEADER_LEN + 500] ^= 1;
        assert_eq!(payload(&flipped, &d), Err(Corrupt::Checksum));
        let mut longer = f.clone();
        longer.push(0);
        assert!(matches!(payload(&longer, &d), Err(Corrupt::Length { .. })));
        let other = digest(&key("s3://b/a.tif", "e1", 5));
        assert_eq!(payload(&f, &other), Err(Corrupt::OtherKey));
        let mut foreign = f;
        foreign[0] = b'X';
        assert_eq!(payload(&foreign, &d), Err(Corrupt::Foreign));
    }

    #[test]
    fn digests_separate_objects_versions_levels_and_blocks() {
        let base = digest(&key("s3://b/a.tif", "e1", 4));
        assert_ne!(base, digest(&key("s3://b/a.tif", "e2", 4)));
        assert_ne!(base, digest(&key("s3://b/a.tif", "e1", 5)));
        assert_ne!(base, digest(&key("s3://b/a.ti", "fe1", 4)));
        let mut level = key("s3://b/a.tif", "e1", 4);
        level.level = 1;
        assert_ne!(base, digest(&level));
    }

    #[test]
    fn names_round_trip_and_strangers_are_ignored() {
        let d = digest(&key("s3://b/a.tif", "e1", 4));
        let (dir, name) = relative_path(&d);
        assert_eq!(&name[..2], dir);
        assert_eq!(parse_name(&name), Some(d));
        assert_eq!(parse_name("notes.txt"), None);
        assert_eq!(parse_name(&"zz".repeat(32)), None);
    }
}
