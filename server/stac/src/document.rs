//! STAC documents: the forms Items come in, href resolution and `href_rewrite`.

use serde_json::value::RawValue;

use super::item::{BoundedElements, KeepProperties, read_with};
use super::{Item, StacError};

/// Largest number of Items one JSON document may hold.
pub const MAX_ITEMS: usize = 10_000_000;

/// URL prefix rewrites applied to resolved hrefs, longest prefix first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HrefRewrite {
    rules: Vec<(String, String)>,
}

impl HrefRewrite {
    /// Rules `from prefix → to prefix`.
    pub fn new(rules: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut rules: Vec<(String, String)> = rules.into_iter().collect();
        rules.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        Self { rules }
    }

    /// `href` with its longest matching prefix replaced.
    pub fn apply(&self, href: &str) -> String {
        for (from, to) in &self.rules {
            if let Some(rest) = href.strip_prefix(from.as_str()) {
                return format!("{to}{rest}");
            }
        }
        href.to_string()
    }
}

fn has_scheme(s: &str) -> bool {
    s.split_once("://")
        .is_some_and(|(scheme, _)| !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || c == '+'))
}

/// Resolves `href` against the document at `doc` (a URL or a local path).
pub fn resolve_href(doc: &str, href: &str) -> String {
    if has_scheme(href) {
        return href.to_string();
    }
    if has_scheme(doc) {
        if let Ok(base) = url::Url::parse(doc)
            && let Ok(joined) = base.join(href)
        {
            return joined.to_string();
        }
        let dir = doc.rsplit_once('/').map(|(d, _)| d).unwrap_or(doc);
        return format!("{dir}/{}", href.trim_start_matches("./"));
    }
    let href_path = std::path::Path::new(href);
    if href_path.is_absolute() {
        return href.to_string();
    }
    let dir = std::path::Path::new(doc).parent().unwrap_or(std::path::Path::new(""));
    let joined = dir.join(href_path);
    // Lexical normalisation of `.` and `..`.
    let mut out = std::path::PathBuf::new();
    for part in joined.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out.to_string_lossy().into_owned()
}

/// Parses a document's bytes: an ItemCollection (FeatureCollection), one Item, a JSON array
/// of Items, or newline-delimited Items. `doc` names the document in errors and is the base
/// for relative hrefs. Keeps every scalar property ([`parse_document_keeping`] keeps fewer).
pub fn parse_document(doc: &str, bytes: &[u8], rewrite: &HrefRewrite) -> Result<Vec<Item>, StacError> {
    parse_document_keeping(doc, bytes, rewrite, KeepProperties::Scalars)
}

/// The top of a JSON object document: its type and, for an ItemCollection, its features,
/// borrowed unread.
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    features: Option<&'a RawValue>,
}

/// [`parse_document`], keeping the properties `keep` names. The document is never turned
/// into a JSON tree: the Items are located in its text and each is read field by field
/// ([`Item::from_raw`]), so what a document costs beyond its bytes is its Items as cogfeed
/// holds them (a few hundred bytes per asset), whatever else it carries.
pub fn parse_document_keeping(
    doc: &str,
    bytes: &[u8],
    rewrite: &HrefRewrite,
    keep: KeepProperties<'_>,
) -> Result<Vec<Item>, StacError> {
    let not_stac = |reason: String| StacError::NotStac {
        doc: doc.to_string(),
        reason,
    };
    let resolve = |h: &str| rewrite.apply(&resolve_href(doc, h));
    let text = std::str::from_utf8(bytes).map_err(|e| not_stac(format!("not UTF-8 ({e})")))?;
    let trimmed = text.trim_start_matches('\u{feff}').trim();
    if trimmed.is_empty() {
        return Err(not_stac("empty document".into()));
    }
    let items = BoundedElements {
        max: MAX_ITEMS,
        what: "the document",
    };
    match serde_json::from_str::<&RawValue>(trimmed) {
        Ok(value) => {
            let features: Vec<&RawValue> = match value.get().as_bytes()[0] {
                b'[' => read_with(value, items).map_err(|e| not_stac(e.to_string()))?,
                b'{' => {
                    let head: Head = serde_json::from_str(value.get()).map_err(|e| not_stac(e.to_string()))?;
                    let kind = head
                        .kind
                        .filter(|k| k.get().len() <= 256)
                        .and_then(|k| serde_json::from_str::<String>(k.get()).ok());
                    match kind.as_deref() {
                        Some("FeatureCollection") => match head.features.filter(|f| f.get().starts_with('[')) {
                            Some(f) => read_with(f, items).map_err(|e| not_stac(e.to_string()))?,
                            None => return Err(not_stac("a FeatureCollection without a features array".into())),
                        },
                        Some("Feature") => vec![value],
                        Some(t) => {
                            return Err(not_stac(format!(
                                "type {t:?}: expected an Item (Feature) or an ItemCollection (FeatureCollection)"
                            )));
                        }
                        None => return Err(not_stac("a JSON object without a type".into())),
                    }
                }
                _ => return Err(not_stac("JSON that is neither an object nor an array".into())),
            };
            features
                .into_iter()
                .map(|f| Item::from_raw(f, doc, &resolve, keep))
                .collect()
        }
        Err(whole) => {
            // Newline-delimited Items: every non-empty line one Item.
            let mut items = Vec::new();
            for (n, line) in trimmed.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                let v: &RawValue = serde_json::from_str(line.trim()).map_err(|e| {
                    if n == 0 {
                        not_stac(format!("not JSON ({whole})"))
                    } else {
                        not_stac(format!("line {}: not JSON ({e})", n + 1))
                    }
                })?;
                if items.len() >= MAX_ITEMS {
                    return Err(not_stac(format!("more than {MAX_ITEMS} items")));
                }
                items.push(Item::from_raw(v, doc, &resolve, keep)?);
            }
            Ok(items)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hrefs_resolve_against_the_document() {
        assert_eq!(
            resolve_href("/data/cat/items.json", "tiff/a.tif"),
            "/data/cat/tiff/a.tif"
        );
        assert_eq!(resolve_href("/data/cat/items.json", "../b.tif"), "/data/b.tif");
        assert_eq!(resolve_href("/data/items.json", "/abs/c.tif"), "/abs/c.tif");
        assert_eq!(
            resolve_href("s3://bkt/cat/items.json", "./x/a.tif"),
            "s3://bkt/cat/x/a.tif"
        );
        assert_eq!(resolve_href("http://h:1/c/i.json", "a.tif"), "http://h:1/c/a.tif");
        assert_eq!(resolve_href("/d/i.json", "https://o/a.tif"), "https://o/a.tif");
        let rw = HrefRewrite::new([
            ("https://b.s3.amazonaws.com/".to_string(), "s3://b/".to_string()),
            (
                "https://b.s3.amazonaws.com/x/".to_string(),
                "file:///mirror/".to_string(),
            ),
        ]);
        assert_eq!(rw.apply("https://b.s3.amazonaws.com/y/1.tif"), "s3://b/y/1.tif");
        assert_eq!(rw.apply("https://b.s3.amazonaws.com/x/1.tif"), "file:///mirror/1.tif");
        assert_eq!(rw.apply("https://other/1.tif"), "https://other/1.tif");
    }

    #[test]
    fn document_forms() {
        let item = r#"{"type":"Feature","id":"i1","properties":{"datetime":null},"assets":{"a":{"href":"a.tif"}}}"#;
        let rw = HrefRewrite::default();
        let one = parse_document("/d/x.json", item.as_bytes(), &rw).unwrap();
        assert_eq!(one[0].assets["a"].href, "/d/a.tif");
        let fc = format!(r#"{{"type":"FeatureCollection","features":[{item},{item}]}}"#);
        assert_eq!(parse_document("/d/x.json", fc.as_bytes(), &rw).unwrap().len(), 2);
        let nd = format!("{item}\n\n{item}\n");
        assert_eq!(parse_document("/d/x.ndjson", nd.as_bytes(), &rw).unwrap().len(), 2);
        let arr = format!("[{item}]");
        assert_eq!(parse_document("/d/x.json", arr.as_bytes(), &rw).unwrap().len(), 1);
        for bad in ["", "{}", r#"{"type":"Collection"}"#, "not json", "[1]", "\u{0}"] {
            let e = parse_document("/d/x.json", bad.as_bytes(), &rw).unwrap_err();
            assert!(e.to_string().contains("/d/x.json"), "{e}");
        }
    }
}
