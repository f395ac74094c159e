"""After a writable mount is unmounted: is everything that was written on the Hub, byte for byte?

    python verify_hub.py REPO_ID OUT MOUNT_SUMS KNOWN_SUMS EXPECTED_JSON

MOUNT_SUMS: `sha256sum` lines (`SHA  ./path`) of every regular file in the mount, read through the
mount before unmounting. KNOWN_SUMS: the same for files whose content is known from their source
(cp -r, unzip, to_parquet). EXPECTED_JSON: what write_workload.py wrote (sqlite tables).
The dataset repo is listed with `list_repo_tree(recursive=True, expand=True)` and downloaded with
`snapshot_download` into OUT/files (run.sh then checks the git repository and the sqlite3 CLI db there).
"""

import json
import sqlite3
import sys
from pathlib import Path

from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.hf_api import RepoFile

from wfcommon import check, exit_code, sha256_file

repo_id, out = sys.argv[1], Path(sys.argv[2])
api = HfApi()


def sums(path) -> dict:
    got = {}
    for line in Path(path).read_text().splitlines():
        sha, name = line.split(maxsplit=1)
        got[name.removeprefix("./")] = sha
    return got


mount_sums, known_sums = sums(sys.argv[3]), sums(sys.argv[4])
expected = json.loads(Path(sys.argv[5]).read_text())
tree = {e.path: e for e in api.list_repo_tree(repo_id, repo_type="dataset", recursive=True, expand=True)
        if isinstance(e, RepoFile)}
files = out / "files"


def same_tree():
    missing = sorted(set(mount_sums) - set(tree))
    extra = sorted(set(tree) - set(mount_sums))
    if missing or extra:
        return f"not on the Hub: {missing[:8]} ({len(missing)}); on the Hub only: {extra[:8]} ({len(extra)})"
    print(f"# {len(tree)} files on the Hub", flush=True)


def same_bytes():
    snapshot_download(repo_id, repo_type="dataset", local_dir=files, max_workers=8)
    bad = []
    for path, e in tree.items():
        local = files / path
        sha = sha256_file(local)
        if path in mount_sums and sha != mount_sums[path]:
            bad.append(f"{path}: Hub {sha[:12]} != mount {mount_sums[path][:12]}")
        if e.lfs is not None and e.lfs.sha256 != sha:
            bad.append(f"{path}: the API says sha256 {e.lfs.sha256[:12]}, the download has {sha[:12]}")
        if local.stat().st_size != e.size:
            bad.append(f"{path}: the API says {e.size} bytes, the download has {local.stat().st_size}")
    if bad:
        return f"{len(bad)} files differ: {bad[:5]}"


def known_content():
    bad = [f"{p}: {'missing' if p not in tree else 'differs'}" for p, sha in known_sums.items()
           if p not in tree or sha256_file(files / p) != sha]
    if expected.get("tables/metrics.parquet") is None:
        bad.append("to_parquet wrote nothing to compare")
    elif sha256_file(files / "tables/metrics.parquet") != expected["tables/metrics.parquet"]:
        bad.append("tables/metrics.parquet differs from the DataFrame's local copy")
    if bad:
        return f"{len(bad)} of {len(known_sums) + 1}: {bad[:5]}"
    print(f"# {len(known_sums) + 1} files equal their source", flush=True)


def sqlite_dbs():
    for path, want in expected["sqlite"].items():
        db = sqlite3.connect(f"file:{files / path}?mode=ro", uri=True)
        (n,) = db.execute(f"select count(*) from {want['table']}").fetchone()
        if n != want["rows"]:
            return f"{path}: {n} rows, {want['rows']} written"
        if db.execute("pragma integrity_check").fetchone() != ("ok",):
            return f"{path}: integrity_check failed"
        db.close()


check("hub: the repo's tree equals the files in the mount (list_repo_tree recursive)", same_tree)
check("hub: every file's sha256 equals what the mount read back before unmount", same_bytes)
check("hub: files from cp -r, unzip and to_parquet have their source's sha256", known_content)
check("hub: the sqlite db opens, passes integrity_check and has the rows", sqlite_dbs)
sys.exit(exit_code())
