//! Client configuration: endpoint, token, timeouts, retries. `from_env` follows the Python client
//! (`HF_ENDPOINT`, `HF_TOKEN`, `HF_TOKEN_PATH`, `$HF_HOME/token`). `Debug` never shows the token.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX_RETRIES: u32 = 5;
/// How long a request waits for a request window or through an outage by default: the Hub's
/// windows last 5 minutes, so twice that covers a refusal at any point of one, and a training job
/// would rather wait than fail a read.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(600);

/// How a [`super::HubClient`] reaches the Hub.
#[derive(Clone)]
pub struct HubClientConfig {
    /// `https://huggingface.co` or a mirror / local Hub (`http://127.0.0.1:PORT`); a trailing `/` is ignored.
    pub endpoint: String,
    /// Bearer token, sent only to the endpoint's own origin (never to redirect targets).
    pub token: Option<String>,
    /// Deadline of one request attempt: connecting, headers and the whole body.
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Retries after the first attempt (so at most `max_retries + 1` attempts per HTTP exchange).
    pub max_retries: u32,
    /// How long a request refused for one of the Hub's request windows (429), or meeting an
    /// outage (no connection, 5xx, timeouts), keeps waiting and retrying after its first attempt
    /// before it fails. Zero: only `max_retries` retries, asked waits capped at 10 s.
    pub patience: Duration,
    pub user_agent: String,
    /// Ask tree listings and paths-info for each entry's last commit (`expand=true`): a file's
    /// `last_commit_date` is then known, at the price of pages of 50 entries instead of 1,000.
    pub tree_expand: bool,
}

impl Default for HubClientConfig {
    /// The public Hub, no token, default timeouts; reads no environment variable.
    fn default() -> Self {
        HubClientConfig {
            endpoint: DEFAULT_ENDPOINT.to_string(),
            token: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            patience: DEFAULT_PATIENCE,
            user_agent: format!("hubfs/{}", env!("CARGO_PKG_VERSION")),
            tree_expand: false,
        }
    }
}

impl HubClientConfig {
    /// Endpoint from `HF_ENDPOINT` (default `https://huggingface.co`); token from `HF_TOKEN`, else the
    /// file named by `HF_TOKEN_PATH`, else `$HF_HOME/token` (`HF_HOME` defaults to
    /// `$XDG_CACHE_HOME/huggingface`, then `~/.cache/huggingface`). Timeout 30 s, connect 10 s, 5 retries.
    pub fn from_env() -> Self {
        Self::from_env_map(|k| std::env::var(k).ok())
    }

    /// [`from_env`](Self::from_env) with the variables taken from `get` (for tests and embedding).
    pub fn from_env_map(get: impl Fn(&str) -> Option<String>) -> Self {
        let non_empty = |v: Option<String>| v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        let endpoint = non_empty(get("HF_ENDPOINT")).unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let token = non_empty(get("HF_TOKEN")).or_else(|| match non_empty(get("HF_TOKEN_PATH")) {
            // As in Python: when HF_TOKEN_PATH is set, it replaces $HF_HOME/token.
            Some(p) => read_token_file(Path::new(&p)),
            None => hf_home(&get).and_then(|h| read_token_file(&h.join("token"))),
        });
        HubClientConfig {
            endpoint,
            token,
            ..Default::default()
        }
    }

    /// Upper bound of the time one HTTP exchange (request plus its retries) can take. Without
    /// patience: `(max_retries + 1) × timeout` plus the sleeps between attempts, each at most
    /// [`MAX_RETRY_WAIT`](super::MAX_RETRY_WAIT) (10 s, reached only when the Hub asks for it with
    /// `RateLimit: …;t=N` or `Retry-After`; plain backoff sleeps are 0.2 s doubling to at most
    /// 5 s). With patience: no attempt starts after it, so the patience plus one attempt.
    pub fn exchange_time_bound(&self) -> Duration {
        let waits = super::http::MAX_RETRY_WAIT * self.max_retries;
        let counted = self.timeout * (self.max_retries + 1) + waits;
        counted.max(self.patience + self.timeout)
    }
}

fn hf_home(get: &impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |k: &str| get(k).filter(|v| !v.is_empty());
    if let Some(h) = set("HF_HOME") {
        return Some(PathBuf::from(h));
    }
    if let Some(x) = set("XDG_CACHE_HOME") {
        return Some(PathBuf::from(x).join("huggingface"));
    }
    set("HOME").map(|h| PathBuf::from(h).join(".cache").join("huggingface"))
}

fn read_token_file(p: &Path) -> Option<String> {
    let s = std::fs::read_to_string(p).ok()?;
    let t = s.trim();
    (!t.is_empty()).then(|| t.to_string())
}

impl fmt::Debug for HubClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HubClientConfig")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_retries", &self.max_retries)
            .field("patience", &self.patience)
            .field("user_agent", &self.user_agent)
            .field("tree_expand", &self.tree_expand)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> HubClientConfig {
        let m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        HubClientConfig::from_env_map(|k| m.get(k).cloned())
    }

    #[test]
    fn env_precedence() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "hf_from_home\n").unwrap();
        let alt = dir.path().join("alt");
        std::fs::write(&alt, " hf_from_path ").unwrap();
        let home = dir.path().to_str().unwrap();
        let alt = alt.to_str().unwrap();

        let c = cfg(&[]);
        assert_eq!(c.endpoint, DEFAULT_ENDPOINT);
        assert_eq!(c.timeout, Duration::from_secs(30));
        assert_eq!(c.max_retries, 5);
        assert_eq!(cfg(&[("HF_ENDPOINT", "http://x:1")]).endpoint, "http://x:1");
        assert_eq!(cfg(&[("HF_HOME", home)]).token.as_deref(), Some("hf_from_home"));
        assert_eq!(
            cfg(&[("HF_HOME", home), ("HF_TOKEN_PATH", alt)]).token.as_deref(),
            Some("hf_from_path")
        );
        assert_eq!(
            cfg(&[("HF_HOME", home), ("HF_TOKEN", "hf_env")]).token.as_deref(),
            Some("hf_env")
        );
        assert_eq!(cfg(&[("HOME", "/nonexistent-home")]).token, None);
        let dbg = format!("{:?}", cfg(&[("HF_TOKEN", "hf_secret_value")]));
        assert!(!dbg.contains("hf_secret_value"), "{dbg}");
    }
}
