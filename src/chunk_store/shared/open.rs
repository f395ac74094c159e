//! The object store behind `--shared-cache URL`, built from the URL and the credentials its cloud's
//! own tools would use on the node, so a node already set up for its cluster's storage needs no
//! hubfs-specific secrets:
//!
//! - `s3://bucket/prefix` (and `s3a://`): the AWS environment, then the AWS shared files' profile
//!   (`aws_profile`), then the instance metadata service; `AWS_ENDPOINT_URL` (or a profile's
//!   `endpoint_url`) points it at MinIO, Ceph, SeaweedFS and other S3-compatible stores.
//! - `gs://bucket/prefix`: `GOOGLE_SERVICE_ACCOUNT` or `GOOGLE_APPLICATION_CREDENTIALS` (a service
//!   account or `gcloud auth application-default login` file), then the metadata server (Workload
//!   Identity); `STORAGE_EMULATOR_HOST`, as Google's own clients read it, names an emulator
//!   (no OAuth).
//! - `az://container/prefix` (also `azure://`, `abfs[s]://container@account.dfs.core.windows.net/…`):
//!   `AZURE_STORAGE_ACCOUNT_NAME` with `AZURE_STORAGE_ACCOUNT_KEY`, a SAS token, a workload
//!   identity or a managed identity; `AZURE_STORAGE_USE_EMULATOR=true` for Azurite.
//!
//! Nothing is contacted here: a store that is down only pauses the tier later.

use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;

use super::{SharedError, UPLOAD_DEADLINE, aws_profile};

/// The URL schemes `--shared-cache` takes.
pub const SCHEMES: [&str; 7] = ["s3", "s3a", "gs", "az", "azure", "abfs", "abfss"];

/// Whether `url` names a store this build can open (its scheme; the rest is checked on open).
pub fn supported(url: &str) -> bool {
    url.split_once("://")
        .is_some_and(|(scheme, rest)| SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()) && !rest.is_empty())
}

/// The store `url` names and the prefix its blocks go under (no leading or trailing `/`).
pub fn store(url: &str) -> Result<(Arc<dyn ObjectStore>, String), SharedError> {
    let parsed = url::Url::parse(url).map_err(|_| SharedError::Url(url.to_string()))?;
    let bucket = parsed
        .host_str()
        .filter(|b| !b.is_empty())
        .ok_or_else(|| SharedError::Url(url.to_string()))?;
    let prefix = parsed.path().trim_matches('/').to_string();
    let failed = |source| SharedError::Store {
        url: url.to_string(),
        source,
    };
    let store: Arc<dyn ObjectStore> = match parsed.scheme() {
        "s3" | "s3a" => Arc::new(s3(bucket).build().map_err(failed)?),
        "gs" => Arc::new(gcs(bucket).build().map_err(failed)?),
        "az" | "azure" | "abfs" | "abfss" => Arc::new(azure(url).build().map_err(failed)?),
        _ => return Err(SharedError::Scheme(url.to_string())),
    };
    Ok((store, prefix))
}

/// Our own deadlines bound every request; the client's retries must not outlast them.
fn retry() -> object_store::RetryConfig {
    object_store::RetryConfig {
        max_retries: 1,
        retry_timeout: Duration::from_secs(5),
        ..Default::default()
    }
}

/// Connection settings every store shares; `http` allows a plain-http endpoint (a store on the
/// cluster network or an emulator is often not TLS).
fn client(http: bool) -> object_store::ClientOptions {
    object_store::ClientOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(UPLOAD_DEADLINE)
        .with_allow_http(http)
}

fn s3(bucket: &str) -> object_store::aws::AmazonS3Builder {
    use object_store::aws::AmazonS3ConfigKey as Key;
    let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
    if let Some(profile) = aws_profile::load(|k| std::env::var(k).ok()) {
        for (key, value) in profile.settings(|k| b.get_config_value(k).is_some()) {
            b = b.with_config(key, value);
        }
        match profile.unfollowed {
            Some(how) => tracing::warn!(
                profile = %profile.name,
                how,
                "the shared cache reads only keys from AWS profiles; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or use an instance role) for this one"
            ),
            None => {
                tracing::debug!(profile = %profile.name, keys = profile.has_keys(), "shared cache settings from an AWS profile")
            }
        }
    }
    let http = b
        .get_config_value(&Key::Endpoint)
        .is_some_and(|e| e.starts_with("http://"));
    if ![Key::Region, Key::DefaultRegion]
        .iter()
        .any(|k| b.get_config_value(k).is_some())
    {
        b = b.with_region("us-east-1");
    }
    unsigned_unless_set(b, std::env::var_os("AWS_UNSIGNED_PAYLOAD").is_some())
        .with_retry(retry())
        .with_client_options(client(http))
}

/// Every object is verified against its own hash when read, so the SigV4 payload hash (a sha256
/// of each 8 MiB upload on the node's CPU, beside the reads: a tenth of a first node's samples)
/// buys nothing here; `AWS_UNSIGNED_PAYLOAD=false` (`set`) turns signing back on for stores that
/// require it. The builder cannot say whether the setting was given: it reports its default
/// (`false`) as a value.
fn unsigned_unless_set(b: object_store::aws::AmazonS3Builder, set: bool) -> object_store::aws::AmazonS3Builder {
    if set { b } else { b.with_unsigned_payload(true) }
}

/// A service-account key that turns OAuth off (for an emulator); the crate wants every field.
const NO_OAUTH_KEY: &str = r#"{"disable_oauth":true,"client_email":"","private_key":"","private_key_id":""}"#;

fn gcs(bucket: &str) -> object_store::gcp::GoogleCloudStorageBuilder {
    use object_store::gcp::GoogleConfigKey as Key;
    let mut b = object_store::gcp::GoogleCloudStorageBuilder::from_env().with_bucket_name(bucket);
    // Google's client libraries send every request to this host, without OAuth, when it is set.
    // A key with OAuth off is how the crate does that: skipping signatures alone still asks the
    // metadata server for a token on writes.
    if let Some(host) = std::env::var("STORAGE_EMULATOR_HOST").ok().filter(|h| !h.is_empty())
        && b.get_config_value(&Key::BaseUrl).is_none()
    {
        let base = if host.contains("://") {
            host
        } else {
            format!("http://{host}")
        };
        b = b.with_base_url(base.trim_end_matches('/'));
        if [Key::ServiceAccount, Key::ServiceAccountKey]
            .iter()
            .all(|k| b.get_config_value(k).is_none())
        {
            b = b.with_service_account_key(NO_OAUTH_KEY);
        }
    }
    let http = b
        .get_config_value(&Key::BaseUrl)
        .is_some_and(|e| e.starts_with("http://"));
    b.with_retry(retry()).with_client_options(client(http))
}

fn azure(url: &str) -> object_store::azure::MicrosoftAzureBuilder {
    use object_store::azure::AzureConfigKey as Key;
    let b = object_store::azure::MicrosoftAzureBuilder::from_env().with_url(url);
    // The emulator switch turns plain http on by itself; an endpoint of the cluster's may be http.
    let http = b
        .get_config_value(&Key::Endpoint)
        .is_some_and(|e| e.starts_with("http://"));
    b.with_retry(retry()).with_client_options(client(http))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_of_the_three_clouds_are_taken() {
        for url in [
            "s3://b/p",
            "S3://b",
            "s3a://b/p",
            "gs://b/p/q",
            "az://c/p",
            "azure://c",
            "abfss://c@acct.dfs.core.windows.net/p",
        ] {
            assert!(supported(url), "{url}");
        }
        for url in ["http://b/p", "file:///tmp/x", "s3://", "bucket/prefix", ""] {
            assert!(!supported(url), "{url}");
        }
    }

    /// The headers of the one request `store` sends to a listener that answers 200 to it.
    async fn headers_of_a_put(b: object_store::aws::AmazonS3Builder) -> String {
        use object_store::ObjectStoreExt;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let store = b
            .with_endpoint(endpoint)
            .with_bucket_name("b")
            .with_region("us-east-1")
            .with_access_key_id("key")
            .with_secret_access_key("secret")
            .with_client_options(client(true))
            .build()
            .unwrap();
        let server = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request ended before its headers did");
                got.extend_from_slice(&buf[..n]);
            }
            conn.write_all(b"HTTP/1.1 200 OK\r\netag: \"e\"\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            String::from_utf8_lossy(&got).to_ascii_lowercase()
        });
        let path = object_store::path::Path::from("p/o");
        let put = store.put(&path, bytes::Bytes::from_static(b"ten bytes!").into());
        let _ = tokio::time::timeout(Duration::from_secs(10), put).await;
        server.await.unwrap()
    }

    #[tokio::test]
    async fn uploads_to_s3_carry_no_payload_hash_unless_asked() {
        let base = object_store::aws::AmazonS3Builder::new();
        let headers = headers_of_a_put(unsigned_unless_set(base, false)).await;
        assert!(headers.contains("x-amz-content-sha256: unsigned-payload"), "{headers}");

        // AWS_UNSIGNED_PAYLOAD=false, as `from_env` reads it: the body is hashed and signed.
        let base = object_store::aws::AmazonS3Builder::new()
            .with_config(object_store::aws::AmazonS3ConfigKey::UnsignedPayload, "false");
        let headers = headers_of_a_put(unsigned_unless_set(base, true)).await;
        let ten =
            "x-amz-content-sha256: ".to_string() + &hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"ten bytes!"));
        assert!(headers.contains(&ten), "{headers}");
    }

    #[test]
    fn an_unknown_scheme_is_refused_by_name() {
        let Err(e) = store("ftp://host/p") else {
            panic!("ftp opened")
        };
        assert!(e.to_string().contains("s3://, gs:// and az://"), "{e}");
        let Err(e) = store("gs:///p") else {
            panic!("a URL without a bucket opened")
        };
        assert!(matches!(e, SharedError::Url(_)), "{e}");
    }
}
