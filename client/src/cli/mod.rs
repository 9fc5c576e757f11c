//! Subcommands of `cogfeed-client` beyond listing and streaming: previews, stitching, and
//! the progress display they share.

pub mod preview;
pub mod progress;
pub mod stitch;
