"""The CPU side of bench/consistency_tolerance.py: ONNX Runtime's CPU (FP32) on the repository's models, a row run
alone against the same row repeated in a batch of 4 (rel_l2, the worst row) and the largest |diff| between two equal
rows of that batch. Writes bench/results/consistency_tolerance_cpu.json.

Run: .venv/bin/python bench/consistency_tolerance_cpu.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["demo/fp16_repair/fashion_bn_fp32.onnx", "demo/fashion_mnist/fashion_cnn_fp32.onnx",
          "tests/data/tiny/tiny.onnx", "tests/data/bert/bert_tiny.onnx"]  # fmt: skip


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    den = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / den) if den else float(np.linalg.norm(a - b))


def measure(path: Path) -> dict[str, float]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {}
    for i in session.get_inputs():  # one row; dynamic sizes other than the batch at 8
        shape = [1 if k == 0 else (d if isinstance(d, int) and d > 0 else 8) for k, d in enumerate(i.shape)]
        feed[i.name] = rng.integers(0, 100, shape) if "int" in i.type else rng.random(shape, dtype=np.float32)
    four = {n: np.repeat(a, 4, axis=0) for n, a in feed.items()}
    single, repeated = session.run(None, feed), session.run(None, four)
    worst = max(rel_l2(r[k], s[0]) for s, r in zip(single, repeated) for k in range(4))
    dup = max(float(np.abs(r[1].astype(np.float64) - r[0]).max()) for r in repeated)
    return {"repeated_rel_l2": worst, "duplicated_max_abs": dup}


if __name__ == "__main__":
    out = {"onnxruntime": ort.__version__} | {m: measure(ROOT / m) for m in MODELS}
    path = ROOT / "bench" / "results" / "consistency_tolerance_cpu.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    json.dump(out, sys.stdout, indent=1)
