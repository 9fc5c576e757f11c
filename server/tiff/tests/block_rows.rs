//! Row-limited decodes against whole ones on the committed GDAL-written fixtures (every
//! codec, predictor, sample type, tiled and striped): a block's top `n` rows decoded alone
//! are byte for byte the whole block's first `n` rows, whether the codec stops early
//! (Deflate, none) or decodes whole and cuts.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

use std::sync::Arc;

use cogfeed_tiff::{Cog, MemoryReader, decode};

fn fixtures() -> Vec<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tif");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tif"))
        .collect();
    files.sort();
    files
}

#[test]
fn top_rows_equal_the_whole_blocks_first_rows() {
    futures::executor::block_on(top_rows_equal())
}

async fn top_rows_equal() {
    let (mut compared, mut early) = (0, 0);
    for path in fixtures() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let reader = Arc::new(MemoryReader::new(name.clone(), std::fs::read(&path).unwrap()));
        let Ok(cog) = Cog::open(reader, Default::default()).await else {
            continue;
        };
        let level = cog.level(0).unwrap().clone();
        if decode::check_supported(&level).is_err() {
            continue;
        }
        let blocks: Vec<usize> = (0..level.offsets.len().min(3)).collect();
        let raw = cog.fetch_blocks(0, &blocks).await.unwrap();
        let whole = cog.decode_blocks(0, blocks.clone(), raw.clone()).await.unwrap();
        let shape = decode::block_shape(&level, 0);
        let row_bytes = shape.cols * shape.samples * level.dtype.size();
        for ((&b, raw), whole) in blocks.iter().zip(raw).zip(whole) {
            let rows = decode::block_shape(&level, b).rows;
            for n in [1, rows / 3, rows.saturating_sub(1), rows, rows + 5] {
                let top = cog.decode_block_rows(0, b, raw.clone(), n).await.unwrap();
                let want = n.min(rows) * row_bytes;
                assert_eq!(top.len(), want, "{name} block {b}: {n} rows");
                assert_eq!(
                    top[..],
                    whole[..want],
                    "{name} block {b}: {n} rows differ from the whole's"
                );
                compared += 1;
            }
        }
        early += usize::from(decode::decodes_rows(&level));
    }
    assert!(compared > 100, "only {compared} row-limited decodes compared");
    assert!(early >= 5, "only {early} fixtures decode rows early");
    eprintln!("{compared} row-limited decodes compared, {early} fixtures stop early");
}

#[test]
fn a_truncated_deflate_block_is_an_error_not_a_short_tile() {
    futures::executor::block_on(truncated())
}

async fn truncated() {
    let path = fixtures()
        .into_iter()
        .find(|p| p.to_string_lossy().contains("deflate_uint16_p2_pixel_cog"))
        .unwrap();
    let reader = Arc::new(MemoryReader::new("f", std::fs::read(&path).unwrap()));
    let cog = Cog::open(reader, Default::default()).await.unwrap();
    let raw = cog.fetch_blocks(0, &[0]).await.unwrap().remove(0);
    let rows = decode::block_shape(cog.level(0).unwrap(), 0).rows;
    // The first few bytes of the stream cannot hold the block's top half.
    let cut = raw.slice(..raw.len().min(16));
    let err = cog.decode_block_rows(0, 0, cut, rows / 2).await.unwrap_err();
    assert!(err.to_string().contains("decoded"), "{err}");
}
