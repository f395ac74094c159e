//! `hubfs cache shared URL`: how big the shared cache tier is under a prefix (blocks, metadata
//! objects, claims), and trimming its blocks to a size (oldest first). Bucket lifecycle rules are the way to bound it for good
//! (docs/CONFIGURATION.md); this is for looking and for a one-off trim.

use anyhow::Context;
use clap::Subcommand;
use futures::TryStreamExt;
use object_store::ObjectStoreExt;

use crate::chunk_store::SharedTier;

#[derive(Subcommand, Debug)]
pub enum CacheCommand {
    /// Size of the shared cache tier at URL (s3://, gs:// or az://bucket/prefix, credentials as
    /// for --shared-cache): blocks, bytes, metadata objects, claims; with --trim-to, delete the
    /// oldest blocks until they fit.
    Shared {
        url: String,
        /// Delete the oldest blocks (by upload time) until the blocks take at most SIZE, e.g. 500G
        /// (and claims left by nodes that died).
        #[arg(long, value_name = "SIZE", value_parser = crate::util::units::parse_size)]
        trim_to: Option<u64>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: CacheCommand) -> anyhow::Result<()> {
    match cmd {
        CacheCommand::Shared { url, trim_to, json } => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(shared(&url, trim_to, json))
        }
    }
}

async fn shared(url: &str, trim_to: Option<u64>, json: bool) -> anyhow::Result<()> {
    let tier = SharedTier::open(url)?;
    let (store, prefix) = tier.store();
    let under = |kind: &str| {
        object_store::path::Path::from(match prefix {
            "" => kind.to_string(),
            p => format!("{p}/{kind}"),
        })
    };
    let mut blocks: Vec<object_store::ObjectMeta> = store
        .list(Some(&under("blocks")))
        .try_collect()
        .await
        .with_context(|| format!("listing {url}"))?;
    let meta: Vec<object_store::ObjectMeta> = store
        .list(Some(&under("meta")))
        .try_collect()
        .await
        .with_context(|| format!("listing {url}"))?;
    let meta_bytes: u64 = meta.iter().map(|m| m.size).sum();
    let claims: Vec<object_store::ObjectMeta> = store
        .list(Some(&under("claims")))
        .try_collect()
        .await
        .with_context(|| format!("listing {url}"))?;
    let before: u64 = blocks.iter().map(|m| m.size).sum();
    let (mut deleted, mut freed, mut stale) = (0u64, 0u64, 0u64);
    if let Some(limit) = trim_to {
        blocks.sort_by_key(|m| m.last_modified);
        let mut total = before;
        for m in &blocks {
            if total <= limit {
                break;
            }
            store
                .delete(&m.location)
                .await
                .with_context(|| format!("deleting from {url}"))?;
            total -= m.size;
            freed += m.size;
            deleted += 1;
        }
        let now = chrono::Utc::now();
        for c in &claims {
            let age = now.signed_duration_since(c.last_modified).to_std().unwrap_or_default();
            if age > crate::chunk_store::shared::CLAIM_STALE * 10 {
                store
                    .delete(&c.location)
                    .await
                    .with_context(|| format!("deleting from {url}"))?;
                stale += 1;
            }
        }
    }
    let (count, bytes) = (blocks.len() as u64 - deleted, before - freed);
    if json {
        let v = serde_json::json!({
            "url": url, "blocks": count, "bytes": bytes, "claims": claims.len() as u64 - stale,
            "meta_objects": meta.len() as u64, "meta_bytes": meta_bytes,
            "deleted_blocks": deleted, "freed_bytes": freed, "deleted_claims": stale,
        });
        println!("{v}");
    } else {
        println!(
            "{url}: {count} blocks, {} ({bytes} bytes), {} metadata objects ({}), {} claims",
            human(bytes),
            meta.len(),
            human(meta_bytes),
            claims.len() as u64 - stale
        );
        if trim_to.is_some() {
            println!(
                "trimmed: {deleted} blocks deleted, {} freed; {stale} stale claims deleted",
                human(freed)
            );
        }
    }
    Ok(())
}

/// `bytes` in the largest binary unit that keeps a number ≥ 1 (1.5 GiB).
fn human(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut u) = (bytes as f64, 0);
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}
