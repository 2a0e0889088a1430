"""The report step of bench/gpu_capture.py (here, after the GPU step): trtverify's layerwise verdict on each GPU
capture (`captured:` candidates, with the precision the arithmetic had) beside its verdict on the CPU-emulated
candidates of the same precision (the demo's *_fp16.onnx, and the AutoCast BF16 ONNX `prepare` made), on the same
kit feeds, one suite per model run by `trtverify run`. Writes STEM.md and STEM.json.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import yaml
from gpu_capture import MODELS

# candidate: (side, precision, suite entry given the model's fp32 file name)
CANDIDATES: dict[str, tuple[str, str, Any]] = {
    "cpu_fp16": ("CPU emulated", "fp16", lambda f32: f32.replace("fp32", "fp16")),
    "cpu_bf16": ("CPU emulated", "bf16", lambda f32: f32.replace("fp32", "bf16")),
    "gpu_fp32": ("GPU captured", "fp32", lambda f32: {"captured": "kit/captured/fp32.json"}),
    "gpu_fp16": ("GPU captured", "fp16", lambda f32: {"captured": "kit/captured/fp16.json", "precision": "fp16"}),
    "gpu_bf16": ("GPU captured", "bf16", lambda f32: {"captured": "kit/captured/bf16.json", "precision": "bf16"}),
    "gpu_fp16_graph": ("GPU captured", "fp16",
                       lambda f32: {"captured": "kit/captured/fp16_graph.json", "path": f32.replace("fp32", "fp16")}),
    "gpu_bf16_graph": ("GPU captured", "bf16",
                       lambda f32: {"captured": "kit/captured/bf16_graph.json", "path": f32.replace("fp32", "bf16")}),
}  # fmt: skip
WHAT = {
    "cpu_fp16": "*_fp16.onnx, trtverify's emulation",
    "cpu_bf16": "AutoCast BF16 ONNX, trtverify's emulation",
    "gpu_fp32": "FP32 graph in FP32 (TF32 off)",
    "gpu_fp16": "FP32 graph, every tensor FP16",
    "gpu_bf16": "FP32 graph, every tensor BF16",
    "gpu_fp16_graph": "*_fp16.onnx as typed",
    "gpu_bf16_graph": "AutoCast BF16 ONNX as typed",
}
TIGHT = 0.003  # the second run's one check, rel_l2 <= TIGHT on every tensor: tight enough that FP16 and BF16 break it
PAIRS = [("gpu_fp16", "cpu_fp16"), ("gpu_fp16_graph", "cpu_fp16"), ("gpu_bf16", "cpu_bf16"),
         ("gpu_bf16_graph", "cpu_bf16")]  # fmt: skip


def run_suite(folder: Path, name: str, tight: bool) -> dict[str, Any]:
    _demo, f32, _f16, _input, _n = MODELS[name]
    d = folder / name
    suite = {
        "name": f"gpu_captures_{name}",
        "models": {"reference": f32, "candidates": {c: make(f32) for c, (_s, _p, make) in CANDIDATES.items()}},
        "inputs": {"file": "kit/inputs.npz"},
        "stages": {"layerwise": {"checks": [{"metric": "rel_l2", "max": TIGHT}]} if tight else {}},
    }
    stem = "tight" if tight else "defaults"
    (d / f"suite_{stem}.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    out = d / f"out_{stem}"
    done = subprocess.run([sys.executable, "-m", "trtverify", "run", str(d / f"suite_{stem}.yaml"), "--out", str(out)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode not in (0, 1):
        raise SystemExit(f"trtverify run {d / f'suite_{stem}.yaml'}: exit {done.returncode}\n{done.stdout}\n"
                         f"{done.stderr}")  # fmt: skip
    return json.loads((out / "results.json").read_text())


def summarise(cand: dict[str, Any], outputs: set[str]) -> dict[str, Any]:
    rows = {r["tensor"]: r["metrics"]["rel_l2"] for r in cand["rows"] if "rel_l2" in r.get("metrics", {})}
    worst = max(rows, key=lambda t: rows[t])
    fd = cand.get("first_divergence")
    return {
        "passed": cand["passed"],
        "precision": cand["precision"],
        "checks": cand["checks_source"],
        "paired": f"{cand['paired']['paired']}/{cand['paired']['reference_tensors']}",
        "first_divergence": fd["tensor"] if fd else None,
        "first_divergence_failed": fd["failed"] if fd else [],
        "worst_rel_l2": rows[worst],
        "worst_tensor": worst,
        "outputs_rel_l2": max(v for t, v in rows.items() if t in outputs),
        "rel_l2": rows,
        "root_cause": cand["root_causes"][0]["node"] if cand.get("root_causes") else None,
    }


def compare(gpu: dict[str, Any], cpu: dict[str, Any]) -> dict[str, Any]:
    common = sorted(set(gpu["rel_l2"]) & set(cpu["rel_l2"]))
    ratios = [gpu["rel_l2"][t] / cpu["rel_l2"][t] for t in common if cpu["rel_l2"][t] > 0 and gpu["rel_l2"][t] > 0]
    return {
        "same_verdict": gpu["passed"] == cpu["passed"],
        "same_first_divergence": gpu["first_divergence"] == cpu["first_divergence"],
        "tensors": len(common),
        "ratio_median": statistics.median(ratios) if ratios else None,
        "ratio_min": min(ratios) if ratios else None,
        "ratio_max": max(ratios) if ratios else None,
    }


def markdown(result: dict[str, Any]) -> str:
    m = result["gpu"]
    lines = [
        "# trtverify's verdict on GPU captures against its verdict on CPU-emulated candidates",
        "",
        f"GPU: {m['device']} (compute capability {m['capability']}), torch {m['torch']}, CUDA {m['cuda']}, cuDNN "
        f"{m['cudnn']}, TF32 off, Polygraphy {m['polygraphy']} (its RunResults.save wrote every capture), "
        f"{m['date']}. CPU: trtverify {result['cpu']['trtverify']} layerwise, ONNX Runtime "
        f"{result['cpu']['onnxruntime']} (FP16/BF16 emulated). Made by `bench/gpu_capture.py` (prepare, gpu, report).",
        "",
        "No TensorRT engine runs on this project's GPU (TensorRT-RTX refuses Hopper): each capture is a node-by-node "
        "interpreter of the ONNX graph in PyTorch CUDA (cuDNN/cuBLAS FP16 and BF16 kernels), every tensor kept by its "
        "ONNX name (a marked-all capture), fed the kit's feeds (`trtverify capture`; "
        + ", ".join(f"{n}: its first {MODELS[n][4]} real images, one a feed" for n in MODELS)
        + "). Checks: trtverify's defaults "
        "for the candidate's precision (`precision:` given for the GPU's `fp16`/`bf16` captures of the FP32 graph).",
        "",
    ]
    for checks, models in result["runs"].items():
        head = "| model | precision | side | candidate | verdict | first divergence | worst rel_l2 (tensor) | outputs "
        lines += [f"### Checks: {checks}", "", head + "rel_l2 | paired |", "|---|---|---|---|---|---|---|---|---|"]
        lines += table(models)
        lines += [
            "",
            "GPU against CPU, per pair (per-tensor rel_l2 ratio GPU / CPU over the tensors both compared, by name):",
            "",
            "| model | GPU capture | CPU candidate | same verdict | same first divergence | tensors | ratio median "
            "[min, max] |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += pair_table(result["pairs"][checks])
        lines.append("")
    lines += summary(result)
    rep = m.get("repeat_bitwise_identical", {})
    if rep:
        lines.append("Determinism on the GPU (the same feeds run twice, every tensor bitwise equal): "
                     + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in rep.items()) + ".")  # fmt: skip
    lines.append(f"\nInterpreter against ONNX Runtime (FP32, CPU, every tensor): {json.dumps(result['interpreter'])}.")
    return "\n".join(lines) + "\n"


def summary(result: dict[str, Any]) -> list[str]:
    """What the tables say, computed from them."""
    pairs = [(checks, model, key, p) for checks, ms in result["pairs"].items() for model, ps in ms.items()
             for key, p in ps.items()]  # fmt: skip
    differ = [f"{model} {key} ({checks})" for checks, model, key, p in pairs
              if not (p["same_verdict"] and p["same_first_divergence"])]  # fmt: skip
    ratios = [(p["ratio_min"], p["ratio_max"]) for *_x, p in pairs if p["ratio_min"] is not None]
    lines = [
        "**Reading.** "
        + (
            f"In all {len(pairs)} GPU/CPU pairs trtverify's verdict and first divergence on the GPU capture are the "
            "ones it gives the CPU-emulated candidate of the same precision"
            if not differ
            else f"Verdict or first divergence differ in: {'; '.join(differ)}"
        )
        + f"; per tensor, the GPU's rel_l2 is {min(r[0] for r in ratios):.2f} to {max(r[1] for r in ratios):.2f} "
        "times the CPU emulation's (above 1: the emulation understates the GPU's error on that tensor)."
    ]
    same = result.get("graph_vs_cast", {})
    if same:
        lines.append(
            "\nThe FP32 graph cast to FP16/BF16 against the *_fp16 / AutoCast BF16 graph run as typed on the GPU, "
            "largest |difference| over the tensors of one name: "
            + ", ".join(f"{k} {v:.3g}" for k, v in same.items())
            + " (the converted graphs hold the same rounded weights, so the GPU runs the same arithmetic)."
        )
    return lines + [""]


def graph_vs_cast(folder: Path) -> dict[str, float]:
    """Largest |difference| between the capture of the FP32 graph cast to a type and that of the converted graph."""
    import numpy as np
    from polygraphy.comparator import RunResults

    res = {}
    for name in MODELS:
        for prec in ("fp16", "bf16"):
            caps = [
                RunResults.load(str(folder / name / "kit" / "captured" / f"{v}.json")) for v in (prec, f"{prec}_graph")
            ]
            worst = 0.0
            for a, b in zip(next(iter(caps[0].values())), next(iter(caps[1].values()))):
                for k in set(a.keys()) & set(b.keys()):
                    worst = max(worst, float(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)).max()))
            res[f"{name}/{prec}"] = worst
    return res


def table(models: dict[str, Any]) -> list[str]:
    lines = []
    for model, cands in models.items():
        for c, s in cands.items():
            side, prec, _ = CANDIDATES[c]
            failed = ", ".join(s["first_divergence_failed"])
            fd = f"`{s['first_divergence']}` ({failed})" if s["first_divergence"] else "none"
            lines.append(
                f"| {model} | {prec} | {side} | {c}: {WHAT[c]} | {'PASS' if s['passed'] else 'FAIL'} | {fd} | "
                f"{s['worst_rel_l2']:.3g} (`{s['worst_tensor']}`) | {s['outputs_rel_l2']:.3g} | {s['paired']} |"
            )
    return lines


def pair_table(models: dict[str, Any]) -> list[str]:
    lines = []
    for model, pairs in models.items():
        for key, p in pairs.items():
            g, c = key.split(" vs ")
            ratio = (f"{p['ratio_median']:.2f} [{p['ratio_min']:.2f}, {p['ratio_max']:.2f}]"
                     if p["ratio_median"] is not None else "-")  # fmt: skip
            lines.append(f"| {model} | {g} | {c} | {'yes' if p['same_verdict'] else 'NO'} | "
                         f"{'yes' if p['same_first_divergence'] else 'NO'} | {p['tensors']} | {ratio} |")  # fmt: skip
    return lines


def report(folder: Path, gpu_dir: Path, out: Path) -> dict[str, Any]:
    import onnx
    import onnxruntime
    from gpu_capture import check

    import trtverify

    for tar in sorted(gpu_dir.glob("*.tar.xz")):
        with tarfile.open(tar) as t:
            t.extractall(folder, filter="data")
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "gpu": json.loads((gpu_dir / "meta.json").read_text()),
        "cpu": {"trtverify": trtverify.__version__, "onnxruntime": onnxruntime.__version__},
        "interpreter": check(),
        "runs": {},
        "pairs": {},
        "graph_vs_cast": graph_vs_cast(folder),
    }
    for tight in (False, True):
        checks = f"rel_l2 <= {TIGHT} on every tensor" if tight else "trtverify's defaults per precision"
        result["runs"][checks], result["pairs"][checks] = {}, {}
        for name, (_demo, f32, *_rest) in MODELS.items():
            res = run_suite(folder, name, tight)
            stage = next(s for s in res["stages"] if s["name"] == "layerwise")
            outputs = {o.name for o in onnx.load(folder / name / f32).graph.output}
            cands = {c["name"]: summarise(c, outputs) for c in stage["candidates"]}
            result["runs"][checks][name] = cands
            result["pairs"][checks][name] = {f"{g} vs {c}": compare(cands[g], cands[c]) for g, c in PAIRS}
    out.parent.mkdir(parents=True, exist_ok=True)
    slim = {**result, "runs": {k: {n: {c: {f: v for f, v in s.items() if f != "rel_l2"} for c, s in cs.items()}
                                   for n, cs in models.items()} for k, models in result["runs"].items()}}  # fmt: skip
    out.with_suffix(".json").write_text(json.dumps(slim, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    sys.stdout.write(markdown(result))
    return result
