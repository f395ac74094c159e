"""Downloads the reference copy of a repo with the stock client and writes its manifest.

    python hub_ref.py REPO_TYPE REPO_ID OUT_DIR

OUT_DIR/files/ gets every file (huggingface_hub `snapshot_download`, HF_ENDPOINT = the local Hub);
OUT_DIR/manifest.json maps each repo path to its sha256 and size, and OUT_DIR/SHA256SUMS holds the
same in `sha256sum -c` form. The downloaded bytes are checked against what the Hub's API says
(`list_repo_tree(recursive=True, expand=True)`: size of every file, sha256 of every LFS/Xet file).
"""

import json
import sys
from pathlib import Path

from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.hf_api import RepoFile

from wfcommon import check, exit_code, sha256_file

repo_type, repo_id, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
api = HfApi()
tag = f"{repo_type}s/{repo_id}" if repo_type != "model" else repo_id


def fetch():
    tree = [e for e in api.list_repo_tree(repo_id, repo_type=repo_type, recursive=True, expand=True)
            if isinstance(e, RepoFile)]
    files = out / "files"
    snapshot_download(repo_id, repo_type=repo_type, local_dir=files, max_workers=8)
    manifest, bad = {}, []
    for e in tree:
        local = files / e.path
        if not local.is_file():
            bad.append(f"{e.path}: not downloaded")
            continue
        sha = sha256_file(local)
        if local.stat().st_size != e.size:
            bad.append(f"{e.path}: {local.stat().st_size} bytes, the Hub says {e.size}")
        if e.lfs is not None and e.lfs.sha256 != sha:
            bad.append(f"{e.path}: sha256 {sha}, the Hub says {e.lfs.sha256}")
        manifest[e.path] = {"sha256": sha, "size": e.size}
    if bad:
        return f"{len(bad)} bad: {bad[:5]}"
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    (out / "SHA256SUMS").write_text("".join(f"{m['sha256']}  ./{p}\n" for p, m in sorted(manifest.items())))
    print(f"# {tag}: {len(manifest)} files, {sum(m['size'] for m in manifest.values())} bytes", flush=True)


check(f"reference copy of {tag} downloaded with huggingface_hub matches the Hub's sizes and sha256", fetch)
sys.exit(exit_code())
