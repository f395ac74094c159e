//! Unit tests of the mutation: each returned patch is applied to the pod by an independent RFC 6902
//! implementation (the json-patch crate) and the resulting pod is checked.

use super::*;

fn sidecar() -> Sidecar {
    Sidecar {
        image: "ghcr.io/example/hubfs:1".into(),
        cpu_request: Some("100m".into()),
        memory_request: Some("512Mi".into()),
        cpu_limit: None,
        memory_limit: Some("1Gi".into()),
    }
}

fn request(pod: Value) -> AdmissionRequest {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": "ml",
            "object": pod,
        }
    });
    parse_review(&serde_json::to_vec(&review).unwrap()).unwrap()
}

fn pod(volumes: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "ml", "annotations": {"team": "nlp"}},
        "spec": {
            "containers": [{"name": "app", "image": "python:3", "volumeMounts": [{"name": "model", "mountPath": "/model"}]}],
            "volumes": volumes,
        }
    })
}

fn inline_volume() -> Value {
    json!({"name": "model", "csi": {"driver": DRIVER, "readOnly": true, "volumeAttributes": {"repo": "gpt2"}}})
}

fn pvc_volume(claim: &str) -> Value {
    json!({"name": claim, "persistentVolumeClaim": {"claimName": claim, "readOnly": true}})
}

fn no_claims() -> BTreeMap<String, Claim> {
    BTreeMap::new()
}

/// Applies the decision's patch to the pod (which must have been patched).
fn patched(req: &AdmissionRequest, decision: &Decision) -> Value {
    let Decision::Inject(ops) = decision else {
        panic!("expected a patch, got {decision:?}")
    };
    let ops: json_patch::Patch = serde_json::from_value(Value::Array(ops.clone())).unwrap();
    let mut doc = req.object.clone();
    json_patch::patch(&mut doc, &ops).unwrap_or_else(|e| panic!("{e}: {ops:?}"));
    doc
}

fn assert_injected(pod: &Value) {
    let init = pod["spec"]["initContainers"].as_array().unwrap();
    assert_eq!(init[0]["name"], SIDECAR_NAME);
    assert_eq!(init[0]["image"], "ghcr.io/example/hubfs:1");
    assert_eq!(
        init[0]["args"],
        json!(["csi-sidecar", "--socket-dir", "/hubfs-sidecar"])
    );
    assert_eq!(init[0]["restartPolicy"], "Always");
    assert_eq!(
        init[0]["securityContext"],
        json!({"runAsUser": 65534, "runAsGroup": 65534, "runAsNonRoot": true, "readOnlyRootFilesystem": true,
               "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}})
    );
    assert_eq!(
        init[0]["resources"],
        json!({"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}})
    );
    assert_eq!(
        init[0]["volumeMounts"],
        json!([{"name": SIDECAR_NAME, "mountPath": SOCKET_DIR}])
    );
    let vols = pod["spec"]["volumes"].as_array().unwrap();
    assert_eq!(vols.last().unwrap(), &json!({"name": SIDECAR_NAME, "emptyDir": {}}));
    assert_eq!(vols.iter().filter(|v| v["name"] == SIDECAR_NAME).count(), 1);
    assert_eq!(pod["metadata"]["annotations"][INJECTED_ANNOTATION], "injected");
}

#[test]
fn inline_volume_gets_the_sidecar() {
    let req = request(pod(json!([inline_volume()])));
    assert!(claims_to_resolve(&req).is_empty(), "an inline volume needs no look-up");
    let d = decide(&req, &no_claims(), &sidecar());
    let out = patched(&req, &d);
    assert_injected(&out);
    assert_eq!(out["spec"]["initContainers"].as_array().unwrap().len(), 1);
    assert_eq!(out["metadata"]["annotations"]["team"], "nlp", "other annotations stay");
    assert_eq!(
        out["spec"]["containers"], req.object["spec"]["containers"],
        "containers untouched"
    );
    // The patch is idempotent through the annotation: the patched pod gets nothing more.
    assert_eq!(
        decide(&request(out), &no_claims(), &sidecar()),
        Decision::Skip(Skip::AlreadyInjected)
    );
}

#[test]
fn pod_without_annotations_or_metadata_gets_them_created() {
    let mut p = pod(json!([inline_volume()]));
    p["metadata"].as_object_mut().unwrap().remove("annotations");
    let req = request(p);
    let out = patched(&req, &decide(&req, &no_claims(), &sidecar()));
    assert_injected(&out);
    assert_eq!(out["metadata"]["annotations"].as_object().unwrap().len(), 1);

    let mut p = pod(json!([inline_volume()]));
    p.as_object_mut().unwrap().remove("metadata");
    let req = request(p);
    assert_injected(&patched(&req, &decide(&req, &no_claims(), &sidecar())));
}

#[test]
fn bound_hubfs_claim_gets_the_sidecar() {
    let req = request(pod(json!([
        pvc_volume("scratch"),
        pvc_volume("weights"),
        pvc_volume("scratch")
    ])));
    assert_eq!(claims_to_resolve(&req), vec!["scratch", "weights"], "each claim once");
    let claims = BTreeMap::from([
        ("scratch".to_string(), Claim::Unbound),
        ("weights".to_string(), Claim::Hubfs),
    ]);
    assert_injected(&patched(&req, &decide(&req, &claims, &sidecar())));

    // The look-up's inputs: a PVC's bound PV and that PV's driver.
    let pvc = json!({"spec": {"volumeName": "pv-gpt2"}, "status": {"phase": "Bound"}});
    assert_eq!(bound_volume(&pvc), Some("pv-gpt2"));
    assert_eq!(bound_volume(&json!({"spec": {}, "status": {"phase": "Pending"}})), None);
    assert_eq!(claim_of_pv(&json!({"spec": {"csi": {"driver": DRIVER}}})), Claim::Hubfs);
    assert_eq!(
        claim_of_pv(&json!({"spec": {"csi": {"driver": "ebs.csi.aws.com"}}})),
        Claim::Other
    );
    assert_eq!(
        claim_of_pv(&json!({"spec": {"hostPath": {"path": "/x"}}})),
        Claim::Other
    );
}

#[test]
fn unbound_failed_or_foreign_claims_get_nothing() {
    let req = request(pod(json!([pvc_volume("a"), pvc_volume("b")])));
    let with = |a: Claim, b: Claim| BTreeMap::from([("a".to_string(), a), ("b".to_string(), b)]);
    assert_eq!(
        decide(&req, &with(Claim::Other, Claim::Unbound), &sidecar()),
        Decision::Skip(Skip::ClaimUnbound("b".into()))
    );
    let failed = decide(&req, &with(Claim::Failed("timed out".into()), Claim::Other), &sidecar());
    let Decision::Skip(skip) = &failed else {
        panic!("{failed:?}")
    };
    assert!(skip.is_warning() && skip.to_string().contains("\"a\"") && skip.to_string().contains("timed out"));
    assert_eq!(
        decide(&req, &with(Claim::Other, Claim::Other), &sidecar()),
        Decision::Skip(Skip::NoHubfsVolume)
    );
    // A claim the server did not look up is not taken for hubfs.
    assert!(matches!(
        decide(&req, &no_claims(), &sidecar()),
        Decision::Skip(Skip::ClaimFailed { .. })
    ));
    let r = response(
        &req.uid,
        &decide(&req, &with(Claim::Unbound, Claim::Unbound), &sidecar()),
    );
    assert!(r["response"].get("patch").is_none() && r["response"].get("warnings").is_none());
}

#[test]
fn already_injected_pods_are_left_alone() {
    let mut p = pod(json!([inline_volume()]));
    p["metadata"]["annotations"][INJECTED_ANNOTATION] = json!("injected");
    assert_eq!(
        decide(&request(p), &no_claims(), &sidecar()),
        Decision::Skip(Skip::AlreadyInjected)
    );
    for list in ["initContainers", "containers"] {
        let mut p = pod(json!([inline_volume()]));
        p["spec"][list] = json!([{"name": SIDECAR_NAME, "image": "mine"}]);
        assert_eq!(
            decide(&request(p), &no_claims(), &sidecar()),
            Decision::Skip(Skip::AlreadyInjected),
            "{list}"
        );
    }
}

#[test]
fn opt_out_annotation_is_honoured() {
    let mut p = pod(json!([inline_volume()]));
    p["metadata"]["annotations"][INJECT_ANNOTATION] = json!("false");
    let req = request(p);
    assert!(claims_to_resolve(&req).is_empty());
    assert_eq!(decide(&req, &no_claims(), &sidecar()), Decision::Skip(Skip::OptedOut));
    let mut p = pod(json!([inline_volume()]));
    p["metadata"]["annotations"][INJECT_ANNOTATION] = json!("true");
    assert!(matches!(
        decide(&request(p), &no_claims(), &sidecar()),
        Decision::Inject(_)
    ));
}

#[test]
fn pods_without_hubfs_volumes_get_nothing() {
    let other = json!({"name": "ebs", "csi": {"driver": "ebs.csi.aws.com"}});
    let cache = json!({"name": "cache", "emptyDir": {}});
    for volumes in [json!([other, cache]), json!([]), Value::Null] {
        let req = request(pod(volumes.clone()));
        assert!(claims_to_resolve(&req).is_empty());
        let d = decide(&req, &no_claims(), &sidecar());
        assert_eq!(d, Decision::Skip(Skip::NoHubfsVolume), "{volumes}");
        let r = response(&req.uid, &d);
        assert_eq!(
            r,
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "response": {"uid": req.uid, "allowed": true}})
        );
    }
}

#[test]
fn existing_init_containers_run_after_the_sidecar() {
    let mut p = pod(json!([inline_volume()]));
    p["spec"]["initContainers"] = json!([{"name": "fetch", "image": "busybox"}, {"name": "warm", "image": "busybox"}]);
    let req = request(p);
    let out = patched(&req, &decide(&req, &no_claims(), &sidecar()));
    assert_injected(&out);
    let names: Vec<&str> = out["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hubfs-sidecar", "fetch", "warm"]);
}

#[test]
fn a_volume_named_like_the_sidecars_is_a_clash() {
    let req = request(pod(json!([inline_volume(), {"name": SIDECAR_NAME, "emptyDir": {}}])));
    let d = decide(&req, &no_claims(), &sidecar());
    assert_eq!(d, Decision::Skip(Skip::NameClash));
    let r = response(&req.uid, &d);
    assert!(r["response"].get("patch").is_none());
    assert_eq!(r["response"]["allowed"], true);
    let warning = r["response"]["warnings"][0].as_str().unwrap();
    assert!(warning.contains(SIDECAR_NAME) && warning.len() <= 120, "{warning}");
    // Without a hubfs volume the name is nobody's business.
    let req = request(pod(json!([{"name": SIDECAR_NAME, "emptyDir": {}}])));
    assert_eq!(
        decide(&req, &no_claims(), &sidecar()),
        Decision::Skip(Skip::NoHubfsVolume)
    );
}

#[test]
fn only_pod_creates_are_mutated() {
    let mut req = request(pod(json!([inline_volume()])));
    req.operation = "UPDATE".into();
    assert!(matches!(
        decide(&req, &no_claims(), &sidecar()),
        Decision::Skip(Skip::NotPodCreate { .. })
    ));
    for kind in [("", "v1", "Service"), ("apps", "v1", "Pod"), ("", "v2", "Pod")] {
        let mut req = request(pod(json!([inline_volume(), pvc_volume("w")])));
        req.kind = Gvk {
            group: kind.0.into(),
            version: kind.1.into(),
            kind: kind.2.into(),
        };
        assert!(claims_to_resolve(&req).is_empty(), "{kind:?}");
        assert!(matches!(
            decide(&req, &no_claims(), &sidecar()),
            Decision::Skip(Skip::NotPodCreate { .. })
        ));
    }
}

#[test]
fn the_response_carries_the_uid_and_a_base64_patch() {
    let req = request(pod(json!([inline_volume()])));
    let d = decide(&req, &no_claims(), &sidecar());
    let r = response(&req.uid, &d);
    assert_eq!(r["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(r["kind"], "AdmissionReview");
    assert_eq!(r["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(r["response"]["allowed"], true);
    assert_eq!(r["response"]["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(r["response"]["patch"].as_str().unwrap())
        .unwrap();
    let Decision::Inject(ops) = &d else { unreachable!() };
    assert_eq!(
        serde_json::from_slice::<Value>(&bytes).unwrap(),
        Value::Array(ops.clone())
    );
    // The `/` of the annotation key is escaped in its JSON Pointer.
    assert!(
        ops.iter()
            .any(|o| o["path"] == "/metadata/annotations/hubfs.csi.huggingface.co~1sidecar")
    );
}

#[test]
fn bad_reviews_are_refused() {
    assert!(matches!(parse_review(b"{not json"), Err(ReviewError::Malformed(_))));
    assert!(matches!(parse_review(b"[]"), Err(ReviewError::Malformed(_))));
    let review = |v: Value| parse_review(&serde_json::to_vec(&v).unwrap());
    let beta =
        review(json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}}));
    let err = beta.unwrap_err();
    assert!(matches!(err, ReviewError::Unsupported { .. }));
    assert!(err.to_string().contains("admission.k8s.io/v1 is supported"), "{err}");
    assert!(matches!(
        review(json!({"apiVersion": "admission.k8s.io/v1", "kind": "Pod"})),
        Err(ReviewError::Unsupported { .. })
    ));
    let v1 = |request: Value| {
        review(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}))
    };
    assert_eq!(v1(json!({"kind": {"kind": "Pod"}})).unwrap_err(), ReviewError::NoUid);
    assert_eq!(v1(json!({"uid": ""})).unwrap_err(), ReviewError::NoUid);
    assert!(matches!(v1(json!({"uid": 7})), Err(ReviewError::Malformed(_))));
    assert_eq!(
        review(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})).unwrap_err(),
        ReviewError::NoRequest
    );
    // A DELETE has no object: parsed, then left alone.
    let del = v1(json!({"uid": "u", "kind": {"version": "v1", "kind": "Pod"}, "operation": "DELETE", "object": null}))
        .unwrap();
    assert!(matches!(
        decide(&del, &no_claims(), &sidecar()),
        Decision::Skip(Skip::NotPodCreate { .. })
    ));
}

#[test]
fn quantities_and_names() {
    for ok in ["100m", "512Mi", "1Gi", "2", "0.5", "1.5G", "1e3", "1E-2", "+1k"] {
        assert_eq!(check_quantity(ok), Ok(()), "{ok}");
    }
    for bad in ["", "m", "512MB", "1..5", "1e", "-1", "1 Gi", "abc"] {
        assert!(check_quantity(bad).is_err(), "{bad}");
    }
    for ok in ["weights", "pv-gpt2", "a.b-c.d", "0"] {
        assert!(is_object_name(ok), "{ok}");
    }
    for bad in ["", "..", "a/b", "A", "-a", "a-", "a..b", "a?x=1", &"a".repeat(254)] {
        assert!(!is_object_name(bad), "{bad}");
    }
}
