//! Object URLs: `s3://bucket/key`, `az://` / `azure://container/blob`, `gs://bucket/key`,
//! `http(s)://host/path`, `file:///path` or a plain local path, parsed into the store they
//! live in and the path inside it.

use object_store::path::Path;

use crate::error::{Error, Result};

/// Kind of store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    Local,
    S3,
    Azure,
    Gcs,
    Http,
}

impl Scheme {
    /// Short name used in metrics labels and logs.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Local => "file",
            Scheme::S3 => "s3",
            Scheme::Azure => "azure",
            Scheme::Gcs => "gcs",
            Scheme::Http => "http",
        }
    }
}

/// Where an object lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The URL as the user wrote it (used in messages).
    pub url: String,
    pub scheme: Scheme,
    /// Bucket or container; for HTTP the origin (`scheme://host:port`); empty for local files.
    pub container: String,
    /// Path of the object inside the store.
    pub path: Path,
}

impl Location {
    /// Parses a URL or local path.
    pub fn parse(input: &str) -> Result<Self> {
        let invalid = |reason: &str| Error::InvalidUrl {
            url: input.to_string(),
            reason: reason.to_string(),
        };
        let Some((scheme, rest)) = input.split_once("://") else {
            return Self::local(input, std::path::Path::new(input));
        };
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "file" => {
                let url = url::Url::parse(input).map_err(|e| invalid(&e.to_string()))?;
                let path = url.to_file_path().map_err(|_| invalid("not a local file path"))?;
                return Self::local(input, &path);
            }
            "s3" | "s3a" => Scheme::S3,
            "az" | "azure" | "abfs" | "abfss" => Scheme::Azure,
            "gs" | "gcs" => Scheme::Gcs,
            "http" | "https" => Scheme::Http,
            other => return Err(invalid(&format!("unsupported scheme {other}"))),
        };
        let (authority, key) = rest.split_once('/').unwrap_or((rest, ""));
        if authority.is_empty() {
            return Err(invalid("missing bucket, container or host"));
        }
        if key.is_empty() || key.ends_with('/') {
            return Err(invalid("missing object key"));
        }
        let key = key.split(['?', '#']).next().unwrap_or(key);
        let path = Path::from_url_path(key).map_err(|e| invalid(&e.to_string()))?;
        let container = match scheme {
            Scheme::Http => format!("{}://{authority}", &input[..input.find("://").unwrap_or(0)]),
            // `abfs://container@account.dfs.core.windows.net/...`
            Scheme::Azure => authority.split('@').next().unwrap_or(authority).to_string(),
            _ => authority.to_string(),
        };
        Ok(Self {
            url: input.to_string(),
            scheme,
            container,
            path,
        })
    }

    fn local(input: &str, path: &std::path::Path) -> Result<Self> {
        let absolute = std::path::absolute(path).map_err(|e| Error::InvalidUrl {
            url: input.to_string(),
            reason: e.to_string(),
        })?;
        // Resolve `.` and `..` lexically: object_store paths have no such segments.
        let mut normal = std::path::PathBuf::new();
        for part in absolute.components() {
            match part {
                std::path::Component::ParentDir => {
                    normal.pop();
                }
                std::path::Component::CurDir => {}
                other => normal.push(other),
            }
        }
        let absolute = normal;
        let path = Path::from_absolute_path(&absolute).map_err(|e| Error::InvalidUrl {
            url: input.to_string(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            url: input.to_string(),
            scheme: Scheme::Local,
            container: String::new(),
            path,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_scheme() {
        let s3 = Location::parse("s3://bucket/a/b.tif").unwrap();
        assert_eq!(
            (s3.scheme, s3.container.as_str(), s3.path.as_ref()),
            (Scheme::S3, "bucket", "a/b.tif")
        );
        let az = Location::parse("azure://cont/x.tif").unwrap();
        assert_eq!((az.scheme, az.container.as_str()), (Scheme::Azure, "cont"));
        let az = Location::parse("az://cont/dir/x.tif").unwrap();
        assert_eq!(az.path.as_ref(), "dir/x.tif");
        let gs = Location::parse("gs://b/k.tif").unwrap();
        assert_eq!(gs.scheme, Scheme::Gcs);
        let http = Location::parse("http://127.0.0.1:8080/data/x%20y.tif").unwrap();
        assert_eq!(
            (http.scheme, http.container.as_str()),
            (Scheme::Http, "http://127.0.0.1:8080")
        );
        assert_eq!(http.path.as_ref(), "data/x y.tif");
        let file = Location::parse("file:///tmp/x.tif").unwrap();
        assert_eq!((file.scheme, file.path.as_ref()), (Scheme::Local, "tmp/x.tif"));
        let plain = Location::parse("/tmp/y.tif").unwrap();
        assert_eq!(plain.path.as_ref(), "tmp/y.tif");
        let dotted = Location::parse("/a/b/../c/./d.tif").unwrap();
        assert_eq!(dotted.path.as_ref(), "a/c/d.tif");
        let relative = Location::parse("some/dir/z.tif").unwrap();
        assert!(relative.path.as_ref().ends_with("some/dir/z.tif"));
    }

    #[test]
    fn rejects_bad_urls() {
        for bad in ["ftp://x/y.tif", "s3://bucket/", "s3:///key.tif", "gs://bucket"] {
            assert!(Location::parse(bad).is_err(), "{bad} accepted");
        }
    }
}
