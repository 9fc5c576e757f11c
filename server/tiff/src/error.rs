//! Errors of the format code, without the object name (the caller adds it).
//!
//! Three kinds matter to callers: the file is malformed, it uses a feature we do not read,
//! or one block's data is corrupt. Reading the bytes can also fail ([`ReadError`]).

use super::source::ReadError;

/// What went wrong while reading a TIFF.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TiffError {
    /// The structure of the file is broken (bad magic, offsets outside the file, ...).
    #[error("malformed tiff: {0}")]
    Malformed(String),
    /// A valid file using something this reader does not decode.
    #[error("unsupported {0}")]
    Unsupported(String),
    /// A tile or strip whose compressed data does not decode.
    #[error("corrupt {kind} {index} (level {level}): {detail}")]
    CorruptBlock {
        /// "tile" or "strip".
        kind: &'static str,
        /// Block index within its IFD.
        index: usize,
        /// Overview level (0 = full resolution).
        level: usize,
        /// What the decoder said.
        detail: String,
    },
    /// A header asks for more memory than the configured limits allow.
    #[error("too large: {0}")]
    TooLarge(String),
    /// A request (window, level, band) that does not fit the file.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A bug on our side (a decoder task that failed); details are in the log.
    #[error("internal error: {0}")]
    Internal(String),
    /// The bytes could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// Shorthand for format results.
pub type TiffResult<T> = Result<T, TiffError>;

pub(crate) fn malformed(msg: impl Into<String>) -> TiffError {
    TiffError::Malformed(msg.into())
}
