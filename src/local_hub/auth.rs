//! Tokens and access rules of the local Hub. Token values are secrets: they are compared and looked
//! up here and never logged or echoed; logs name the token's user instead.
//!
//! Tokens have the Hub's roles: classic `read` and `write` tokens act with their user's rights;
//! fine-grained ones only with the permissions they list (`repo.content.read`, `repo.write`),
//! globally, on a namespace or on one repo, so that clients checking a token's scopes (whoami) and
//! the refusals that follow from them can be tested end to end.

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::HeaderMap;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::error::{HubError, HubResult};
use super::model::RepoMeta;
use super::names::{RepoId, RepoType};

/// A token of the local Hub: `NAME:TOKEN:ROLE` (parsed by its `FromStr` impl).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSpec {
    pub user: String,
    pub token: String,
    pub role: Role,
}

/// What a token may do, as the Hub's token roles say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Reads what its user may read.
    Read,
    /// Reads and writes what its user may.
    Write,
    /// Only what its permissions list, within what its user may.
    FineGrained(Grants),
}

/// The permissions of a fine-grained token: global ones, and ones scoped to an entity.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Grants {
    pub global: Vec<String>,
    pub scoped: Vec<ScopedGrant>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopedGrant {
    pub entity: Entity,
    pub permissions: Vec<String>,
}

/// What a scoped permission is about: a namespace (user or org: every repo and bucket in it) or
/// one repo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entity {
    User(String),
    Org(String),
    Repo(RepoType, String, String),
}

/// Changes a repo's content (commits, uploads, branches), or a bucket's; creates repos and buckets
/// when held on a namespace.
pub const REPO_WRITE: &str = "repo.write";
/// Reads a private repo's content.
pub const REPO_CONTENT_READ: &str = "repo.content.read";

impl Entity {
    /// `user/NAME`, `org/NAME`, `model/NS/NAME`, `dataset/NS/NAME`, `space/NS/NAME`.
    fn parse(s: &str) -> Result<Entity, String> {
        let parts: Vec<&str> = s.split('/').collect();
        let checked = |n: &str| {
            super::names::validate_name_part(n)
                .map(|_| n.to_string())
                .map_err(|_| format!("invalid name {n:?} in {s:?}"))
        };
        match parts.as_slice() {
            ["user", n] => Ok(Entity::User(checked(n)?)),
            ["org", n] => Ok(Entity::Org(checked(n)?)),
            [ty, ns, n] => match RepoType::from_singular(Some(ty)) {
                Some(t) => Ok(Entity::Repo(t, checked(ns)?, checked(n)?)),
                None => Err(format!("unknown entity type {ty:?} in {s:?}")),
            },
            _ => Err(format!(
                "{s:?} is not an entity: use global, user/NAME, org/NAME, model/NS/NAME, dataset/NS/NAME or space/NS/NAME"
            )),
        }
    }

    /// `(type, name)` as whoami names the entity.
    pub fn whoami_parts(&self) -> (&'static str, String) {
        match self {
            Entity::User(n) => ("user", n.clone()),
            Entity::Org(n) => ("org", n.clone()),
            Entity::Repo(t, ns, n) => (t.singular(), format!("{ns}/{n}")),
        }
    }

    /// Whether this entity is `namespace` or, with `repo`, that repo in it. Names compare without
    /// case, as on the Hub.
    fn covers(&self, namespace: &str, repo: Option<(RepoType, &str)>) -> bool {
        match self {
            Entity::User(n) | Entity::Org(n) => n.eq_ignore_ascii_case(namespace),
            Entity::Repo(t, ns, n) => repo
                .is_some_and(|(rt, rn)| rt == *t && ns.eq_ignore_ascii_case(namespace) && n.eq_ignore_ascii_case(rn)),
        }
    }
}

impl Grants {
    /// `SCOPE[,SCOPE...]`, each `ENTITY=PERM[+PERM...]`, `ENTITY` being `global` or an [`Entity`].
    fn parse(s: &str) -> Result<Grants, String> {
        let mut g = Grants::default();
        for scope in s.split(',').filter(|p| !p.is_empty()) {
            let (entity, perms) = scope
                .split_once('=')
                .ok_or_else(|| format!("{scope:?}: expected ENTITY=PERMISSION[+PERMISSION...]"))?;
            let perms: Vec<String> = perms.split('+').map(str::to_string).collect();
            if let Some(bad) = perms.iter().find(|p| !valid_permission(p)) {
                return Err(format!(
                    "{bad:?} is not a permission (e.g. repo.write, repo.content.read)"
                ));
            }
            if entity == "global" {
                g.global.extend(perms);
            } else {
                g.scoped.push(ScopedGrant {
                    entity: Entity::parse(entity)?,
                    permissions: perms,
                });
            }
        }
        Ok(g)
    }

    /// Whether `perm` is held globally, on `namespace`, or on `repo` (in `namespace`).
    pub fn allows(&self, perm: &str, namespace: &str, repo: Option<(RepoType, &str)>) -> bool {
        self.global.iter().any(|p| p == perm)
            || self
                .scoped
                .iter()
                .any(|s| s.entity.covers(namespace, repo) && s.permissions.iter().any(|p| p == perm))
    }
}

/// `word.word[.word]`: letters, digits, `-`, `_` between dots.
fn valid_permission(p: &str) -> bool {
    p.contains('.')
        && p.split('.')
            .all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
}

impl std::str::FromStr for TokenSpec {
    type Err = String;

    /// `NAME:TOKEN:read`, `NAME:TOKEN:write`, or `NAME:TOKEN:fineGrained[:SCOPES]` with SCOPES as
    /// in `dataset/alice/data=repo.content.read+repo.write,user/alice=repo.content.read`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.splitn(3, ':').collect();
        let [user, token, role] = parts.as_slice() else {
            return Err("expected NAME:TOKEN:read|write|fineGrained[:SCOPES]".to_string());
        };
        if super::names::validate_name_part(user).is_err() {
            return Err(format!("invalid user name {user:?} (letters, digits, '-', '_', '.')"));
        }
        if token.len() < 4 || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("the token must be at least 4 characters with no spaces".to_string());
        }
        let role = match *role {
            "write" => Role::Write,
            "read" => Role::Read,
            "fineGrained" => Role::FineGrained(Grants::default()),
            other => match other.strip_prefix("fineGrained:") {
                Some(scopes) => Role::FineGrained(Grants::parse(scopes)?),
                None => {
                    return Err(format!(
                        "role must be read, write or fineGrained[:SCOPES], not {other:?}"
                    ));
                }
            },
        };
        Ok(TokenSpec {
            user: user.to_string(),
            token: token.to_string(),
            role,
        })
    }
}

/// Who is calling. `admin` is set for the default tokens of a single-user local Hub, which may read
/// and write every namespace.
#[derive(Debug, Clone)]
pub struct Caller {
    pub user: String,
    /// A classic write token (what admin endpoints need). A fine-grained token has `grants`.
    pub write: bool,
    pub admin: bool,
    pub grants: Option<Arc<Grants>>,
}

impl Caller {
    /// Whether the token may change content in `namespace` (with `repo`: that repo only), as far
    /// as its role goes; the namespace's own rules are checked apart (`owns`).
    pub fn token_writes(&self, namespace: &str, repo: Option<(RepoType, &str)>) -> bool {
        match &self.grants {
            Some(g) => g.allows(REPO_WRITE, namespace, repo),
            None => self.write,
        }
    }

    /// Whether the token may read private content of `repo` in `namespace`, as far as its role goes.
    pub fn token_reads(&self, namespace: &str, repo: Option<(RepoType, &str)>) -> bool {
        match &self.grants {
            Some(g) => g.allows(REPO_CONTENT_READ, namespace, repo) || g.allows(REPO_WRITE, namespace, repo),
            None => true,
        }
    }

    /// The `/api/whoami-v2` answer for this caller, shaped as the Hub's.
    pub fn whoami_json(&self) -> Value {
        let role = match (&self.grants, self.write) {
            (Some(_), _) => "fineGrained",
            (None, true) => "write",
            (None, false) => "read",
        };
        let mut token = json!({"displayName": format!("{}-{role}", self.user), "role": role});
        if let Some(g) = &self.grants {
            let scoped: Vec<Value> = g
                .scoped
                .iter()
                .map(|s| {
                    let (ty, name) = s.entity.whoami_parts();
                    json!({"entity": {"_id": object_id(&format!("{ty}:{name}")), "type": ty, "name": name},
                           "permissions": s.permissions})
                })
                .collect();
            token["fineGrained"] = json!({"canReadGatedRepos": false, "global": g.global, "scoped": scoped});
        }
        json!({
            "type": "user",
            "id": object_id(&format!("user:{}", self.user)),
            "name": self.user,
            "fullname": self.user,
            "email": null,
            "emailVerified": false,
            "canPay": false,
            "periodEnd": null,
            "isPro": false,
            "avatarUrl": "",
            "orgs": [],
            "auth": {"type": "access_token", "accessToken": token},
        })
    }
}

/// A stable 24-hex id, shaped as the Hub's object ids.
fn object_id(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    hex::encode(&digest[..12])
}

pub struct Auth {
    tokens: HashMap<String, Caller>,
}

pub const DEFAULT_WRITE_TOKEN: &str = "hf_local_write";
pub const DEFAULT_READ_TOKEN: &str = "hf_local_read";
pub const DEFAULT_USER: &str = "local";

impl Auth {
    /// With no specs, the two default tokens of user `local` exist (and are admins).
    pub fn new(specs: &[TokenSpec]) -> Auth {
        let mut tokens = HashMap::new();
        if specs.is_empty() {
            for (t, write) in [(DEFAULT_WRITE_TOKEN, true), (DEFAULT_READ_TOKEN, false)] {
                tokens.insert(
                    t.to_string(),
                    Caller {
                        user: DEFAULT_USER.to_string(),
                        write,
                        admin: true,
                        grants: None,
                    },
                );
            }
        }
        for s in specs {
            let (write, grants) = match &s.role {
                Role::Read => (false, None),
                Role::Write => (true, None),
                Role::FineGrained(g) => (false, Some(Arc::new(g.clone()))),
            };
            tokens.insert(
                s.token.clone(),
                Caller {
                    user: s.user.clone(),
                    write,
                    admin: false,
                    grants,
                },
            );
        }
        Auth { tokens }
    }

    /// Any write token (used by the in-process seeding and by tests).
    pub fn some_write_token(&self) -> Option<String> {
        let mut v: Vec<_> = self.tokens.iter().filter(|(_, c)| c.write).collect();
        v.sort_by_key(|(_, c)| !c.admin);
        v.first().map(|(t, _)| (*t).clone())
    }

    /// The caller named by `Authorization: Bearer …`; `None` when anonymous. A token we do not know
    /// is refused outright, as the Hub does.
    pub fn caller(&self, headers: &HeaderMap) -> HubResult<Option<Caller>> {
        let Some(v) = headers.get(axum::http::header::AUTHORIZATION) else {
            return Ok(None);
        };
        let v = v.to_str().map_err(|_| HubError::BadToken)?;
        let token = v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
            .ok_or(HubError::BadToken)?;
        self.tokens
            .get(token.trim())
            .cloned()
            .map(Some)
            .ok_or(HubError::BadToken)
    }

    pub fn lookup(&self, token: &str) -> Option<Caller> {
        self.tokens.get(token).cloned()
    }
}

fn owns(caller: &Caller, repo: &RepoId) -> bool {
    caller.admin || caller.user == repo.namespace
}

/// Read access: public repos for everyone; private ones for their namespace's users, through a
/// fine-grained token only with `repo.content.read` (or `repo.write`) on the repo or namespace. A
/// private repo is reported missing (401 anonymous, 404 with a token) so its existence does not leak.
pub fn check_read(caller: Option<&Caller>, repo: &RepoId, meta: &RepoMeta) -> HubResult<()> {
    if !meta.private {
        return Ok(());
    }
    match caller {
        None => Err(HubError::RepoNotFound { anonymous: true }),
        Some(c) if owns(c, repo) && c.token_reads(&repo.namespace, Some((repo.ty, &repo.name))) => Ok(()),
        Some(_) => Err(HubError::RepoNotFound { anonymous: false }),
    }
}

/// Write access: a token of the repo's namespace that writes: a classic write token, or a
/// fine-grained one with `repo.write` on the repo or its namespace.
pub fn check_write(caller: Option<&Caller>, repo: &RepoId, meta: &RepoMeta) -> HubResult<()> {
    check_read(caller, repo, meta)?;
    match caller {
        None => Err(HubError::RepoNotFound { anonymous: true }),
        Some(c) if c.grants.is_none() && !c.write => Err(HubError::Forbidden(
            "You have read access but not the required permissions for this operation: this token is read-only"
                .to_string(),
        )),
        Some(c) if !c.token_writes(&repo.namespace, Some((repo.ty, &repo.name))) => Err(HubError::Forbidden(format!(
            "This fine-grained token does not have the {REPO_WRITE} permission on {}",
            repo.id()
        ))),
        Some(c) if !owns(c, repo) => Err(HubError::Forbidden(format!(
            "You don't have the rights to write to {}",
            repo.id()
        ))),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(user: &str, spec: &str) -> Caller {
        let auth = Auth::new(&[format!("{user}:hf_tok_{user}:{spec}").parse().unwrap()]);
        auth.lookup(&format!("hf_tok_{user}")).unwrap()
    }

    fn meta(private: bool) -> RepoMeta {
        RepoMeta {
            private,
            created_at: String::new(),
            id: String::new(),
        }
    }

    #[test]
    fn token_specs() {
        let t: TokenSpec = "alice:hf_alice123:write".parse().unwrap();
        assert_eq!(
            t,
            TokenSpec {
                user: "alice".into(),
                token: "hf_alice123".into(),
                role: Role::Write,
            }
        );
        assert!("alice:abc:write".parse::<TokenSpec>().is_err());
        assert!("alice:hf_alice123:admin".parse::<TokenSpec>().is_err());
        assert!("alice".parse::<TokenSpec>().is_err());

        let t: TokenSpec = "alice:hf_fg:fineGrained:dataset/alice/d=repo.content.read+repo.write,org/acme=repo.content.read,global=discussion.write"
            .parse()
            .unwrap();
        let Role::FineGrained(g) = t.role else { panic!("{t:?}") };
        assert_eq!(g.global, vec!["discussion.write".to_string()]);
        assert_eq!(
            g.scoped,
            vec![
                ScopedGrant {
                    entity: Entity::Repo(RepoType::Dataset, "alice".into(), "d".into()),
                    permissions: vec!["repo.content.read".into(), "repo.write".into()],
                },
                ScopedGrant {
                    entity: Entity::Org("acme".into()),
                    permissions: vec!["repo.content.read".into()],
                },
            ]
        );
        let t: TokenSpec = "alice:hf_fg:fineGrained".parse().unwrap();
        assert_eq!(t.role, Role::FineGrained(Grants::default()));
        for bad in [
            "alice:hf_fg:fineGrained:dataset/alice=repo.write",
            "alice:hf_fg:fineGrained:bucket/alice/b=repo.write",
            "alice:hf_fg:fineGrained:user/alice",
            "alice:hf_fg:fineGrained:user/alice=write",
            "alice:hf_fg:fineGrained:user/a..b=repo.write",
        ] {
            assert!(bad.parse::<TokenSpec>().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn access_rules() {
        let repo = RepoId::new(RepoType::Model, "alice", "m").unwrap();
        let alice = caller("alice", "write");
        let bob = caller("bob", "write");
        assert!(check_read(None, &repo, &meta(false)).is_ok());
        assert!(matches!(
            check_read(None, &repo, &meta(true)),
            Err(HubError::RepoNotFound { anonymous: true })
        ));
        assert!(matches!(
            check_read(Some(&bob), &repo, &meta(true)),
            Err(HubError::RepoNotFound { anonymous: false })
        ));
        assert!(check_write(Some(&alice), &repo, &meta(true)).is_ok());
        assert!(matches!(
            check_write(Some(&bob), &repo, &meta(false)),
            Err(HubError::Forbidden(_))
        ));
        assert!(matches!(
            check_write(Some(&caller("alice", "read")), &repo, &meta(false)),
            Err(HubError::Forbidden(m)) if m.contains("read-only")
        ));
    }

    #[test]
    fn fine_grained_rules() {
        let m = RepoId::new(RepoType::Model, "alice", "m").unwrap();
        let other = RepoId::new(RepoType::Model, "alice", "other").unwrap();
        let same_name_dataset = RepoId::new(RepoType::Dataset, "alice", "m").unwrap();
        let on_repo = caller("alice", "fineGrained:model/alice/m=repo.content.read+repo.write");
        let on_ns = caller("alice", "fineGrained:user/alice=repo.write");
        let global = caller("alice", "fineGrained:global=repo.write");
        let read_only = caller("alice", "fineGrained:model/alice/m=repo.content.read");
        let nothing = caller("alice", "fineGrained");
        for (c, r) in [(&on_repo, &m), (&on_ns, &m), (&on_ns, &other), (&global, &other)] {
            assert!(check_write(Some(c), r, &meta(true)).is_ok(), "{c:?} on {r}");
        }
        for (c, r) in [
            (&on_repo, &other),
            (&on_repo, &same_name_dataset),
            (&read_only, &m),
            (&nothing, &m),
        ] {
            assert!(
                matches!(check_write(Some(c), r, &meta(false)), Err(HubError::Forbidden(e)) if e.contains("repo.write")),
                "{c:?} on {r}"
            );
        }
        // A private repo is read with repo.content.read (or repo.write), else it does not exist.
        assert!(check_read(Some(&read_only), &m, &meta(true)).is_ok());
        assert!(check_read(Some(&on_ns), &other, &meta(true)).is_ok());
        assert!(matches!(
            check_read(Some(&nothing), &m, &meta(true)),
            Err(HubError::RepoNotFound { anonymous: false })
        ));
        // Still only within the token's user's namespace.
        let bob_ns = caller("bob", "fineGrained:user/alice=repo.write");
        assert!(check_write(Some(&bob_ns), &m, &meta(false)).is_err());
    }

    #[test]
    fn whoami_answers_as_the_hub() {
        let w = caller("alice", "write").whoami_json();
        assert_eq!(w["name"], "alice");
        assert_eq!(w["id"].as_str().map(str::len), Some(24));
        assert_eq!(w["auth"]["accessToken"]["role"], "write");
        assert_eq!(
            caller("alice", "read").whoami_json()["auth"]["accessToken"]["role"],
            "read"
        );
        let w = caller(
            "alice",
            "fineGrained:dataset/alice/d=repo.write,global=discussion.write",
        )
        .whoami_json();
        let t = &w["auth"]["accessToken"];
        assert_eq!(t["role"], "fineGrained");
        assert_eq!(t["fineGrained"]["global"], json!(["discussion.write"]));
        assert_eq!(t["fineGrained"]["scoped"][0]["entity"]["type"], "dataset");
        assert_eq!(t["fineGrained"]["scoped"][0]["entity"]["name"], "alice/d");
        assert_eq!(t["fineGrained"]["scoped"][0]["permissions"], json!(["repo.write"]));
    }
}
