//! Writing TIFF: classic little-endian TIFF directories, for the writers ([`cog`] here,
//! the daemon's demo data): IFD entries with their values as little-endian bytes, an IFD's size, and an
//! IFD laid out at a known offset with its out-of-line values right after its table.

pub mod cog;

/// One IFD entry: tag, type, count, value bytes (little-endian).
pub struct Entry {
    /// Tag number.
    pub tag: u16,
    /// TIFF field type (2 ASCII, 3 SHORT, 4 LONG, 12 DOUBLE).
    pub typ: u16,
    /// Number of values (for ASCII, bytes including the terminating NUL).
    pub count: u32,
    /// The values, little-endian.
    pub bytes: Vec<u8>,
}

impl Entry {
    /// An entry of SHORT (type 3) values.
    pub fn shorts(tag: u16, v: &[u16]) -> Self {
        Self {
            tag,
            typ: 3,
            count: v.len() as u32,
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// An entry of LONG (type 4) values.
    pub fn longs(tag: u16, v: &[u32]) -> Self {
        Self {
            tag,
            typ: 4,
            count: v.len() as u32,
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// An entry of DOUBLE (type 12) values.
    pub fn doubles(tag: u16, v: &[f64]) -> Self {
        Self {
            tag,
            typ: 12,
            count: v.len() as u32,
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// An ASCII (type 2) entry: `s` and a terminating NUL.
    pub fn ascii(tag: u16, s: &str) -> Self {
        let mut bytes = s.as_bytes().to_vec();
        bytes.push(0);
        Self {
            tag,
            typ: 2,
            count: bytes.len() as u32,
            bytes,
        }
    }
}

/// Bytes of an IFD and its out-of-line values (each padded to an even length).
pub fn ifd_len(entries: &[Entry]) -> u64 {
    let table = 2 + entries.len() as u64 * 12 + 4;
    let extra: u64 = entries
        .iter()
        .filter(|e| e.bytes.len() > 4)
        .map(|e| e.bytes.len().div_ceil(2) as u64 * 2)
        .sum();
    table + extra
}

/// Appends the IFD that starts at `start`, its values right after its table.
pub fn write_ifd(out: &mut Vec<u8>, entries: &[Entry], start: u64, next: u64) {
    let mut extra_pos = start + 2 + entries.len() as u64 * 12 + 4;
    let mut extra = Vec::new();
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for e in entries {
        out.extend_from_slice(&e.tag.to_le_bytes());
        out.extend_from_slice(&e.typ.to_le_bytes());
        out.extend_from_slice(&e.count.to_le_bytes());
        if e.bytes.len() <= 4 {
            let mut v = e.bytes.clone();
            v.resize(4, 0);
            out.extend_from_slice(&v);
        } else {
            out.extend_from_slice(&(extra_pos as u32).to_le_bytes());
            extra.extend_from_slice(&e.bytes);
            if e.bytes.len() % 2 == 1 {
                extra.push(0);
            }
            extra_pos += e.bytes.len().div_ceil(2) as u64 * 2;
        }
    }
    out.extend_from_slice(&(next as u32).to_le_bytes());
    out.extend_from_slice(&extra);
}

/// GeoTIFF tags for a north-up or rotated grid (`geotransform` in GDAL order) and its EPSG
/// code: pixel scale and tie point (or the model transformation when rotated), and the
/// GeoKey directory (projected, or geographic for codes 4000–4999; area pixels).
pub fn georeferencing(t: [f64; 6], epsg: Option<u32>) -> Vec<Entry> {
    let mut e = Vec::with_capacity(3);
    if t[2] == 0.0 && t[4] == 0.0 {
        e.push(Entry::doubles(33550, &[t[1], -t[5], 0.0]));
        e.push(Entry::doubles(33922, &[0.0, 0.0, 0.0, t[0], t[3], 0.0]));
    } else {
        e.push(Entry::doubles(
            34264,
            &[
                t[1], t[2], 0.0, t[0], t[4], t[5], 0.0, t[3], 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0,
            ],
        ));
    }
    if let Some(code) = epsg {
        let code = code.min(u16::MAX as u32) as u16;
        let (model, key) = if (4000..5000).contains(&code) {
            (2, 2048)
        } else {
            (1, 3072)
        };
        e.push(Entry::shorts(
            34735,
            &[1, 1, 0, 3, 1024, 0, 1, model, 1025, 0, 1, 1, key, 0, 1, code],
        ));
    }
    e
}
