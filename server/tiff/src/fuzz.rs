//! One hostile file through everything the reader does with untrusted bytes: header
//! parsing, block decoding and pasting. Shared by the `cargo fuzz` target
//! (`server/tiff/fuzz`) and the corpus replay test, so both exercise exactly the same code.

use bytes::Bytes;

use super::header::{self, Limits};
use super::ifd::SparseBytes;
use super::window::{self, WindowRequest};
use super::{Raster, decode};

/// Blocks decoded per level (the first ones and the last one), to keep each run short.
const BLOCKS_PER_LEVEL: usize = 4;
/// Levels looked at.
const LEVELS: usize = 3;

/// Parses `data` as a whole TIFF and decodes a few blocks of its first levels, pasting each
/// into a window over it. Returns how many blocks decoded cleanly; errors are expected and
/// ignored, a panic is a bug.
pub fn exercise(data: &[u8]) -> usize {
    let mut src = SparseBytes::new(data.len() as u64);
    src.insert(0, Bytes::copy_from_slice(data));
    // Small limits: a fuzzer must not spend its time on legitimately huge allocations.
    let limits = Limits {
        max_block_bytes: 4 << 20,
        max_blocks: 1 << 16,
        ..Limits::default()
    };
    let Ok(header) = header::parse_header(&src, &limits) else {
        return 0;
    };
    let mut decoded = 0;
    for (level_no, level) in header.levels.iter().enumerate().take(LEVELS) {
        if decode::check_supported(level).is_err() {
            continue;
        }
        let count = level.offsets.len();
        let picks = (0..count.min(BLOCKS_PER_LEVEL)).chain(count.checked_sub(1));
        for index in picks {
            let Some(range) = level.block_range(index) else {
                continue;
            };
            let (start, end) = (range.start as usize, range.end as usize);
            if end > data.len() || start > end {
                continue;
            }
            let raw = &data[start..end];
            // A row-limited decode of hostile bytes ends cleanly too, whatever the whole does.
            let top = decode::decode_block_rows(level, level_no, index, raw, 3);
            let Ok(block) = decode::decode_block(level, level_no, index, raw) else {
                continue;
            };
            // Where the whole block decodes, its top rows are exactly the whole's first rows.
            if let Ok(top) = top {
                assert!(
                    block.starts_with(&top),
                    "row-limited decode differs from the whole's top rows"
                );
            }
            decoded += 1;
            paste_block(level, index, &block);
        }
    }
    decoded
}

/// Pastes `block` into a window covering its first rows and columns, as a read would.
fn paste_block(level: &header::Level, index: usize, block: &[u8]) {
    let req = WindowRequest {
        level: 0,
        col: 0,
        row: 0,
        width: level.width.min(64),
        height: level.height.min(64),
        bands: None,
    };
    let Ok(bands) = window::validate(level, &req, 64 << 20) else {
        return;
    };
    let es = level.dtype.size();
    let mut out = Raster {
        dtype: level.dtype,
        bands: bands.len(),
        height: req.height as usize,
        width: req.width as usize,
        data: vec![0u8; bands.len() * req.height as usize * req.width as usize * es],
    };
    if window::blocks_for(level, &req, &bands).contains(&index) {
        window::paste(level, index, block, &req, &bands, &mut out);
    }
}
