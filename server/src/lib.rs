//! cogfeed server library: the COG reader, object-store access and the batch daemon.
//!
//! Module map (dependencies point down only): `app` builds everything from `config` and
//! serves `service`; `service` validates requests and runs `pipeline`; `pipeline` turns a
//! `sampler` plan into batches through the tile `cache`; `catalog` opens datasets through
//! `storage` and `cog`; `cog` is the format code behind its own range-reader trait;
//! `error` is the crate error with its code set.

pub mod app;
pub mod auth;
pub mod cache;
pub mod catalog;
pub mod cluster;
pub mod cog;
pub mod config;
pub mod demo;
pub mod error;
pub mod inspect;
pub mod metrics;
pub mod npy;
pub mod pipeline;
pub mod rng;
pub mod sampler;
pub mod service;
pub mod storage;
pub mod tls;

pub use error::{Error, ErrorCode, Result};
