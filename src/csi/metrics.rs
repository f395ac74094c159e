//! The plugin's `/metrics` (`hubfs csi-node --metrics-addr`): its own series (volumes published,
//! calls) and those of every source mount's server, each labelled `source_mount="<key>"` (not `source`: the block metrics use that). A server
//! listens on a loopback port of its own and writes it to `<source dir>/metrics.port`; a scrape of
//! the plugin asks each live source in turn. A source that stopped (its last volume unpublished)
//! has no directory left, so its series leave the next scrape.
//!
//! `hubfs_csi_volume_info{volume, source_mount}` says which source serves which volume: several pods'
//! volumes share one source mount, so the server's series are per source, not duplicated per volume.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use parking_lot::Mutex;

use crate::metrics::VolumeLabels;

/// The file a server writes its metrics port to, in its source directory.
pub const PORT_FILE: &str = "metrics.port";
/// How long one server's scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// The published targets: target path → (volume id, source key). A volume published at several
/// targets (pods) keeps its series until the last one goes.
static TARGETS: Mutex<Option<HashMap<PathBuf, (String, String)>>> = Mutex::new(None);

/// `volume` is now published at `target`, served by source `key`.
pub fn published(volume: &str, target: &Path, key: &str) {
    let entry = (volume.to_string(), key.to_string());
    let old = TARGETS
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert(target.to_path_buf(), entry.clone());
    if let Some(old) = old
        && old != entry
    {
        drop_if_unused(&old);
    }
    crate::metrics::get().csi_volumes.get_or_create(&labels(&entry)).set(1);
}

/// The volume at `target` was unpublished: its series goes when no other target uses it.
pub fn unpublished(target: &Path) {
    let old = TARGETS.lock().as_mut().and_then(|m| m.remove(target));
    if let Some(old) = old {
        drop_if_unused(&old);
    }
}

fn labels((volume, key): &(String, String)) -> VolumeLabels {
    VolumeLabels {
        volume: volume.clone(),
        source_mount: key.clone(),
    }
}

fn drop_if_unused(entry: &(String, String)) {
    let used = TARGETS.lock().as_ref().is_some_and(|m| m.values().any(|e| e == entry));
    if !used {
        crate::metrics::get().csi_volumes.remove(&labels(entry));
    }
}

/// Counts one call of `method` that ended with `code`.
pub fn call(method: &'static str, code: tonic::Code) {
    let code = match code {
        tonic::Code::Ok => "ok",
        tonic::Code::InvalidArgument => "invalid_argument",
        tonic::Code::NotFound => "not_found",
        tonic::Code::PermissionDenied => "permission_denied",
        tonic::Code::AlreadyExists => "already_exists",
        tonic::Code::FailedPrecondition => "failed_precondition",
        tonic::Code::Unavailable => "unavailable",
        tonic::Code::Internal => "internal",
        _ => "other",
    };
    crate::metrics::get()
        .csi_calls
        .get_or_create(&crate::metrics::CsiCallLabels { method, code })
        .inc();
}

/// In a server: serves its metrics on a free loopback port and records the port next to its mount.
pub fn serve_for_plugin(source_dir: &Path) {
    match crate::metrics::server::serve(([127, 0, 0, 1], 0).into(), None) {
        Ok(s) => {
            if let Err(e) = std::fs::write(source_dir.join(PORT_FILE), s.addr.port().to_string()) {
                tracing::warn!(error = %e, "the plugin will not see this server's metrics");
            }
        }
        Err(e) => tracing::warn!(error = %e, "no metrics endpoint for this server"),
    }
}

/// The plugin's render: its own text merged with every live source's.
pub fn render(sources_root: PathBuf) -> impl Fn(String) -> String + Send + Sync {
    move |own| {
        let mut merged = Merged::default();
        merged.add(&own, None);
        let Ok(rd) = std::fs::read_dir(&sources_root) else {
            return merged.text();
        };
        for e in rd.flatten() {
            let key = e.file_name().to_string_lossy().to_string();
            let Some(port) = std::fs::read_to_string(e.path().join(PORT_FILE))
                .ok()
                .and_then(|p| p.trim().parse::<u16>().ok())
            else {
                continue;
            };
            match scrape(port) {
                Ok(text) => merged.add(&text, Some(&key)),
                Err(e) => tracing::debug!(source = %key, error = %e, "scraping a source's server"),
            }
        }
        merged.text()
    }
}

fn scrape(port: u16) -> std::io::Result<String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, SCRAPE_TIMEOUT)?;
    s.set_read_timeout(Some(SCRAPE_TIMEOUT))?;
    s.set_write_timeout(Some(SCRAPE_TIMEOUT))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
    let mut resp = Vec::new();
    s.take(64 << 20).read_to_end(&mut resp)?;
    let resp = String::from_utf8_lossy(&resp);
    match resp.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_string()),
        _ => Err(std::io::Error::other("not a 200 answer")),
    }
}

/// Text-format families merged by name: the format wants each family's samples together under
/// one HELP and TYPE, and every server has the same families.
#[derive(Default)]
struct Merged {
    order: Vec<String>,
    families: HashMap<String, Family>,
}

#[derive(Default)]
struct Family {
    head: Vec<String>,
    samples: Vec<String>,
}

impl Merged {
    /// Adds one exposition; `source`: the label its samples get.
    fn add(&mut self, text: &str, source: Option<&str>) {
        let mut current: Option<String> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# ") {
                let mut parts = rest.splitn(3, ' ');
                let (kind, name) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                if kind == "HELP" || kind == "TYPE" {
                    let fam = self.family(name);
                    if !fam.head.iter().any(|h| h.starts_with(&format!("# {kind} "))) {
                        fam.head.push(line.to_string());
                    }
                    current = Some(name.to_string());
                }
                continue;
            }
            if line.trim().is_empty() {
                continue;
            }
            let name = current.clone().unwrap_or_else(|| sample_name(line).to_string());
            let sample = match source {
                Some(key) => with_label(line, key),
                None => line.to_string(),
            };
            self.family(&name).samples.push(sample);
        }
    }

    fn family(&mut self, name: &str) -> &mut Family {
        if !self.families.contains_key(name) {
            self.order.push(name.to_string());
        }
        self.families.entry(name.to_string()).or_default()
    }

    fn text(&self) -> String {
        let mut out = String::new();
        for name in &self.order {
            if let Some(f) = self.families.get(name) {
                for l in f.head.iter().chain(&f.samples) {
                    out.push_str(l);
                    out.push('\n');
                }
            }
        }
        out
    }
}

fn sample_name(line: &str) -> &str {
    line.split(['{', ' ']).next().unwrap_or(line)
}

/// `name{a="b"} 1` → `name{source_mount="KEY",a="b"} 1`; `name 1` → `name{source_mount="KEY"} 1`.
fn with_label(line: &str, key: &str) -> String {
    let name = sample_name(line);
    let rest = &line[name.len()..];
    match rest.strip_prefix('{') {
        Some(labels) if labels.starts_with('}') => format!("{name}{{source_mount=\"{key}\"{labels}"),
        Some(labels) => format!("{name}{{source_mount=\"{key}\",{labels}"),
        None => format!("{name}{{source_mount=\"{key}\"}}{rest}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_merge_and_samples_get_their_source() {
        let own = "# HELP hubfs_x A.\n# TYPE hubfs_x counter\nhubfs_x_total 1\n";
        let server = "# HELP hubfs_x A.\n# TYPE hubfs_x counter\nhubfs_x_total{class=\"api\"} 2\n\
                      # HELP hubfs_up Up.\n# TYPE hubfs_up gauge\nhubfs_up 3\n";
        let mut m = Merged::default();
        m.add(own, None);
        m.add(server, Some("k1"));
        m.add(server, Some("k2"));
        let text = m.text();
        assert_eq!(text.matches("# TYPE hubfs_x counter").count(), 1, "{text}");
        assert!(text.contains("hubfs_x_total 1\n"));
        assert!(
            text.contains("hubfs_x_total{source_mount=\"k1\",class=\"api\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("hubfs_up{source_mount=\"k2\"} 3\n"), "{text}");
        // Each family's samples follow its own header.
        let x = text.find("# TYPE hubfs_x").unwrap();
        let up = text.find("# TYPE hubfs_up").unwrap();
        assert!(text[x..up].contains("k2"));
    }
}
