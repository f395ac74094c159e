//! The demo repos of `--seed-demo`: deterministic content, created once (a second run finds them and
//! does nothing, except add the parquet file to a dataset seeded before it existed), with no
//! downloads. The model's weights are uploaded through the Xet CAS exactly as a client would; the
//! dataset holds a plain-LFS file, a parquet file stored through Xet and a folder of more than 1,000
//! files. A small public bucket (`demo/scratch-bucket`) holds two Xet files.

use sha2::{Digest, Sha256};
use xet::xet_session::{Sha256Policy, XetSessionBuilder};

use super::error::HubError;
use super::model::FileEntry;
use super::names::{RepoId, RepoType};
use super::state::HubState;
use super::store::{CommitRequest, Op, XetBinding};

pub const DEMO_MODEL: &str = "demo/tiny-model";
pub const DEMO_DATASET: &str = "demo/tiny-dataset";
/// The demo bucket: `hello.txt` and `data/numbers.csv`, both through Xet.
pub const DEMO_BUCKET: &str = "demo/scratch-bucket";
/// Files in the dataset's `data/many/` folder: more than one listing page.
pub const DEMO_MANY_FILES: usize = 1_100;
/// Where the dataset's parquet file lives in the repo.
pub const DEMO_PARQUET_PATH: &str = "data/parquet/train-00000.parquet";
/// The dataset's parquet file: 4 row groups × 5,000 rows, columns id int64, text string, value
/// float64, label int64, zstd-compressed, deterministic. Generated once by
/// `tests/workflows/make_demo_parquet.py` (pyarrow, pinned in tests/conformance/requirements.txt),
/// which documents the content row by row; rerun it only to change the file, and commit its output.
pub const DEMO_PARQUET: &[u8] = include_bytes!("demo_data/train-00000.parquet");

pub use crate::util::pattern::demo_bytes;

/// A valid safetensors file: an 8-byte little-endian header length, a JSON header padded with
/// spaces to a multiple of 8, then the tensor data (one 4096×4096 F32 matrix = 64 MiB, and a bias).
pub fn demo_safetensors() -> Vec<u8> {
    let rows = 4096usize;
    let big = rows * rows * 4;
    let bias = rows * 4;
    let header = serde_json::json!({
        "__metadata__": {"format": "pt", "note": "hubfs demo weights (pseudo-random)"},
        "model.embed.weight": {"dtype": "F32", "shape": [rows, rows], "data_offsets": [0, big]},
        "model.head.bias": {"dtype": "F32", "shape": [rows], "data_offsets": [big, big + bias]},
    })
    .to_string();
    let mut header = header.into_bytes();
    while !header.len().is_multiple_of(8) {
        header.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + header.len() + big + bias);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&demo_bytes(big + bias, 42));
    out
}

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("seeding demo repos: {e}")
}

/// Uploads `data` (named `name` for the Xet client) through the Xet CAS of this Hub and records the
/// sha256 → Xet hash binding.
async fn upload_xet(state: &HubState, name: &str, data: Vec<u8>) -> anyhow::Result<FileEntry> {
    let sha = hex::encode(Sha256::digest(&data));
    let size = data.len() as u64;
    let (token, exp) = state.issue_cas_token(true, None);
    // The client-side shard cache lives with the data it describes, not in the user's home.
    let session = XetSessionBuilder::new()
        .with_cache_dir(state.store.root().join("seed-client-cache"))
        .with_tokio_handle(tokio::runtime::Handle::current())
        .build()
        .map_err(err)?;
    let commit = session
        .new_upload_commit()
        .map_err(err)?
        .with_endpoint(state.cas_url.clone())
        .with_token_info(token, exp)
        .build()
        .await
        .map_err(err)?;
    commit
        .upload_bytes(data, Sha256Policy::Compute, Some(name.to_string()))
        .await
        .map_err(err)?;
    let report = commit.commit().await.map_err(err)?;
    let meta = report
        .uploads
        .values()
        .next()
        .ok_or_else(|| err("the Xet upload reported no file"))?;
    let xet_hash = meta.xet_info.hash.clone();
    wait_until_readable(state, &xet_hash).await?;
    state
        .store
        .add_xet_binding(XetBinding {
            sha256: sha.clone(),
            xet_hash: xet_hash.clone(),
            size,
        })
        .map_err(err)?;
    Ok(FileEntry::lfs(&sha, size, Some(xet_hash)))
}

/// The demo is "ready" only once its weights can be reconstructed; checking here turns a broken
/// upload into a clear seeding error instead of a 404 for the first client.
async fn wait_until_readable(state: &HubState, xet_hash: &str) -> anyhow::Result<()> {
    let hash = xet_core_structures::merklehash::MerkleHash::from_hex(xet_hash).map_err(err)?;
    match state.cas_client.get_reconstruction_v1(&hash, None).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(err("the uploaded demo weights are unknown to the CAS")),
        Err(e) => Err(err(format!("the uploaded demo weights cannot be reconstructed: {e}"))),
    }
}

/// Stores `data` as a plain-LFS object (no Xet) and returns its entry.
fn put_plain_lfs(state: &HubState, data: &[u8]) -> anyhow::Result<FileEntry> {
    let sha = hex::encode(Sha256::digest(data));
    let path = state.store.lfs_object_path(&sha);
    if !path.exists() {
        super::store::write_atomic(&path, data).map_err(err)?;
    }
    Ok(FileEntry::lfs(&sha, data.len() as u64, None))
}

fn regular(state: &HubState, path: &str, content: &[u8]) -> anyhow::Result<Op> {
    let entry = state.store.put_git_object(content).map_err(err)?;
    Ok(Op::Put {
        path: path.to_string(),
        entry,
    })
}

async fn commit(state: &HubState, id: &RepoId, title: &str, ops: Vec<Op>) -> anyhow::Result<()> {
    let repo = match state.store.repo(id).map_err(err)? {
        Some(r) => r,
        None => state.store.create_repo(id, false, "demo").map_err(err)?,
    };
    let _g = repo.write.lock().await;
    let req = CommitRequest {
        title: title.to_string(),
        message: String::new(),
        author: "demo".to_string(),
        parent: None,
        create_pr: false,
        ops,
    };
    state
        .store
        .apply_commit(&repo, "main", req)
        .map_err(|e: HubError| err(e))?;
    Ok(())
}

fn seeded(state: &HubState, id: &RepoId, marker: &str) -> anyhow::Result<bool> {
    let Some(repo) = state.store.repo(id).map_err(err)? else {
        return Ok(false);
    };
    let head = state.store.resolve(&repo, "main").map_err(err)?;
    Ok(state
        .store
        .commit(&repo, &head.commit)
        .map_err(err)?
        .files
        .contains_key(marker))
}

async fn parquet_op(state: &HubState) -> anyhow::Result<Op> {
    let name = DEMO_PARQUET_PATH.rsplit('/').next().unwrap_or(DEMO_PARQUET_PATH);
    Ok(Op::Put {
        path: DEMO_PARQUET_PATH.to_string(),
        entry: upload_xet(state, name, DEMO_PARQUET.to_vec()).await?,
    })
}

pub async fn seed_demo(state: &HubState) -> anyhow::Result<()> {
    let model = RepoId::new(RepoType::Model, "demo", "tiny-model").map_err(err)?;
    if !seeded(state, &model, "model.safetensors")? {
        tracing::info!("seeding {DEMO_MODEL}");
        let config = serde_json::to_vec_pretty(&serde_json::json!({
            "architectures": ["TinyDemoModel"], "model_type": "tiny-demo",
            "hidden_size": 4096, "vocab_size": 4096, "num_hidden_layers": 1, "torch_dtype": "float32"
        }))
        .map_err(err)?;
        let vocab: serde_json::Map<String, serde_json::Value> =
            (0..256u32).map(|i| (format!("tok{i}"), serde_json::json!(i))).collect();
        let tokenizer = serde_json::to_vec_pretty(&serde_json::json!({
            "version": "1.0", "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "tok0"}
        }))
        .map_err(err)?;
        let readme = "---\nlicense: apache-2.0\n---\n# tiny-model\n\nDemo model of the hubfs local Hub: \
                      pseudo-random weights in a valid safetensors file, stored through Xet.\n";
        let weights = upload_xet(state, "model.safetensors", demo_safetensors()).await?;
        let ops = vec![
            regular(state, "config.json", &config)?,
            regular(state, "tokenizer.json", &tokenizer)?,
            regular(state, "README.md", readme.as_bytes())?,
            Op::Put {
                path: "model.safetensors".to_string(),
                entry: weights,
            },
        ];
        commit(state, &model, "Add demo model", ops).await?;
    }

    let dataset = RepoId::new(RepoType::Dataset, "demo", "tiny-dataset").map_err(err)?;
    if !seeded(state, &dataset, "README.md")? {
        tracing::info!("seeding datasets/{DEMO_DATASET}");
        let mut ops = vec![regular(
            state,
            "README.md",
            b"---\nlicense: cc0-1.0\n---\n# tiny-dataset\n\nDemo dataset of the hubfs local Hub.\n",
        )?];
        for shard in 0..3 {
            let mut csv = String::from("id,text,label\n");
            for row in 0..200 {
                csv.push_str(&format!("{},\"sample {shard}-{row}\",{}\n", shard * 200 + row, row % 2));
            }
            ops.push(regular(
                state,
                &format!("data/train/shard-{shard:05}.csv"),
                csv.as_bytes(),
            )?);
        }
        let jsonl: String = (0..100)
            .map(|i| format!("{{\"id\": {i}, \"text\": \"validation {i}\"}}\n"))
            .collect();
        ops.push(regular(state, "data/validation/part-0.jsonl", jsonl.as_bytes())?);
        ops.push(regular(state, "data/nested/a/b/c/deep.csv", b"x,y\n1,2\n")?);
        for i in 0..DEMO_MANY_FILES {
            let line = format!("{{\"id\": {i}}}\n");
            ops.push(regular(
                state,
                &format!("data/many/item-{i:05}.jsonl"),
                line.as_bytes(),
            )?);
        }
        let blob = put_plain_lfs(state, &demo_bytes(3 << 20, 7))?;
        ops.push(Op::Put {
            path: "data/blobs/images.bin".to_string(),
            entry: blob,
        });
        ops.push(parquet_op(state).await?);
        commit(state, &dataset, "Add demo dataset", ops).await?;
    } else if !seeded(state, &dataset, DEMO_PARQUET_PATH)? {
        // A data dir seeded before the parquet file existed gets it in a commit of its own.
        tracing::info!("adding {DEMO_PARQUET_PATH} to datasets/{DEMO_DATASET}");
        let ops = vec![parquet_op(state).await?];
        commit(state, &dataset, "Add demo parquet file", ops).await?;
    }
    seed_bucket(state).await
}

/// The demo bucket, created once with its two files (a later start finds it, even emptied).
async fn seed_bucket(state: &HubState) -> anyhow::Result<()> {
    let id = super::bucket_store::BucketId::new("demo", "scratch-bucket").map_err(err)?;
    if state.buckets.get(&id).is_some() {
        return Ok(());
    }
    tracing::info!("seeding buckets/{DEMO_BUCKET}");
    let numbers: String = (0..100).map(|i| format!("{i},{}\n", i * i)).collect();
    let files = [
        ("hello.txt", b"Hello from the hubfs demo bucket!\n".to_vec()),
        ("data/numbers.csv", format!("n,square\n{numbers}").into_bytes()),
    ];
    let mut doc_files = std::collections::BTreeMap::new();
    let now = super::store::now_iso();
    for (path, data) in files {
        let entry = upload_xet(state, path, data).await?;
        let xet_hash = entry.xet_hash.ok_or_else(|| err("the Xet upload gave no hash"))?;
        doc_files.insert(
            path.to_string(),
            super::bucket_store::BucketFile {
                xet_hash,
                size: entry.size,
                mtime_ms: chrono::Utc::now().timestamp_millis(),
                uploaded_at: now.clone(),
                content_type: None,
            },
        );
    }
    let bucket = state.buckets.create(&id, false).map_err(err)?;
    let _w = bucket.write.lock().await;
    let mut doc = (*bucket.doc()).clone();
    doc.files = doc_files;
    doc.touch();
    state.buckets.save(&bucket, doc).map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safetensors_header_is_valid() {
        let st = demo_safetensors();
        assert!(st.len() >= 64 << 20);
        let n = u64::from_le_bytes(st[..8].try_into().unwrap()) as usize;
        assert_eq!(n % 8, 0);
        let header: serde_json::Value = serde_json::from_slice(&st[8..8 + n]).unwrap();
        let end = header["model.head.bias"]["data_offsets"][1].as_u64().unwrap() as usize;
        assert_eq!(8 + n + end, st.len());
        assert_eq!(demo_bytes(16, 1), demo_bytes(16, 1));
    }

    #[test]
    fn parquet_is_embedded_and_small() {
        assert!(DEMO_PARQUET.len() > 8 && DEMO_PARQUET.len() < 1 << 20);
        assert_eq!(&DEMO_PARQUET[..4], b"PAR1");
        assert_eq!(&DEMO_PARQUET[DEMO_PARQUET.len() - 4..], b"PAR1");
    }
}
