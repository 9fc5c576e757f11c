//! CCITT bilevel codecs (Modified Huffman RLE, Group 3, Group 4) into packed 1-bit rows,
//! as libtiff delivers them (1 = black for MinIsWhite files is left to the caller: values
//! are returned as stored).

use super::codec::{Compression, Produced};

/// Whether CCITT decoding is built in.
pub const AVAILABLE: bool = false;

/// Decodes a CCITT block of `cols` x `rows` into `out` (rows of `ceil(cols/8)` bytes).
pub fn decode(kind: Compression, input: &[u8], cols: usize, rows: usize, out: &mut [u8]) -> Produced {
    let _ = (kind, input, cols, rows, out);
    Err("ccitt decoding not available".into())
}
