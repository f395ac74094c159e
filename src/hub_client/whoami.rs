//! `GET /api/whoami-v2`: whose token this is and what it may do, and the answer to "may this token
//! write to this repo or bucket?" read from it, so a writable mount is refused before it mounts
//! instead of failing at the first close.
//!
//! The Hub's tokens come in three roles. `read` and `write` are classic tokens: they do what the
//! account may do, read-only for `read`. `fineGrained` tokens list their permissions: `global` ones
//! and `scoped` ones, each for an entity (a user or an org, which covers its repos, or one repo):
//!
//! ```json
//! {"name": "alice", "auth": {"type": "access_token", "accessToken": {
//!   "displayName": "ci", "role": "fineGrained",
//!   "fineGrained": {"canReadGatedRepos": false, "global": ["discussion.write"],
//!     "scoped": [{"entity": {"_id": "…", "type": "dataset", "name": "alice/data"},
//!                 "permissions": ["repo.content.read", "repo.write"]}]}}}}
//! ```
//!
//! Writing a repo's files takes `repo.write` on the repo or on its namespace. The token says nothing
//! of the account's own rights (an org member with the `read` role holds write tokens too), so a
//! `Yes` here can still be refused at commit; a `No` cannot be granted.

use serde::Deserialize;

use super::error::{ErrorContext, HubClientError};
use super::http::Request;
use super::{HubClient, RepoKind, RepoRef};

/// The permission that lets a token change a repo's content.
pub const REPO_WRITE: &str = "repo.write";

/// The account behind a token and what the token may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Whoami {
    /// The account name (`alice`), or the org's for an org token.
    pub name: String,
    pub token: TokenRole,
}

/// The role of the token, as `auth.accessToken.role` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenRole {
    /// Reads what the account may read; writes nothing.
    Read,
    /// Does what the account may do.
    Write,
    /// Does what its permissions list.
    FineGrained(FineGrained),
    /// No access token in the answer (an OAuth or app token) or a role this client does not know.
    Other(String),
}

/// The permissions of a fine-grained token.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FineGrained {
    /// Permissions valid for every entity.
    pub global: Vec<String>,
    pub scoped: Vec<Scope>,
}

/// Permissions a fine-grained token holds on one entity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// `user`, `org`, `model`, `dataset`, `space` (others are kept as they come).
    pub entity_type: String,
    /// A user or org name, or a repo id `ns/name`.
    pub entity_name: String,
    pub permissions: Vec<String>,
}

/// Whether a token may write to a repo or bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteAccess {
    Yes,
    /// It may not; the reason, for the user (names the token's role, never the token).
    No(String),
    /// The answer does not say (an unknown role, a bucket whose permission names are not known):
    /// the Hub decides at the first write.
    Unknown,
}

#[derive(Deserialize)]
struct RawWhoami {
    name: Option<String>,
    #[serde(default)]
    auth: RawAuth,
}

#[derive(Deserialize, Default)]
struct RawAuth {
    #[serde(rename = "accessToken")]
    access_token: Option<RawAccessToken>,
}

#[derive(Deserialize)]
struct RawAccessToken {
    role: Option<String>,
    #[serde(rename = "fineGrained")]
    fine_grained: Option<RawFineGrained>,
}

#[derive(Deserialize)]
struct RawFineGrained {
    #[serde(default)]
    global: Vec<String>,
    #[serde(default)]
    scoped: Vec<RawScope>,
}

#[derive(Deserialize)]
struct RawScope {
    entity: RawEntity,
    #[serde(default)]
    permissions: Vec<String>,
}

#[derive(Deserialize)]
struct RawEntity {
    #[serde(rename = "type", default)]
    ty: String,
    #[serde(default)]
    name: String,
}

impl Whoami {
    /// Reads a whoami-v2 answer. `None` when it has no account name.
    pub fn from_json(body: &[u8]) -> Option<Whoami> {
        let raw: RawWhoami = serde_json::from_slice(body).ok()?;
        let name = raw.name.filter(|n| !n.is_empty())?;
        let token = match raw.auth.access_token {
            None => TokenRole::Other(String::new()),
            Some(t) => match (t.role.as_deref(), t.fine_grained) {
                (Some("read"), _) => TokenRole::Read,
                (Some("write"), _) => TokenRole::Write,
                (Some("fineGrained"), Some(fg)) => TokenRole::FineGrained(FineGrained {
                    global: fg.global,
                    scoped: fg
                        .scoped
                        .into_iter()
                        .map(|s| Scope {
                            entity_type: s.entity.ty,
                            entity_name: s.entity.name,
                            permissions: s.permissions,
                        })
                        .collect(),
                }),
                (role, _) => TokenRole::Other(role.unwrap_or_default().to_string()),
            },
        };
        Some(Whoami { name, token })
    }

    /// Whether this token may write to `repo` (a bucket too).
    pub fn write_access(&self, repo: &RepoRef) -> WriteAccess {
        match &self.token {
            TokenRole::Write => WriteAccess::Yes,
            TokenRole::Read => WriteAccess::No("it is a read token".to_string()),
            TokenRole::Other(_) => WriteAccess::Unknown,
            TokenRole::FineGrained(fg) => fg.write_access(repo),
        }
    }
}

impl FineGrained {
    /// `repo.write` globally, on the repo's namespace or on the repo itself. Buckets: the Hub's
    /// names for bucket permissions are not documented, so only a grant counts; its absence is
    /// left for the Hub to judge.
    pub fn write_access(&self, repo: &RepoRef) -> WriteAccess {
        let grants = |perms: &[String]| perms.iter().any(|p| p == REPO_WRITE);
        if grants(&self.global) || self.scoped.iter().any(|s| s.covers(repo) && grants(&s.permissions)) {
            return WriteAccess::Yes;
        }
        if repo.is_bucket() {
            return WriteAccess::Unknown;
        }
        WriteAccess::No(format!(
            "it is a fine-grained token without {REPO_WRITE} on {} or {}",
            repo.id(),
            repo.namespace
        ))
    }
}

impl Scope {
    /// Whether this entity is `repo`'s namespace or `repo` itself. Hub names compare without case.
    /// No bucket entity is documented, so a bucket is covered through its namespace only.
    fn covers(&self, repo: &RepoRef) -> bool {
        let repo_type = match repo.kind {
            RepoKind::Model => Some("model"),
            RepoKind::Dataset => Some("dataset"),
            RepoKind::Space => Some("space"),
            RepoKind::Bucket => None,
        };
        match self.entity_type.as_str() {
            "user" | "org" => self.entity_name.eq_ignore_ascii_case(&repo.namespace),
            t => repo_type == Some(t) && self.entity_name.eq_ignore_ascii_case(&repo.id()),
        }
    }
}

impl HubClient {
    /// `GET /api/whoami-v2`: the account the token belongs to and what the token may do. Without a
    /// token, or with one the Hub does not know, the Hub answers 401 (`Unauthorized`); a Hub
    /// without this route answers 404 (`NotFound`).
    pub async fn whoami(&self) -> Result<Whoami, HubClientError> {
        let ctx = ErrorContext {
            method: "GET".to_string(),
            path: Some("api/whoami-v2".to_string()),
            ..Default::default()
        };
        let url = self.url("/api/whoami-v2")?;
        let reply = self.inner.http.send(&Request::get(url), &ctx).await?;
        if !reply.status.is_success() {
            return Err(HubClientError::invalid(
                &ctx,
                format!("unexpected answer {}", reply.status),
            ));
        }
        Whoami::from_json(&reply.body).ok_or_else(|| HubClientError::invalid(&ctx, "whoami answer has no account name"))
    }

    /// Whether the token may write to `repo`: asks whoami. No token: `No`. A Hub that cannot say
    /// (no whoami route, not reachable, a token it refuses): `Unknown`, and opening the repo or the
    /// first write reports the real problem.
    pub async fn write_access(&self, repo: &RepoRef) -> WriteAccess {
        if !self.has_token() {
            return WriteAccess::No("no token was given".to_string());
        }
        match self.whoami().await {
            Ok(who) => who.write_access(repo),
            Err(e) => {
                tracing::info!(error = %e, "could not ask the Hub what the token may do; the Hub decides at the first write");
                WriteAccess::Unknown
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn who(token: serde_json::Value) -> Whoami {
        let body = json!({"type": "user", "name": "alice", "auth": {"type": "access_token", "accessToken": token}});
        Whoami::from_json(body.to_string().as_bytes()).unwrap()
    }

    fn fine(global: &[&str], scoped: serde_json::Value) -> Whoami {
        who(json!({"displayName": "t", "role": "fineGrained",
            "fineGrained": {"canReadGatedRepos": false, "global": global, "scoped": scoped}}))
    }

    fn scope(ty: &str, name: &str, perms: &[&str]) -> serde_json::Value {
        json!({"entity": {"_id": "0123456789abcdef01234567", "type": ty, "name": name}, "permissions": perms})
    }

    fn dataset() -> RepoRef {
        RepoRef::dataset("alice/data").unwrap()
    }

    fn bucket() -> RepoRef {
        RepoRef::new(RepoKind::Bucket, "alice", "b")
    }

    #[test]
    fn classic_tokens() {
        let r = who(json!({"displayName": "w", "role": "write"}));
        assert_eq!(r.name, "alice");
        assert_eq!(r.write_access(&dataset()), WriteAccess::Yes);
        assert_eq!(r.write_access(&bucket()), WriteAccess::Yes);
        let r = who(json!({"displayName": "r", "role": "read"}));
        assert!(matches!(r.write_access(&dataset()), WriteAccess::No(m) if m.contains("read token")));
        assert!(matches!(r.write_access(&bucket()), WriteAccess::No(_)));
    }

    #[test]
    fn fine_grained_grants_on_the_repo_its_namespace_or_globally() {
        let ds = dataset();
        for w in [
            fine(
                &[],
                json!([scope("dataset", "alice/data", &["repo.content.read", "repo.write"])]),
            ),
            fine(&[], json!([scope("dataset", "Alice/Data", &["repo.write"])])),
            fine(&[], json!([scope("user", "alice", &["repo.write"])])),
            fine(
                &[],
                json!([scope("org", "ALICE", &["repo.content.read", "repo.write"])]),
            ),
            fine(&["repo.write"], json!([])),
        ] {
            assert_eq!(w.write_access(&ds), WriteAccess::Yes, "{w:?}");
        }
    }

    #[test]
    fn fine_grained_without_write_on_the_repo_is_refused() {
        let ds = dataset();
        for w in [
            // Read only, on the repo or on its namespace.
            fine(&[], json!([scope("dataset", "alice/data", &["repo.content.read"])])),
            fine(
                &["discussion.write"],
                json!([scope("user", "alice", &["repo.content.read"])]),
            ),
            // Write, elsewhere: another repo, another namespace, a model of the same name.
            fine(&[], json!([scope("dataset", "alice/other", &["repo.write"])])),
            fine(&[], json!([scope("org", "acme", &["repo.write"])])),
            fine(&[], json!([scope("model", "alice/data", &["repo.write"])])),
            // Nothing at all.
            fine(&[], json!([])),
        ] {
            match w.write_access(&ds) {
                WriteAccess::No(m) => assert!(m.contains("fine-grained") && m.contains("alice/data"), "{m}"),
                other => panic!("{w:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn fine_grained_buckets_are_yes_or_unknown() {
        let b = bucket();
        assert_eq!(
            fine(&[], json!([scope("user", "alice", &["repo.write"])])).write_access(&b),
            WriteAccess::Yes
        );
        assert_eq!(
            fine(&[], json!([scope("user", "alice", &["repo.content.read"])])).write_access(&b),
            WriteAccess::Unknown
        );
    }

    #[test]
    fn answers_that_do_not_say() {
        // An unknown role, no access token (OAuth), a fine-grained role without its permissions.
        for t in [json!({"role": "admin"}), json!(null), json!({"role": "fineGrained"})] {
            assert_eq!(who(t.clone()).write_access(&dataset()), WriteAccess::Unknown, "{t}");
        }
        assert!(Whoami::from_json(b"{}").is_none());
        assert!(Whoami::from_json(b"not json").is_none());
        let bare = Whoami::from_json(br#"{"name": "bob"}"#).unwrap();
        assert_eq!(bare.write_access(&dataset()), WriteAccess::Unknown);
    }
}
