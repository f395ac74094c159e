"""Read workflows on a read-only mount of demo/tiny-model, checked against the Hub's copy.

    python model_read.py MOUNT REF_DIR [CYCLES]

REF_DIR is what hub_ref.py wrote for demo/tiny-model (REF_DIR/files: downloaded with huggingface_hub).
"""

import json
import mmap
import random
import sys
import time
from pathlib import Path

from safetensors import safe_open

from wfcommon import bit_equal, check, exit_code, load_manifest

mnt, ref = Path(sys.argv[1]), Path(sys.argv[2])
cycles = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
files = ref / "files"
manifest = load_manifest(ref / "manifest.json")


def listing():
    got = sorted(p.name for p in mnt.iterdir())
    want = sorted(manifest)
    if got != want:
        return f"mount lists {got}, the Hub has {want}"


def tensors():
    with safe_open(str(files / "model.safetensors"), "np") as r, \
         safe_open(str(mnt / "model.safetensors"), "np") as m:
        if sorted(m.keys()) != sorted(r.keys()):
            return f"keys {sorted(m.keys())} != {sorted(r.keys())}"
        if m.metadata() != r.metadata():
            return f"metadata {m.metadata()} != {r.metadata()}"
        for k in r.keys():
            a, b = m.get_tensor(k), r.get_tensor(k)
            if a.dtype != b.dtype or a.shape != b.shape or not bit_equal(a, b):
                return f"tensor {k} differs ({a.dtype}{a.shape} vs {b.dtype}{b.shape})"
        # A slice too: the partial reads a loader does for sharded loading.
        k = sorted(r.keys())[0]
        if not bit_equal(m.get_slice(k)[100:110], r.get_slice(k)[100:110]):
            return f"slice of {k} differs"
        print(f"# {len(r.keys())} tensors equal", flush=True)


def json_file(name):
    def run():
        got = (mnt / name).read_bytes()
        want = (files / name).read_bytes()
        if got != want:
            return f"{len(got)} bytes differ from the Hub's {len(want)}"
        with open(mnt / name) as f:
            parsed = json.load(f)
        if parsed != json.loads(want):
            return "parsed JSON differs"
    return run


def open_cycles():
    small = [p for p in manifest if p != "model.safetensors"]
    texts = {p: (files / p).read_text() for p in small}
    ref_f = open(files / "model.safetensors", "rb")
    weights = mmap.mmap(ref_f.fileno(), 0, access=mmap.ACCESS_READ)
    size = len(weights)
    rng = random.Random(1234)
    bad = []
    t0 = time.monotonic()
    for i in range(cycles):
        kind = i % 4
        if kind in (0, 1):  # text mode: what config/tokenizer loaders do
            p = rng.choice(small)
            with open(mnt / p) as f:
                got = f.read()
            if got != texts[p]:
                bad.append(f"text {p}")
        elif kind == 2:  # binary, whole small file
            p = rng.choice(small)
            with open(mnt / p, "rb") as f:
                got = f.read()
            if got != texts[p].encode():
                bad.append(f"binary {p}")
        else:  # binary, a random range of the weights
            off = rng.randrange(0, size - 1)
            n = rng.choice([1, 4096, 65536, 300_000])
            with open(mnt / "model.safetensors", "rb") as f:
                f.seek(off)
                got = f.read(n)
            if got != weights[off:off + n]:
                bad.append(f"weights [{off}, +{n})")
    weights.close()
    ref_f.close()
    print(f"# {cycles} open/read/close cycles in {time.monotonic() - t0:.1f} s", flush=True)
    if bad:
        return f"{len(bad)} of {cycles} reads wrong, first: {bad[:3]}"


check("model: the mount lists the Hub's files", listing)
check("model: safetensors.safe_open loads every tensor equal to the hf_hub_download copy", tensors)
check("model: config.json parses and equals the Hub's bytes", json_file("config.json"))
check("model: tokenizer.json parses and equals the Hub's bytes", json_file("tokenizer.json"))
check(f"model: {cycles} Python open/read/close cycles (text and binary) return the Hub's bytes", open_cycles)
sys.exit(exit_code())
