"""What running around a plugin node costs (issue 37, item 10): `trtverify layerwise` on a model with a plugin
node against the same model without it, alternating, same inputs.

  python bench/plugin_cost.py [--repeat 5] [--cases cnn,encoder,detector]

cnn, encoder: bench/.cache's models (bench/make_models.py) and their FP16 candidates; the plugin model is the
same file with one mid-graph node (the CNN's middle Relu, the encoder's middle Add) turned into a plugin node of
another domain (`trt.plugins::<op>_TRT`), computed by a `--plugin` hook that does what the op did (numpy). Same
tensors, same numbers: the difference is the split (two ONNX Runtime sessions per
exposed chunk, the plugin in numpy between them). detector: demo/plugins' shapes detector ending in EfficientNMS_TRT
(built-in reference; its outputs compared as detections) against the same export without it (the raw head, FP16 made
with the same converter). Median wall time per variant and the ratio.
Results: bench/results/plugin_cost.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / ".cache"
TRTVERIFY = str(Path(sys.executable).with_name("trtverify"))

HOOKS = """
import numpy as np


def relu(x):
    return np.maximum(x, np.zeros((), x.dtype))


def add(a, b):
    return (a + b).astype(np.result_type(a, b))
"""


def _pluginise(src: Path, dst: Path, op: str) -> str:
    """`src` with its middle `op` node turned into `trt.plugins::<op>_TRT`; the node's name."""
    import onnx

    m = onnx.load(str(src), load_external_data=False)
    nodes = [n for n in m.graph.node if n.op_type == op]
    if not nodes:
        sys.exit(f"{src}: no {op} node")
    n = nodes[len(nodes) // 2]
    n.op_type, n.domain = f"{op}_TRT", "trt.plugins"
    m.opset_import.append(onnx.helper.make_opsetid("trt.plugins", 1))
    onnx.save(m, str(dst))
    return n.name


def _inputs(model: Path, tmp: Path) -> Path:
    import onnx

    m = onnx.load(str(model), load_external_data=False)
    feed = {}
    for i in m.graph.input:
        dims = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feed[i.name] = np.random.default_rng(0).integers(0, 100, dims).astype(np.int64)
        else:
            feed[i.name] = np.random.default_rng(0).standard_normal(dims).astype(np.float32)
    path = tmp / f"{model.stem}_in.npz"
    np.savez(path, **feed)
    return path


def cases(names: list[str], tmp: Path) -> dict[str, dict[str, list[str]]]:
    (tmp / "hooks.py").write_text(HOOKS)
    out: dict[str, dict[str, list[str]]] = {}
    for model, op, hook in (("cnn", "Relu", "relu"), ("encoder", "Add", "add")):
        if model not in names:
            continue
        ref, cand = CACHE / f"{model}_fp32.onnx", CACHE / f"{model}_fp16.onnx"
        if not ref.is_file():
            sys.exit(f"{ref} missing: run bench/make_models.py first")
        pref, pcand = tmp / f"{model}_plugin_fp32.onnx", tmp / f"{model}_plugin_fp16.onnx"
        _pluginise(ref, pref, op)
        _pluginise(cand, pcand, op)
        feed = str(_inputs(ref, tmp))
        base = [TRTVERIFY, "layerwise", "--inputs", feed, "-q"]
        out[model] = {
            "without plugin": [*base, str(ref), str(cand), "--out", str(tmp / f"{model}-plain")],
            "with plugin": [
                *base,
                str(pref),
                str(pcand),
                "--plugin",
                f"{op}_TRT=hooks:{hook}",
                "--out",
                str(tmp / f"{model}-plugin"),
            ],  # fmt: skip
        }
    demo = ROOT / "demo" / "plugins"
    if "detector" in names:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        raw = demo / "shapes_yolo_raw.onnx"
        raw16 = tmp / "shapes_yolo_raw_fp16.onnx"  # as the demo's FP16 candidates were made (float32 I/O)
        onnx.save(convert_float_to_float16(onnx.load(str(raw)), keep_io_types=True), str(raw16))
        images = str(_inputs(raw, tmp))
        base = [TRTVERIFY, "layerwise", "--inputs", images, "-q"]
        out["detector"] = {
            "without plugin": [*base, str(raw), str(raw16), "--out", str(tmp / "det-plain")],
            "with plugin": [
                *base,
                str(demo / "shapes_yolo_nms.onnx"),
                str(demo / "shapes_yolo_nms_fp16.onnx"),
                "--out",
                str(tmp / "det-plugin"),
            ],  # fmt: skip
        }
    return out


def measure(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cases", default="cnn,encoder,detector")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="trtverify-plugin-cost-") as t:
        tmp = Path(t)
        for name, variants in cases(args.cases.split(","), tmp).items():
            for cmd in variants.values():
                measure(cmd, tmp)  # warm: page cache, imports
            walls: dict[str, list[float]] = {v: [] for v in variants}
            for _ in range(args.repeat):
                for v, cmd in variants.items():
                    walls[v].append(measure(cmd, tmp))
            med = {v: statistics.median(w) for v, w in walls.items()}
            row = {"case": name, "median_s": med, "ratio": med["with plugin"] / med["without plugin"],
                   "walls": {v: [round(x, 3) for x in w] for v, w in walls.items()}}  # fmt: skip
            rows.append(row)
            print(f"{name:10s} without {med['without plugin']:.3f} s, with {med['with plugin']:.3f} s: "
                  f"{row['ratio']:.3f}x", flush=True)  # fmt: skip
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "plugin_cost.json").write_text(json.dumps({"repeat": args.repeat, "rows": rows}, indent=1))
    lines = [
        "# Layerwise around a plugin node: the same model with and without it",
        "",
        f"`bench/plugin_cost.py --repeat {args.repeat}`: median wall time of {args.repeat} alternating runs of "
        "`trtverify layerwise` (FP32 reference against the FP16 candidate).",
        "",
        "| case | without plugin (s) | with plugin (s) | ratio |",
        "|---|---|---|---|",
    ]
    for r in rows:
        m = r["median_s"]
        lines.append(f"| {r['case']} | {m['without plugin']:.3f} | {m['with plugin']:.3f} | {r['ratio']:.3f} |")
    (args.results / "plugin_cost.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
