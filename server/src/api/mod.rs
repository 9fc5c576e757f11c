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
pub mod footprint;
pub mod job;
pub mod live;
pub mod order;
pub mod peer;
pub mod stream;
pub mod synthetic;
pub mod tls;

pub use feed::FeedService;

/// The message-size limits the client shares (from the proto crate).
pub use cogfeed_proto::{MAX_MESSAGE_BYTES, MAX_REQUEST_BYTES};
