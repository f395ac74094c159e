//! Tests of the local Hub's repo store (`store.rs`).

use super::*;

fn store() -> (tempfile::TempDir, Store) {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path()).unwrap();
    (d, s)
}

fn req(ops: Vec<Op>, parent: Option<String>) -> CommitRequest {
    CommitRequest {
        title: "t".into(),
        message: String::new(),
        author: "u".into(),
        parent,
        create_pr: false,
        ops,
    }
}

#[test]
fn commit_and_reopen() {
    let (d, s) = store();
    let id = RepoId::new(RepoType::Dataset, "ns", "r").unwrap();
    let repo = s.create_repo(&id, false, "u").unwrap();
    let e = s.put_git_object(b"hello").unwrap();
    let out = s
        .apply_commit(
            &repo,
            "main",
            req(
                vec![Op::Put {
                    path: "a/b.txt".into(),
                    entry: e,
                }],
                None,
            ),
        )
        .unwrap();
    // Reopen from disk: the same head and file.
    let s2 = Store::open(d.path()).unwrap();
    let repo2 = s2.repo(&id).unwrap().unwrap();
    let r = s2.resolve(&repo2, "main").unwrap();
    assert_eq!(r.commit, out.commit);
    let c = s2.commit(&repo2, &r.commit).unwrap();
    assert!(c.files.contains_key("a/b.txt"));
    assert!(c.files.contains_key(".gitattributes"));
    assert!(s.create_repo(&id, false, "u").is_err());
}

#[test]
fn parent_mismatch_is_412_and_conflicts_refused() {
    let (_d, s) = store();
    let id = RepoId::new(RepoType::Model, "ns", "r").unwrap();
    let repo = s.create_repo(&id, false, "u").unwrap();
    let first = s.resolve(&repo, "main").unwrap().commit;
    let e = s.put_git_object(b"x").unwrap();
    s.apply_commit(
        &repo,
        "main",
        req(
            vec![Op::Put {
                path: "f".into(),
                entry: e.clone(),
            }],
            Some(first.clone()),
        ),
    )
    .unwrap();
    let err = s
        .apply_commit(
            &repo,
            "main",
            req(
                vec![Op::Put {
                    path: "g".into(),
                    entry: e.clone(),
                }],
                Some(first),
            ),
        )
        .err()
        .unwrap();
    assert!(matches!(err, HubError::PreconditionFailed));
    let err = s
        .apply_commit(
            &repo,
            "main",
            req(
                vec![Op::Put {
                    path: "f/x".into(),
                    entry: e,
                }],
                None,
            ),
        )
        .err()
        .unwrap();
    assert!(matches!(err, HubError::BadRequest(_)));
    let err = s
        .apply_commit(&repo, "main", req(vec![Op::DeleteFile { path: "nope".into() }], None))
        .err()
        .unwrap();
    assert!(matches!(err, HubError::EntryNotFound(_)));
}

#[test]
fn pr_from_parent_and_its_target_survive_reopen() {
    let (d, s) = store();
    let id = RepoId::new(RepoType::Model, "ns", "r").unwrap();
    let repo = s.create_repo(&id, false, "u").unwrap();
    let put = |path: &str| Op::Put {
        path: path.into(),
        entry: s.put_git_object(path.as_bytes()).unwrap(),
    };
    let old = s
        .apply_commit(&repo, "main", req(vec![put("old")], None))
        .unwrap()
        .commit;
    s.set_ref(&repo, RefKind::Branch, "dev", Some(old.clone())).unwrap();
    let later = s
        .apply_commit(&repo, "dev", req(vec![put("later")], None))
        .unwrap()
        .commit;
    let pr_req = |path: &str, parent: &str| CommitRequest {
        create_pr: true,
        ..req(vec![put(path)], Some(parent.to_string()))
    };
    let pr = s.apply_commit(&repo, "refs/heads/dev", pr_req("pr", &old)).unwrap();
    assert_eq!(pr.pr_num, Some(1));
    let c = s.commit(&repo, &pr.commit).unwrap();
    assert_eq!(c.parents, std::slice::from_ref(&old));
    assert!(c.files.contains_key("pr") && c.files.contains_key("old") && !c.files.contains_key("later"));
    assert_eq!(s.resolve(&repo, "dev").unwrap().commit, later, "the branch stays");
    assert_eq!(repo.pr_base(1), "refs/heads/dev");
    let main_pr = s.apply_commit(&repo, "main", pr_req("pr2", &old)).unwrap();
    assert_eq!(repo.pr_base(main_pr.pr_num.unwrap()), DEFAULT_PR_BASE);
    // Not a commit of this repo: RevisionNotFound, and nothing is opened.
    for bad in ["f".repeat(40), old[..7].to_string()] {
        let err = s.apply_commit(&repo, "main", pr_req("x", &bad)).err().unwrap();
        assert!(matches!(err, HubError::RevisionNotFound(_)), "{err:?}");
    }
    assert_eq!(repo.refs.read().prs.len(), 2);
    // Without create_pr the same parent is stale.
    let err = s
        .apply_commit(&repo, "dev", req(vec![put("y")], Some(old.clone())))
        .err()
        .unwrap();
    assert!(matches!(err, HubError::PreconditionFailed));
    // Targets are on disk; a data dir without the file reads as "every PR targets main".
    let s2 = Store::open(d.path()).unwrap();
    let repo2 = s2.repo(&id).unwrap().unwrap();
    assert_eq!(repo2.pr_base(1), "refs/heads/dev");
    assert_eq!(repo2.pr_base(2), DEFAULT_PR_BASE);
    std::fs::remove_file(repo2.dir.join(PR_BASES)).unwrap();
    let s3 = Store::open(d.path()).unwrap();
    assert_eq!(s3.repo(&id).unwrap().unwrap().pr_base(1), DEFAULT_PR_BASE);
}
