//! Percent-encoding of URL path parts, shared by the Hub client and the local Hub so both sides of
//! the wire agree: a revision is one segment (`refs/pr/1` → `refs%2Fpr%2F1`, as Python's
//! `quote(rev, safe="")`), a file path keeps its `/` (Python's `quote(path)`).

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// Unreserved characters stay; everything else, `/` included, is escaped.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
/// Like [`SEGMENT`] but keeping `/`. `#`, `?`, `%`, spaces and all non-ASCII bytes are escaped.
const PATH: &AsciiSet = &SEGMENT.remove(b'/');

/// One URL path segment: revisions, cursors.
pub fn encode_segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// A file path in a URL, keeping `/`: `a b/#1.txt` → `a%20b/%231.txt`.
pub fn encode_path(path: &str) -> String {
    utf8_percent_encode(path, PATH).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        assert_eq!(encode_segment("refs/pr/1"), "refs%2Fpr%2F1");
        assert_eq!(encode_segment("main"), "main");
        assert_eq!(encode_segment("v1.0-rc_1~x"), "v1.0-rc_1~x");
        assert_eq!(encode_path("a b/#c?.txt"), "a%20b/%23c%3F.txt");
        assert_eq!(encode_path("dir/100%/é"), "dir/100%25/%C3%A9");
    }
}
