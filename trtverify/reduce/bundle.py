"""The bug-report bundle of a reduction: both subgraphs with their weights, the inputs and the reference's outputs in
the formats trtexec and Polygraphy read, the commands that reproduce the divergence, the versions, and REPORT.md.

The feeds and outputs are written by the capture kit's writers (trtverify/data/kit.py): `inputs.json` (Polygraphy
--load-inputs), `reference_outputs.json` (Polygraphy --load-outputs), `trtexec/NAME.bin` and `trtexec/ref/NAME.bin`
(raw values for --loadInputs and --loadRefOutputs), `inputs.npz` (`trtverify layerwise --inputs`).
"""

from __future__ import annotations

import importlib.metadata as md
import io
import shlex
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.data.kit import polygraphy_inputs, polygraphy_outputs, raw_files, shell_dq
from trtverify.reduce.cut import has_external_files, size, write_model
from trtverify.reduce.search import Reduction
from trtverify.util.environment import environment
from trtverify.util.fsutil import atomic_write, atomic_write_json, atomic_write_text
from trtverify.util.words import count

REFERENCE, CANDIDATE = "reference.onnx", "candidate.onnx"
EXTRA_VERSIONS = ("nvidia-modelopt",)  # not in the run environment's list, asked for in a bug report


def tolerances(r: Reduction) -> tuple[float, float]:
    """(atol, rtol) for Polygraphy's element-wise check, from the tensor's rel_l2 limit t: an element is off when it
    differs by more than t x the reference's RMS and by more than t relatively. Halved until the candidate's output
    fails them (Polygraphy passes an element within either tolerance), so the command shows what the checks saw."""
    limit = next((c.threshold for c in r.checks if c.metric == "rel_l2"), 0.1)
    ref = r.ref_out.astype(np.float64)
    diff = np.abs(r.cand_out.astype(np.float64) - ref)
    rms = float(np.sqrt(np.mean(ref * ref))) if ref.size else 0.0
    atol, rtol = limit * rms, limit
    scale = np.maximum(np.abs(ref), np.abs(r.cand_out.astype(np.float64)))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(scale > 0, diff / scale, 0.0)
    for _ in range(30):
        if bool(np.any(((diff > atol) & (rel > rtol)) | ~np.isfinite(diff))):
            break
        atol, rtol = atol / 2, rtol / 2
    return float(f"{atol:.3g}"), float(f"{rtol:.3g}")


def versions() -> dict[str, Any]:
    env = environment()
    libs = dict(env["libraries"])
    for lib in EXTRA_VERSIONS:
        try:
            libs[lib] = md.version(lib)
        except md.PackageNotFoundError:
            continue
    env["libraries"] = libs
    return env


def _ops(model: Any) -> str:
    c = Counter(n.op_type for n in model.graph.node)
    return ", ".join(f"{k} x{v}" if v > 1 else k for k, v in c.most_common())


def plugin_note(r: Reduction) -> str:
    """Where a subgraph computes in BF16 or holds nodes ONNX Runtime lacks (TensorRT plugins), what its commands
    need; '' otherwise."""
    from trtverify.graph.onnxemulate import BF16, holds
    from trtverify.plugins.onnxops import label, plugin_nodes

    note = ""
    if holds(r.cand_model, frozenset({BF16})):
        note = ("# The candidate computes in BF16, which ONNX Runtime's CPU has almost no kernels for: its --onnxrt "
                "line fails to load there\n# (trtverify emulates BF16 as a GPU rounds it); run it with --trt or on a "
                "GPU provider.\n")  # fmt: skip
    nodes = list(dict.fromkeys(label(n) for m in (r.ref_model, r.cand_model) for n in plugin_nodes(m)))
    if not nodes:
        return note
    return note + (f"# The subgraphs hold {count(len(nodes), 'plugin node')} ({', '.join(nodes)}): "
            "Polygraphy's ONNX Runtime runner cannot run them;\n# build with TensorRT and the plugin's library "
            "(polygraphy --plugins LIB, trtexec --staticPlugins=LIB).\n")  # fmt: skip


def commands(r: Reduction, refs: dict[str, str], inputs: dict[str, str], atol: float, rtol: float) -> str:
    target = r.trial.cut.target
    cos = next((c.threshold for c in r.checks if c.metric == "cosine"), None)
    load = shell_dq("--loadInputs=" + ",".join(f"'{n}':{f}" for n, f in inputs.items()))
    ref = shell_dq("--loadRefOutputs=" + ",".join(f"'{n}':{f}" for n, f in refs.items()))
    threshold = f"{1 - cos:.3g}" if cos is not None else "1e-3"
    pg = f"--load-inputs inputs.json --load-outputs reference_outputs.json --atol {atol:g} --rtol {rtol:g}"
    checks = " ".join(shlex.quote(f"--check={c.key}{c.op}{c.threshold:g}") for c in r.checks)
    return f"""# Reproduce the divergence of '{target}' (written by trtverify reduce; run in this folder).
# Expected: the candidate FAILS the comparison with the reference's outputs, the reference PASSES against itself.
{plugin_note(r)}
# Polygraphy, ONNX Runtime on the CPU (no GPU needed): candidate fails, reference passes
polygraphy run {CANDIDATE} --onnxrt {pg}
polygraphy run {REFERENCE} --onnxrt {pg}

# Polygraphy, TensorRT (TensorRT 10 and earlier: add --strongly-typed to build the candidate's types as written)
polygraphy run {CANDIDATE} --trt {pg}

# trtexec (TensorRT 11: --loadRefOutputs checks the engine's output against the reference's)
trtexec --onnx={CANDIDATE} {load} {ref} --accuracyAlgorithm=cos --accuracyThreshold={threshold}

# trtverify: the subgraphs tensor by tensor (exit 1: the candidate fails)
trtverify layerwise {REFERENCE} {CANDIDATE} --inputs inputs.npz {checks} --out layerwise
"""


def write_bundle(r: Reduction, out: Path, name: str, model_names: tuple[str, str]) -> dict[str, Any]:
    """Write the bundle into `out`; returns its summary (also `reduce.json`)."""
    out.mkdir(parents=True, exist_ok=True)
    ref_bytes, ref_data = write_model(r.ref_model, r.reference.folder, out / REFERENCE,
                                      has_external_files(r.reference))  # fmt: skip
    cand_bytes, cand_data = write_model(r.cand_model, r.candidate.folder, out / CANDIDATE,
                                        has_external_files(r.candidate))  # fmt: skip
    target = r.trial.cut.target
    polygraphy_inputs([r.feed], out / "inputs.json")
    polygraphy_outputs([{target: r.ref_out}], out / "reference_outputs.json", "onnxrt-runner-reference")
    buf = io.BytesIO()
    np.savez(buf, **r.feed)
    atomic_write(out / "inputs.npz", lambda fh: fh.write(buf.getvalue()))
    inputs = raw_files(out / "trtexec", r.feed, "trtexec/")
    refs = raw_files(out / "trtexec" / "ref", {target: r.ref_out}, "trtexec/ref/")
    atol, rtol = tolerances(r)
    atomic_write_text(out / "COMMANDS.sh", commands(r, refs, inputs, atol, rtol))
    env = versions()
    atomic_write_json(out / "versions.json", env)
    m = r.trial.metrics[r.sample]
    summary: dict[str, Any] = {
        "candidate": name,
        "reference_model": model_names[0],
        "candidate_model": model_names[1],
        "precision": r.precision,
        "target": target,
        "root_cause": r.root_cause,
        "root_node": r.root_node,
        "root_op_type": r.root_op,
        "level": r.trial.level,
        "inputs": {n: {"shape": list(v.shape), "dtype": str(v.dtype)} for n, v in r.feed.items()},
        "reference_nodes": {"subgraph": len(r.ref_model.graph.node), "model": r.reference_nodes},
        "candidate_nodes": {
            "subgraph": len(r.cand_model.graph.node),
            "model": r.candidate_nodes,
            "adapters": r.adapters,
        },  # fmt: skip
        "sample": r.sample,
        "samples": len(r.trial.metrics),
        "failing_samples": sum(1 for f in r.trial.failed if f),
        "metrics": m,
        "failed": r.trial.failed[r.sample],
        "reference_cut_drift": r.trial.ref_drift,
        "whole_model_metrics": r.full_metrics,
        "checks": [f"{c.key} {c.op} {c.threshold:g}" for c in r.checks],
        "polygraphy_tolerances": {"atol": atol, "rtol": rtol},
        "weights": {
            "reference_bytes": ref_bytes,
            "reference_data": ref_data,
            "candidate_bytes": cand_bytes,
            "candidate_data": cand_data,
        },  # fmt: skip
        "trials": [
            {
                "level": t.level,
                "nodes": size(r.reference.info, t.cut.nodes),
                "inputs": len(t.cut.inputs),
                "result": t.why_not or ("fails" if t.fails else "passes"),
            }
            for t in r.trials
        ],  # fmt: skip
    }
    atomic_write_json(out / "reduce.json", summary)
    atomic_write_text(out / "REPORT.md", report(r, summary, env, out))
    return summary


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.6g}"


def report(r: Reduction, s: dict[str, Any], env: dict[str, Any], out: Path) -> str:
    """The markdown a user pastes into an issue."""
    from trtverify.lint.linter import node_precisions

    node_prec = node_precisions(r.candidate).get(r.root_node or "", "") if r.root_node else ""
    m, full = s["metrics"], s["whole_model_metrics"]
    ins = ", ".join(f"`{n}` {'x'.join(map(str, v['shape']))} {v['dtype']}" for n, v in s["inputs"].items())
    rn, cn = s["reference_nodes"], s["candidate_nodes"]
    libs = env["libraries"]
    gpus = ", ".join(f"{g['name']} (driver {g['driver']})" for g in env["gpus"]) or "none (CPU only)"
    rows = "\n".join(f"| {k} | {libs[k]} |" for k in ("onnx", "onnxruntime", "nvidia-modelopt", "tensorrt",
                                                         "polygraphy", "numpy", "torch") if k in libs)  # fmt: skip
    cmd = (out / "COMMANDS.sh").read_text(encoding="utf-8")
    root = (f"`{r.root_node}` ({r.root_op}{', ' + node_prec if node_prec else ''})" if r.root_node
            else "not localised")  # fmt: skip
    return f"""# {r.precision.upper()} divergence at `{s["target"]}` ({s["candidate_model"]})

**Model.** Reference `{s["reference_model"]}` (FP32, {count(rn["model"], "node")}); candidate `{s["candidate_model"]}`
({r.precision}, {count(cn["model"], "node")}).

**What diverges.** `{s["target"]}`: in the whole model rel_l2 {_fmt(full.get("rel_l2"))}, cosine
{_fmt(full.get("cosine"))} against the FP32 reference (checks: {", ".join(s["checks"])}).
Root cause: {root}.

**The subgraph.** `{REFERENCE}`: {count(rn["subgraph"], "node")} of the reference's {rn["model"]}
({_ops(r.ref_model)}); `{CANDIDATE}`: the candidate's own computation of the same tensor,
{count(cn["subgraph"], "node")} ({_ops(r.cand_model)}; {count(cn["adapters"], "node")} of them added at the cut
to take and give the reference's types) of its {cn["model"]}. Inputs: {ins}: the reference's values at the cut
on sample {s["sample"]} of the layerwise run ({s["failing_samples"]} of its {count(s["samples"], "sample")} fail
when cut; this one the most).

**On its own** the candidate's subgraph gives rel_l2 {_fmt(m.get("rel_l2"))}, cosine {_fmt(m.get("cosine"))},
max |diff| {_fmt(m.get("max_abs"))} (fails {", ".join(s["failed"])}); the reference's subgraph gives the whole
reference's values (largest difference {_fmt(s["reference_cut_drift"])}).

**Reproduce** (files in this folder):

```sh
{cmd.strip()}
```

**Versions.** trtverify {env["trtverify"]}, Python {env["python"]}, {env["platform"]}; GPU: {gpus}.

| library | version |
|---|---|
{rows}
"""
