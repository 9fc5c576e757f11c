//! The label layer of the published sample, without I/O: a 320 × 320 footprint at 1 m in
//! EPSG:32632 warped with `mode` from a one-band class map at about 1 m in EPSG:4326 (classes
//! in blocks of 20 source pixels, as `client/bench/sample_bench.py` writes it). Prints the
//! median µs per footprint of each step over `N` footprints (default 200): mapping the
//! points, validity, the warp, and the conversion to bytes. A benchmark for issue 27, not a
//! test: `cargo run --release -p cogfeed-geo --example label_warp [N]`.

use cogfeed_geo::warp::kernel::Source;
use cogfeed_geo::warp::plan::{LevelGrid, PixelMapper, source_window};
use cogfeed_geo::warp::{MappedPoints, Mosaic, NodataTest, Resampling, validity, warp_mapped};
use cogfeed_geo::{Affine, Crs, Footprint, Transformer};
use cogfeed_tiff::DType;
use std::time::Instant;

/// The daemon's allocator: fresh buffers cost what they cost there.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The label raster's grid: the sample bench's west/north edges and pixel sizes.
const WEST: f64 = 8.31;
const NORTH: f64 = 46.94;
const DX: f64 = 1.3e-5;
const DY: f64 = 9e-6;
const BLOCK: usize = 20;

fn lcg(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    let utm = Crs::from_epsg(32632).expect("EPSG:32632");
    let geo = Crs::from_epsg(4326).expect("EPSG:4326");
    let to_pixel = Affine::from_gdal([WEST, DX, 0.0, NORTH, 0.0, -DY])
        .and_then(|a| a.inverse())
        .expect("grid");
    let level = LevelGrid {
        width: 200_000,
        height: 200_000,
        to_pixel,
    };
    let transformer = Transformer::new(&utm, &geo);
    let mut seed = 3u64;
    let (mut points_us, mut valid_us, mut warp_us, mut bytes_us) = (vec![], vec![], vec![], vec![]);
    let mut filled = 0usize;
    for k in 0..n {
        let (x0, y0) = (
            600_000.0 + (k % 17) as f64 * 533.7,
            5_190_000.0 + (k / 17) as f64 * 411.3,
        );
        let fp = Footprint::new(utm.clone(), [x0, y0, x0 + 320.0, y0 + 320.0], 1.0).expect("footprint");
        let mapper = PixelMapper {
            footprint: &fp,
            transformer: &transformer,
            level,
        };
        let window = source_window(&mapper, Resampling::Mode).expect("window");
        let (w, h) = (window.width as usize, window.height as usize);
        // Classes 1..8 in blocks of BLOCK level pixels; 255 (nodata) now and then.
        let values: Vec<f64> = (0..w * h)
            .map(|p| {
                let (c, r) = (window.col as usize + p % w, window.row as usize + p / w);
                let mut s = ((c / BLOCK) as u64) << 32 | (r / BLOCK) as u64;
                let class = 1 + lcg(&mut s) % 8;
                if lcg(&mut seed).is_multiple_of(500) {
                    255.0
                } else {
                    class as f64
                }
            })
            .collect();
        let t = Instant::now();
        let mapped = MappedPoints::new(&mapper, Resampling::Mode);
        points_us.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        let valid = validity(&values, w * h, &[NodataTest::new(DType::U8, Some(255.0))]);
        valid_us.push(t.elapsed().as_secs_f64() * 1e6);
        let src = Source {
            width: w,
            height: h,
            bands: 1,
            values: &values,
            valid: &valid,
        };
        let t = Instant::now();
        let warped = warp_mapped(&mapped, &window, &src, Resampling::Mode);
        warp_us.push(t.elapsed().as_secs_f64() * 1e6);
        filled += warped.valid.iter().filter(|v| **v).count();
        let t = Instant::now();
        let mut m = Mosaic::new(1, 320, 320);
        m.add_owned(warped);
        let bytes = m.to_bytes(DType::U8, 255.0, true);
        bytes_us.push(t.elapsed().as_secs_f64() * 1e6);
        std::hint::black_box(bytes);
    }
    println!(
        "{n} footprints of 320x320 (mode, 4326 -> 32632), median µs: points {:.0}, validity {:.0}, warp {:.0}, to bytes {:.0}; {:.1} % filled",
        median(&mut points_us),
        median(&mut valid_us),
        median(&mut warp_us),
        median(&mut bytes_us),
        100.0 * filled as f64 / (n * 320 * 320) as f64
    );
}
