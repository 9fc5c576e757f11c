//! The gRPC surface: the only part of the daemon that knows tonic and the generated
//! protocol. Requests come in through [`connections`] (accepted, counted, closed when idle),
//! are authenticated and rate-limited by [`auth`] (over [`tls`] when configured), validated
//! into typed jobs by [`job`], run by the pipeline, and metered back out by [`stream`];
//! [`convert`] maps between the protocol's messages and the crate's types, [`feed`] is the
//! `Feed` service's glue and [`peer`] the replica-to-replica tile service; [`synthetic`]
//! is a bare `Feed` of prebuilt batches that measures the transport alone. Errors become
//! statuses in one place, `crate::error`.

pub mod auth;
pub mod connections;
pub mod convert;
pub mod feed;
pub mod job;
pub mod peer;
pub mod stream;
pub mod synthetic;
pub mod tls;

pub use feed::FeedService;

/// Largest gRPC message the daemon sends (a batch; `limits.max_batch_bytes` may not be set
/// above it). Requests it receives are capped at [`MAX_REQUEST_BYTES`].
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

/// Largest gRPC message the daemon accepts (requests are small; a large one is an attack).
pub const MAX_REQUEST_BYTES: usize = 1 << 20;
