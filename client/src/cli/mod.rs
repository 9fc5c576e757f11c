//! Subcommands of `cogfeed-client` beyond listing and streaming: footprint reads (and the
//! `.npy`/`.npz` writer they use), previews, stitching, and the progress display they share.

pub mod npy;
pub mod preview;
pub mod progress;
pub mod read;
pub mod stitch;
