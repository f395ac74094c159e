"""Mixed-read soak through --daemon mounts: threads doing random reads of the weights, listing
directories and opening small files, for SECS seconds; every answer is checked against the Hub copies.

    python soak.py MODEL_MOUNT DATASET_MOUNT MODEL_REF DATASET_REF SECS
"""

import mmap
import os
import random
import sys
import threading
import time
from pathlib import Path

from wfcommon import check, exit_code, load_manifest

model, dataset = Path(sys.argv[1]), Path(sys.argv[2])
model_ref, dataset_ref = Path(sys.argv[3]), Path(sys.argv[4])
secs = float(sys.argv[5])
deadline = time.monotonic() + secs

ref_f = open(model_ref / "files/model.safetensors", "rb")
weights = mmap.mmap(ref_f.fileno(), 0, access=mmap.ACCESS_READ)
model_names = sorted(load_manifest(model_ref / "manifest.json"))
ds_manifest = load_manifest(dataset_ref / "manifest.json")
many = sorted(p.rsplit("/", 1)[1] for p in ds_manifest if p.startswith("data/many/"))
small = [("model", p) for p in model_names if p != "model.safetensors"] + \
        [("dataset", p) for p, m in ds_manifest.items() if m["size"] < 64 << 10]
roots = {"model": (model, model_ref / "files"), "dataset": (dataset, dataset_ref / "files")}

counts = {"reads": 0, "listings": 0, "opens": 0}
errors = {"reads": [], "listings": [], "opens": []}
wrong = {"reads": 0, "listings": 0, "opens": 0}
lock = threading.Lock()


def record(kind, err=None):
    with lock:
        counts[kind] += 1
        if err:
            wrong[kind] += 1
            if len(errors[kind]) < 5:
                errors[kind].append(err)


def guarded(kind, body):
    def run():
        while time.monotonic() < deadline:
            try:
                record(kind, body())
            except Exception as e:  # noqa: BLE001
                record(kind, f"{type(e).__name__}: {e}")
    return run


def reader(seed):
    rng = random.Random(seed)
    fd = os.open(model / "model.safetensors", os.O_RDONLY)  # a long-lived descriptor, as loaders keep

    def body():
        off = rng.randrange(0, len(weights) - 1)
        n = rng.choice([512, 4096, 131072, 1 << 20])
        if rng.random() < 0.5:
            got = os.pread(fd, n, off)
        else:
            with open(model / "model.safetensors", "rb") as f:
                f.seek(off)
                got = f.read(n)
        if got != weights[off:off + n]:
            return f"[{off}, +{n}) differs"
    return guarded("reads", body)


def lister():
    def body():
        got = sorted(os.listdir(model))
        if got != model_names:
            return f"model root lists {got}"
        got = sorted(os.listdir(dataset / "data/many"))
        if got != many:
            return f"data/many lists {len(got)} names, the Hub has {len(many)}"
        for e in os.scandir(dataset / "data"):
            e.stat()
    return guarded("listings", body)


def opener(seed):
    rng = random.Random(seed)

    def body():
        which, p = rng.choice(small)
        mnt, ref = roots[which]
        with open(mnt / p, "rb") as f:
            got = f.read()
        if got != (ref / p).read_bytes():
            return f"{which}:{p} differs"
    return guarded("opens", body)


threads = [threading.Thread(target=t) for t in [reader(1), reader(2), lister(), opener(3), opener(4)]]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"# soak {secs:.0f} s: {counts}", flush=True)

for kind, what in [("reads", "random reads of model.safetensors"), ("listings", "directory listings"),
                   ("opens", "small-file opens")]:
    def verdict(kind=kind):
        if counts[kind] == 0:
            return "none done"
        if wrong[kind]:
            return f"{wrong[kind]} wrong of {counts[kind]}, first: {errors[kind]}"
    check(f"soak: {what} all correct", verdict)
sys.exit(exit_code())
