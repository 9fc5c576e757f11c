//! The `cogfeed.v1` gRPC protocol: generated messages, the `Feed` client and server, and
//! the file descriptor set for gRPC reflection. No logic lives here.

#![allow(clippy::all, missing_docs)]

pub mod codec;

/// Generated code for package `cogfeed.v1`.
pub mod v1 {
    tonic::include_proto!("cogfeed.v1");

    /// Encoded file descriptor set, for `tonic-reflection`.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("cogfeed_v1_descriptor");
}

/// The protobuf package every cogfeed message lives in.
pub const PACKAGE: &str = "cogfeed.v1";

/// Largest gRPC message the daemon sends and a client accepts (a batch; the daemon's
/// `limits.max_batch_bytes` may not be set above it).
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

/// Largest gRPC message the daemon accepts (requests are small; a large one is an attack).
pub const MAX_REQUEST_BYTES: usize = 1 << 20;
