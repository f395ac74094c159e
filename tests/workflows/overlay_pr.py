"""The contribute-by-pull-request workflow, seen from the stock client: after edits through an
overlay mount and `hubfs overlay commit --pr`, huggingface_hub lists one pull request holding
exactly the four changes, main is unchanged, and the model file is the one main has.

    python overlay_pr.py REPO MOUNT TITLE
"""

import hashlib
import sys
from pathlib import Path

from huggingface_hub import HfApi, hf_hub_download

from wfcommon import check, exit_code

repo, mount, title = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
api = HfApi()


def pr():
    prs = [d for d in api.get_repo_discussions(repo) if d.is_pull_request]
    if len(prs) != 1 or prs[0].title != title:
        return f"pull requests: {[(d.num, d.title) for d in prs]}"
    return prs[0]


p = check("stock client: get_repo_discussions lists the one pull request", pr)
ref = f"refs/pr/{p.num}" if p else "refs/pr/1"
main_files = sorted(api.list_repo_files(repo, revision="main"))
pr_files = sorted(api.list_repo_files(repo, revision=ref))


def tree():
    want = sorted(
        (set(main_files) - {"README.md", "tokenizer.json"}) | {"tokenizer-v2.json", "notes/eval.json"}
    )
    return None if pr_files == want else f"{ref}: {pr_files}, expected {want}"


check(f"stock client: {ref} has exactly the four changes", tree)


def main_unchanged():
    need = {"README.md", "tokenizer.json", "config.json", "model.safetensors"}
    return None if need <= set(main_files) and "notes/eval.json" not in main_files else f"main: {main_files}"


check("stock client: main is unchanged", main_unchanged)


def same(path_pr, path_local):
    got = Path(hf_hub_download(repo, path_pr, revision=ref)).read_bytes()
    want = (mount / path_local).read_bytes()
    if got != want:
        return f"{path_pr}@{ref}: {hashlib.sha256(got).hexdigest()[:12]} != local {hashlib.sha256(want).hexdigest()[:12]}"
    return None


check("stock client: config.json in the pull request is the edited one", lambda: same("config.json", "config.json"))
check("stock client: notes/eval.json in the pull request is the local one", lambda: same("notes/eval.json", "notes/eval.json"))


def model_same():
    a = api.get_paths_info(repo, ["model.safetensors"], revision="main")[0]
    b = api.get_paths_info(repo, ["model.safetensors"], revision=ref)[0]
    if a.lfs is None or b.lfs is None or a.lfs.sha256 != b.lfs.sha256:
        return f"main {a.lfs} vs {ref} {b.lfs}"
    return None


check("stock client: the pull request's model.safetensors is main's (not uploaded again)", model_same)
sys.exit(exit_code())
