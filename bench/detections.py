"""The measured defaults of the layerwise detection checks (docs/stages/layerwise.md#detections).

The shapes demo's CenterNet (demo/shapes: FP32 reference, FP16 and INT8 Q/DQ candidates) with a decode, ONNX's own
NonMaxSuppression and a top-K gather appended (tests/stages/detection/detector_graphs.py), ending in [B, K, 6] and in
the
four-output layout; each candidate run as the layerwise stage runs it (FP16 emulated as a GPU rounds it) on the 200
validation images, one image a sample; then the same detections matched box to box (trtverify/compare/detections.py),
for the correct candidates and for planted faults: boxes of one head scaled (a wrong weight scale in the `wh` head's
last Conv), scores shifted (a bias added to the heatmap head's logits), boxes moved (the `offset` head shifted).

    .venv/bin/python bench/detections.py [--images 200] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.stages.detection.detector_graphs import append, planted  # noqa: E402
from trtverify.backends.base import candidate_backend  # noqa: E402
from trtverify.backends.onnxruntime import OnnxRuntimeBackend  # noqa: E402
from trtverify.compare.detections import DetectionStats  # noqa: E402
from trtverify.compare.detlayout import TensorInfo, images, recognise  # noqa: E402
from trtverify.config.backends import Backends  # noqa: E402
from trtverify.config.layerwise import detection_checks  # noqa: E402

DEMO = ROOT / "demo" / "shapes"
FAULTS = [  # name, head, scale, shift of its last Conv's output
    ("boxes x1.05", "wh", 1.05, 0.0),
    ("boxes x1.1", "wh", 1.1, 0.0),
    ("boxes moved 0.1 cell", "offset", 1.0, 0.1),
    ("boxes moved 0.25 cell", "offset", 1.0, 0.25),
    ("heatmap logits +0.25", "heatmap", 1.0, 0.25),
    ("heatmap logits +0.5", "heatmap", 1.0, 0.5),
    ("heatmap logits -0.5", "heatmap", 1.0, -0.5),
    ("heatmap logits x0.8", "heatmap", 0.8, 0.0),
]


def load_images(n: int) -> list[np.ndarray]:
    files = sorted((DEMO / "val" / "images").glob("*.png"))[:n]
    return [np.asarray(Image.open(f).convert("RGB"), dtype=np.float32).transpose(2, 0, 1)[None] / 255.0 for f in files]


def outputs_of(path: Path, feeds: list[dict[str, np.ndarray]], candidate: bool) -> list[dict[str, np.ndarray]]:
    backends = Backends()
    backend = candidate_backend("onnxruntime", path, backends, feeds) if candidate else OnnxRuntimeBackend(path)
    with backend:
        return [backend.infer(f) for f in feeds]


def infos(path: Path, first: dict[str, np.ndarray]) -> list[TensorInfo]:
    m = onnx.load(str(path), load_external_data=False)
    prod = {o: (n, i) for n in m.graph.node for i, o in enumerate(n.output)}
    out = []
    for o in m.graph.output:
        n, i = prod[o.name]
        out.append(TensorInfo(o.name, tuple(first[o.name].shape), str(first[o.name].dtype), n.op_type, n.name, i))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    feeds = [{"images": x} for x in load_images(args.images)]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        heads = {
            "fp16": DEMO / "shapes_fp16.onnx",
            "int8": DEMO / "shapes_int8_qdq.onnx",
            **{
                name: planted(DEMO / "shapes_fp32.onnx", work / f"fault{i}.onnx", head, scale=scale, shift=shift)
                for i, (name, head, scale, shift) in enumerate(FAULTS)
            },
        }
        for layout in ("det6", "nms4"):
            ref_path = append(DEMO / "shapes_fp32.onnx", work / f"ref_{layout}.onnx", layout)
            t0 = time.perf_counter()
            ref = outputs_of(ref_path, feeds, candidate=False)
            first = ref[0]
            found = recognise(infos(ref_path, first), first.get)
            print(f"{layout}: recognised {[(x.kind, x.tensors) for x in found]}", flush=True)
            (lay,) = found
            for name, src in heads.items():
                cand_path = append(src, work / f"{name.replace(' ', '_')}_{layout}.onnx", layout)
                cand = outputs_of(cand_path, feeds, candidate=True)
                stats = DetectionStats(iou=0.5)
                precision = "int8" if name == "int8" else "fp16"  # the faults are FP32 models: FP32's defaults
                checks = detection_checks(precision)
                alone = 0  # single-image runs (one image a run) that fail the defaults
                for si, (r, c) in enumerate(zip(ref, cand)):
                    ri, ci = images(lay, r), images(lay, c)
                    stats.add(si, ri, ci)
                    one = DetectionStats(iou=0.5)
                    one.add(0, ri, ci)
                    alone += not all(ch.passes(one.metrics()[ch.metric]) for ch in checks)
                row = {
                    **{k: round(v, 5) for k, v in stats.metrics().items()},
                    "reference_boxes": stats.reference_boxes,
                    "candidate_boxes": stats.candidate_boxes,
                    "matched": stats.matched,
                    "class_changes": stats.class_changes,
                    "unmatched_score_max": stats.unmatched_score_max,
                    "worst_image_fraction": stats.worst[0] if stats.worst else None,
                    "fails_defaults": [ch.condition for ch in checks if not ch.passes(stats.metrics()[ch.metric])],
                    "single_image_runs_failing": alone,
                }
                results[f"{layout} {name}"] = row
                print(f"{layout} {name}: {json.dumps(row)}", flush=True)
            print(f"{layout}: {time.perf_counter() - t0:.1f} s", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "detections.json").write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
