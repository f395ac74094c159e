//! Plain Git-LFS uploads (the batch API's `basic` transfer), for a Hub that offers no Xet storage.

use std::path::Path;

use bytes::Bytes;
use reqwest::Method;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;

use super::api::parse_json;
use super::error::{ErrorContext, HubClientError};
use super::http::Request;
use super::{HubClient, RepoRef};

const LFS_JSON: &str = "application/vnd.git-lfs+json";

/// What the batch API says to do with one object.
#[derive(Debug, Clone)]
pub struct LfsUploadAction {
    pub oid: String,
    pub size: u64,
    /// `None`: the Hub already has the object.
    pub upload: Option<(String, HeaderMap)>,
    pub verify: Option<(String, HeaderMap)>,
}

#[derive(Deserialize)]
struct RawAction {
    href: String,
    #[serde(default)]
    header: std::collections::HashMap<String, String>,
}

#[derive(Deserialize)]
struct RawActions {
    upload: Option<RawAction>,
    verify: Option<RawAction>,
}

#[derive(Deserialize)]
struct RawError {
    message: Option<String>,
}

#[derive(Deserialize)]
struct RawObject {
    oid: String,
    size: u64,
    actions: Option<RawActions>,
    error: Option<RawError>,
}

#[derive(Deserialize)]
struct RawBatch {
    transfer: Option<String>,
    objects: Vec<RawObject>,
}

fn headers(h: &std::collections::HashMap<String, String>) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (k, v) in h {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(k.as_str()), HeaderValue::from_str(v)) {
            out.insert(k, v);
        }
    }
    out
}

impl HubClient {
    /// `POST /{repo}.git/info/lfs/objects/batch` for an upload of `objects` (sha256, size), offering
    /// only the `basic` transfer.
    pub async fn lfs_batch_upload(
        &self,
        repo: &RepoRef,
        branch: &str,
        objects: &[(String, u64)],
    ) -> Result<Vec<LfsUploadAction>, HubClientError> {
        repo.validate()?;
        let ctx = ErrorContext::call("POST", repo, Some(branch), None);
        let url = self.url(&format!("/{}.git/info/lfs/objects/batch", repo.web_path()))?;
        let body = serde_json::json!({
            "operation": "upload",
            "transfers": ["basic"],
            "objects": objects.iter().map(|(oid, size)| serde_json::json!({"oid": oid, "size": size})).collect::<Vec<_>>(),
            "hash_algo": "sha256",
            "ref": {"name": branch},
        });
        let mut h = HeaderMap::new();
        h.insert(ACCEPT, HeaderValue::from_static(LFS_JSON));
        let req = Request {
            method: Method::POST,
            headers: h,
            body: Some((LFS_JSON, Bytes::from(body.to_string()))),
            ..Request::get(url)
        };
        let reply = self.inner.http.send(&req, &ctx).await?;
        let raw: RawBatch = parse_json(&reply, &ctx)?;
        if let Some(t) = raw.transfer.as_deref()
            && t != "basic"
        {
            return Err(HubClientError::invalid(
                &ctx,
                format!("the Hub chose transfer {t:?}, not basic"),
            ));
        }
        let mut out = Vec::with_capacity(raw.objects.len());
        for o in raw.objects {
            if let Some(e) = o.error {
                return Err(HubClientError::invalid(
                    &ctx,
                    format!("LFS object {}: {}", o.oid, e.message.unwrap_or_default()),
                ));
            }
            let a = o.actions;
            out.push(LfsUploadAction {
                oid: o.oid,
                size: o.size,
                upload: a
                    .as_ref()
                    .and_then(|a| a.upload.as_ref())
                    .map(|u| (u.href.clone(), headers(&u.header))),
                verify: a
                    .as_ref()
                    .and_then(|a| a.verify.as_ref())
                    .map(|v| (v.href.clone(), headers(&v.header))),
            });
        }
        Ok(out)
    }

    /// PUTs a local file to a `basic` upload URL (self-authorising: no token is sent), streaming it,
    /// then calls the verify action with the token. One attempt per call; the caller retries.
    pub async fn lfs_put(&self, action: &LfsUploadAction, file: &Path) -> Result<(), HubClientError> {
        let ctx = ErrorContext {
            method: "PUT".into(),
            path: Some(action.oid.clone()),
            ..Default::default()
        };
        if let Some((href, h)) = &action.upload {
            let f = tokio::fs::File::open(file)
                .await
                .map_err(|e| HubClientError::bad_input(file.display().to_string(), e.to_string()))?;
            let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(f, 1 << 20));
            let r = self
                .inner
                .http
                .client
                .put(href)
                .headers(h.clone())
                .header(reqwest::header::CONTENT_LENGTH, action.size)
                .body(body)
                .send()
                .await
                .map_err(|e| HubClientError::Network {
                    ctx: ctx.with_message(e.to_string()),
                })?;
            if !r.status().is_success() {
                let status = r.status().as_u16();
                return Err(HubClientError::from_status(
                    status,
                    None,
                    Box::new(ErrorContext {
                        status: Some(status),
                        ..ctx
                    }),
                ));
            }
        }
        if let Some((href, h)) = &action.verify {
            let mut hh = h.clone();
            hh.insert(ACCEPT, HeaderValue::from_static(LFS_JSON));
            hh.remove(CONTENT_TYPE);
            let url = url::Url::parse(href).map_err(|e| HubClientError::invalid(&ctx, e.to_string()))?;
            let req = Request {
                method: Method::POST,
                headers: hh,
                body: Some((
                    LFS_JSON,
                    Bytes::from(serde_json::json!({"oid": action.oid, "size": action.size}).to_string()),
                )),
                ..Request::get(url)
            };
            self.inner.http.send(&req, &ctx).await?;
        }
        Ok(())
    }
}
