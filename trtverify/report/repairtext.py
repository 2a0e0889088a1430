"""The repair stage's lines of the terminal summary (registered as its `lines`)."""

from __future__ import annotations

from typing import Any

from trtverify.repair.stage import RepairResult
from trtverify.report.sensitivitytext import sensitivity_lines
from trtverify.report.text import latency_text
from trtverify.util.words import count

# how each tool takes the keep-list (repair.json's exports), in the order a TensorRT user reaches for them
_EXPORTS = (
    ("trtexec", "trtexec (TensorRT <= 10)"),
    ("polygraphy", "polygraphy convert/run (TensorRT <= 10)"),
    ("onnxruntime_float16_node_block_list", "onnxruntime float16 convert_float_to_float16(node_block_list=...)"),
    ("onnxruntime_quantization_nodes_to_exclude", "onnxruntime quantize_static(nodes_to_exclude=...)"),
    ("modelopt_autocast", "ModelOpt AutoCast"),
    ("modelopt_quantization", "ModelOpt quantization"),
)


def _exports(exports: dict[str, Any]) -> list[str]:
    out = []
    if exports.get("tensorrt_strongly_typed"):
        out.append("          TensorRT 11 / TensorRT-RTX: build the repaired model as it is (strongly typed, no flags)")
    for key, label in _EXPORTS:
        value = exports.get(key)
        if not value:
            continue
        text = value if isinstance(value, str) else " ".join(str(v) for v in value)
        out.append(f"          {label}: {text}")
        if key == "modelopt_quantization" and exports.get("modelopt_quantization_scope"):
            out.append(f"            (that {exports['modelopt_quantization_scope']})")
    return out


def repair_lines(s: RepairResult) -> list[str]:
    if s.before is None or s.after is None or s.cost is None or s.keep is None:
        return []
    before = "passes" if s.before.passed else "; ".join(s.before.failed[:2])
    lowered = s.candidate_precision or s.precision
    out = [f"          before ({lowered}, nothing kept): {before}"]
    share = f"{s.cost.flops_share:.1%} of multiply-adds, {s.cost.params_share:.1%} of parameters"
    verdict = "passes" if s.after.passed else "fails: " + "; ".join(s.after.failed[:2])
    where = "every tensor" if s.tensors == "all" else "the model outputs"
    rows = s.rows or {}
    searched = f" on the {count(rows['search'], 'row')} searched" if rows.get("search") else ""
    out.append(
        f"          keep in FP32: {', '.join(s.keep) or 'nothing'} ({share}); repaired model {verdict}{searched}"
    )
    out.append(f"          passes means: the checks on {where}, and no tensor non-finite where the reference's is not")
    if s.verified is not None:
        held = "passes" if s.verified.passed else "fails: " + "; ".join(s.verified.failed[:2])
        out.append(f"          held-out check ({count(rows.get('holdout', 0), 'row')} the search did not use): {held}")
    else:
        out.append(
            "          held-out check: none (fewer than 4 rows, or --holdout 0): the pass is on the searched rows"
        )
    if s.stopped:
        out.append(f"          not repaired: {s.stopped}; what still fails: {'; '.join(s.after.failed[:3])}")
    out.append(f"          {count(s.evaluations, 'evaluation')}; {latency_text(s.cost)}")
    out += _exports(s.exports or {})
    out.append(f"          repaired: {s.repaired_model}")
    if s.sensitivity is not None:
        out += sensitivity_lines(s.sensitivity)
    return out
