"""Copies of the two demo suites for a pinned bench: `suites/_dev<N>_{fashion,shapes}.yaml` with
ONNX Runtime's intra-op threads set to N (and 2 e2e reader threads), for each N given. They live
beside the originals so that their relative paths hold; the calling script deletes them.

    python3 bench/pinned_suites.py 2 4 16
"""

import sys

import yaml

for n in map(int, sys.argv[1:]):
    for src, tag in (("suites/fashion_mnist.yaml", "fashion"), ("suites/shapes_detection.yaml", "shapes")):
        with open(src, encoding="utf-8") as fh:
            d = yaml.safe_load(fh)
        d.setdefault("backends", {}).setdefault("onnxruntime", {})["intra_op_num_threads"] = n
        d["stages"]["e2e"]["workers"] = 2
        with open(f"suites/_dev{n}_{tag}.yaml", "w", encoding="utf-8") as fh:
            yaml.safe_dump(d, fh, sort_keys=False)
