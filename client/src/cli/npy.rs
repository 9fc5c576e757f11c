//! Writing received tensors as `.npy` (format 1.0) and `.npz` (a zip of `.npy` members,
//! stored uncompressed, as `numpy.savez` writes them): a header naming dtype and shape, then
//! the tensor's little-endian bytes as they came. Hand-written because it is short and the
//! data is already a byte buffer (the daemon's `npy` module does the same for its TIFF
//! sample types; the wire's dtype names, float16 included, are mapped here).

use std::io::Write;

/// The `.npy` descr of a wire dtype name (bfloat16 has none).
pub fn descr(dtype: &str) -> anyhow::Result<&'static str> {
    Ok(match dtype {
        "uint8" => "|u1",
        "int8" => "|i1",
        "uint16" => "<u2",
        "int16" => "<i2",
        "uint32" => "<u4",
        "int32" => "<i4",
        "uint64" => "<u8",
        "int64" => "<i8",
        "float16" => "<f2",
        "float32" => "<f4",
        "float64" => "<f8",
        other => anyhow::bail!("dtype {other} has no .npy type"),
    })
}

/// The `.npy` bytes of an array of wire dtype `dtype` and `shape` over `data` (C order).
pub fn npy(dtype: &str, shape: &[usize], data: &[u8]) -> anyhow::Result<Vec<u8>> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape_text}, }}",
        descr(dtype)?
    );
    // Magic (6) + version (2) + length (2) + header + newline, padded to 64 bytes.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    Ok(out)
}

/// Writes a `.npz`: each `(name, npy bytes)` as member `name.npy`, stored. Members over
/// 4 GiB (zip64) are refused; the daemon sends at most 1 GiB.
pub fn write_npz(mut w: impl Write, members: &[(String, Vec<u8>)]) -> anyhow::Result<()> {
    let mut central = Vec::new();
    let mut offset = 0u64;
    let small = |v: u64, what: &str| u32::try_from(v).map_err(|_| anyhow::anyhow!("{what} over 4 GiB"));
    for (name, bytes) in members {
        let name = format!("{name}.npy");
        let crc = crc32fast::hash(bytes);
        let size = small(bytes.len() as u64, "a member")?;
        let at = small(offset, "the archive")?;
        let name_len = u16::try_from(name.len())?;
        // Version 2.0, no flags, stored, no date (1980-01-01).
        let common = |out: &mut Vec<u8>| {
            out.extend_from_slice(&20u16.to_le_bytes());
            out.extend_from_slice(&[0, 0, 0, 0]);
            out.extend_from_slice(&[0, 0, 0x21, 0]);
            out.extend_from_slice(&crc.to_le_bytes());
            out.extend_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&name_len.to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes());
        };
        let mut local = b"PK\x03\x04".to_vec();
        common(&mut local);
        local.extend_from_slice(name.as_bytes());
        w.write_all(&local)?;
        w.write_all(bytes)?;
        central.extend_from_slice(b"PK\x01\x02");
        central.extend_from_slice(&20u16.to_le_bytes()); // made by
        common(&mut central);
        central.extend_from_slice(&[0; 6]); // comment length, disk, internal attributes
        central.extend_from_slice(&0u32.to_le_bytes()); // external attributes
        central.extend_from_slice(&at.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
        offset += (local.len() + bytes.len()) as u64;
    }
    let count = u16::try_from(members.len())?;
    let mut end = b"PK\x05\x06".to_vec();
    end.extend_from_slice(&[0; 4]); // this disk, the central directory's disk
    end.extend_from_slice(&count.to_le_bytes());
    end.extend_from_slice(&count.to_le_bytes());
    end.extend_from_slice(&small(central.len() as u64, "the directory")?.to_le_bytes());
    end.extend_from_slice(&small(offset, "the archive")?.to_le_bytes());
    end.extend_from_slice(&0u16.to_le_bytes());
    w.write_all(&central)?;
    w.write_all(&end)?;
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_header_is_aligned_and_names_dtype_and_shape() {
        let out = npy("float16", &[2, 3], &[0u8; 12]).unwrap();
        let hlen = u16::from_le_bytes([out[8], out[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        let header = std::str::from_utf8(&out[10..10 + hlen]).unwrap();
        assert!(header.contains("'descr': '<f2'") && header.contains("'shape': (2, 3)"));
        assert_eq!(out.len(), 10 + hlen + 12);
        assert!(npy("bfloat16", &[1], &[0, 0]).is_err());
    }

    #[test]
    fn npz_members_are_stored_with_their_crc() {
        let a = npy("uint8", &[3], &[1, 2, 3]).unwrap();
        let mut out = Vec::new();
        write_npz(&mut out, &[("a".into(), a.clone())]).unwrap();
        assert_eq!(&out[..4], b"PK\x03\x04");
        assert_eq!(u32::from_le_bytes(out[14..18].try_into().unwrap()), crc32fast::hash(&a));
        let end = out.len() - 22;
        assert_eq!(&out[end..end + 4], b"PK\x05\x06");
        assert_eq!(u16::from_le_bytes([out[end + 10], out[end + 11]]), 1);
    }
}
