//! The tier's logic over an in-memory store (conditional create included) and over a store that
//! is not there; tests/shared_cache.rs runs it against a real S3 server.

use object_store::PutPayload;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::ObjectStoreExt;
use object_store::memory::InMemory;

use super::*;

/// A fetch's error: the file is not there.
fn gone() -> std::io::Error {
    std::io::ErrorKind::NotFound.into()
}

fn key() -> Arc<str> {
    Arc::from("xet:00aa")
}

/// Waits until `tier`'s uploads are done.
async fn settled(tier: &SharedTier) {
    while tier.pending_uploads() > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One in-memory store and two nodes' tiers over it (same prefix).
fn two_nodes() -> (Arc<dyn ObjectStore>, SharedTier, SharedTier) {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let a = SharedTier::with_store("mem://", store.clone(), "p");
    let b = SharedTier::with_store("mem://", store.clone(), "p");
    (store, a, b)
}

/// An in-memory store that counts the conditional creates of claims, so a test sees a claim
/// that was taken and let go again.
#[derive(Debug, Default)]
struct CountingStore {
    inner: InMemory,
    claims: AtomicUsize,
    /// Block uploads wait here for a permit, when set.
    gate: Option<Arc<tokio::sync::Semaphore>>,
    /// Claims are never answered.
    hang_claims: bool,
    /// Block uploads take this long, and how many run at once now and at most.
    put_delay: Option<Duration>,
    puts_now: AtomicUsize,
    puts_max: AtomicUsize,
}

impl std::fmt::Display for CountingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CountingStore")
    }
}

#[async_trait::async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &object_store::path::Path,
        payload: PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        if matches!(opts.mode, object_store::PutMode::Create) && location.as_ref().contains("/claims/") {
            self.claims.fetch_add(1, Ordering::SeqCst);
            if self.hang_claims {
                std::future::pending::<()>().await;
            }
        }
        if let Some(gate) = self.gate.as_ref().filter(|_| location.as_ref().contains("/blocks/")) {
            let _ = gate.acquire().await;
        }
        if let Some(delay) = self.put_delay.filter(|_| location.as_ref().contains("/blocks/")) {
            let now = self.puts_now.fetch_add(1, Ordering::SeqCst) + 1;
            self.puts_max.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(delay).await;
            self.puts_now.fetch_sub(1, Ordering::SeqCst);
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &object_store::path::Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &object_store::path::Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[tokio::test]
async fn a_block_fetched_by_one_node_is_served_to_the_next_and_damage_is_replaced() {
    let (store, a, b) = two_nodes();
    let fetches = AtomicUsize::new(0);
    let fetch = || async {
        fetches.fetch_add(1, Ordering::SeqCst);
        Ok::<_, std::io::Error>(Bytes::from_static(b"eight by"))
    };
    let (got, shared) = a.load(&key(), 2, 8, fetch()).await.unwrap();
    assert_eq!((&got[..], shared), (&b"eight by"[..], false));
    settled(&a).await;
    let (got, shared) = b.load(&key(), 2, 8, fetch()).await.unwrap();
    assert_eq!(
        (&got[..], shared),
        (&b"eight by"[..], true),
        "the second node's from the tier"
    );
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    let claim = format::object_path("p", "claims", &key(), 2);
    assert!(
        store.head(&claim).await.is_err(),
        "the claim is gone once the block is written"
    );

    // Damage the object: the next node refetches from the Hub and puts a good one back.
    let path = format::object_path("p", "blocks", &key(), 2);
    let mut obj = store.get(&path).await.unwrap().bytes().await.unwrap().to_vec();
    let last = obj.len() - 1;
    obj[last] ^= 1;
    store.put(&path, Bytes::from(obj).into()).await.unwrap();
    let c = SharedTier::with_store("mem://", store.clone(), "p");
    let (got, shared) = c.load(&key(), 2, 8, fetch()).await.unwrap();
    assert_eq!((&got[..], shared), (&b"eight by"[..], false), "not served: refetched");
    settled(&c).await;
    let obj = store.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(
        &format::decode(&obj, &key(), 2, 8).unwrap()[..],
        b"eight by",
        "replaced"
    );
}

#[tokio::test]
async fn a_node_waits_for_a_block_another_claimed_and_a_dead_claim_is_waited_on_for_a_bounded_time() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (a, b) = (
        SharedTier::with_store("mem://", store.clone(), ""),
        SharedTier::with_store("mem://", store.clone(), ""),
    );
    // A claims and takes 300 ms to fetch; B finds the claim and gets A's block without fetching.
    let (ka, kb) = (key(), key());
    let slow = tokio::spawn(async move {
        a.load(&ka, 0, 4, async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok::<_, std::io::Error>(Bytes::from_static(b"once"))
        })
        .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (got, shared) = b
        .load(&kb, 0, 4, async { Err(std::io::Error::other("B must not fetch")) })
        .await
        .unwrap();
    assert_eq!((&got[..], shared), (&b"once"[..], true));
    assert_eq!(&slow.await.unwrap().unwrap().0[..], b"once");

    // A claim whose node died (never released, never written): B fetches after at most CLAIM_WAIT.
    let claim = format::object_path("", "claims", "xet:dead", 0);
    store.put(&claim, Bytes::from_static(b"gone:1").into()).await.unwrap();
    let t = Instant::now();
    let (got, shared) = b
        .load(&Arc::from("xet:dead"), 0, 4, async {
            Ok::<_, std::io::Error>(Bytes::from_static(b"mine"))
        })
        .await
        .unwrap();
    assert_eq!((&got[..], shared), (&b"mine"[..], false));
    let waited = t.elapsed();
    assert!(
        waited >= CLAIM_WAIT && waited < CLAIM_WAIT + Duration::from_secs(3),
        "{waited:?}"
    );
}

#[tokio::test]
async fn a_store_that_is_not_there_pauses_the_tier_and_reads_go_to_the_hub() {
    // Nothing listens on port 9 here: connections are refused.
    let s3 = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name("b")
        .with_endpoint("http://127.0.0.1:9")
        .with_region("us-east-1")
        .with_access_key_id("k")
        .with_secret_access_key("s")
        .with_retry(object_store::RetryConfig {
            max_retries: 0,
            ..Default::default()
        })
        .with_client_options(object_store::ClientOptions::new().with_allow_http(true))
        .build()
        .unwrap();
    let tier = SharedTier::with_store("s3://b/p", Arc::new(s3), "p");
    let t = Instant::now();
    let (got, shared) = tier
        .load(&key(), 0, 2, async {
            Ok::<_, std::io::Error>(Bytes::from_static(b"ok"))
        })
        .await
        .unwrap();
    assert_eq!((&got[..], shared), (&b"ok"[..], false));
    assert!(t.elapsed() < LOOKUP_DEADLINE, "a refused store fails fast");
    assert!(tier.paused(), "and pauses the tier");
    // Paused: no request at all, the fetch's own error is the only one a load returns.
    let r = tier.load(&key(), 1, 2, async { Err(gone()) }).await;
    assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::NotFound);
}

#[tokio::test]
async fn a_run_of_misses_asks_lookup_and_claim_together_and_a_hit_in_it_lets_the_claim_go() {
    let counting = Arc::new(CountingStore::default());
    let store: Arc<dyn ObjectStore> = counting.clone();
    let a = SharedTier::with_store("mem://", store.clone(), "p");
    let b = SharedTier::with_store("mem://", store.clone(), "p");
    let claims = || counting.claims.load(Ordering::SeqCst);
    let fetches = AtomicUsize::new(0);
    let fetch = || async {
        fetches.fetch_add(1, Ordering::SeqCst);
        Ok::<_, std::io::Error>(Bytes::from_static(b"eight by"))
    };
    // Node b puts block 1 in the tier; node a then misses block 0: its file is in a run of misses.
    b.load(&key(), 1, 8, fetch()).await.unwrap();
    settled(&b).await;
    let (_, shared) = a.load(&key(), 0, 8, fetch()).await.unwrap();
    assert!(!shared);
    assert!(a.0.missing.lock().contains(&key()), "a miss starts a run");
    settled(&a).await;

    // Block 1 is asked for with a claim beside the lookup; the lookup finds it, the claim goes.
    let before = claims();
    let (got, shared) = a.load(&key(), 1, 8, fetch()).await.unwrap();
    assert_eq!(claims() - before, 1, "the claim went out beside the lookup");
    assert_eq!((&got[..], shared), (&b"eight by"[..], true));
    assert_eq!(fetches.load(Ordering::SeqCst), 2, "blocks 1 (by b) and 0 (by a) only");
    assert!(!a.0.missing.lock().contains(&key()), "a hit ends the run");
    let claim = format::object_path("p", "claims", &key(), 1);
    let t = Instant::now();
    while store.head(&claim).await.is_ok() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the claim taken with a hit is let go"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Out of the run, a block the tier holds is looked up alone: no claim.
    let before = claims();
    let (_, shared) = a.load(&key(), 1, 8, fetch()).await.unwrap();
    assert!(shared);
    assert_eq!(claims(), before, "a file whose blocks are found asks no claim");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_no_uploader_is_free_for_wait_as_keys_and_a_claimed_one_keeps_its_claim() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let store = Arc::new(CountingStore {
        gate: Some(gate.clone()),
        ..Default::default()
    });
    let a = SharedTier::with_store("mem://", store.clone(), "p");
    let b = SharedTier::with_store("mem://", store.clone(), "p");
    let dir = tempfile::tempdir().unwrap();
    let disk = crate::chunk_store::DiskTier::open(dir.path(), 1 << 30).unwrap();
    a.set_disk(disk.clone(), crate::chunk_store::BufferPool::new(8 << 20, 2));
    // A key the disk tier takes (a hash of 8 hex digits at least).
    let k: Arc<str> = Arc::from("xet:00aa00aa");
    // Larger than a small file's block, which would wait with its bytes instead.
    const LEN: usize = (upload::KEEP_SMALL_MAX + 4096) as usize;
    let block = |i: u64| Bytes::from(vec![i as u8; LEN]);
    let put = |i: u64, claim: Option<Claim>| {
        // On disk first, as the chunk store has it by the time an uploader reads it back.
        disk.write((k.clone(), i), &block(i));
        a.write_behind(&k, i, &block(i), claim);
    };
    let claimed = |i: u64| {
        let a = a.clone();
        let k = k.clone();
        async move {
            match a.claim(&k, i).await {
                claim::Outcome::Ours(c) => c,
                _ => panic!("block {i} was claimed already"),
            }
        }
    };
    // The uploaders of both lanes taken (their puts wait at the gate), with their blocks' bytes.
    for i in 0..4 {
        put(i, None);
        put(100 + i, Some(claimed(100 + i).await));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(a.waiting_as_keys(), (0, 0));
    // Now blocks wait as keys: unclaimed ones, and a claimed one that keeps its claim, so a node
    // asking for it waits for this one's upload instead of fetching it from the Hub too.
    for i in 4..8 {
        put(i, None);
    }
    put(104, Some(claimed(104).await));
    assert_eq!(a.waiting_as_keys(), (1, 4));
    assert!(matches!(b.claim(&k, 104).await, claim::Outcome::Theirs));
    assert_eq!(a.pending_uploads(), 13);
    // The gate opens: every block lands, the deferred ones read back from disk, and the claim goes.
    gate.add_permits(1000);
    settled(&a).await;
    for i in (0..8).chain(100..105) {
        match b.get(&k, i, LEN as u64).await {
            Lookup::Hit(got) => assert_eq!(got, block(i), "block {i}"),
            _ => panic!("block {i} is not in the store"),
        }
    }
    let t = Instant::now();
    while !matches!(b.claim(&k, 104).await, claim::Outcome::Ours(_)) {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the claim of block 104 was never let go"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(a.report().dropped, 0);
}

fn meta_key(path: &str) -> MetaKey {
    MetaKey::new(&["v1", "models", "demo", "tiny-model", "0123"], "tree", path)
}

/// A listing as the vfs stores it (any serde value does).
fn listing(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn metadata_fetched_by_one_node_is_served_to_the_next_and_damage_is_replaced() {
    let (store, a, b) = two_nodes();
    let fetches = AtomicUsize::new(0);
    let fetch = |names: &'static [&'static str]| {
        let fetches = &fetches;
        async move {
            fetches.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(listing(names))
        }
    };
    let k = meta_key("sub");
    assert_eq!(a.metadata(&k, fetch(&["x", "y"])).await.unwrap(), listing(&["x", "y"]));
    settled(&a).await;
    assert_eq!(a.report().meta_written, 1);
    // The next node gets it from the tier: its fetch (here another answer) is never asked.
    assert_eq!(b.metadata(&k, fetch(&["other"])).await.unwrap(), listing(&["x", "y"]));
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    assert_eq!((b.report().meta_hits, b.report().meta_misses), (1, 0));
    // Another path, another question: not that object.
    assert_eq!(
        b.metadata(&meta_key("sub2"), fetch(&["z"])).await.unwrap(),
        listing(&["z"])
    );
    assert_eq!(fetches.load(Ordering::SeqCst), 2);

    let path = object_store::path::Path::from("p/meta/v1/models/demo/tiny-model/0123/tree/_sub");
    let good = store.get(&path).await.unwrap().bytes().await.unwrap();
    let damaged = |obj: Bytes| async {
        store.put(&path, obj.into()).await.unwrap();
        let c = SharedTier::with_store("mem://", store.clone(), "p");
        let before = fetches.load(Ordering::SeqCst);
        let got = c.metadata(&k, fetch(&["x", "y"])).await.unwrap();
        assert_eq!(got, listing(&["x", "y"]));
        assert_eq!(
            fetches.load(Ordering::SeqCst),
            before + 1,
            "not served: asked of the Hub"
        );
        settled(&c).await;
        assert_eq!(c.report().invalid, 1);
        let back = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(back, good, "replaced by a good object");
    };
    // Flipped bytes, a torn object, an object of another directory put under this name, and a
    // well-formed object whose payload is not a listing.
    let mut flipped = good.to_vec();
    let last = flipped.len() - 2;
    flipped[last] ^= 0x01;
    damaged(Bytes::from(flipped)).await;
    damaged(good.slice(..good.len() - 4)).await;
    let foreign: PutPayload = format::encode_meta(meta_key("sub2").id(), &Bytes::from_static(b"[\"z\"]"))
        .into_iter()
        .collect();
    damaged(Bytes::from(foreign.into_iter().flatten().collect::<Vec<u8>>())).await;
    let junk: PutPayload = format::encode_meta(k.id(), &Bytes::from_static(b"{\"not\":1}"))
        .into_iter()
        .collect();
    damaged(Bytes::from(junk.into_iter().flatten().collect::<Vec<u8>>())).await;
}

#[tokio::test]
async fn nodes_asking_for_the_same_metadata_at_once_wait_for_one_fetch() {
    let (_store, a, b) = two_nodes();
    let k = meta_key("");
    let slow = {
        let (a, k) = (a.clone(), k.clone());
        tokio::spawn(async move {
            a.metadata(&k, async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok::<_, std::io::Error>(listing(&["once"]))
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let got = b
        .metadata(&k, async {
            Err::<Vec<String>, _>(std::io::Error::other("b must not ask the Hub"))
        })
        .await
        .unwrap();
    assert_eq!(got, listing(&["once"]));
    assert_eq!(slow.await.unwrap().unwrap(), listing(&["once"]));
    // A failed fetch is not stored, and its error is the caller's.
    let err = a
        .metadata(&meta_key("gone"), async { Err::<Vec<String>, _>(gone()) })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    settled(&a).await;
    let got = b
        .metadata(&meta_key("gone"), async { Ok::<_, std::io::Error>(listing(&["now"])) })
        .await;
    assert_eq!(got.unwrap(), listing(&["now"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_small_blocks_waits_with_its_bytes_and_every_one_lands() {
    // Uploads held at the gate; no disk tier to read anything back from.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let store = Arc::new(CountingStore {
        gate: Some(gate.clone()),
        ..Default::default()
    });
    let a = SharedTier::with_store("mem://", store.clone(), "p");
    let k: Arc<str> = Arc::from("xet:00bb00bb");
    let block = |i: u64| Bytes::from(vec![i as u8; 4096]);
    for i in 0..300 {
        a.write_behind(&k, i, &block(i), None);
    }
    assert_eq!(a.pending_uploads(), 300, "none dropped");
    gate.add_permits(10_000);
    settled(&a).await;
    assert_eq!((a.report().written, a.report().dropped), (300, 0));
    for i in 0..300 {
        match a.get(&k, i, 4096).await {
            Lookup::Hit(got) => assert_eq!(got, block(i), "block {i}"),
            _ => panic!("block {i} is not in the store"),
        }
    }
}

#[tokio::test]
async fn a_metadata_claim_the_store_does_not_answer_looks_again_then_asks_the_hub() {
    let store = Arc::new(CountingStore {
        hang_claims: true,
        ..Default::default()
    });
    let a = SharedTier::with_store("mem://", store.clone(), "p");
    // Another node writes the listing while this one's claim hangs: found on the second look.
    let k = meta_key("x");
    let writer = {
        let store = store.clone();
        let id = k.id().to_string();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let obj: PutPayload = format::encode_meta(&id, &Bytes::from_static(b"[\"theirs\"]"))
                .into_iter()
                .collect();
            let path = object_store::path::Path::from("p/meta/v1/models/demo/tiny-model/0123/tree/_x");
            store.put(&path, obj).await.unwrap();
        })
    };
    let t = Instant::now();
    let got = a
        .metadata(&k, async {
            Err::<Vec<String>, _>(std::io::Error::other("must not ask the Hub"))
        })
        .await
        .unwrap();
    writer.await.unwrap();
    assert_eq!(got, listing(&["theirs"]));
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    // Nobody wrote it: the node asks the Hub itself, a second late, and never fails.
    let got = a
        .metadata(&meta_key("y"), async { Ok::<_, std::io::Error>(listing(&["mine"])) })
        .await;
    assert_eq!(got.unwrap(), listing(&["mine"]));
    assert!(!a.paused(), "a slow claim does not pause the tier");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_goes_without_its_block_makes_one_waiter_fetch_it_not_all() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let a = SharedTier::with_store("mem://", store.clone(), "p");
    let k = key();
    let claim = match a.claim(&k, 0).await {
        claim::Outcome::Ours(c) => c,
        _ => panic!("the first claim is ours"),
    };
    let fetches = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let (tier, k, fetches) = (
                SharedTier::with_store("mem://", store.clone(), "p"),
                k.clone(),
                fetches.clone(),
            );
            tokio::spawn(async move {
                tier.load(&k, 0, 4, async move {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    // The Hub takes its time: the others look again meanwhile and miss.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    Ok::<_, std::io::Error>(Bytes::from_static(b"once"))
                })
                .await
                .unwrap()
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Its claimer lets it go without the block (its upload queue backed up).
    claim.release();
    let t = Instant::now();
    for w in waiters {
        assert_eq!(&w.await.unwrap().0[..], b"once");
    }
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "one waiter took the claim over and fetched it"
    );
    assert!(t.elapsed() < CLAIM_WAIT, "{:?}", t.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_go_one_at_a_time_while_a_read_waits_on_the_tier() {
    let store = Arc::new(CountingStore {
        put_delay: Some(Duration::from_millis(40)),
        ..Default::default()
    });
    let tier = SharedTier::with_store("mem://", store.clone(), "p");
    let data = Bytes::from(vec![7u8; 64]);
    let (go, reader) = waiting_read(&tier, &data).await;
    for block in 0..6 {
        tier.write_behind(&key(), block, &data, None);
    }
    settled_blocks(&store, 6).await;
    assert_eq!(
        store.puts_max.load(Ordering::SeqCst),
        1,
        "uploads beside a read waiting on the tier"
    );

    // The read is served; uploads then go at the lanes' pace.
    go.send(()).unwrap();
    let (got, shared) = reader.await.unwrap().unwrap();
    assert_eq!((got, shared), (data.clone(), false));
    for block in 6..14 {
        tier.write_behind(&key(), block, &data, None);
    }
    settled(&tier).await;
    assert!(
        store.puts_max.load(Ordering::SeqCst) > 1,
        "with no read waiting, uploads run side by side"
    );
    for block in (0..14).chain([100]) {
        assert!(
            matches!(tier.get(&key(), block, 64).await, Lookup::Hit(_)),
            "block {block} is in the tier"
        );
    }
}

/// A read of block 100 of `key()` (64 bytes, `data`) that misses the tier and waits for its Hub
/// fetch until told through the sender; returns once it waits on the tier.
async fn waiting_read(
    tier: &SharedTier,
    data: &Bytes,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<(Bytes, bool)>>,
) {
    let (go, fetched) = tokio::sync::oneshot::channel::<()>();
    let reader = {
        let (tier, data) = (tier.clone(), data.clone());
        tokio::spawn(async move {
            tier.load(&key(), 100, 64, async move {
                let _ = fetched.await;
                Ok::<_, std::io::Error>(data)
            })
            .await
        })
    };
    while tier.0.reading.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    (go, reader)
}

/// Waits until `n` block objects are in `store`.
async fn settled_blocks(store: &CountingStore, n: usize) {
    use futures::StreamExt;
    let t = Instant::now();
    loop {
        let found = store.inner.list(None).filter(|m| {
            let m = m
                .as_ref()
                .map(|m| m.location.as_ref().contains("/blocks/"))
                .unwrap_or(false);
            async move { m }
        });
        if found.count().await >= n {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{n} blocks not uploaded in 10 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimed_uploads_do_not_yield_to_reads_once_another_node_is_seen_reading() {
    let store = Arc::new(CountingStore {
        put_delay: Some(Duration::from_millis(40)),
        ..Default::default()
    });
    let (a, b) = (
        SharedTier::with_store("mem://", store.clone(), "p"),
        SharedTier::with_store("mem://", store.clone(), "p"),
    );
    let data = Bytes::from(vec![7u8; 64]);
    // Node b holds the claim on block 50 of a file both read; a finds it.
    let claim::Outcome::Ours(held) = b.claim(&key(), 50).await else {
        panic!("b could not claim block 50")
    };
    let waiter = {
        let (a, data) = (a.clone(), data.clone());
        tokio::spawn(async move { a.load(&key(), 50, 64, async { Ok::<_, std::io::Error>(data) }).await })
    };
    while !a.others_reading() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(a.0.reading.load(Ordering::SeqCst) > 0, "a waits on the tier");
    // a's own claimed blocks go side by side: b may be waiting for them.
    for block in 0..6 {
        let claim::Outcome::Ours(c) = a.claim(&key(), block).await else {
            panic!("a could not claim block {block}")
        };
        a.write_behind(&key(), block, &data, Some(c));
    }
    settled_blocks(&store, 6).await;
    assert!(
        store.puts_max.load(Ordering::SeqCst) > 1,
        "claimed uploads beside reads, with another node reading"
    );
    b.write_behind(&key(), 50, &data, Some(held));
    let (got, shared) = waiter.await.unwrap().unwrap();
    assert_eq!((got, shared), (data, true), "a got block 50 from the tier");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_waiting_as_keys_are_read_back_one_at_a_time_while_a_read_waits() {
    let store = Arc::new(CountingStore {
        put_delay: Some(Duration::from_millis(60)),
        ..Default::default()
    });
    let tier = SharedTier::with_store("mem://", store.clone(), "p");
    let dir = tempfile::tempdir().unwrap();
    let disk = crate::chunk_store::DiskTier::open(dir.path(), 1 << 30).unwrap();
    let pool = crate::chunk_store::BufferPool::new(8 << 20, 2);
    tier.set_disk(disk.clone(), pool.clone());
    let k: Arc<str> = Arc::from("xet:00bb00bb");
    // Larger than a small file's block, which would wait with its bytes instead.
    const LEN: usize = (upload::KEEP_SMALL_MAX + 4096) as usize;
    let block = |i: u64| Bytes::from(vec![i as u8 + 1; LEN]);
    let (go, reader) = waiting_read(&tier, &Bytes::from(vec![9u8; 64])).await;
    // The first blocks take the lane's uploaders with their bytes (one each as an uploader frees
    // up); the rest wait as keys, to be read back from disk (into the pool's buffers) when their
    // upload comes.
    for i in 0..8 {
        disk.write((k.clone(), i), &block(i));
        tier.write_behind(&k, i, &block(i), None);
        if i == 3 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let as_keys = tier.waiting_as_keys().1;
    assert!(as_keys >= 2, "{as_keys} blocks wait as keys");
    // While the read waits, a block is read back only in its turn to upload: one at a time.
    let one_buffer = (8 << 20) + crate::chunk_store::buffer_pool::ALIGN as u64;
    let mut most = 0;
    let t = Instant::now();
    while tier.pending_uploads() > 0 {
        most = most.max(pool.usage().on_loan());
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the deferred blocks were not uploaded"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(most > 0, "the deferred blocks were read back");
    assert!(most <= one_buffer, "{most} bytes read back at once beside a read");
    assert_eq!(store.puts_max.load(Ordering::SeqCst), 1, "uploads beside a read");

    go.send(()).unwrap();
    reader.await.unwrap().unwrap();
    settled(&tier).await;
    for i in 0..8 {
        match tier.get(&k, i, LEN as u64).await {
            Lookup::Hit(got) => assert_eq!(got, block(i), "block {i}"),
            _ => panic!("block {i} is not in the store"),
        }
    }
}
