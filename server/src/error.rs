//! The crate error: one enum, a small code set, and the one mapping onto gRPC statuses.
//!
//! Every message names the object (URL) it concerns, for the log. Clients get
//! [`Error::client_message`]: the object's name (its file name) instead of its URL, and no
//! store detail, per the threat model in the README. Text is lowercase without a final
//! period. Nothing else in the crate builds a `tonic::Status`.

use cogfeed_stac::StacError;
use cogfeed_tiff::{ReadError, TiffError};

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
    /// A dataset (or catalog object) a request names does not exist.
    #[error("{0}")]
    NotFound(String),
    /// A valid request the dataset cannot serve (labels it does not have, a stale version).
    #[error("{0}")]
    FailedPrecondition(String),
    /// A configured dataset that failed to open and is retried in the background: the
    /// message names it and says why, in client-safe words.
    #[error("{0}")]
    Unready(String),
    /// The client read nothing for the stall timeout; its stream was ended.
    #[error(
        "stream ended: the client read nothing for {secs} s (limits.stall_timeout_secs); resume from the cursor of the last batch received (at least {cursor})"
    )]
    Stalled {
        /// The stall timeout in seconds.
        secs: f64,
        /// Where the batches the client has surely taken end.
        cursor: u64,
    },
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
    /// A STAC document, Item or asset cogfeed cannot use.
    #[error(transparent)]
    Stac(#[from] StacError),
    /// A CRS, transform or footprint that makes no grid.
    #[error(transparent)]
    Grid(#[from] cogfeed_geo::GridError),
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
            Error::InvalidUrl { .. } | Error::InvalidArgument(_) | Error::Grid(_) => ErrorCode::InvalidArgument,
            Error::Stac(_) => ErrorCode::FailedPrecondition,
            Error::ShuttingDown { .. } | Error::Stalled { .. } | Error::Unready(_) => ErrorCode::Unavailable,
            Error::NotFound(_) => ErrorCode::NotFound,
            Error::FailedPrecondition(_) => ErrorCode::FailedPrecondition,
            Error::Unauthenticated(_) => ErrorCode::Unauthenticated,
            Error::PermissionDenied(_) => ErrorCode::PermissionDenied,
            Error::LimitExceeded(_) => ErrorCode::ResourceExhausted,
            Error::Io { .. } => ErrorCode::Internal,
        }
    }
}

impl Error {
    /// The message a client may see: objects by name (never their URL or a server path),
    /// store failures without the store's own words, internal errors without detail.
    pub fn client_message(&self) -> String {
        crate::redact::secrets(&self.unredacted_client_message()).into_owned()
    }

    /// [`Error::client_message`] before credentials are scrubbed from it.
    fn unredacted_client_message(&self) -> String {
        match self {
            Error::Tiff { object, source } => {
                let detail = match source {
                    TiffError::Read(ReadError::Unavailable(_)) => "store unavailable".to_string(),
                    TiffError::Read(ReadError::Other(_)) => "read failed".to_string(),
                    TiffError::Internal(_) => "internal error".to_string(),
                    other => other.to_string(),
                };
                format!("{detail} in {}", object_name(object))
            }
            Error::InvalidUrl { .. } => "invalid object url".into(),
            Error::Stac(e) => stac_client_message(e),
            Error::Io { .. } => "internal error".into(),
            other => other.to_string(),
        }
    }

    /// The gRPC status for this error; internal errors are logged here with their detail.
    pub fn to_status(&self) -> tonic::Status {
        status(self.code(), self.client_message(), self)
    }

    /// [`Error::to_status`] with a context (e.g. the dataset) before the message.
    pub fn to_status_in(&self, context: &str) -> tonic::Status {
        status(self.code(), format!("{context}: {}", self.client_message()), self)
    }
}

fn status(code: ErrorCode, msg: String, e: &Error) -> tonic::Status {
    use tonic::Status;
    match code {
        ErrorCode::InvalidArgument => Status::invalid_argument(msg),
        ErrorCode::NotFound => Status::not_found(msg),
        ErrorCode::FailedPrecondition => Status::failed_precondition(msg),
        ErrorCode::DataLoss => Status::data_loss(msg),
        ErrorCode::Unavailable => Status::unavailable(msg),
        ErrorCode::ResourceExhausted => Status::resource_exhausted(msg),
        ErrorCode::Unauthenticated => Status::unauthenticated(msg),
        ErrorCode::PermissionDenied => Status::permission_denied(msg),
        ErrorCode::Internal => {
            tracing::error!(error = %e, "internal error");
            Status::internal("internal error")
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        e.to_status()
    }
}

impl From<&Error> for tonic::Status {
    fn from(e: &Error) -> Self {
        e.to_status()
    }
}

/// The name of an object a client may see: the last segment of its URL or path.
pub fn object_name(url: &str) -> &str {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    path.trim_end_matches('/').rsplit('/').next().unwrap_or(path)
}

/// A STAC error as a client may see it: documents named by their last path segment, not
/// their URL.
fn stac_client_message(e: &StacError) -> String {
    match e {
        StacError::NotStac { doc, reason } => StacError::NotStac {
            doc: object_name(doc).to_string(),
            reason: reason.clone(),
        }
        .to_string(),
        StacError::BadItem { doc, item, reason } => StacError::BadItem {
            doc: object_name(doc).to_string(),
            item: item.clone(),
            reason: reason.clone(),
        }
        .to_string(),
        other => other.to_string(),
    }
}

/// Shorthand for crate results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_see_object_names_not_urls_or_store_detail() {
        let e = Error::tiff(
            "s3://bucket/secret/prefix/scene_07.tif",
            TiffError::Read(ReadError::Unavailable(
                "GET https://bucket.s3/secret/prefix: 503".into(),
            )),
        );
        assert_eq!(e.client_message(), "store unavailable in scene_07.tif");
        assert!(
            e.to_string().contains("s3://bucket/secret/prefix"),
            "the log keeps the url"
        );
        let corrupt = Error::tiff(
            "/home/me/.local/share/cogfeed/demo/scene_00.tif",
            TiffError::CorruptBlock {
                kind: "tile",
                index: 5,
                level: 0,
                detail: "zstd: bad frame".into(),
            },
        );
        let status = corrupt.to_status_in("dataset demo");
        assert_eq!(status.code(), tonic::Code::DataLoss);
        assert_eq!(
            status.message(),
            "dataset demo: corrupt tile 5 (level 0): zstd: bad frame in scene_00.tif"
        );
        // Messages that quote an href keep no credential.
        let quoted = Error::FailedPrecondition(
            "item a: asset b at https://u:pw@h/x.tif?sv=1&sig=S3CR3T&X-Amz-Signature=abc has no grid".into(),
        );
        let text = quoted.client_message();
        assert!(
            !text.contains("pw") && !text.contains("S3CR3T") && !text.contains("abc"),
            "{text}"
        );
        assert!(text.contains("REDACTED@h/x.tif?sv=1&sig=REDACTED"), "{text}");
        let io = Error::Io {
            context: "write /etc/x".into(),
            source: std::io::Error::other("disk"),
        };
        assert_eq!(tonic::Status::from(io).message(), "internal error");
        assert_eq!(object_name("https://h/a/b.tif?sig=secret"), "b.tif");
    }
}
