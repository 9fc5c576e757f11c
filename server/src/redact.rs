//! Credentials out of every text the daemon shows: URL userinfo (`user:password@`) and
//! the values of query parameters that carry a secret (SAS `sig`, `X-Amz-Signature`,
//! `X-Amz-Credential`, `token`, …) are replaced with `REDACTED`, wherever in a text they
//! are. Applied to every log line (the writer in [`LogWriter`]), to every message a client
//! sees (`Error::client_message`) and to the status listener's error bodies.
//!
//! This module must never decide what else a message says; it only scrubs.

use std::borrow::Cow;
use std::io::Write;

/// What a scrubbed secret reads as.
pub const MASK: &str = "REDACTED";

/// Query parameters whose value is a credential (compared without case): Azure SAS,
/// AWS and GCS signed URLs, OAuth and common API-key names.
const SECRET_KEYS: &[&str] = &[
    "sig",
    "signature",
    "token",
    "access_token",
    "id_token",
    "refresh_token",
    "password",
    "passwd",
    "pwd",
    "secret",
    "client_secret",
    "key",
    "api_key",
    "apikey",
    "code",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "x-goog-signature",
    "x-goog-credential",
    "x-goog-security-token",
    "awsaccesskeyid",
    "skoid",
    "sktid",
    "skt",
    "ske",
    "sks",
    "skv",
];

/// Ends a URL part in free text.
fn ends_value(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '&' | '#' | '"' | '\'' | '<' | '>' | ')' | ']' | '}' | ',' | ';' | '`' | '\\'
        )
}

fn ends_authority(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '/' | '?' | '#' | '"' | '\'' | '<' | '>' | ')' | ']' | '}' | ',' | '`' | '\\'
        )
}

/// `text` with every credential it holds replaced by [`MASK`] (borrowed when it holds none).
pub fn secrets(text: &str) -> Cow<'_, str> {
    let mut out: Option<String> = None;
    let mut copied = 0; // bytes of `text` already in `out`
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        // userinfo: scheme://user:password@host
        if text[i..].starts_with("://") {
            let start = i + 3;
            let end = text[start..].find(ends_authority).map_or(text.len(), |n| start + n);
            if let Some(at) = text[start..end].rfind('@') {
                let o = out.get_or_insert_with(String::new);
                o.push_str(&text[copied..start]);
                o.push_str(MASK);
                copied = start + at;
                i = end;
                continue;
            }
            i = start;
            continue;
        }
        // query parameter: ?key=value or &key=value
        if matches!(bytes[i], b'?' | b'&' | b';') {
            let key_start = i + 1;
            let key_len = text[key_start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
                .unwrap_or(text.len() - key_start);
            let eq = key_start + key_len;
            if key_len > 0 && text[eq..].starts_with('=') {
                let key = &text[key_start..eq];
                let value_start = eq + 1;
                let value_end = text[value_start..]
                    .find(ends_value)
                    .map_or(text.len(), |n| value_start + n);
                if value_end > value_start && SECRET_KEYS.iter().any(|k| k.eq_ignore_ascii_case(key)) {
                    let o = out.get_or_insert_with(String::new);
                    o.push_str(&text[copied..value_start]);
                    o.push_str(MASK);
                    copied = value_end;
                }
                i = value_end.max(i + 1);
                continue;
            }
        }
        i += text[i..].chars().next().map_or(1, char::len_utf8);
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut o) => {
            o.push_str(&text[copied..]);
            Cow::Owned(o)
        }
    }
}

/// The log's writer: standard error, every line scrubbed of credentials first. The
/// formatter hands it one whole event per write, so no secret is split across calls.
#[derive(Debug, Default, Clone, Copy)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(secrets(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_and_signed_query_values_are_masked() {
        let cases = [
            (
                "GET https://alice:hunter2@store.example/b/x.tif failed",
                "GET https://REDACTED@store.example/b/x.tif failed",
            ),
            (
                "https://acct.blob.core.windows.net/c/x.tif?sv=2024-01-01&se=2030&sig=AbC%2Bdef%3D&sp=r",
                "https://acct.blob.core.windows.net/c/x.tif?sv=2024-01-01&se=2030&sig=REDACTED&sp=r",
            ),
            (
                "s3 x.tif?X-Amz-Credential=AKIA%2F2024&X-Amz-Signature=deadbeef, then",
                "s3 x.tif?X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED, then",
            ),
            (
                "href \"http://u@h/p?token=t0k\"",
                "href \"http://REDACTED@h/p?token=REDACTED\"",
            ),
            ("nothing here: a/b?x=1&y=2", "nothing here: a/b?x=1&y=2"),
            (
                "file:///data/x.tif and ünïcode?key=v",
                "file:///data/x.tif and ünïcode?key=REDACTED",
            ),
            ("", ""),
            ("?", "?"),
            ("a://@", "a://REDACTED@"),
            ("&sig=", "&sig="),
        ];
        for (text, want) in cases {
            assert_eq!(secrets(text), want, "{text}");
        }
        assert!(matches!(secrets("plain text"), Cow::Borrowed(_)));
    }

    #[test]
    fn never_panics_on_odd_text() {
        for text in ["://", "x://a@b@c/d", "?&&==", "é://é@é?sig=é&", "::///?@@"] {
            let _ = secrets(text);
        }
        assert_eq!(secrets("x://a@b@c/d"), "x://REDACTED@c/d");
    }
}
