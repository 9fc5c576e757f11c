//! cogfeed server library: the COG reader, object-store access and (later) the daemon.
//!
//! Module map (dependencies point down only): `storage` turns URLs into range readers,
//! `cog` reads TIFF/COG headers and windows through them, `npy` writes arrays for the CLI,
//! `error` is the crate error with its code set.

pub mod cog;
pub mod error;
pub mod inspect;
pub mod npy;
pub mod storage;

pub use error::{Error, ErrorCode, Result};
