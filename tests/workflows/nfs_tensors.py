"""Loads a safetensors file copied out of an NFS export (nfs-cp) and compares every tensor with the
copy downloaded from the Hub.

    python nfs_tensors.py COPIED_FILE HUB_FILE
"""

import sys

from safetensors import safe_open

from wfcommon import bit_equal, check, exit_code

copied, hub = sys.argv[1], sys.argv[2]


def tensors():
    with safe_open(copied, "np") as c, safe_open(hub, "np") as h:
        if sorted(c.keys()) != sorted(h.keys()):
            return f"keys {sorted(c.keys())} != {sorted(h.keys())}"
        for k in h.keys():
            if not bit_equal(c.get_tensor(k), h.get_tensor(k)):
                return f"tensor {k} differs"


check("nfs: the safetensors copied with nfs-cp loads and every tensor equals the Hub's", tensors)
sys.exit(exit_code())
