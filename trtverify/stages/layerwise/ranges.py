"""The range report of a quantized candidate: per quantized activation, the range its calibration gave (its
QuantizeLinear's scale) against the reference's values of that tensor on the samples compared: the fraction of
values beyond the range (clipped), and the quantization step against the median |x| (a step as large as the typical
value leaves it a few levels). The "dynamic range mismatch" a user hunts in TensorRT's calibration warnings, read from
the candidate itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trtverify.graph.onnxgraph import GraphIndex
from trtverify.lint.weights import q_limit
from trtverify.stages.layerwise.models import RangeRow
from trtverify.stages.layerwise.reference import ReferencePass


def report(ref: ReferencePass, cand: GraphIndex, pairs: Sequence[tuple[str, str]], samples: int) -> list[RangeRow]:
    """One row per QuantizeLinear of an activation whose input pairs with a reference tensor, the worst first (most
    clipped, then coarsest step)."""
    to_ref = {c: r for r, c in pairs}
    rows = []
    for idx, node in enumerate(cand.nodes):
        if node.op_type != "QuantizeLinear" or not node.input or node.input[0] in cand.constants:
            continue
        r = to_ref.get(node.input[0])
        limit = q_limit(cand, node)
        if r is None or limit is None or not limit > 0:
            continue
        scale_t = cand.constants.get(node.input[1]) if len(node.input) > 1 else None
        scale = cand.values_of(scale_t) if scale_t is not None else None
        if scale is None:
            continue
        step = float(np.abs(np.asarray(scale, dtype=np.float64)).max())
        clipped = total = 0
        top = 0.0
        medians = []
        seen = 0
        for si in range(samples):
            try:
                v = np.abs(np.asarray(ref.store.get(si, r), dtype=np.float64))
            except KeyError:
                continue
            v = v[np.isfinite(v)]
            if not v.size:
                continue
            seen += 1
            clipped += int(np.count_nonzero(v > limit * (1 + 1e-6)))
            total += v.size
            top = max(top, float(v.max()))
            medians.append(float(np.median(v)))
        if not total:
            continue
        median = float(np.median(medians))
        rows.append(
            RangeRow(
                tensor=r,
                quantize_node=cand.label(idx),
                limit=limit,
                step=step,
                reference_max_abs=top,
                clipped_fraction=clipped / total,
                step_over_median=step / median if median > 0 else None,
                samples=seen,
            )
        )
    rows.sort(key=lambda row: (-row.clipped_fraction, -(row.step_over_median or 0.0)))
    return rows
