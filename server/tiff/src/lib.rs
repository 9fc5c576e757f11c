//! Cloud-Optimized GeoTIFF reading: header, tile grid, codecs, window reads.
//!
//! The format code knows nothing about object stores: it reads through a [`RangeReader`].
//! Header reads start with one prefix request and grow only when IFDs or tag arrays lie
//! beyond it. Window reads fetch the blocks they touch with coalesced, parallel range
//! requests, decode them on the CPU pool (rayon, sized to the cores) and paste them into a
//! band-major raster in the native sample type.

#![deny(missing_docs)]

pub mod ccitt;
pub mod coalesce;
pub mod codec;
pub mod decode;
pub mod dtype;
pub mod error;
pub mod fuzz;
pub mod geo;
pub mod header;
pub mod ifd;
pub mod image_codecs;
pub mod predictor;
pub mod samples;
pub mod source;
pub mod window;
pub mod write;

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

pub use coalesce::CoalescePolicy;
pub use codec::Compression;
pub use dtype::DType;
pub use error::{TiffError, TiffResult};
pub use header::{Header, Level, Limits, Planar};
pub use source::{MemoryReader, Prefix, RangeReader, ReadError};
pub use window::{Raster, WindowRequest};

use ifd::{SparseBytes, Step};

#[cfg(target_endian = "big")]
compile_error!("cogfeed writes little-endian tensors and assumes a little-endian host");

/// How to open and read a file.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Bytes fetched by the first header request.
    pub prefix_bytes: u64,
    /// Header limits.
    pub limits: Limits,
    /// Range coalescing for block reads.
    pub coalesce: CoalescePolicy,
    /// Range requests in flight per window read.
    pub fetch_concurrency: usize,
    /// Largest window a single read may return, in bytes.
    pub max_window_bytes: u64,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            prefix_bytes: 32 * 1024,
            limits: Limits::default(),
            coalesce: CoalescePolicy::default(),
            fetch_concurrency: 32,
            max_window_bytes: 2 * 1024 * 1024 * 1024,
        }
    }
}

/// Header fetches allowed before giving up on a file (each at least doubles the prefix or
/// reads one far IFD).
const MAX_HEADER_FETCHES: usize = 2 * ifd::MAX_IFDS;

/// An opened COG/GeoTIFF: its header and the reader to fetch blocks with.
#[derive(Debug, Clone)]
pub struct Cog {
    reader: Arc<dyn RangeReader>,
    header: Arc<Header>,
    version: Option<String>,
    options: OpenOptions,
    requests: Arc<AtomicU64>,
    header_requests: u64,
}

impl Cog {
    /// The largest window (in bytes) this object's reads may produce.
    pub fn max_window_bytes(&self) -> u64 {
        self.options.max_window_bytes
    }

    /// Reads and validates the header.
    pub async fn open(reader: Arc<dyn RangeReader>, options: OpenOptions) -> TiffResult<Self> {
        let prefix = reader.read_prefix(options.prefix_bytes).await?;
        let size = prefix.object_size;
        let mut src = SparseBytes::new(size);
        src.insert(0, prefix.bytes);
        let mut fetches = 1u64;
        let header = loop {
            match header::parse_header(&src, &options.limits) {
                Ok(h) => break h,
                Err(Step::Fail(e)) => return Err(e),
                Err(Step::Need(need)) => {
                    if fetches as usize > MAX_HEADER_FETCHES {
                        return Err(TiffError::TooLarge(format!(
                            "header needs more than {MAX_HEADER_FETCHES} reads"
                        )));
                    }
                    let range = header_fetch_range(&src, need, options.prefix_bytes);
                    let bytes = reader.read_range(range.clone()).await?;
                    if (bytes.len() as u64) < range.end - range.start {
                        return Err(TiffError::Malformed("object shorter than its reported size".into()));
                    }
                    src.insert(range.start, bytes);
                    fetches += 1;
                }
            }
        };
        Ok(Self {
            reader,
            header: Arc::new(header),
            version: prefix.version,
            options,
            requests: Arc::new(AtomicU64::new(0)),
            header_requests: fetches,
        })
    }

    /// The object's name (URL).
    pub fn name(&self) -> &str {
        self.reader.name()
    }

    /// The parsed header.
    pub fn header(&self) -> &Arc<Header> {
        &self.header
    }

    /// The store's version tag (ETag) seen when the header was read.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// Range requests made to read the header.
    pub fn header_requests(&self) -> u64 {
        self.header_requests
    }

    /// Range requests made for blocks so far.
    pub fn block_requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// The level `n`, or an invalid-request error.
    pub fn level(&self, n: usize) -> TiffResult<&Level> {
        self.header.levels.get(n).ok_or_else(|| {
            TiffError::InvalidRequest(format!(
                "level {n} requested, the file has levels 0..={}",
                self.header.levels.len() - 1
            ))
        })
    }

    /// Fetches the compressed bytes of `blocks` of level `level` with coalesced, parallel
    /// range requests. Empty (sparse) blocks come back as empty `Bytes`.
    pub async fn fetch_blocks(&self, level: usize, blocks: &[usize]) -> TiffResult<Vec<Bytes>> {
        let lvl = self.level(level)?;
        let mut ranges: Vec<Option<Range<u64>>> = Vec::with_capacity(blocks.len());
        for &b in blocks {
            let r = lvl.block_range(b);
            if let Some(r) = &r
                && r.end > self.header.object_size
            {
                return Err(TiffError::CorruptBlock {
                    kind: lvl.block_kind(),
                    index: b,
                    level,
                    detail: format!(
                        "data at {}..{} lies beyond the end of the file ({} bytes)",
                        r.start, r.end, self.header.object_size
                    ),
                });
            }
            ranges.push(r);
        }
        let wanted: Vec<Range<u64>> = ranges.iter().flatten().cloned().collect();
        let merged = coalesce::coalesce(&wanted, self.options.coalesce);
        self.requests.fetch_add(merged.len() as u64, Ordering::Relaxed);
        let fetched: Vec<Bytes> = futures::stream::iter(merged.iter().cloned().map(|r| self.reader.read_range(r)))
            .buffered(self.options.fetch_concurrency.max(1))
            .try_collect()
            .await?;
        let mut out = Vec::with_capacity(blocks.len());
        for r in ranges {
            let Some(r) = r else {
                out.push(Bytes::new());
                continue;
            };
            let i = coalesce::containing(&merged, &r)
                .ok_or_else(|| TiffError::Malformed("range planning failed".into()))?;
            let base = merged[i].start;
            let data = &fetched[i];
            let (s, e) = ((r.start - base) as usize, (r.end - base) as usize);
            if e > data.len() {
                return Err(TiffError::Read(ReadError::Other(
                    "store returned fewer bytes than requested".into(),
                )));
            }
            out.push(data.slice(s..e));
        }
        Ok(out)
    }

    /// Decodes fetched blocks on the CPU pool. Sparse blocks decode to zeros.
    pub async fn decode_blocks(&self, level: usize, blocks: Vec<usize>, raw: Vec<Bytes>) -> TiffResult<Vec<Vec<u8>>> {
        self.level(level)?;
        let header = self.header.clone();
        on_cpu_pool(move || {
            use rayon::prelude::*;
            let lvl = &header.levels[level];
            // Nobody waits any more (the stream ended): the remaining blocks are not decoded.
            let probe = cogfeed_cpu::probe();
            blocks
                .par_iter()
                .zip(raw.par_iter())
                .map(|(&b, data)| {
                    if probe.cancelled() {
                        Err(TiffError::Internal("decode cancelled".into()))
                    } else if data.is_empty() {
                        // Sparse block: GDAL reads it as nodata when the file has one, else 0.
                        let s = decode::block_shape(lvl, b);
                        let one = dtype::fill_bytes(lvl.dtype, header.geo.nodata_value().unwrap_or(0.0));
                        Ok(one.repeat(s.rows * s.cols * s.samples))
                    } else {
                        decode::decode_block(lvl, level, b, data)
                    }
                })
                .collect::<TiffResult<Vec<Vec<u8>>>>()
        })
        .await?
    }

    /// The top `rows` rows of block `block` of `level` from its compressed bytes `raw`
    /// ([`decode::decode_block_rows`]: only those rows are decoded where the codec allows),
    /// on the CPU pool.
    pub async fn decode_block_rows(&self, level: usize, block: usize, raw: Bytes, rows: usize) -> TiffResult<Vec<u8>> {
        self.level(level)?;
        let header = self.header.clone();
        on_cpu_pool(move || {
            let lvl = &header.levels[level];
            if raw.is_empty() {
                let s = decode::block_shape(lvl, block);
                let one = dtype::fill_bytes(lvl.dtype, header.geo.nodata_value().unwrap_or(0.0));
                return Ok(one.repeat(s.rows.min(rows) * s.cols * s.samples));
            }
            decode::decode_block_rows(lvl, level, block, &raw, rows)
        })
        .await?
    }

    /// Reads a window: fetch, decode and paste the blocks it touches.
    pub async fn read_window(&self, req: &WindowRequest) -> TiffResult<Raster> {
        let lvl = self.level(req.level)?;
        decode::check_supported(lvl)?;
        let bands = window::validate(lvl, req, self.options.max_window_bytes)?;
        let blocks = window::blocks_for(lvl, req, &bands);
        let raw = self.fetch_blocks(req.level, &blocks).await?;
        let decoded = self.decode_blocks(req.level, blocks.clone(), raw).await?;
        let es = lvl.dtype.size();
        let mut out = Raster {
            dtype: lvl.dtype,
            bands: bands.len(),
            height: req.height as usize,
            width: req.width as usize,
            data: vec![0u8; bands.len() * req.height as usize * req.width as usize * es],
        };
        for (b, block) in blocks.iter().zip(decoded.iter()) {
            window::paste(lvl, *b, block, req, &bands, &mut out);
        }
        Ok(out)
    }
}

/// Where the next header fetch goes: grow the prefix when the missing bytes are close to
/// it (doubling), otherwise read around the far IFD or array.
fn header_fetch_range(src: &SparseBytes, need: Range<u64>, prefix_bytes: u64) -> Range<u64> {
    let size = src.size();
    let prefix_end = src.prefix_end();
    if need.start <= prefix_end.saturating_add(prefix_bytes) {
        let end = need.end.max(prefix_end.saturating_mul(2)).min(size);
        prefix_end..end.max(need.end)
    } else {
        let end = need.end.max(need.start.saturating_add(prefix_bytes)).min(size);
        need.start..end.max(need.end)
    }
}

/// Runs CPU-bound work on the daemon's fair CPU pool (`cogfeed-cpu`) without blocking the
/// async reactor: accounted to the submitting stream, never started once nobody awaits it.
/// A panic in the work (a bug) comes back as an internal error instead of taking the
/// process down.
pub async fn on_cpu_pool<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> TiffResult<T> {
    cogfeed_cpu::run(work)
        .await
        .map_err(|_| TiffError::Internal("decoder task failed".into()))
}
