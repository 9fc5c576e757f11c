//! cogfeed.v1 protocol.
