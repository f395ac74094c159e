//! Tokens and access rules of the local Hub. Token values are secrets: they are compared and looked
//! up here and never logged or echoed; logs name the token's user instead.

use std::collections::HashMap;

use axum::http::HeaderMap;

use super::error::{HubError, HubResult};
use super::model::RepoMeta;
use super::names::RepoId;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSpec {
    pub user: String,
    pub token: String,
    pub write: bool,
}

impl std::str::FromStr for TokenSpec {
    type Err = String;

    /// `NAME:TOKEN:read|write`
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.splitn(3, ':').collect();
        let [user, token, role] = parts.as_slice() else {
            return Err("expected NAME:TOKEN:read|write".to_string());
        };
        if super::names::validate_name_part(user).is_err() {
            return Err(format!("invalid user name {user:?} (letters, digits, '-', '_', '.')"));
        }
        if token.len() < 4 || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("the token must be at least 4 characters with no spaces".to_string());
        }
        let write = match *role {
            "write" => true,
            "read" => false,
            other => return Err(format!("role must be read or write, not {other:?}")),
        };
        Ok(TokenSpec {
            user: user.to_string(),
            token: token.to_string(),
            write,
        })
    }
}

/// Who is calling. `admin` is set for the default tokens of a single-user local Hub, which may read
/// and write every namespace.
#[derive(Debug, Clone)]
pub struct Caller {
    pub user: String,
    pub write: bool,
    pub admin: bool,
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
                    },
                );
            }
        }
        for s in specs {
            tokens.insert(
                s.token.clone(),
                Caller {
                    user: s.user.clone(),
                    write: s.write,
                    admin: false,
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

/// Read access: public repos for everyone; private ones for their namespace's users. A private repo
/// is reported missing (401 anonymous, 404 with a token) so its existence does not leak.
pub fn check_read(caller: Option<&Caller>, repo: &RepoId, meta: &RepoMeta) -> HubResult<()> {
    if !meta.private {
        return Ok(());
    }
    match caller {
        None => Err(HubError::RepoNotFound { anonymous: true }),
        Some(c) if owns(c, repo) => Ok(()),
        Some(_) => Err(HubError::RepoNotFound { anonymous: false }),
    }
}

/// Write access: a write token of the repo's namespace.
pub fn check_write(caller: Option<&Caller>, repo: &RepoId, meta: &RepoMeta) -> HubResult<()> {
    check_read(caller, repo, meta)?;
    match caller {
        None => Err(HubError::RepoNotFound { anonymous: true }),
        Some(c) if !c.write => Err(HubError::Forbidden(
            "You have read access but not the required permissions for this operation: this token is read-only"
                .to_string(),
        )),
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

    #[test]
    fn token_specs() {
        let t: TokenSpec = "alice:hf_alice123:write".parse().unwrap();
        assert_eq!(
            t,
            TokenSpec {
                user: "alice".into(),
                token: "hf_alice123".into(),
                write: true
            }
        );
        assert!("alice:abc:write".parse::<TokenSpec>().is_err());
        assert!("alice:hf_alice123:admin".parse::<TokenSpec>().is_err());
        assert!("alice".parse::<TokenSpec>().is_err());
    }

    #[test]
    fn access_rules() {
        let repo = RepoId::new(super::super::names::RepoType::Model, "alice", "m").unwrap();
        let private = RepoMeta {
            private: true,
            created_at: String::new(),
            id: String::new(),
        };
        let public = RepoMeta {
            private: false,
            created_at: String::new(),
            id: String::new(),
        };
        let alice = Caller {
            user: "alice".into(),
            write: true,
            admin: false,
        };
        let bob = Caller {
            user: "bob".into(),
            write: true,
            admin: false,
        };
        assert!(check_read(None, &repo, &public).is_ok());
        assert!(matches!(
            check_read(None, &repo, &private),
            Err(HubError::RepoNotFound { anonymous: true })
        ));
        assert!(matches!(
            check_read(Some(&bob), &repo, &private),
            Err(HubError::RepoNotFound { anonymous: false })
        ));
        assert!(check_write(Some(&alice), &repo, &private).is_ok());
        assert!(matches!(
            check_write(Some(&bob), &repo, &public),
            Err(HubError::Forbidden(_))
        ));
    }
}
