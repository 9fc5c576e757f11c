//! The `cogfeed.v1` gRPC protocol crate.
//!
//! Holds the `.proto` files and their generated code once the daemon exists (service
//! `Feed`: ListDatasets, DescribeDataset, StreamBatches, ReadWindow). It has no logic and
//! never will; today it only fixes the protocol's package name.

/// The protobuf package every cogfeed message lives in.
pub const PACKAGE: &str = "cogfeed.v1";
