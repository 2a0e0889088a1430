"""Copies of the two demo suites for a pinned bench: `suites/_dev<CFG>_{fashion,shapes}.yaml`, for each
CFG given as `N` (ONNX Runtime's intra-op threads = N, for a process pinned to N cores) or `NtT`
(T threads, for N cores: the cores beyond T are left to reading and post-processing, as on a machine
whose inference runs on an accelerator), with the e2e reader threads left at their default (a quarter of
the usable cores, 2..4; the stage records it in results.json). They live beside the originals
so that their relative paths hold; the calling script deletes them.

    python3 bench/pinned_suites.py 2 4 16 16t8
"""

import re
import sys

import yaml

for cfg in sys.argv[1:]:
    m = re.fullmatch(r"(\d+)(?:t(\d+))?", cfg)
    if not m:
        sys.exit(f"pinned_suites.py: {cfg!r} is not N or NtT (cores, threads)")
    threads = int(m.group(2) or m.group(1))
    for src, tag in (("suites/fashion_mnist.yaml", "fashion"), ("suites/shapes_detection.yaml", "shapes")):
        with open(src, encoding="utf-8") as fh:
            d = yaml.safe_load(fh)
        d.setdefault("backends", {}).setdefault("onnxruntime", {})["intra_op_num_threads"] = threads
        with open(f"suites/_dev{cfg}_{tag}.yaml", "w", encoding="utf-8") as fh:
            yaml.safe_dump(d, fh, sort_keys=False)
