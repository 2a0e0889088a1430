"""Lint rules on the graph: compute layers without Q/DQ, reference activations beyond the target
type's range, and what the lint could not see."""

from __future__ import annotations

import math
from collections.abc import Mapping

from trtverify.graph.onnxgraph import GraphIndex
from trtverify.lint.findings import Found, at
from trtverify.lint.ranges import CLOSE_TO_MAX, COMPUTE_OPS, PASS_THROUGH_OPS, RANGES, SATURATION_MEDIUM
from trtverify.lint.weights import q_limit


def _from_dequantize(g: GraphIndex, name: str) -> bool:
    for _ in range(16):  # a bounded walk: a malformed cyclic graph cannot hang the lint
        p = g.producers.get(name)
        if p is None:
            return False
        idx = p.index
        node = g.nodes[idx]
        if node.op_type == "DequantizeLinear":
            return True
        if node.op_type not in PASS_THROUGH_OPS or not node.input:
            return False
        name = node.input[0]
    return False


def coverage_findings(g: GraphIndex, target: str) -> Found:
    """Compute layers whose data or weight input lacks Q/DQ run in FP16/FP32, not the quantised type."""
    found: Found = []
    q = target.upper()
    for idx, node in enumerate(g.nodes):
        if node.op_type not in COMPUTE_OPS or len(node.input) < 2:
            continue
        labels = {
            0: "data input (input 0)",
            1: "weight (input 1)" if node.input[1] in g.constants else "second operand (input 1)",
        }
        missing = [i for i in (0, 1) if node.input[i] and not _from_dequantize(g, node.input[i])]
        if not missing:
            continue
        label = g.label(idx)
        if len(missing) == 2:
            message = (
                f"{node.op_type} '{label}' has no Q/DQ on its {labels[0]} or its {labels[1]}; "
                f"TensorRT runs it in FP16/FP32, not {q}."
            )
        else:
            has, lacks = labels[1 - missing[0]], labels[missing[0]]
            message = (
                f"{node.op_type} '{label}' has Q/DQ on its {has} but not on its {lacks}; "
                f"TensorRT cannot fuse it into an {q} kernel and runs it in higher precision."
            )
        detail = {"missing": [labels[i] for i in missing], "inputs": [node.input[0], node.input[1]], "target": target}
        found.append(
            at(
                idx,
                "qdq_uncovered",
                "medium",
                message,
                node=label,
                op_type=node.op_type,
                tensor=node.input[missing[0]],
                detail=detail,
            )
        )
    return found


def activation_findings(
    g: GraphIndex, target: str, activation_max: Mapping[str, float], narrow: Mapping[str, str] | None = None
) -> Found:
    """Reference |activation| maxima against the range the tensor gets in the engine.

    `narrow` (strongly typed builds: the graph's types are what runs): tensor -> the narrow float type the
    candidate holds it in ('fp16', 'bf16'); only those are judged against a float range. None: a weakly typed
    build, where the precision flags may lower every activation to the target."""
    found: Found = []
    unknown_names: list[str] = []
    for name, value in activation_max.items():
        if name not in g.producers and name not in g.inputs:
            unknown_names.append(name)
            continue
        v = abs(float(value))
        pos = g.producers[name].index if name in g.producers else -1
        label = g.label(pos) if pos >= 0 else None
        op = g.nodes[pos].op_type if pos >= 0 else None
        where = f"'{name}' (output of {op} '{label}')" if pos >= 0 else f"graph input '{name}'"
        uses = g.consumers.get(name, [])
        checks: list[tuple[str, bool]] = []  # (range key, fallback)
        if narrow is not None:
            if name in narrow:
                checks.append((narrow[name], False))
        elif target in ("fp16", "bf16"):
            checks.append((target, False))
        elif target in ("int8", "fp8"):
            for n, i in uses:
                qn = g.nodes[n]
                if qn.op_type != "QuantizeLinear" or i != 0:
                    continue
                lim = q_limit(g, qn)
                if lim is None or not lim > 0 or not v > lim:
                    continue
                ratio = v / lim if math.isfinite(v) else math.inf
                sev = "medium" if ratio > SATURATION_MEDIUM else "info"
                msg = (
                    f"{where} reaches |x| = {v:.4g} on the FP32 reference but QuantizeLinear '{g.label(n)}' "
                    f"represents at most {lim:.4g}; larger values are clipped ({ratio:.3g}x the range)."
                )
                detail = {
                    "max_abs": v,
                    "limit": lim,
                    "ratio": ratio,
                    "quantize_node": g.label(n),
                    "target": target,
                }
                found.append(
                    at(pos, "activation_saturation", sev, msg, node=label, op_type=op, tensor=name, detail=detail)
                )
                break
            if narrow is None and (
                name in g.outputs or not uses or any(g.nodes[n].op_type != "QuantizeLinear" or i != 0 for n, i in uses)
            ):
                checks.append(("fp16", True))
        for key, fallback in checks:
            rng = RANGES[key]
            when = f" if FP16 is enabled next to {target.upper()}" if fallback else ""
            detail = {"max_abs": v, "target": key, "limit": rng.max}
            if fallback:
                detail["fallback_for"] = target
            if not math.isfinite(v):
                msg = f"{where} is already inf/NaN on the FP32 reference; it stays non-finite in {rng.name}."
                found.append(
                    at(pos, "activation_overflow", "high", msg, node=label, op_type=op, tensor=name, detail=detail)
                )
            elif v > rng.max:
                msg = (
                    f"{where} reaches |x| = {v:.4g} on the FP32 reference, above the {rng.name} maximum "
                    f"{rng.max:g}; it overflows to inf{when}."
                )
                found.append(
                    at(pos, "activation_overflow", "high", msg, node=label, op_type=op, tensor=name, detail=detail)
                )
            elif v > CLOSE_TO_MAX * rng.max:
                msg = (
                    f"{where} reaches |x| = {v:.4g} on the FP32 reference, {v / rng.max:.0%} of the {rng.name} "
                    f"maximum {rng.max:g}; other inputs may overflow it{when}."
                )
                found.append(
                    at(
                        pos,
                        "activation_close_to_range",
                        "medium",
                        msg,
                        node=label,
                        op_type=op,
                        tensor=name,
                        detail=detail,
                    )
                )
    if unknown_names:
        msg = (
            f"{len(unknown_names)} tensor(s) in activation_max are not activations of this graph and "
            f"were not checked (e.g. '{unknown_names[0]}')."
        )
        found.append(at(len(g.nodes), "activation_unknown", "info", msg, detail={"names": unknown_names}))
    return found


def structure_findings(g: GraphIndex, unread: list[str]) -> Found:
    """What the lint could not see, said once each."""
    found: Found = []
    if g.subgraph_nodes:
        first = min(g.subgraph_nodes)
        holders = [g.label(i) for i in sorted(g.subgraph_nodes)]
        total = sum(g.subgraph_nodes.values())
        msg = (
            f"{len(holders)} control-flow node(s) ({g.nodes[first].op_type} '{holders[0]}'"
            f"{' and others' if len(holders) > 1 else ''}) hold {total} subgraph node(s) "
            "that the lint does not inspect."
        )
        detail = {"nodes": holders, "subgraph_nodes": total}
        found.append(
            at(first, "subgraph_skipped", "info", msg, node=holders[0], op_type=g.nodes[first].op_type, detail=detail)
        )
    if unread:
        names = sorted(set(unread))
        msg = (
            f"{len(names)} constant(s) have no data here (external data not loaded, or unreadable), "
            f"e.g. '{names[0]}'; their values were not checked."
        )
        found.append(at(len(g.nodes), "external_data_not_loaded", "info", msg, detail={"tensors": names}))
    return found
