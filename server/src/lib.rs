//! cogfeed server library: the COG reader, object-store access and the batch daemon.
//!
//! Module map (dependencies point down only): `app` builds everything from `config` and
//! serves `api`; `api` (the only tonic code: connections, auth, tls, request validation,
//! stream metering, the Feed and Peer services) admits requests against `memory` and runs
//! `pipeline`; `pipeline` turns a `sampler` plan into batches through the tile `cache`,
//! which asks the fleet (`cluster`) for tiles other replicas own; `catalog` opens datasets
//! through `storage` and `cog`; `cog` is the format code behind its own range-reader
//! trait; `error` is the crate error with its code set and the one mapping to statuses.

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
pub mod rng;
pub mod sampler;
pub mod status;
pub mod storage;
pub mod tiles;

pub use error::{Error, ErrorCode, Result};
