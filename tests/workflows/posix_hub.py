"""Hub side of the "POSIX tools into a writable mount" section (tests/workflows/posix_tools.sh).

    python posix_hub.py commits REPO_ID
        prints the number of commits of the dataset repo's main branch (list_repo_commits), nothing else
    python posix_hub.py seed REPO_ID PATH TEXT
        uploads TEXT as PATH (upload_file; needs a write token in HF_TOKEN)
    python posix_hub.py verify LABEL REPO_ID OUT SUMS [ABSENT...]
        SUMS: `sha256sum` lines (`SHA  ./path`) of the regular files that must be on the Hub. Checks that
        the Hub's files under the top-level names of SUMS are exactly those (nothing missing, nothing
        extra: no temporary files, no symlinks turned into files), that each one downloaded with
        `snapshot_download` into OUT has the listed sha256 (and the size/sha256 the API states), and that
        the Hub has no file at any ABSENT path.

`verify` prints `ok NAME` / `FAIL NAME<TAB>reason` lines for run.sh (see wfcommon.py).
"""

import sys
from pathlib import Path

from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.hf_api import RepoFile

from wfcommon import check, exit_code, sha256_file

api = HfApi()
cmd = sys.argv[1]

if cmd == "commits":
    print(len(api.list_repo_commits(sys.argv[2], repo_type="dataset")))
    sys.exit(0)

if cmd == "seed":
    repo_id, path, text = sys.argv[2:5]
    api.upload_file(path_or_fileobj=text.encode(), path_in_repo=path, repo_id=repo_id, repo_type="dataset",
                    commit_message=f"seed {path}")
    sys.exit(0)

assert cmd == "verify", f"unknown command {cmd}"
label, repo_id, out, sums_file = sys.argv[2], sys.argv[3], Path(sys.argv[4]), sys.argv[5]
absent = sys.argv[6:]

want = {}
for line in Path(sums_file).read_text().splitlines():
    sha, name = line.split(maxsplit=1)
    want[name.removeprefix("./")] = sha
tops = sorted({p.split("/")[0] for p in want})
tree = {e.path: e for e in api.list_repo_tree(repo_id, repo_type="dataset", recursive=True, expand=True)
        if isinstance(e, RepoFile)}
in_scope = {p: e for p, e in tree.items() if p.split("/")[0] in tops}
files = out / "files"


def same_tree():
    missing = sorted(set(want) - set(in_scope))
    extra = sorted(set(in_scope) - set(want))
    if missing or extra:
        return f"not on the Hub: {missing[:8]} ({len(missing)}); on the Hub only: {extra[:8]} ({len(extra)})"
    print(f"# {len(in_scope)} files on the Hub under {', '.join(tops)}", flush=True)


def same_bytes():
    snapshot_download(repo_id, repo_type="dataset", local_dir=files, max_workers=8)
    bad = []
    for path, sha in sorted(want.items()):
        local = files / path
        if path not in tree or not local.is_file():
            bad.append(f"{path}: not on the Hub")
            continue
        got = sha256_file(local)
        if got != sha:
            bad.append(f"{path}: Hub {got[:12]} != source {sha[:12]}")
        e = tree[path]
        if e.lfs is not None and e.lfs.sha256 != got:
            bad.append(f"{path}: the API says sha256 {e.lfs.sha256[:12]}, the download has {got[:12]}")
        if local.stat().st_size != e.size:
            bad.append(f"{path}: the API says {e.size} bytes, the download has {local.stat().st_size}")
    if bad:
        return f"{len(bad)} of {len(want)} files: {bad[:5]}"


def nothing_at_absent():
    there = [p for p in absent if p in tree or any(q.startswith(p + "/") for q in tree)]
    if there:
        return f"on the Hub: {there}"


where = ", ".join(tops) if len(tops) <= 6 else f"{len(tops)} top-level names"
check(f"{label}: the Hub's files under {where} are exactly the {len(want)} regular files expected", same_tree)
check(f"{label}: each of them downloaded from the Hub has the source's sha256", same_bytes)
if absent:
    check(f"{label}: the Hub has no file at {', '.join(absent)} (what the Hub cannot store stays in the mount)", nothing_at_absent)
sys.exit(exit_code())
