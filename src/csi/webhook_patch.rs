//! The pure half of `hubfs csi-webhook`: reading an AdmissionReview, deciding whether a pod gets
//! the hubfs sidecar, and the RFC 6902 JSON Patch that adds it. Nothing here does I/O: the
//! PersistentVolumeClaim look-ups a decision may need are made by [`super::webhook`] and passed in
//! as [`Claim`]s, so every case is testable with plain JSON.
//!
//! Every path that is not a clean "inject" answers `allowed` with no patch: the sidecar is an
//! optimisation (the FUSE server outlives plugin restarts), and without it the node plugin serves
//! the volume itself, so refusing or half-mutating a pod would only do harm.

use std::collections::BTreeMap;

use base64::Engine;
use serde::Deserialize;
use serde_json::{Value, json};

/// The CSI driver whose volumes get the sidecar (examples/kubernetes/csidriver.yaml).
pub const DRIVER: &str = "hubfs.csi.huggingface.co";
/// Name of the injected init container and of its emptyDir volume.
pub const SIDECAR_NAME: &str = "hubfs-sidecar";
/// Where the sidecar and the plugin meet: the emptyDir holding the descriptor-passing socket.
pub const SOCKET_DIR: &str = "/hubfs-sidecar";
/// Set on every pod that got the sidecar, so a second pass (or a reinvocation) changes nothing.
pub const INJECTED_ANNOTATION: &str = "hubfs.csi.huggingface.co/sidecar";
/// `"false"` opts a pod out of the sidecar.
pub const INJECT_ANNOTATION: &str = "hubfs.csi.huggingface.co/inject";
/// The only AdmissionReview version served (what `admissionReviewVersions: [v1]` asks for).
pub const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";
/// `nobody`: the sidecar only holds a FUSE descriptor and serves it, it needs no identity.
pub const SIDECAR_UID: u32 = 65534;

/// Why a review body cannot be answered at all (HTTP 400: a malformed request never gets a patch).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReviewError {
    #[error("malformed AdmissionReview: {0}")]
    Malformed(String),
    #[error(
        "unsupported review (apiVersion {api_version:?}, kind {kind:?}): only AdmissionReview {REVIEW_API_VERSION} is supported"
    )]
    Unsupported { api_version: String, kind: String },
    #[error("AdmissionReview has no request")]
    NoRequest,
    #[error("AdmissionReview request has no uid")]
    NoUid,
}

/// Group, version and kind of the object under review.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
pub struct Gvk {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

/// The parts of `request` the webhook reads; the object stays untyped JSON so that the patch is
/// computed against exactly what the API server sent.
#[derive(Debug, Clone)]
pub struct AdmissionRequest {
    pub uid: String,
    pub kind: Gvk,
    pub operation: String,
    pub namespace: String,
    pub object: Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawReview {
    api_version: Option<String>,
    kind: Option<String>,
    request: Option<RawRequest>,
}

#[derive(Deserialize)]
struct RawRequest {
    uid: Option<String>,
    kind: Option<Gvk>,
    operation: Option<String>,
    namespace: Option<String>,
    #[serde(default)]
    object: Value,
}

/// Parses and checks an AdmissionReview body.
pub fn parse_review(body: &[u8]) -> Result<AdmissionRequest, ReviewError> {
    let raw: RawReview = serde_json::from_slice(body).map_err(|e| ReviewError::Malformed(e.to_string()))?;
    let api_version = raw.api_version.unwrap_or_default();
    let kind = raw.kind.unwrap_or_default();
    if api_version != REVIEW_API_VERSION || kind != "AdmissionReview" {
        return Err(ReviewError::Unsupported { api_version, kind });
    }
    let req = raw.request.ok_or(ReviewError::NoRequest)?;
    let uid = req.uid.filter(|u| !u.is_empty()).ok_or(ReviewError::NoUid)?;
    let mut namespace = req.namespace.unwrap_or_default();
    if namespace.is_empty() {
        namespace = str_at(&req.object, "/metadata/namespace")
            .unwrap_or_default()
            .to_string();
    }
    Ok(AdmissionRequest {
        uid,
        kind: req.kind.unwrap_or_default(),
        operation: req.operation.unwrap_or_default(),
        namespace,
        object: req.object,
    })
}

/// What the Kubernetes API said about one PersistentVolumeClaim of the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Bound to a PV of the hubfs driver.
    Hubfs,
    /// Bound to some other volume.
    Other,
    /// Not bound yet: which driver will serve it is unknown.
    Unbound,
    /// The look-up failed (API error, timeout, not found); the reason, free of credentials.
    Failed(String),
}

/// The PV a PVC is bound to (`spec.volumeName`), if any.
pub fn bound_volume(pvc: &Value) -> Option<&str> {
    str_at(pvc, "/spec/volumeName").filter(|s| !s.is_empty())
}

/// Whether a PV is served by the hubfs driver.
pub fn claim_of_pv(pv: &Value) -> Claim {
    match str_at(pv, "/spec/csi/driver") {
        Some(DRIVER) => Claim::Hubfs,
        _ => Claim::Other,
    }
}

/// A DNS-1123 subdomain, which every namespace, PVC and PV name is: only such names are put in an
/// API URL, so a pod cannot steer the webhook's look-ups elsewhere (`..`, `/`, `?`).
pub fn is_object_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
            b.first().is_some_and(edge) && b.last().is_some_and(edge) && b.iter().all(|c| edge(c) || *c == b'-')
        })
}

/// Why a pod gets no patch. The warning ones are logged as warnings; a name clash is also told
/// to whoever created the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    NotPodCreate { kind: String, operation: String },
    OptedOut,
    AlreadyInjected,
    NoHubfsVolume,
    ClaimUnbound(String),
    ClaimFailed { claim: String, error: String },
    NameClash,
}

impl Skip {
    pub fn is_warning(&self) -> bool {
        matches!(self, Skip::ClaimUnbound(_) | Skip::ClaimFailed { .. } | Skip::NameClash)
    }

    /// The admission warning shown to the pod's creator (kubectl prints it), under the API
    /// server's 120 characters.
    pub fn response_warning(&self) -> Option<String> {
        match self {
            Skip::NameClash => Some(format!(
                "hubfs: volume {SIDECAR_NAME:?} exists, sidecar not injected (plugin serves hubfs volumes itself)"
            )),
            _ => None,
        }
    }
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::NotPodCreate { kind, operation } => write!(f, "{operation} of {kind}, not a pod CREATE"),
            Skip::OptedOut => write!(f, "opted out ({INJECT_ANNOTATION}: \"false\")"),
            Skip::AlreadyInjected => write!(f, "the sidecar is already there"),
            Skip::NoHubfsVolume => write!(f, "no hubfs volume"),
            Skip::ClaimUnbound(c) => write!(
                f,
                "persistentVolumeClaim {c:?} is not bound yet, the node plugin will serve it without a sidecar"
            ),
            Skip::ClaimFailed { claim, error } => write!(
                f,
                "persistentVolumeClaim {claim:?} could not be looked up ({error}), the node plugin will serve it without a sidecar"
            ),
            Skip::NameClash => write!(f, "the pod already has a volume named {SIDECAR_NAME:?}"),
        }
    }
}

/// What to answer for one review.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// The JSON Patch operations that add the sidecar.
    Inject(Vec<Value>),
    Skip(Skip),
}

/// The injected container's image and resources (`--sidecar-*`); `None` leaves one out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sidecar {
    pub image: String,
    pub cpu_request: Option<String>,
    pub memory_request: Option<String>,
    pub cpu_limit: Option<String>,
    pub memory_limit: Option<String>,
}

impl Sidecar {
    /// The native sidecar: an init container that keeps running (`restartPolicy: Always`), so it
    /// is up before the app's containers start and lives as long as the pod.
    pub fn container(&self) -> Value {
        let pick = |pairs: [(&str, &Option<String>); 2]| -> serde_json::Map<String, Value> {
            pairs
                .into_iter()
                .filter_map(|(k, v)| Some((k.to_string(), json!(v.as_ref()?))))
                .collect()
        };
        let requests = pick([("cpu", &self.cpu_request), ("memory", &self.memory_request)]);
        let limits = pick([("cpu", &self.cpu_limit), ("memory", &self.memory_limit)]);
        let mut resources = serde_json::Map::new();
        if !requests.is_empty() {
            resources.insert("requests".into(), Value::Object(requests));
        }
        if !limits.is_empty() {
            resources.insert("limits".into(), Value::Object(limits));
        }
        json!({
            "name": SIDECAR_NAME,
            "image": self.image,
            "args": ["csi-sidecar", "--socket-dir", SOCKET_DIR],
            "restartPolicy": "Always",
            "securityContext": unprivileged(),
            "resources": resources,
            "volumeMounts": [{"name": SIDECAR_NAME, "mountPath": SOCKET_DIR}],
        })
    }
}

/// The security context of hubfs's own containers that serve a handed-over FUSE descriptor (the
/// sidecar, a mount pod): they open no device and mount nothing, so they need no identity, no
/// capability and no writable root.
pub fn unprivileged() -> Value {
    json!({
        "runAsUser": SIDECAR_UID,
        "runAsGroup": SIDECAR_UID,
        "runAsNonRoot": true,
        "readOnlyRootFilesystem": true,
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
    })
}

/// Checks a resource quantity (`100m`, `512Mi`, `1.5G`, `1e3`) the way the API server would, at
/// start-up: a typo must fail the webhook, not every pod it patches.
pub fn check_quantity(s: &str) -> Result<(), String> {
    let digits = s.trim_start_matches('+');
    let num_end = digits
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(digits.len());
    let (number, suffix) = digits.split_at(num_end);
    let number_ok = number.matches('.').count() <= 1 && number.chars().any(|c| c.is_ascii_digit());
    let suffix_ok = match suffix {
        "" | "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => true,
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => true,
        exp => exp
            .strip_prefix(['e', 'E'])
            .map(|e| e.strip_prefix(['+', '-']).unwrap_or(e))
            .is_some_and(|e| !e.is_empty() && e.chars().all(|c| c.is_ascii_digit())),
    };
    if number_ok && suffix_ok {
        Ok(())
    } else {
        Err(format!("{s:?} is not a Kubernetes quantity (e.g. 100m, 512Mi, 2Gi)"))
    }
}

/// What a pod's own spec says, before any look-up: an early skip, or whether an inline volume is
/// hubfs and which claims would need looking up.
struct Uses {
    inline: bool,
    claims: Vec<String>,
}

fn uses(req: &AdmissionRequest) -> Result<Uses, Skip> {
    let k = &req.kind;
    if !(k.group.is_empty() && k.version == "v1" && k.kind == "Pod" && req.operation == "CREATE") {
        return Err(Skip::NotPodCreate {
            kind: req.kind.kind.clone(),
            operation: req.operation.clone(),
        });
    }
    let pod = &req.object;
    if str_at(pod, &annotation_pointer(INJECT_ANNOTATION)).is_some_and(|v| v.eq_ignore_ascii_case("false")) {
        return Err(Skip::OptedOut);
    }
    let named_sidecar = |list: &str| {
        array_at(pod, list)
            .iter()
            .any(|c| str_at(c, "/name") == Some(SIDECAR_NAME))
    };
    if str_at(pod, &annotation_pointer(INJECTED_ANNOTATION)).is_some()
        || named_sidecar("/spec/initContainers")
        || named_sidecar("/spec/containers")
    {
        return Err(Skip::AlreadyInjected);
    }
    let mut found = Uses {
        inline: false,
        claims: Vec::new(),
    };
    for vol in array_at(pod, "/spec/volumes") {
        if str_at(vol, "/csi/driver") == Some(DRIVER) {
            found.inline = true;
        } else if let Some(claim) = str_at(vol, "/persistentVolumeClaim/claimName")
            && !found.claims.iter().any(|c| c == claim)
        {
            found.claims.push(claim.to_string());
        }
    }
    Ok(found)
}

/// The PVCs whose binding decides this review: none when it is decided without them (not a pod
/// CREATE, opted out, already injected, an inline hubfs volume).
pub fn claims_to_resolve(req: &AdmissionRequest) -> Vec<String> {
    match uses(req) {
        Ok(u) if !u.inline => u.claims,
        _ => Vec::new(),
    }
}

/// Decides one review, given what the API said about the claims of [`claims_to_resolve`] (a claim
/// missing from `claims` counts as a failed look-up).
pub fn decide(req: &AdmissionRequest, claims: &BTreeMap<String, Claim>, sidecar: &Sidecar) -> Decision {
    let found = match uses(req) {
        Ok(u) => u,
        Err(skip) => return Decision::Skip(skip),
    };
    if !found.inline {
        // One hubfs claim is enough; otherwise the first unknown one is why nothing is injected.
        let mut hubfs = false;
        let mut unknown = None;
        for name in &found.claims {
            let why = match claims.get(name) {
                Some(Claim::Hubfs) => {
                    hubfs = true;
                    break;
                }
                Some(Claim::Other) => continue,
                Some(Claim::Unbound) => Skip::ClaimUnbound(name.clone()),
                Some(Claim::Failed(e)) => Skip::ClaimFailed {
                    claim: name.clone(),
                    error: e.clone(),
                },
                None => Skip::ClaimFailed {
                    claim: name.clone(),
                    error: "not looked up".into(),
                },
            };
            unknown.get_or_insert(why);
        }
        if !hubfs {
            return Decision::Skip(unknown.unwrap_or(Skip::NoHubfsVolume));
        }
    }
    if array_at(&req.object, "/spec/volumes")
        .iter()
        .any(|v| str_at(v, "/name") == Some(SIDECAR_NAME))
    {
        return Decision::Skip(Skip::NameClash);
    }
    Decision::Inject(patch(&req.object, sidecar))
}

/// The JSON Patch: the sidecar first among the init containers (so it runs before the others,
/// which may read the volume), its emptyDir, and the annotation. Each `add` creates its parent
/// array or map when the pod has none.
fn patch(pod: &Value, sidecar: &Sidecar) -> Vec<Value> {
    let add = |path: String, value: Value| json!({"op": "add", "path": path, "value": value});
    let mut ops = Vec::with_capacity(3);
    ops.push(match pod.pointer("/spec/initContainers") {
        Some(Value::Array(_)) => add("/spec/initContainers/0".into(), sidecar.container()),
        _ => add("/spec/initContainers".into(), json!([sidecar.container()])),
    });
    let volume = json!({"name": SIDECAR_NAME, "emptyDir": {}});
    ops.push(match pod.pointer("/spec/volumes") {
        Some(Value::Array(_)) => add("/spec/volumes/-".into(), volume),
        _ => add("/spec/volumes".into(), json!([volume])),
    });
    ops.push(match (pod.pointer("/metadata/annotations"), pod.get("metadata")) {
        (Some(Value::Object(_)), _) => add(annotation_pointer(INJECTED_ANNOTATION), json!("injected")),
        (_, Some(Value::Object(_))) => add("/metadata/annotations".into(), json!({INJECTED_ANNOTATION: "injected"})),
        _ => add(
            "/metadata".into(),
            json!({"annotations": {INJECTED_ANNOTATION: "injected"}}),
        ),
    });
    ops
}

/// The AdmissionReview answered: always allowed, with the patch (base64 of its JSON) when there is
/// one and the warnings when there are some.
pub fn response(uid: &str, decision: &Decision) -> Value {
    let mut resp = json!({"uid": uid, "allowed": true});
    match decision {
        Decision::Inject(ops) => {
            // Serialising a `Value` cannot fail (its map keys are strings).
            let text = serde_json::to_vec(ops).unwrap_or_default();
            resp["patchType"] = json!("JSONPatch");
            resp["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
        Decision::Skip(skip) => {
            if let Some(w) = skip.response_warning() {
                resp["warnings"] = json!([w]);
            }
        }
    }
    json!({"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": resp})
}

/// The pod's name for logs: pods of controllers have only a `generateName` at admission.
pub fn pod_name(req: &AdmissionRequest) -> String {
    match (
        str_at(&req.object, "/metadata/name"),
        str_at(&req.object, "/metadata/generateName"),
    ) {
        (Some(n), _) if !n.is_empty() => n.to_string(),
        (_, Some(g)) => format!("{g}*"),
        _ => "?".to_string(),
    }
}

/// JSON Pointer (RFC 6901) of an annotation: `~` and the `/` of a prefixed key escaped.
fn annotation_pointer(key: &str) -> String {
    format!("/metadata/annotations/{}", key.replace('~', "~0").replace('/', "~1"))
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn array_at<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

// The unit tests live beside, in webhook_patch/tests.rs, to keep this file short.
#[cfg(test)]
mod tests;
