//! Credentials, region and endpoint from the AWS shared files for the profile `AWS_PROFILE` names
//! (else `default`): `~/.aws/credentials` (or `AWS_SHARED_CREDENTIALS_FILE`) and `~/.aws/config`
//! (or `AWS_CONFIG_FILE`), as the AWS CLI writes them. The object-store crate reads only the
//! environment, so a node set up with `aws configure` would otherwise reach the store unsigned.
//! The environment wins over the files, as it does for the AWS tools. Profiles that get their
//! credentials from a process, SSO or an assumed role are not followed: the caller says so.

use std::collections::HashMap;
use std::path::PathBuf;

use object_store::aws::AmazonS3ConfigKey;

/// What a profile gives. Values are secrets or near them: never logged.
pub struct Profile {
    pub name: String,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
    /// A way of getting credentials this reader does not follow (`role_arn`, `sso_session`, …).
    pub unfollowed: Option<&'static str>,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Keys are secrets: only whether they are there.
        f.debug_struct("Profile")
            .field("name", &self.name)
            .field("has_keys", &self.has_keys())
            .field("region", &self.region)
            .field("unfollowed", &self.unfollowed)
            .finish()
    }
}

/// Settings of a profile that name a credential source other than keys.
const UNFOLLOWED: [&str; 6] = [
    "role_arn",
    "credential_process",
    "sso_session",
    "sso_start_url",
    "web_identity_token_file",
    "credential_source",
];

impl Profile {
    pub fn has_keys(&self) -> bool {
        self.access_key_id.is_some() && self.secret_access_key.is_some()
    }

    /// The store settings this profile gives, for keys the environment left unset: the keys only
    /// as a pair (with their token), and only when the environment gives no credentials of its
    /// own (keys, or a web identity, which the AWS tools also put before profiles).
    pub fn settings(&self, set: impl Fn(&AmazonS3ConfigKey) -> bool) -> Vec<(AmazonS3ConfigKey, String)> {
        let mut out = Vec::new();
        let env_keys = set(&AmazonS3ConfigKey::AccessKeyId)
            || set(&AmazonS3ConfigKey::SecretAccessKey)
            || set(&AmazonS3ConfigKey::WebIdentityTokenFile);
        if let (Some(id), Some(secret), false) = (&self.access_key_id, &self.secret_access_key, env_keys) {
            out.push((AmazonS3ConfigKey::AccessKeyId, id.clone()));
            out.push((AmazonS3ConfigKey::SecretAccessKey, secret.clone()));
            if let Some(t) = &self.session_token {
                out.push((AmazonS3ConfigKey::Token, t.clone()));
            }
        }
        let region_set = set(&AmazonS3ConfigKey::Region) || set(&AmazonS3ConfigKey::DefaultRegion);
        if let (Some(r), false) = (&self.region, region_set) {
            out.push((AmazonS3ConfigKey::Region, r.clone()));
        }
        if let (Some(e), false) = (&self.endpoint_url, set(&AmazonS3ConfigKey::Endpoint)) {
            out.push((AmazonS3ConfigKey::Endpoint, e.clone()));
        }
        out
    }
}

/// Sections of an INI file as the AWS tools write it: `[name]`, `key = value`, `#`/`;` comments.
/// Indented lines (a nested block such as `s3 =` followed by its settings) are skipped.
fn sections(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut out: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut current: Option<String> = None;
    for raw in text.lines() {
        if raw.starts_with([' ', '\t']) {
            continue;
        }
        let line = raw.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            out.entry(name.clone()).or_default();
            current = Some(name);
            continue;
        }
        let (Some(section), Some((k, v))) = (&current, line.split_once('=')) else {
            continue;
        };
        let v = v.trim();
        if !v.is_empty() {
            out.entry(section.clone())
                .or_default()
                .insert(k.trim().to_ascii_lowercase(), v.to_string());
        }
    }
    out
}

/// The profile from the shared files, `None` when neither file has it. `env` reads the
/// environment (a parameter, for tests).
pub fn load(env: impl Fn(&str) -> Option<String>) -> Option<Profile> {
    let name = env("AWS_PROFILE")
        .or_else(|| env("AWS_DEFAULT_PROFILE"))
        .unwrap_or_else(|| "default".to_string());
    let home = env("HOME").map(PathBuf::from);
    let path = |var: &str, file: &str| {
        env(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws").join(file)))
    };
    let read = |p: Option<PathBuf>| p.and_then(|p| std::fs::read_to_string(p).ok()).map(|t| sections(&t));
    let creds = read(path("AWS_SHARED_CREDENTIALS_FILE", "credentials")).unwrap_or_default();
    let config = read(path("AWS_CONFIG_FILE", "config")).unwrap_or_default();
    let from_creds = creds.get(&name);
    // The config file names profiles `[profile NAME]`, except `[default]`.
    let from_config = config.get(&format!("profile {name}")).or_else(|| config.get(&name));
    if from_creds.is_none() && from_config.is_none() {
        return None;
    }
    // A key from the credentials file wins over the same key in the config file.
    let get = |k: &str| {
        from_creds
            .and_then(|s| s.get(k))
            .or_else(|| from_config.and_then(|s| s.get(k)))
            .cloned()
    };
    let mut p = Profile {
        access_key_id: get("aws_access_key_id"),
        secret_access_key: get("aws_secret_access_key"),
        session_token: get("aws_session_token"),
        region: from_config.and_then(|s| s.get("region")).cloned(),
        endpoint_url: from_config.and_then(|s| s.get("endpoint_url")).cloned(),
        name,
        unfollowed: None,
    };
    if !p.has_keys() {
        p.unfollowed = UNFOLLOWED.into_iter().find(|k| get(k).is_some());
    }
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_in(dir: &std::path::Path, profile: Option<&str>) -> impl Fn(&str) -> Option<String> {
        let (home, profile) = (dir.display().to_string(), profile.map(str::to_string));
        move |k| match k {
            "HOME" => Some(home.clone()),
            "AWS_PROFILE" => profile.clone(),
            _ => None,
        }
    }

    fn write(dir: &std::path::Path, creds: &str, config: &str) {
        std::fs::create_dir_all(dir.join(".aws")).unwrap();
        std::fs::write(dir.join(".aws/credentials"), creds).unwrap();
        std::fs::write(dir.join(".aws/config"), config).unwrap();
    }

    const CREDS: &str = "# written by aws configure\n[default]\naws_access_key_id = AKDEFAULT\n\
        aws_secret_access_key = sdefault\n\n[fleet]\naws_access_key_id=AKFLEET\naws_secret_access_key = sfleet\n\
        aws_session_token = tfleet\n";
    const CONFIG: &str = "[default]\nregion = eu-west-1\n\n[profile fleet]\nregion = us-east-2\n\
        endpoint_url = http://minio.storage:9000\ns3 =\n  addressing_style = path\n\n\
        [profile sso]\nsso_session = corp\nregion = us-west-2\n";

    #[test]
    fn the_named_profile_gives_keys_region_and_endpoint() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), CREDS, CONFIG);
        let p = load(env_in(dir.path(), Some("fleet"))).unwrap();
        assert_eq!(p.access_key_id.as_deref(), Some("AKFLEET"));
        assert_eq!(p.secret_access_key.as_deref(), Some("sfleet"));
        assert_eq!(p.session_token.as_deref(), Some("tfleet"));
        assert_eq!(p.region.as_deref(), Some("us-east-2"));
        assert_eq!(p.endpoint_url.as_deref(), Some("http://minio.storage:9000"));
        assert_eq!(p.unfollowed, None);
        let d = load(env_in(dir.path(), None)).unwrap();
        assert_eq!(d.access_key_id.as_deref(), Some("AKDEFAULT"));
        assert_eq!(d.region.as_deref(), Some("eu-west-1"), "[default] in the config file");
        assert!(!format!("{d:?}").contains("sdefault"), "Debug shows no secret");
    }

    #[test]
    fn a_missing_profile_is_none_and_an_sso_one_is_named_unfollowed() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), CREDS, CONFIG);
        assert!(load(env_in(dir.path(), Some("nope"))).is_none());
        let sso = load(env_in(dir.path(), Some("sso"))).unwrap();
        assert!(!sso.has_keys());
        assert_eq!(sso.unfollowed, Some("sso_session"));
        assert_eq!(sso.region.as_deref(), Some("us-west-2"));
        let empty = tempfile::tempdir().unwrap();
        assert!(load(env_in(empty.path(), None)).is_none(), "no files: nothing");
    }

    #[test]
    fn the_environment_wins_and_keys_go_as_a_pair() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), CREDS, CONFIG);
        let p = load(env_in(dir.path(), Some("fleet"))).unwrap();
        let all = p.settings(|_| false);
        assert_eq!(all.len(), 5, "keys, token, region, endpoint");
        // The environment has an access key id (and no secret): no key of the profile is used.
        let s = p.settings(|k| matches!(k, AmazonS3ConfigKey::AccessKeyId));
        assert!(s.iter().all(|(k, _)| !matches!(
            k,
            AmazonS3ConfigKey::AccessKeyId | AmazonS3ConfigKey::SecretAccessKey | AmazonS3ConfigKey::Token
        )));
        let s = p.settings(|k| matches!(k, AmazonS3ConfigKey::Region | AmazonS3ConfigKey::Endpoint));
        assert_eq!(s.len(), 3, "keys and token only");
    }
}
