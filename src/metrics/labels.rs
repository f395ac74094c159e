//! The label sets and bounded label values of the process's metrics: endpoint classes, request
//! windows, block sources, cache tiers, memory parts, mounts and CSI calls. Each is a fixed set of
//! names or a value per mount, never a path, a URL or a token.

use prometheus_client::encoding::EncodeLabelSet;

/// Where a Hub request went; a bounded label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HubClass {
    /// `/api/…` reads: repo info, tree, paths-info, tokens.
    Api,
    /// Commits and preuploads.
    Commit,
    /// `/resolve/` downloads and the redirects they lead to.
    Resolve,
    /// Xet CAS: which xorb ranges make up a file.
    XetReconstruction,
    /// Xet CAS: xorb bytes from presigned URLs.
    XetXorb,
    /// Xet upload sessions (the xet crates' own requests: xorbs, shards, dedup queries, tokens).
    XetUpload,
    /// Anything else (LFS storage redirects and uploads).
    Other,
}

impl HubClass {
    pub fn as_str(self) -> &'static str {
        match self {
            HubClass::Api => "api",
            HubClass::Commit => "commit",
            HubClass::Resolve => "resolve",
            HubClass::XetReconstruction => "xet_reconstruction",
            HubClass::XetXorb => "xet_xorb",
            HubClass::XetUpload => "xet_upload",
            HubClass::Other => "other",
        }
    }

    /// The class of a request to the Hub's own origin, from its URL path.
    pub fn of_path(path: &str) -> HubClass {
        if path.contains("/resolve/") {
            HubClass::Resolve
        } else if path.starts_with("/api/") && (path.contains("/commit/") || path.contains("/preupload/")) {
            HubClass::Commit
        } else if path.starts_with("/api/") {
            HubClass::Api
        } else {
            HubClass::Other
        }
    }
}

/// How one attempt of a Hub request ended.
#[derive(Debug, Clone, Copy)]
pub enum Attempt {
    /// An answer with this status; `received` body bytes.
    Status { status: u16, received: u64 },
    /// The per-attempt deadline expired.
    Timeout,
    /// A transport error (connect, reset, body cut short).
    Error,
}

/// Where a cached block's bytes came from.
#[derive(Debug, Clone, Copy)]
pub enum BlockSource {
    Memory,
    /// A block a reader's prefetch window holds after the memory tier let it go.
    Held,
    Disk,
    /// The shared cache tier (`--shared-cache`).
    Shared,
    Hub,
}

impl BlockSource {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            BlockSource::Memory => "memory",
            BlockSource::Held => "held",
            BlockSource::Disk => "disk",
            BlockSource::Shared => "shared",
            BlockSource::Hub => "hub",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    pub class: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub class: &'static str,
    /// An HTTP status code, `timeout` or `error`.
    pub status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    pub source: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    pub frontend: &'static str,
    pub op: &'static str,
}

/// What became of prefetched bytes (a fixed set of names).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

/// The part of the memory budget a series is about (a fixed set of names).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartLabel {
    pub part: &'static str,
}

/// One of the Hub's request windows: `api`, `resolvers`, `pages`, `cas`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BucketLabel {
    pub bucket: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierLabel {
    pub tier: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
}

/// The mount info metric's labels: what is mounted, never where.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MountLabels {
    pub repo: String,
    pub revision: String,
    pub mode: &'static str,
    pub frontend: &'static str,
}

/// A published CSI volume and the source mount serving it (the plugin's metrics).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VolumeLabels {
    pub volume: String,
    pub source_mount: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CsiCallLabels {
    pub method: &'static str,
    /// The gRPC status code's name (`ok`, `invalid_argument`, …).
    pub code: &'static str,
}
