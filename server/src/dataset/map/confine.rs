//! Where a STAC dataset's assets may live: hrefs are confined to allowed prefixes, so a
//! catalog cannot make the daemon read any file on its host or any server it can reach.
//!
//! `allowed_prefixes` lists them; by default they are the catalog document's own store (the
//! scheme and host or bucket of a URL; the document's directory for a local catalog) and
//! every `href_rewrite` target. Hrefs are compared after dot segments are resolved, so
//! `../` cannot climb out. This module only decides; it never reads anything.

use crate::config::DatasetConfig;

/// The prefixes a dataset's hrefs must start with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    prefixes: Vec<String>,
}

/// `href` with `.` and `..` path segments resolved lexically (a `..` above the root is
/// dropped, as URLs do; a relative path keeps the `..` that climb above its start).
pub fn normalise(href: &str) -> String {
    let (head, path) = match href.split_once("://") {
        Some((scheme, rest)) => {
            let cut = rest.find('/').unwrap_or(rest.len());
            (format!("{scheme}://{}", &rest[..cut]), &rest[cut..])
        }
        None => (String::new(), href),
    };
    // Keep a query or fragment as it is.
    let (path, tail) = match path.find(['?', '#']) {
        Some(i) => (&path[..i], &path[i..]),
        None => (path, ""),
    };
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !absolute && head.is_empty() {
                    // A relative path keeps what climbs above its start.
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let trailing = path.ends_with('/') && !parts.is_empty();
    let mut out = head;
    if absolute {
        out.push('/');
    }
    out.push_str(&parts.join("/"));
    if trailing {
        out.push('/');
    }
    out.push_str(tail);
    out
}

impl Confinement {
    /// The dataset's prefixes: `allowed_prefixes`, or the document's store and the rewrite
    /// targets.
    pub fn for_dataset(c: &DatasetConfig) -> Self {
        let prefixes = match &c.allowed_prefixes {
            Some(list) => list.iter().map(|p| normalise(p)).collect(),
            None => {
                let doc = c.stac.as_deref().unwrap_or_default();
                let own = match doc.split_once("://") {
                    // A URL: its store (scheme and host or bucket).
                    Some((scheme, rest)) => {
                        let host = rest.split('/').next().unwrap_or_default();
                        format!("{scheme}://{host}/")
                    }
                    // A local catalog: its directory.
                    None if doc.ends_with('/') => normalise(doc),
                    None => match doc.rsplit_once('/') {
                        Some((dir, _)) => normalise(&format!("{dir}/")),
                        None => String::new(),
                    },
                };
                std::iter::once(own)
                    .chain(c.href_rewrite.values().map(|t| normalise(t)))
                    .collect()
            }
        };
        Self { prefixes }
    }

    /// Whether `href` lies under an allowed prefix (a prefix ending in `/` matches whole
    /// path segments; a local catalog in the current directory allows relative paths).
    pub fn allows(&self, href: &str) -> bool {
        let h = normalise(href);
        self.prefixes.iter().any(|p| {
            if p.is_empty() {
                !h.starts_with('/') && !h.contains("://") && !h.starts_with("..")
            } else {
                h.starts_with(p.as_str()) && (p.ends_with('/') || h.len() == p.len() || h[p.len()..].starts_with('/'))
            }
        })
    }

    /// The prefixes, for messages.
    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dataset(stac: &str, allowed: Option<&[&str]>, rewrite: &[(&str, &str)]) -> DatasetConfig {
        DatasetConfig {
            stac: Some(stac.into()),
            allowed_prefixes: allowed.map(|a| a.iter().map(|s| s.to_string()).collect()),
            href_rewrite: rewrite.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn dot_segments_cannot_climb_out() {
        assert_eq!(normalise("/data/cat/../../etc/passwd"), "/etc/passwd");
        assert_eq!(normalise("file:///data/cat/./a/../b.tif"), "file:///data/cat/b.tif");
        assert_eq!(normalise("s3://bucket/a/../../x?sig=1"), "s3://bucket/x?sig=1");
        assert_eq!(normalise("https://h/a/b/"), "https://h/a/b/");
        let local = Confinement::for_dataset(&dataset("/data/cat/items.json", None, &[]));
        assert_eq!(local.prefixes(), ["/data/cat/"]);
        assert!(local.allows("/data/cat/s2/B02.tif"));
        assert!(!local.allows("/data/cat/../../etc/passwd"));
        assert!(!local.allows("/data/catalogue/x.tif"), "whole segments only");
        assert!(!local.allows("file:///etc/passwd"));
        assert!(!local.allows("http://169.254.169.254/latest/meta-data"));
    }

    #[test]
    fn a_url_catalog_allows_its_store_and_the_rewrite_targets() {
        let c = dataset(
            "https://earth-search.example/v1/items.json",
            None,
            &[("https://sentinel-cogs.example/", "s3://sentinel-cogs/")],
        );
        let conf = Confinement::for_dataset(&c);
        assert!(conf.allows("https://earth-search.example/other/x.tif"));
        assert!(conf.allows("s3://sentinel-cogs/tiles/32/T/B02.tif"));
        assert!(!conf.allows("s3://another-bucket/x.tif"));
        assert!(!conf.allows("https://earth-search.example.evil/x.tif"));
        let listed = Confinement::for_dataset(&dataset("/c/items.json", Some(&["s3://b/ok/"]), &[]));
        assert!(listed.allows("s3://b/ok/x.tif") && !listed.allows("/c/x.tif"));
        let here = Confinement::for_dataset(&dataset("items.json", None, &[]));
        assert!(here.allows("s2/B02.tif") && !here.allows("../x.tif") && !here.allows("/etc/passwd"));
    }
}
