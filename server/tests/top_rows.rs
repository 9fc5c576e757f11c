//! Row-limited decodes through the shared tile cache: a window that reads only a few rows
//! at the top of a tile (a footprint spilling over the tile's upper edge) decodes those
//! rows alone, keeps them under their own entry, plans them as it reads them, and gets
//! exactly the pixels a whole decode gives; a window reaching further down decodes the
//! whole tile, which later top-row reads then use.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

use std::sync::Arc;

use cogfeed_server::metrics::Metrics;
use cogfeed_server::sampler::WindowSpec;
use cogfeed_server::tiles::{TileCache, TileObject, region};
use cogfeed_tiff::write::cog::CogWriter;
use cogfeed_tiff::{Cog, MemoryReader, OpenOptions, WindowRequest};

const TILE: u64 = 1024;
const SIDE: u64 = 2048;

/// A 2048² float32 DEFLATE COG in 1024² tiles, every pixel distinct.
async fn object(dir: &std::path::Path) -> TileObject {
    let path = dir.join("rows.tif");
    let mut w = CogWriter::create(&path, SIDE, SIDE, 1, TILE, None).unwrap();
    for ty in 0..2 {
        for tx in 0..2 {
            let data = (0..TILE * TILE)
                .map(|i| ((ty * TILE + i / TILE) * SIDE + tx * TILE + i % TILE) as f32)
                .collect();
            w.put(tx, ty, data).unwrap();
        }
    }
    w.finish().unwrap();
    let reader = Arc::new(MemoryReader::new("rows.tif", std::fs::read(&path).unwrap()));
    TileObject::new(
        "file:///rows.tif",
        Cog::open(reader, OpenOptions::default()).await.unwrap(),
    )
}

fn window(col: u64, row: u64, width: u32, height: u32) -> WindowSpec {
    WindowSpec {
        scene: 0,
        col,
        row,
        width,
        height,
        level: 0,
        padded: false,
    }
}

/// Decodes by extent, from the daemon's counters.
fn decoded(m: &Metrics, extent: &str) -> u64 {
    m.tiles_decoded.with_label_values(&[extent]).get()
}

/// What a whole-file read gives for `w`.
async fn expected(object: &TileObject, w: WindowSpec) -> Vec<u8> {
    let req = WindowRequest {
        level: 0,
        col: w.col,
        row: w.row,
        width: w.width as u64,
        height: w.height as u64,
        bands: None,
    };
    object.cog.read_window(&req).await.unwrap().data
}

#[tokio::test]
async fn a_window_over_a_tiles_top_rows_decodes_only_them() {
    let dir = tempfile::tempdir().unwrap();
    let object = object(dir.path()).await;
    let metrics = Arc::new(Metrics::new(4));
    let cache = TileCache::with_metrics(64 << 20, Some(metrics.clone()));

    // Rows 998..1038: the bottom of the first tile row, 14 rows into the second.
    let spill = window(100, 998, 32, 40);
    let planned = region::region_blocks(&object, spill, &[0]).unwrap();
    assert_eq!(planned.blocks, vec![0, 2]);
    assert_eq!(planned.top_rows, vec![0, region::TOP_ROWS_MIN as u32]);

    let got = region::read(&cache, &object, spill, &[0], 0.0).await.unwrap();
    assert_eq!(got.data, expected(&object, spill).await);
    assert_eq!((decoded(&metrics, "whole"), decoded(&metrics, "top_rows")), (1, 1));
    // The top rows are a sixteenth of the 1024-row tile's bytes.
    let top_bytes = metrics.tiles_decoded_bytes.with_label_values(&["top_rows"]).get();
    assert_eq!(top_bytes, 64 * TILE * 4);

    // Again: both from the cache.
    let again = region::read(&cache, &object, spill, &[0], 0.0).await.unwrap();
    assert_eq!(again.data, got.data);
    assert_eq!((decoded(&metrics, "whole"), decoded(&metrics, "top_rows")), (1, 1));

    // A window further down the second tile row needs the whole tile.
    let deep = window(100, 1100, 32, 40);
    assert_eq!(region::region_blocks(&object, deep, &[0]).unwrap().top_rows, vec![0]);
    let got = region::read(&cache, &object, deep, &[0], 0.0).await.unwrap();
    assert_eq!(got.data, expected(&object, deep).await);
    assert_eq!((decoded(&metrics, "whole"), decoded(&metrics, "top_rows")), (2, 1));

    // A top-rows window over a tile whose whole block is held uses the whole one.
    let top = window(0, 1024, 16, 8);
    let got = region::read(&cache, &object, top, &[0], 0.0).await.unwrap();
    assert_eq!(got.data, expected(&object, top).await);
    assert_eq!((decoded(&metrics, "whole"), decoded(&metrics, "top_rows")), (2, 1));

    // The first tile of the second row's neighbour: a fresh top-rows decode.
    let right = window(1100, 1018, 16, 16);
    let got = region::read(&cache, &object, right, &[0], 0.0).await.unwrap();
    assert_eq!(got.data, expected(&object, right).await);
    assert_eq!((decoded(&metrics, "whole"), decoded(&metrics, "top_rows")), (3, 2));
}

#[tokio::test]
async fn planned_keys_name_the_entries_the_reads_use() {
    let dir = tempfile::tempdir().unwrap();
    let object = object(dir.path()).await;
    let read = region::region_blocks(&object, window(0, 1008, 32, 32), &[0]).unwrap();
    let planned = cogfeed_server::tiles::PlannedBlocks {
        object: object.clone(),
        level: 0,
        blocks: read.blocks,
        top_rows: read.top_rows,
        sure: true,
    };
    let keys: Vec<_> = planned.keys().collect();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], object.key(0, 0));
    assert_eq!(keys[1], object.key(0, 2).top_rows(region::TOP_ROWS_MIN as u32));
    // One owner and one planned use for a block and its top rows.
    assert_eq!(keys[1].digest(), object.key(0, 2).digest());
    assert_eq!(keys[1].whole(), object.key(0, 2));
}

#[tokio::test]
async fn tiles_under_1024_rows_decode_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.tif");
    let mut w = CogWriter::create(&path, 512, 512, 1, 256, None).unwrap();
    for ty in 0..2 {
        for tx in 0..2 {
            w.put(tx, ty, vec![1.0; 256 * 256]).unwrap();
        }
    }
    w.finish().unwrap();
    let reader = Arc::new(MemoryReader::new("small.tif", std::fs::read(&path).unwrap()));
    let object = TileObject::new(
        "file:///small.tif",
        Cog::open(reader, OpenOptions::default()).await.unwrap(),
    );
    let read = region::region_blocks(&object, window(0, 250, 16, 16), &[0]).unwrap();
    assert_eq!(read.blocks, vec![0, 2]);
    assert_eq!(read.top_rows, vec![0, 0]);
}
