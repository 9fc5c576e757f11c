//! Writing `.npy` files (format 1.0): a header naming dtype and shape, then the raw
//! little-endian data. Hand-written because it is twenty lines and the data is already a
//! byte buffer; the npy crates want typed element iterators.

use std::io::Write;

use cogfeed_tiff::DType;

/// Writes `data` (C order, little-endian) as an array of `dtype` and `shape`.
pub fn write_npy(mut w: impl Write, dtype: DType, shape: &[usize], data: &[u8]) -> std::io::Result<()> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
        dtype.npy_descr(),
        shape_text
    );
    // Magic (6) + version (2) + length (2) + header + newline, padded to 64 bytes.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    w.write_all(b"\x93NUMPY\x01\x00")?;
    w.write_all(&(header.len() as u16).to_le_bytes())?;
    w.write_all(header.as_bytes())?;
    w.write_all(data)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_aligned_and_parsable() {
        let mut out = Vec::new();
        write_npy(&mut out, DType::U16, &[2, 3, 4], &[0u8; 48]).unwrap();
        assert_eq!(&out[..6], b"\x93NUMPY");
        let hlen = u16::from_le_bytes([out[8], out[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        let header = std::str::from_utf8(&out[10..10 + hlen]).unwrap();
        assert!(header.contains("'descr': '<u2'"));
        assert!(header.contains("'shape': (2, 3, 4)"));
        assert_eq!(out.len(), 10 + hlen + 48);
    }
}
