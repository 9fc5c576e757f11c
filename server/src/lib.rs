//! cogfeed's daemon: datasets, the tile cache, the batch pipeline and the gRPC service.
//!
//! The rooms, top to bottom (dependencies point down only; `server/tests/architecture.rs`
//! checks that no import circle exists): `app` builds everything from `config` and serves
//! `api` and `status`; `api` (the only tonic code) admits requests against `memory` and
//! runs `pipeline`; `pipeline` asks `dataset` for sample i of a `sampler` plan; `dataset`
//! (scenes, and `map`: what a STAC dataset is) reads through `tiles` (the cache, the one
//! way to open a COG, region reads), which the fleet (`cluster`) wraps and `storage` feeds.
//! `config` is a leaf; `error` is the crate error with the one mapping to statuses. The
//! format (`cogfeed_tiff`), geometry (`cogfeed_geo`) and STAC (`cogfeed_stac`) are library
//! crates beside this one.

pub mod api;
pub mod app;
pub mod cluster;
pub mod config;
pub mod dataset;
pub mod demo;
pub mod error;
pub mod huge_pages;
pub mod inspect;
pub mod memory;
pub mod metrics;
pub mod npy;
pub mod pipeline;
pub mod redact;
pub mod rng;
pub mod sampler;
pub mod status;
pub mod storage;
pub mod tiles;

pub use error::{Error, ErrorCode, Result};
