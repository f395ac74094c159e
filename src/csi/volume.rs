//! Volume attributes (`volumeAttributes` of a PV or an inline volume) and the capability of a
//! publish request, turned into what to mount. The names follow the closest peer's (`sourceType`,
//! `sourceId`, `revision`, `endpoint`) so that manifests carry over; see docs/KUBERNETES.md.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::proto::{MODE_MULTI_NODE_READER_ONLY, MODE_SINGLE_NODE_READER_ONLY, VolumeCapability};

/// What a volume shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    Model,
    Dataset,
    Space,
    Bucket,
}

/// Mount settings the attributes may change; every one is part of the source's identity, so two
/// pods asking for different settings get different source mounts.
#[derive(Debug, Clone, PartialEq)]
pub struct MountSettings {
    pub memory_cache_size: u64,
    /// The volume's server process's memory budget (`memoryLimit`); `None`: the default.
    pub memory_limit: Option<u64>,
    pub cache_size: u64,
    pub metadata_ttl: Duration,
    pub prefetch_files: usize,
    pub commit_every: Option<Duration>,
    pub drain_timeout: Duration,
    pub commit_message: String,
    /// The shared cache tier's URL (`sharedCache`, else the plugin's `--shared-cache`); `Some("")`
    /// until the plugin's default is applied: the volume turned it off (`sharedCache: none`).
    pub shared_cache: Option<String>,
    /// Served by a mount pod with these resources (mount-pod mode); `None`: by the plugin's own
    /// `csi-serve` process.
    pub mount_pod: Option<super::mount_pod::PodResources>,
}

impl Default for MountSettings {
    fn default() -> Self {
        MountSettings {
            memory_cache_size: 256 << 20,
            memory_limit: None,
            cache_size: 10 << 30,
            metadata_ttl: Duration::from_secs(60),
            prefetch_files: 16,
            commit_every: None,
            drain_timeout: Duration::from_secs(60),
            commit_message: "hubfs (kubernetes): {summary}".to_string(),
            shared_cache: None,
            mount_pod: None,
        }
    }
}

/// A parsed publish request: everything but the token.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeSpec {
    pub kind: SourceKind,
    /// `ns/name` (for a bucket `ns/name`, its prefix in `subfolder`).
    pub id: String,
    pub subfolder: Option<String>,
    /// Asked revision (branch, tag, commit); `None`: main. Buckets have none.
    pub revision: Option<String>,
    /// Hub endpoint; `None`: the plugin's default ($HF_ENDPOINT or huggingface.co).
    pub endpoint: Option<String>,
    pub read_only: bool,
    pub uid: u32,
    pub gid: u32,
    pub settings: MountSettings,
    /// Which key of the nodePublishSecretRef secret holds the token.
    pub token_key: String,
    /// A mount pod's resources (`mountPodCpu` and the like), if the volume gets one.
    pub pod_resources: super::mount_pod::PodResources,
}

impl VolumeSpec {
    /// The spec `hubfs mount` understands: `ns/name`, `datasets/ns/name`, `spaces/ns/name`,
    /// `hf://buckets/ns/name[/prefix]`, with the subfolder for repos as an hf:// URL.
    pub fn mount_spec(&self) -> String {
        let sub = self.subfolder.as_deref().map(|s| format!("/{s}")).unwrap_or_default();
        match self.kind {
            SourceKind::Bucket => format!("hf://buckets/{}{sub}", self.id),
            k => {
                let prefix = match k {
                    SourceKind::Dataset => "datasets/",
                    SourceKind::Space => "spaces/",
                    _ => "",
                };
                if sub.is_empty() {
                    format!("{prefix}{}", self.id)
                } else {
                    format!("hf://{prefix}{}{sub}", self.id)
                }
            }
        }
    }

    /// The kernel readahead of this source's mount: what `hubfs mount` gives its repo kind.
    pub fn readahead(&self) -> u64 {
        crate::vfs::default_readahead(match self.kind {
            SourceKind::Model => crate::hub_client::RepoKind::Model,
            SourceKind::Dataset => crate::hub_client::RepoKind::Dataset,
            SourceKind::Space => crate::hub_client::RepoKind::Space,
            SourceKind::Bucket => crate::hub_client::RepoKind::Bucket,
        })
    }

    /// Short human name for logs and mountinfo (never the token).
    pub fn display(&self) -> String {
        self.mount_spec()
    }

    /// The settings and source as a canonical string (part of the source key).
    pub fn canonical(&self) -> String {
        let s = &self.settings;
        // Only a mount pod's volume says so: the keys of other sources stay what they were.
        let pod = s.mount_pod.as_ref().map(|p| format!("|pod={p:?}")).unwrap_or_default();
        pod + &format!(
            "{:?}|{}|{:?}|{:?}|ro={}|{}:{}|mem={}|limit={:?}|disk={}|ttl={:?}|pf={}|every={:?}|drain={:?}|msg={}|shared={:?}",
            self.kind,
            self.id,
            self.subfolder,
            self.endpoint,
            self.read_only,
            self.uid,
            self.gid,
            s.memory_cache_size,
            s.memory_limit,
            s.cache_size,
            s.metadata_ttl,
            s.prefetch_files,
            s.commit_every,
            s.drain_timeout,
            s.commit_message,
            s.shared_cache
        )
    }
}

/// The shared tier a volume gets: its own `sharedCache` (`Some("")`: turned off), else the
/// plugin's `--shared-cache`.
pub fn shared_cache(attribute: Option<String>, plugin: Option<&str>) -> Option<String> {
    match attribute {
        Some(url) if url.is_empty() => None,
        Some(url) => Some(url),
        None => plugin.map(str::to_string),
    }
}

fn truthy(key: &str, v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Ok(true),
        "false" | "no" | "0" => Ok(false),
        _ => Err(format!("volume attribute {key}={v:?}: use true or false")),
    }
}

fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 96
        && s != "."
        && s != ".."
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// The kind named by a `sourceType: repo` id's first segment (`datasets/`, `spaces/`, `models/`;
/// none: a model) and the `ns/name` after it.
fn repo_kind(id: &str) -> (SourceKind, &str) {
    for (prefix, kind) in [
        ("datasets/", SourceKind::Dataset),
        ("spaces/", SourceKind::Space),
        ("models/", SourceKind::Model),
    ] {
        if let Some(rest) = id.strip_prefix(prefix) {
            return (kind, rest);
        }
    }
    (SourceKind::Model, id)
}

/// Parses the request's attributes and capability. Errors are the InvalidArgument message.
pub fn parse(
    attrs: &HashMap<String, String>,
    cap: Option<&VolumeCapability>,
    request_readonly: bool,
) -> Result<VolumeSpec, String> {
    let cap = cap.ok_or("volume_capability is required")?;
    let mount = match (&cap.mount, &cap.block) {
        (Some(m), _) => m,
        (None, Some(_)) => return Err("block volumes are not supported: hubfs volumes are filesystems".into()),
        (None, None) => return Err("volume_capability has neither mount nor block".into()),
    };
    if !matches!(mount.fs_type.as_str(), "" | "hubfs" | "fuse" | "fuse.hubfs") {
        return Err(format!("fsType {:?} is not supported (leave it empty)", mount.fs_type));
    }
    let mode = cap.access_mode.as_ref().map(|m| m.mode).unwrap_or(0);
    let mode_ro = mode == MODE_SINGLE_NODE_READER_ONLY || mode == MODE_MULTI_NODE_READER_ONLY;
    let flag_ro = mount.mount_flags.iter().any(|f| f == "ro");

    // Known keys; kubelet's own (`csi.storage.k8s.io/…`) and any other prefixed key are ignored.
    let mut a: BTreeMap<String, &str> = BTreeMap::new();
    for (k, v) in attrs {
        if k.contains('/') {
            continue;
        }
        a.insert(k.clone(), v.as_str());
    }
    let mut take = |names: &[&str]| -> Option<String> {
        let mut found = None;
        for n in names {
            if let Some(v) = a.remove(*n) {
                found.get_or_insert(v.trim().to_string());
            }
        }
        found
    };
    let kind_s = take(&["sourceType", "repoType"]).unwrap_or_else(|| "model".to_string());
    let mut id = take(&["sourceId", "repoId", "repo"])
        .ok_or("volume attribute sourceId is required (ns/name of the model, dataset, space or bucket)")?;
    let kind = match kind_s.to_ascii_lowercase().as_str() {
        // The peer's manifests say `repo` and put the kind in the id, as `hubfs mount` does.
        "repo" | "repository" => {
            let (kind, rest) = repo_kind(&id);
            id = rest.to_string();
            kind
        }
        "model" | "models" => SourceKind::Model,
        "dataset" | "datasets" => SourceKind::Dataset,
        "space" | "spaces" => SourceKind::Space,
        "bucket" | "buckets" => SourceKind::Bucket,
        other => {
            return Err(format!(
                "sourceType {other:?}: use model, dataset, space, bucket or repo"
            ));
        }
    };
    let mut subfolder = take(&["subfolder", "path"]).map(|s| s.trim_matches('/').to_string());
    // A bucket id may carry its prefix: ns/name/prefix.
    let parts: Vec<&str> = id.split('/').collect();
    if kind == SourceKind::Bucket && parts.len() > 2 {
        let prefix = parts[2..].join("/");
        id = parts[..2].join("/");
        subfolder = Some(match subfolder {
            Some(s) if !s.is_empty() => format!("{prefix}/{s}"),
            _ => prefix,
        });
    }
    let parts: Vec<&str> = id.split('/').collect();
    if parts.len() != 2 || !parts.iter().all(|p| name_ok(p)) {
        return Err(format!(
            "sourceId {id:?} must be ns/name (letters, digits, '-', '_', '.')"
        ));
    }
    if let Some(s) = &subfolder {
        if s.is_empty() {
            subfolder = None;
        } else if s.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
            return Err(format!("subfolder {s:?} must be a plain relative path"));
        }
    }
    let revision = take(&["revision"]).filter(|r| !r.is_empty());
    if kind == SourceKind::Bucket && revision.is_some() {
        return Err("buckets have no revisions: drop the revision attribute".into());
    }
    if let Some(r) = &revision
        && (r.contains("..") || r.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        return Err(format!("revision {r:?} is not a branch, tag or commit id"));
    }
    let endpoint = take(&["endpoint", "hubEndpoint"]).filter(|e| !e.is_empty());
    if let Some(e) = &endpoint
        && !(e.starts_with("https://") || e.starts_with("http://"))
    {
        return Err(format!("endpoint {e:?} must be an http(s) URL"));
    }
    let attr_ro = match take(&["readOnly", "readonly"]) {
        Some(v) => Some(truthy("readOnly", &v)?),
        None => None,
    };
    let read_only = match kind {
        SourceKind::Model => {
            if attr_ro == Some(false) {
                return Err("models are always mounted read-only: drop readOnly: \"false\"".into());
            }
            true
        }
        SourceKind::Space => attr_ro != Some(false) || request_readonly || mode_ro || flag_ro,
        SourceKind::Dataset | SourceKind::Bucket => attr_ro == Some(true) || request_readonly || mode_ro || flag_ro,
    };
    let num = |k: &str, v: String| -> Result<u32, String> {
        v.parse()
            .map_err(|_| format!("volume attribute {k}={v:?} is not a number"))
    };
    let uid = match take(&["uid"]) {
        Some(v) => num("uid", v)?,
        None => 0,
    };
    let gid = if !mount.volume_mount_group.is_empty() {
        num("volume_mount_group", mount.volume_mount_group.clone())?
    } else {
        match take(&["gid"]) {
            Some(v) => num("gid", v)?,
            None => 0,
        }
    };
    let mut settings = MountSettings::default();
    let size =
        |k: &str, v: String| crate::util::units::parse_size(&v).map_err(|e| format!("volume attribute {k}: {e}"));
    let dur =
        |k: &str, v: String| crate::util::units::parse_duration(&v).map_err(|e| format!("volume attribute {k}: {e}"));
    if let Some(v) = take(&["memoryCacheSize"]) {
        settings.memory_cache_size = size("memoryCacheSize", v)?;
    }
    if let Some(v) = take(&["memoryLimit"]) {
        let limit = size("memoryLimit", v)?;
        let min = crate::chunk_store::budget::MIN_LIMIT;
        if limit < min {
            return Err(format!("volume attribute memoryLimit: at least {}Mi", min >> 20));
        }
        settings.memory_limit = Some(limit);
    }
    if let Some(v) = take(&["sharedCache"]) {
        let v = v.trim().to_string();
        settings.shared_cache = Some(match v.to_ascii_lowercase().as_str() {
            "" | "none" | "off" | "false" => String::new(),
            _ if crate::chunk_store::shared::supported_url(&v) => v,
            _ => {
                return Err(format!(
                    "volume attribute sharedCache: {v:?} is not an s3://, gs:// or az:// URL (or none)"
                ));
            }
        });
    }
    if let Some(v) = take(&["cacheSize", "cache-size"]) {
        settings.cache_size = size("cacheSize", v)?;
    }
    if let Some(v) = take(&["metadataTtl"]) {
        settings.metadata_ttl = dur("metadataTtl", v)?;
    }
    if let Some(v) = take(&["prefetchFiles"]) {
        settings.prefetch_files = num("prefetchFiles", v)? as usize;
    }
    if let Some(v) = take(&["commitEvery"]) {
        settings.commit_every = Some(dur("commitEvery", v)?);
    }
    if let Some(v) = take(&["drainTimeout"]) {
        settings.drain_timeout = dur("drainTimeout", v)?;
        if settings.drain_timeout > Duration::from_secs(600) {
            return Err("drainTimeout is at most 10m (kubelet waits for unpublish)".into());
        }
    }
    if let Some(v) = take(&["commitMessage"]) {
        settings.commit_message = v;
    }
    let token_key = take(&["tokenKey", "tokenSecretKey"]).unwrap_or_else(|| "token".to_string());
    // Read by the publish itself (`sidecar::mount_mode`): checked here with the rest.
    if let Some(v) = take(&["mountMode"]) {
        super::sidecar::parse_mode(&v)?;
    }
    let mut quantity = |name: &str| -> Result<Option<String>, String> {
        match take(&[name]).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => super::webhook_patch::check_quantity(&v)
                .map(|()| Some(v))
                .map_err(|e| format!("{name}: {e}")),
        }
    };
    let pod_resources = super::mount_pod::PodResources {
        cpu: quantity("mountPodCpu")?,
        memory: quantity("mountPodMemory")?,
        cpu_limit: quantity("mountPodCpuLimit")?,
        memory_limit: quantity("mountPodMemoryLimit")?,
    };
    if let Some((k, _)) = a.iter().next() {
        return Err(format!(
            "unknown volume attribute {k:?} (see docs/KUBERNETES.md for the list)"
        ));
    }
    Ok(VolumeSpec {
        kind,
        id,
        subfolder,
        revision,
        endpoint,
        read_only,
        uid,
        gid,
        settings,
        token_key,
        pod_resources,
    })
}

/// The token for `spec` among the request's secrets: the `tokenKey` key, else `token` or `HF_TOKEN`
/// when the key was not named. No secret at all: anonymous.
pub fn token(spec: &VolumeSpec, secrets: &HashMap<String, String>) -> Result<Option<String>, String> {
    if secrets.is_empty() {
        return Ok(None);
    }
    let found = secrets
        .get(&spec.token_key)
        .or_else(|| (spec.token_key == "token").then(|| secrets.get("HF_TOKEN")).flatten());
    match found {
        Some(t) if !t.trim().is_empty() => Ok(Some(t.trim().to_string())),
        Some(_) => Err(format!("the secret's key {:?} is empty", spec.token_key)),
        None => Err(format!(
            "the nodePublishSecretRef secret has no key {:?} (set the volume attribute tokenKey)",
            spec.token_key
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::proto::{AccessMode, MountVolume};
    use super::*;

    fn cap(mode: i32, group: &str) -> VolumeCapability {
        VolumeCapability {
            block: None,
            mount: Some(MountVolume {
                fs_type: String::new(),
                mount_flags: vec![],
                volume_mount_group: group.to_string(),
            }),
            access_mode: Some(AccessMode { mode }),
        }
    }

    fn attrs(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn models_are_read_only_datasets_follow_the_access_mode() {
        let m = parse(&attrs(&[("sourceId", "a/b")]), Some(&cap(1, "")), false).unwrap();
        assert!(m.read_only);
        assert_eq!(m.mount_spec(), "a/b");
        let e = parse(
            &attrs(&[("sourceId", "a/b"), ("readOnly", "false")]),
            Some(&cap(1, "")),
            false,
        );
        assert!(e.unwrap_err().contains("read-only"));
        let d = parse(
            &attrs(&[("sourceType", "dataset"), ("sourceId", "a/b")]),
            Some(&cap(1, "7")),
            false,
        )
        .unwrap();
        assert!(!d.read_only);
        assert_eq!(d.gid, 7);
        assert_eq!(d.mount_spec(), "datasets/a/b");
        let d = parse(
            &attrs(&[("sourceType", "dataset"), ("sourceId", "a/b")]),
            Some(&cap(3, "")),
            false,
        )
        .unwrap();
        assert!(d.read_only);
    }

    #[test]
    fn buckets_become_hf_urls_and_bad_input_is_named() {
        let b = parse(
            &attrs(&[("sourceType", "bucket"), ("sourceId", "ns/bk/pre/fix")]),
            Some(&cap(1, "")),
            false,
        )
        .unwrap();
        assert_eq!(b.mount_spec(), "hf://buckets/ns/bk/pre/fix");
        for (kv, want) in [
            (vec![("sourceId", "nope")], "ns/name"),
            (vec![("sourceId", "a/b"), ("cacheSize", "lots")], "cacheSize"),
            (vec![("sourceId", "a/b"), ("colour", "red")], "colour"),
            (
                vec![("sourceType", "bucket"), ("sourceId", "a/b"), ("revision", "main")],
                "revision",
            ),
            (vec![("sourceId", "a/b"), ("subfolder", "../x")], "subfolder"),
        ] {
            let e = parse(&attrs(&kv), Some(&cap(1, "")), false).unwrap_err();
            assert!(e.contains(want), "{kv:?}: {e}");
        }
        assert!(parse(&attrs(&[("sourceId", "a/b")]), None, false).is_err());
        let ok = parse(
            &attrs(&[("sourceId", "a/b"), ("csi.storage.k8s.io/pod.name", "p")]),
            Some(&cap(1, "")),
            false,
        );
        assert!(ok.is_ok());
    }

    #[test]
    fn repo_source_type_takes_the_kind_from_the_id() {
        let repo = |id: &str| {
            parse(
                &attrs(&[("sourceType", "repo"), ("sourceId", id)]),
                Some(&cap(1, "")),
                false,
            )
        };
        let m = repo("ns/name").unwrap();
        assert_eq!(
            (m.kind, m.id.as_str(), m.read_only),
            (SourceKind::Model, "ns/name", true)
        );
        assert_eq!(repo("models/ns/name").unwrap().mount_spec(), "ns/name");
        let d = repo("datasets/ns/name").unwrap();
        assert_eq!(
            (d.kind, d.id.as_str(), d.read_only),
            (SourceKind::Dataset, "ns/name", false)
        );
        assert_eq!(d.mount_spec(), "datasets/ns/name");
        let s = repo("spaces/ns/name").unwrap();
        assert_eq!((s.kind, s.mount_spec().as_str()), (SourceKind::Space, "spaces/ns/name"));
        // Same rules as the other kinds once the prefix is gone.
        assert!(repo("datasets/ns").unwrap_err().contains("ns/name"));
        assert!(repo("buckets/ns/name").is_err());
    }

    #[test]
    fn a_memory_limit_is_part_of_the_source_and_too_small_a_one_is_refused() {
        let plain = parse(&attrs(&[("sourceId", "a/b")]), Some(&cap(1, "")), false).unwrap();
        assert_eq!(
            plain.settings.memory_limit, None,
            "the default: see budget::default_limit"
        );
        let limited = parse(
            &attrs(&[("sourceId", "a/b"), ("memoryLimit", "256Mi")]),
            Some(&cap(1, "")),
            false,
        )
        .unwrap();
        assert_eq!(limited.settings.memory_limit, Some(256 << 20));
        assert_ne!(
            plain.canonical(),
            limited.canonical(),
            "another budget is another source mount"
        );
        let e = parse(
            &attrs(&[("sourceId", "a/b"), ("memoryLimit", "10M")]),
            Some(&cap(1, "")),
            false,
        )
        .unwrap_err();
        assert!(e.contains("memoryLimit: at least 96Mi"), "{e}");
    }

    #[test]
    fn shared_cache_comes_from_the_attribute_else_the_plugin_and_none_turns_it_off() {
        let with = |v: &str| {
            parse(
                &attrs(&[("sourceId", "a/b"), ("sharedCache", v)]),
                Some(&cap(1, "")),
                false,
            )
        };
        let plain = parse(&attrs(&[("sourceId", "a/b")]), Some(&cap(1, "")), false).unwrap();
        assert_eq!(
            shared_cache(plain.settings.shared_cache.clone(), Some("s3://p/x")).as_deref(),
            Some("s3://p/x")
        );
        assert_eq!(shared_cache(plain.settings.shared_cache.clone(), None), None);
        let own = with("s3://fleet/models").unwrap();
        assert_eq!(
            shared_cache(own.settings.shared_cache.clone(), Some("s3://p/x")).as_deref(),
            Some("s3://fleet/models")
        );
        assert_ne!(
            plain.canonical(),
            own.canonical(),
            "another tier is another source mount"
        );
        let off = with("none").unwrap();
        assert_eq!(shared_cache(off.settings.shared_cache, Some("s3://p/x")), None);
        let e = with("http://x/y").unwrap_err();
        assert!(e.contains("sharedCache"), "{e}");
        for url in ["gs://fleet/models", "az://fleet/models"] {
            assert_eq!(with(url).unwrap().settings.shared_cache.as_deref(), Some(url));
        }
    }

    #[test]
    fn the_token_key_is_looked_up() {
        let spec = parse(&attrs(&[("sourceId", "a/b")]), Some(&cap(1, "")), false).unwrap();
        assert_eq!(token(&spec, &HashMap::new()).unwrap(), None);
        assert_eq!(
            token(&spec, &attrs(&[("HF_TOKEN", "t")])).unwrap().as_deref(),
            Some("t")
        );
        assert!(token(&spec, &attrs(&[("other", "t")])).is_err());
    }
}
