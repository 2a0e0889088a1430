"""`trtverify repair --precision fp16` side by side with ModelOpt AutoCast, on the same models and rows.

    pip install -c constraints/ci.txt -e '.[torch,modelopt]'
    python bench/repair_vs_autocast.py [--out bench/results/repair_vs_autocast.json]

AutoCast (`modelopt.onnx.autocast.convert_to_mixed_precision`, the TensorRT 11 migration guide's FP16 tool) keeps
nodes in FP32 by heuristics on one reference run over the calibration rows: `data_max` (an output above it, default
512), `init_max` (a constant above it, default 65504) and the reduction depth. trtverify's repair searches by
evaluating candidates against a target. Both get the same search rows (AutoCast as its calibration data); then
both results are judged by the same evaluation on held-out rows neither saw: every output's rel_l2 <= 0.01 and
cosine >= 0.999 (FP16's defaults), no tensor non-finite where the reference's is finite, no cast to FP16
overflowing (what ONNX Runtime's CPU provider can hide and a GPU engine computes with).

Per tool and case: nodes computing in FP32 that the tool chose (trtverify: its keep-list; AutoCast: compute nodes
whose output stays FP32, graph I/O casts left out), evaluations of a candidate (AutoCast evaluates none: it runs
the reference once), whether the tool itself verified its result, whether the result passes on the held-out
rows, and wall time of the call (ModelOpt's 2-4 s import left out; trtverify's includes its sessions). AutoCast
runs with its defaults, with `data_max` 65504 (keep only what FP16 cannot hold), and with `init_max` 1e9 (let
large constants be lowered). Models: the FP16 repair demo (a BatchNorm variance FP16 cannot hold), a decomposed
LayerNorm whose Pow overflows FP16, a planted cancellation (an offset of 300 added to and taken off small
activations: no value or constant near FP16's limits), and the Fashion-MNIST CNN (nothing wrong).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.benchinfo import machine  # noqa: E402
from tests.stages.layerwise.test_layerwise_real_tools import LayerNormNet, export  # noqa: E402
from trtverify.config.checks import Check  # noqa: E402
from trtverify.lint.linter import node_precisions  # noqa: E402
from trtverify.repair.evaluate import Reference, evaluate  # noqa: E402
from trtverify.repair.search import search  # noqa: E402

CHECKS = [Check(metric="rel_l2", max=0.01), Check(metric="cosine", min=0.999)]
AUTOCAST = {
    "AutoCast defaults": {},
    "AutoCast data_max=65504": {"data_max": 65504},
    "AutoCast init_max=1e9": {"init_max": 1e9},
}


def held_out(reference: Path, model: onnx.ModelProto, rows: list[dict]) -> dict:
    """The same judge for every tool: the target on rows no tool saw."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cand.onnx"
        onnx.save(model, str(path))
        ev = evaluate(Reference.run(reference, rows), path, rows, CHECKS, "outputs", ())
    worst = {k: v for values in ev.checked.values() for k, v in values.items()}
    return {"passes": ev.passed, "failed": ev.failed[:3], **{k: round(v, 6) for k, v in worst.items()}}


def ours(reference: Path, search_rows: list[dict], check_rows: list[dict]) -> dict:
    t0 = time.perf_counter()
    result = search(reference, "fp16", search_rows, CHECKS)
    seconds = time.perf_counter() - t0
    return {
        "fp32_nodes": len(result.keep),
        "nodes": list(result.keep),
        "evaluations": len(result.steps),
        "verified_by_tool": result.passed,
        "seconds": round(seconds, 2),
        "held_out": held_out(reference, result.model, check_rows),
    }


def autocast(reference: Path, search_rows: list[dict], check_rows: list[dict], knobs: dict) -> dict:
    from modelopt.onnx.autocast import convert_to_mixed_precision

    names = list(search_rows[0])
    calib = {n: np.concatenate([r[n] for r in search_rows]) for n in names}
    logging.getLogger("modelopt").setLevel(logging.ERROR)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        model = convert_to_mixed_precision(
            str(reference), low_precision_type="fp16", keep_io_types=True, calibration_data=calib, **knobs
        )
    seconds = time.perf_counter() - t0
    kinds = node_precisions(model)
    fp32 = [n for n, k in kinds.items() if k == "FP32"]
    return {
        "fp32_nodes": len(fp32),
        "nodes": fp32,
        "evaluations": 0,
        "verified_by_tool": False,
        "seconds": round(seconds, 2),
        "held_out": held_out(reference, model, check_rows),
    }


def cancellation_model(path: Path) -> None:
    """A planted precision loss no range heuristic sees: an offset of 300 added and taken off again around small
    activations (FP16's spacing at 300 is 0.25), every value and constant well inside FP16's range."""
    import torch

    class Cancel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = torch.nn.Linear(16, 32)
            self.fc2 = torch.nn.Linear(32, 4)
            self.register_buffer("offset", torch.tensor(300.0))

        def forward(self, x):
            h = torch.tanh(self.fc1(x)) * 0.1
            return self.fc2((h + self.offset) - self.offset)

    torch.manual_seed(0)
    export(Cancel(), (2, 16), path)


def cases(work: Path) -> list[dict]:
    import torch

    images = np.load(ROOT / "demo" / "fashion_mnist" / "data" / "test_subset.npz")["images"].astype(np.float32) / 255
    fashion = [{"input": images[i : i + 8]} for i in range(0, 64, 8)]  # 8 rows of 8 images
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    export(LayerNormNet(), (2, 32), work / "layernorm.onnx", opset=13)
    ln = [{"x": (rng.standard_normal((4, 32)) * 300).astype(np.float32)} for _ in range(8)]
    cancellation_model(work / "cancel.onnx")
    cancel = [{"x": rng.standard_normal((4, 16)).astype(np.float32)} for _ in range(8)]
    return [
        {"name": "FP16 repair demo (BatchNorm variance 1e8)", "model": ROOT / "demo/fp16_repair/fashion_bn_fp32.onnx",
         "rows": fashion},
        {"name": "decomposed LayerNorm, activations ~1000 (Pow overflows FP16)", "model": work / "layernorm.onnx",
         "rows": ln},
        {"name": "offset added and removed around small activations (cancellation)", "model": work / "cancel.onnx",
         "rows": cancel},
        {"name": "Fashion-MNIST CNN (nothing wrong)", "model": ROOT / "demo/fashion_mnist/fashion_cnn_fp32.onnx",
         "rows": fashion},
    ]  # fmt: skip


def table(rows: list[dict]) -> str:
    out = [
        "| case | tool | nodes in FP32 | evaluations | verified by the tool | held-out rows: passes | "
        "worst output rel_l2 | s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for tool, r in row["tools"].items():
            h = r["held_out"]
            passes = "yes" if h["passes"] else "**no**: " + "; ".join(h["failed"][:2])
            out.append(
                f"| {row['case']} | {tool} | {r['fp32_nodes']} | {r['evaluations']} | "
                f"{'yes' if r['verified_by_tool'] else 'no'} | {passes} | {h.get('rel_l2', float('nan')):.4g} | "
                f"{r['seconds']} |"
            )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "repair_vs_autocast.json")
    args = ap.parse_args()
    import modelopt

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases(Path(tmp)):
            search_rows, check_rows = case["rows"][:6], case["rows"][6:]
            tools = {"trtverify repair": ours(case["model"], search_rows, check_rows)}
            for label, knobs in AUTOCAST.items():
                tools[label] = autocast(case["model"], search_rows, check_rows, knobs)
            rows.append({"case": case["name"], "tools": tools})
            print(json.dumps(rows[-1]), flush=True)
    info = machine(f"nvidia-modelopt {modelopt.__version__}, onnx {onnx.__version__}")
    args.out.write_text(json.dumps({"machine": info, "cases": rows}, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(f"# `trtverify repair` vs ModelOpt AutoCast (FP16)\n\n{info}\n\n"
                                           f"{table(rows)}\n")  # fmt: skip
    print(table(rows))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
