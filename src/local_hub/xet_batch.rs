//! Batch file reconstruction on the CAS origin, in both forms clients send:
//!
//! - `POST /v1/reconstructions` with a JSON array of `{"prefix":"default","hash":…}` keys, as the
//!   CAS API documentation specifies it ("Batch File Reconstruction");
//! - `GET /v1/reconstructions?file_id=…&file_id=…`, the form xet-core's remote client sends.
//!
//! Both are checked here (well-formed keys, at most `MAX_BATCH_FILES` of them) and then asked of
//! the embedded CAS in its own GET form, which answers `{"files":{hash:[terms]},"fetch_info":{…}}`.
//! A hash the CAS does not know is left out of `files` (the batch form has no 404 of its own), so a
//! client asks for it alone if it needs to know why. Auth, faults and request accounting are the
//! CAS origin's (`xet::cas_proxy`, `faults::cas_step` classes them as reconstructions).

use axum::body::Bytes;
use serde::Deserialize;

use super::error::{HubError, HubResult};
use super::store::is_sha256;

/// Most files one batch may name. The CAS API documentation names no limit; the stock clients'
/// other batch calls stop at 1,000, and a bound keeps one request's work bounded.
pub const MAX_BATCH_FILES: usize = 1000;

/// Largest request body: 1,000 keys of about 90 bytes each, with room to spare.
pub const MAX_BATCH_BODY: usize = 256 << 10;

/// Whether `path` (without the data dir's prefix) is the batch route.
pub fn is_batch(method: &axum::http::Method, path: &str) -> bool {
    path == "/v1/reconstructions" && (method == axum::http::Method::GET || method == axum::http::Method::POST)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Key {
    prefix: String,
    hash: String,
}

/// The file hashes of a POST body, deduplicated in request order.
pub fn keys_from_body(body: &Bytes) -> HubResult<Vec<String>> {
    let keys: Vec<Key> = serde_json::from_slice(body)
        .map_err(|e| HubError::bad_request(format!("Invalid batch reconstruction body: {e}")))?;
    let mut out = Vec::with_capacity(keys.len());
    for k in keys {
        if k.prefix != "default" {
            return Err(HubError::bad_request(format!("Unknown prefix {:?}", k.prefix)));
        }
        out.push(k.hash);
    }
    checked(out)
}

/// The file hashes of a GET query (`file_id` repeated; other parameters are ignored).
pub fn keys_from_query(query: &str) -> HubResult<Vec<String>> {
    let ids = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| *k == "file_id")
        .map(|(_, v)| v.to_string())
        .collect();
    checked(ids)
}

fn checked(ids: Vec<String>) -> HubResult<Vec<String>> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if !is_sha256(&id) {
            return Err(HubError::bad_request(format!("Malformed file hash {id:?}")));
        }
        if seen.insert(id.clone()) {
            out.push(id);
        }
    }
    if out.len() > MAX_BATCH_FILES {
        return Err(HubError::bad_request(format!(
            "A batch reconstruction may name at most {MAX_BATCH_FILES} files ({} given)",
            out.len()
        )));
    }
    Ok(out)
}

/// The embedded CAS's path and query for `ids`.
pub fn upstream_path(ids: &[String]) -> String {
    let q: Vec<String> = ids.iter().map(|h| format!("file_id={h}")).collect();
    format!("/v1/reconstructions?{}", q.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_and_queries_are_checked() {
        let a = "a".repeat(64);
        let b = "0123456789abcdef".repeat(4);
        let body = Bytes::from(format!(
            r#"[{{"prefix":"default","hash":"{a}"}},{{"prefix":"default","hash":"{b}"}},{{"prefix":"default","hash":"{a}"}}]"#
        ));
        assert_eq!(keys_from_body(&body).unwrap(), vec![a.clone(), b.clone()]);
        assert_eq!(
            keys_from_query(&format!("file_id={a}&x=1&file_id={b}")).unwrap(),
            vec![a.clone(), b.clone()]
        );
        assert_eq!(
            upstream_path(&[a.clone(), b.clone()]),
            format!("/v1/reconstructions?file_id={a}&file_id={b}")
        );
        let bad = [
            "{}".to_string(),
            format!(r#"[{{"prefix":"other","hash":"{a}"}}]"#),
            format!(r#"[{{"prefix":"default","hash":"{}"}}]"#, a.to_uppercase()),
            r#"[{"prefix":"default","hash":"abc"}]"#.to_string(),
        ];
        for body in bad {
            assert!(keys_from_body(&Bytes::from(body.clone())).is_err(), "{body}");
        }
        assert!(keys_from_query("file_id=xyz").is_err());
        let many: Vec<String> = (0..=MAX_BATCH_FILES).map(|i| format!("{i:064x}")).collect();
        assert!(checked(many[..MAX_BATCH_FILES].to_vec()).is_ok());
        assert!(checked(many).is_err());
    }
}
