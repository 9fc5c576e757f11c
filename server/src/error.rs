//! The crate error: one enum, a small code set, one mapping point for gRPC later.
//!
//! Every message names the object (URL) it concerns. Text is lowercase without a final
//! period. Internal detail stays in logs; what is here is safe to show a client.

use crate::cog::{ReadError, TiffError};

/// Coarse class of an error, mapped one to one onto gRPC status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// A bad request or a bad URL.
    InvalidArgument,
    /// A dataset or object that does not exist.
    NotFound,
    /// A valid file using an unsupported TIFF feature.
    FailedPrecondition,
    /// Corrupt or malformed data.
    DataLoss,
    /// The store is down or timing out after retries.
    Unavailable,
    /// A configured limit was hit.
    ResourceExhausted,
    /// No valid credentials.
    Unauthenticated,
    /// Valid credentials that do not cover what was asked for.
    PermissionDenied,
    /// Anything else (a bug, an I/O problem on our side).
    Internal,
}

/// The crate-wide error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or decoding an object failed.
    #[error("{source} in {object}")]
    Tiff {
        /// URL of the object.
        object: String,
        /// What failed.
        #[source]
        source: TiffError,
    },
    /// A URL that cannot be turned into a store.
    #[error("invalid url {url}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A bad argument that is not about a particular object.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The caller could not be authenticated.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The caller may not do this.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// A configured limit (streams, call rate) was hit.
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    /// The daemon is shutting down; the client should reconnect and resume from `cursor`.
    #[error("server shutting down; resume from cursor {cursor}")]
    ShuttingDown {
        /// Global sample offset after the last batch sent.
        cursor: u64,
    },
    /// Local I/O failed (writing output files and the like).
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Wraps a format error with the object it concerns.
    pub fn tiff(object: impl Into<String>, source: TiffError) -> Self {
        Error::Tiff {
            object: object.into(),
            source,
        }
    }

    /// The coarse class of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Tiff { source, .. } => match source {
                TiffError::Malformed(_) | TiffError::CorruptBlock { .. } => ErrorCode::DataLoss,
                TiffError::Unsupported(_) => ErrorCode::FailedPrecondition,
                TiffError::TooLarge(_) => ErrorCode::ResourceExhausted,
                TiffError::InvalidRequest(_) => ErrorCode::InvalidArgument,
                TiffError::Internal(_) => ErrorCode::Internal,
                TiffError::Read(ReadError::NotFound) => ErrorCode::NotFound,
                TiffError::Read(ReadError::Unavailable(_)) => ErrorCode::Unavailable,
                TiffError::Read(ReadError::Other(_)) => ErrorCode::Unavailable,
                TiffError::Read(ReadError::Changed) => ErrorCode::FailedPrecondition,
            },
            Error::InvalidUrl { .. } | Error::InvalidArgument(_) => ErrorCode::InvalidArgument,
            Error::ShuttingDown { .. } => ErrorCode::Unavailable,
            Error::Unauthenticated(_) => ErrorCode::Unauthenticated,
            Error::PermissionDenied(_) => ErrorCode::PermissionDenied,
            Error::LimitExceeded(_) => ErrorCode::ResourceExhausted,
            Error::Io { .. } => ErrorCode::Internal,
        }
    }
}

/// Shorthand for crate results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
