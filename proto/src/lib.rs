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
