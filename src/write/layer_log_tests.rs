//! Tests of `layer_log`: replay, torn and bad lines, compaction and FileMeta round trips.

use std::io::Write;

use super::*;

fn file(id: u64) -> Logged {
    Logged::File { id }
}

fn meta(id: ContentId, sha256: Option<&str>, last_commit: Option<SystemTime>) -> FileMeta {
    FileMeta {
        remote_path: "models/w.bin".into(),
        commit: "0123456789abcdef0123456789abcdef01234567".into(),
        size: 1 << 40,
        id,
        sha256: sha256.map(str::to_string),
        last_commit,
    }
}

fn append_raw(dir: &Path, bytes: &[u8]) {
    let mut f = OpenOptions::new().append(true).open(dir.join(LOG_NAME)).unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn replay_of_sets_and_removes_gives_the_live_map() {
    let dir = tempfile::tempdir().unwrap();
    let (log, live) = LayerLog::open(dir.path()).unwrap();
    assert!(live.is_empty());
    log.set("a/b.txt", &file(7)).unwrap();
    log.set("a", &Logged::Dir).unwrap();
    log.set("gone.txt", &Logged::Gone).unwrap();
    log.set("link", &Logged::Special { hides: true }).unwrap();
    log.set("a/b.txt", &file(9)).unwrap();
    log.remove("gone.txt").unwrap();
    log.remove("never-there").unwrap();
    log.set("link", &Logged::Special { hides: false }).unwrap();
    log.sync().unwrap();
    assert_eq!(log.lines(), 8);
    drop(log);

    let text = std::fs::read_to_string(dir.path().join(LOG_NAME)).unwrap();
    let first = text.lines().next().unwrap();
    assert_eq!(first, r#"{"p":"a/b.txt","e":{"File":{"id":7}}}"#);
    assert!(text.contains(r#"{"p":"gone.txt","rm":true}"#));

    let (log, live) = LayerLog::open(dir.path()).unwrap();
    let want = BTreeMap::from([
        ("a".to_string(), Logged::Dir),
        ("a/b.txt".to_string(), file(9)),
        ("link".to_string(), Logged::Special { hides: false }),
    ]);
    assert_eq!(live, want);
    assert_eq!(log.lines(), 8);
}

#[test]
fn a_torn_last_line_is_ignored_and_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = LayerLog::open(dir.path()).unwrap();
    log.set("kept", &file(1)).unwrap();
    drop(log);
    append_raw(dir.path(), br#"{"p":"torn","e":{"Fi"#);

    let (log, live) = LayerLog::open(dir.path()).unwrap();
    assert_eq!(live, BTreeMap::from([("kept".to_string(), file(1))]));
    assert_eq!(log.lines(), 1);
    // Appends after the cut replay right (they are not glued to the torn bytes).
    log.set("after", &file(2)).unwrap();
    drop(log);
    let (_, live) = LayerLog::open(dir.path()).unwrap();
    assert_eq!(live.len(), 2);
    assert_eq!(live["after"], file(2));
}

#[test]
fn a_bad_line_in_the_middle_is_an_error_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = LayerLog::open(dir.path()).unwrap();
    log.set("one", &file(1)).unwrap();
    drop(log);
    append_raw(dir.path(), b"not json\n");
    append_raw(dir.path(), b"{\"p\":\"three\",\"e\":\"Dir\"}\n");

    let Err(e) = LayerLog::open(dir.path()) else {
        panic!("a bad line was accepted");
    };
    assert_eq!(e.kind(), ErrorKind::InvalidData);
    let msg = e.to_string();
    assert!(msg.contains(LOG_NAME) && msg.contains("line 2"), "{msg}");
}

#[test]
fn a_line_with_both_or_neither_of_e_and_rm_is_an_error() {
    for line in [
        r#"{"p":"x"}"#,
        r#"{"p":"x","e":"Dir","rm":true}"#,
        r#"{"p":"x","rm":false}"#,
    ] {
        let dir = tempfile::tempdir().unwrap();
        drop(LayerLog::open(dir.path()).unwrap());
        append_raw(dir.path(), format!("{line}\n").as_bytes());
        let Err(e) = LayerLog::open(dir.path()) else {
            panic!("{line} was accepted");
        };
        assert!(e.to_string().contains("line 1"), "{e}");
    }
}

#[test]
fn compaction_keeps_exactly_the_live_entries() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = LayerLog::open(dir.path()).unwrap();
    for i in 0..50 {
        log.set(&format!("f{i}"), &file(i)).unwrap();
    }
    for i in 0..40 {
        log.remove(&format!("f{i}")).unwrap();
    }
    drop(log);
    let (log, live) = LayerLog::open(dir.path()).unwrap();
    assert_eq!(log.lines(), 90);
    let entries: Vec<(String, Logged)> = live.clone().into_iter().collect();
    log.compact(&entries).unwrap();
    assert_eq!(log.lines(), 10);
    assert!(!dir.path().join(TMP_NAME).exists());
    // Appends after the compaction go to the new file.
    log.set("late", &Logged::Dir).unwrap();
    log.remove("f45").unwrap();
    assert_eq!(log.lines(), 12);
    drop(log);

    let (log, replayed) = LayerLog::open(dir.path()).unwrap();
    let mut want = live;
    want.insert("late".into(), Logged::Dir);
    want.remove("f45");
    assert_eq!(replayed, want);
    assert_eq!(log.lines(), 12);
}

#[test]
fn file_meta_round_trips_exactly() {
    let ids = [
        ContentId::Xet("x".repeat(64)),
        ContentId::Lfs("a".repeat(64)),
        ContentId::Git("b".repeat(40)),
    ];
    let times = [
        None,
        Some(UNIX_EPOCH),
        Some(UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789)),
        Some(UNIX_EPOCH - Duration::from_secs(86_400)),
        Some(UNIX_EPOCH - Duration::new(1_000, 250)),
        Some(UNIX_EPOCH - Duration::from_nanos(1)),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = LayerLog::open(dir.path()).unwrap();
    let mut all = Vec::new();
    for id in &ids {
        for sha in [None, Some("c".repeat(64))] {
            for t in times {
                let m = meta(id.clone(), sha.as_deref(), t);
                let logged = LoggedMeta::from(&m);
                assert_eq!(FileMeta::try_from(logged.clone()).unwrap(), m);
                assert_eq!(logged.clone().into_meta(), m);
                let path = format!("m{}", all.len());
                log.set(&path, &Logged::Moved(logged)).unwrap();
                all.push((path, m));
            }
        }
    }
    drop(log);
    let (_, live) = LayerLog::open(dir.path()).unwrap();
    assert_eq!(live.len(), all.len());
    for (path, m) in all {
        let Logged::Moved(lm) = live[&path].clone() else {
            panic!("{path} is not Moved");
        };
        assert_eq!(FileMeta::try_from(lm).unwrap(), m);
    }
}

#[test]
fn pre_1970_times_are_floored_seconds_plus_nanos() {
    assert_eq!(
        to_epoch(UNIX_EPOCH - Duration::new(1_000, 250)),
        (-1_001, NANOS_PER_SEC - 250)
    );
    assert_eq!(to_epoch(UNIX_EPOCH - Duration::from_secs(5)), (-5, 0));
    assert_eq!(from_epoch(-1, NANOS_PER_SEC), None);
    let mut bad = LoggedMeta::from(&meta(ContentId::Git("g".into()), None, Some(UNIX_EPOCH)));
    bad.last_commit = Some((0, NANOS_PER_SEC));
    assert!(FileMeta::try_from(bad.clone()).is_err());
    assert_eq!(bad.into_meta().last_commit, None);
}

#[test]
fn an_invalid_last_commit_is_an_error_at_open() {
    let dir = tempfile::tempdir().unwrap();
    drop(LayerLog::open(dir.path()).unwrap());
    let line = r#"{"p":"m","e":{"Moved":{"remote_path":"m","commit":"c","size":1,"id":{"git":"g"},"last_commit":[0,1000000000]}}}"#;
    append_raw(dir.path(), format!("{line}\n").as_bytes());
    let Err(e) = LayerLog::open(dir.path()) else {
        panic!("accepted");
    };
    assert!(e.to_string().contains("line 1"), "{e}");
}
