//! The layering of `src/` (docs/ARCHITECTURE.md, "Module map"): every `crate::X` path in a module
//! names its own top-level module or one in a strictly lower layer. Two modules of one layer never
//! use each other (so the local Hub reaches nothing of the client side, nor the client the local
//! Hub), and there is no exception. Reads the sources as text: a new `use` against the layering
//! fails here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each top-level module of `src/` and its layer, bottom (0) to top. A module uses only modules of
/// lower layers: the chunk store and the write layer sit below VirtualFs (it converts the chunk
/// store's error into its own, and the file metadata both use lives in the Hub client), and the
/// local Hub and the Hub client, one layer, are reached from each other only over HTTP.
const LAYERS: &[(&str, u32)] = &[
    ("util", 0),
    ("metrics", 0),
    ("hub_client", 1),
    ("local_hub", 1),
    ("chunk_store", 2),
    ("write", 2),
    ("vfs", 3),
    ("fuse", 4),
    ("nfs", 4),
    ("process", 5),
    ("csi", 6),
    ("commands", 7),
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`None` for lib.rs and main.rs).
fn module_of(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    match first.strip_suffix(".rs") {
        Some("lib" | "main") => None,
        Some(stem) => Some(stem.to_string()),
        None => Some(first),
    }
}

/// The top-level modules a line names through `crate::`: `crate::a::…` and `crate::{a, b::c}`.
fn crate_refs(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or("");
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
        } else {
            let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
        rest = after;
    }
    out
}

#[test]
fn every_module_has_a_layer() {
    let layers: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    let mut missing: Vec<String> = files
        .iter()
        .filter_map(|f| module_of(f.strip_prefix(src_dir()).unwrap()))
        .filter(|m| !layers.contains_key(m.as_str()))
        .collect();
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "top-level modules with no layer in tests/layers.rs: {missing:?}"
    );
}

#[test]
fn no_module_imports_its_own_layer_or_one_above() {
    let layers: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    files.sort();
    let mut wrong = Vec::new();
    let mut checked = 0usize;
    for f in &files {
        let rel = f.strip_prefix(src_dir()).unwrap();
        let Some(module) = module_of(rel) else { continue };
        let Some(&own) = layers.get(module.as_str()) else {
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for target in crate_refs(line) {
                if target == module {
                    continue;
                }
                checked += 1;
                let bad = match layers.get(target.as_str()) {
                    Some(&t) => t >= own,
                    // `crate::` followed by something that is no module (a macro path): ignore.
                    None => false,
                };
                if bad {
                    wrong.push(format!(
                        "src/{}:{}: {module} uses crate::{target}",
                        rel.display(),
                        n + 1
                    ));
                }
            }
        }
    }
    // The scan found the imports it is meant to judge (a broken scanner must not pass).
    assert!(
        checked > 100,
        "only {checked} crate:: paths found: is the scanner broken?"
    );
    assert!(wrong.is_empty(), "imports against the layering:\n{}", wrong.join("\n"));
}

#[test]
fn the_scanner_reads_grouped_and_plain_paths() {
    assert_eq!(crate_refs("use crate::vfs::VirtualFs;"), ["vfs"]);
    assert_eq!(
        crate_refs("use crate::{util::units, hub_client::RepoRef};"),
        ["util", "hub_client"]
    );
    assert_eq!(
        crate_refs("let x = crate::a::f(crate::b::g()); // crate::c"),
        ["a", "b"]
    );
    assert!(crate_refs("// crate::commands").is_empty());
}
