"""Layerwise around plugin nodes: the tensors nothing computes, and the check that every graph output was compared.

A plugin node without a reference (trtverify/plugins/registry.py) computes nothing here, on either side, and
neither does anything after it (backends/pluginrun.py). Those tensors are rows `after plugin X (no reference)`,
left out of every check and counted; a graph output among them fails `graph outputs compared` unless the suite
allows it (stages.layerwise.allow_uncompared).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from trtverify.compare.checks import CheckResult
from trtverify.stages.layerwise.models import Row, Unmatched
from trtverify.stages.layerwise.reference import NAME, ReferencePass

FIX = (
    "give the plugin a reference: --plugin OP=module:callable (layerwise, repair, run) or the suite's plugins: "
    "{OP: module:callable}, or a library of ONNX Runtime kernels in backends.onnxruntime.custom_op_libraries "
    "(docs/plugins.md); or list the output in stages.layerwise.allow_uncompared"
)


def uncomputed(ref: ReferencePass, candidate: Mapping[str, str]) -> dict[str, str]:
    """Reference tensors not compared because one side cannot compute them: tensor -> why (the reference's reason
    first)."""
    out = dict(ref.uncomputed)
    for t, why in candidate.items():
        if t in ref.graph.producers and t not in out:
            out[t] = f"{why} in the candidate"
    return out


def rows(ref: ReferencePass, missing: Mapping[str, str]) -> list[Row]:
    out = []
    for t, why in missing.items():
        p = ref.graph.producers.get(t)
        if p is None:
            continue
        out.append(
            Row(
                tensor=t,
                node=p.node,
                op_type=p.op_type,
                topo_index=p.index,
                shape=None,
                dtype=ref.dtype.get(t),
                candidate_dtype=None,
                samples=0,
                metrics={},
                not_comparable=why,
                passed=True,
            )
        )
    return out


def counts(missing: Mapping[str, str]) -> dict[str, int] | None:
    return dict(Counter(missing.values()).most_common()) or None


def without(unmatched: Unmatched, missing: Mapping[str, str]) -> Unmatched:
    """The unmatched tensors, less those a plugin left uncomputed (they have rows of their own)."""
    if not missing:
        return unmatched
    return unmatched.model_copy(update={"reference_only": [t for t in unmatched.reference_only if t not in missing]})


def outputs_check(
    name: str, outputs: Sequence[str], compared: Sequence[str], missing: Mapping[str, str], allowed: Sequence[str]
) -> CheckResult:
    """`graph outputs compared`: at least one graph output compared, and none left uncomputed unless allowed."""
    not_compared = [o for o in outputs if o not in compared]
    uncomputed_out = {o: missing[o] for o in not_compared if o in missing}
    failing = [o for o in uncomputed_out if o not in allowed]
    detail: dict[str, object] = {"compared": list(compared), "not_compared": not_compared}
    if uncomputed_out:
        detail["uncomputed"] = uncomputed_out
    if failing:
        detail["reason"] = f"nothing computed {', '.join(failing)} ({uncomputed_out[failing[0]]}): {FIX}"
    elif not compared:
        detail["reason"] = "no graph output was compared"
    return CheckResult(
        name=f"{name}: graph outputs compared",
        stage=NAME,
        metric="outputs_compared",
        value=float(len(compared)),
        threshold=float(max(1, len(compared) + len(failing))),
        op=">=",
        passed=bool(compared) and not failing,
        detail=detail,
        candidate=name,
    )
