"""Is the PyTorch model a reference at all? Two questions the framework stage asks of it before comparing:

- **deterministic**: PyTorch runs the first sample a second time; an output that differs between the two runs
  (beyond float noise of the order of 1e-5 of the output's largest value; exactly, for integer and boolean outputs)
  means the module is no reference, and the stage refuses with the outputs that differed. The usual cause is an
  export-only `torch.autograd.Function` (YOLOv7's TRT_NMS and ORT_NMS, mmdeploy's NMS stand-ins) whose `forward`
  returns random tensors of the right shapes while its `symbolic` writes the real op into the ONNX graph.
- **input dependent**: where every PyTorch output is the same for every sample although the samples' inputs
  differ, and ONNX Runtime's outputs are not, the PyTorch model does not compute from its input (a stand-in that
  returns constant tensors): a note says so, instead of the comparison's failures alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from trtverify.util.errors import BackendError
from trtverify.util.words import count

FLOAT_NOISE = 1e-5  # of an output's largest |value|: two runs of one float computation may differ this much (GPU)

CAUSE = (
    "The usual cause: an export-only torch.autograd.Function (an NMS stand-in such as YOLOv7's TRT_NMS or ORT_NMS) "
    "whose forward returns placeholder tensors while its symbolic writes the real op into the ONNX graph"
)
FIX = (
    "make that Function's forward compute what the op computes (e.g. torchvision.ops.batched_nms for an NMS), or "
    "compare the model without it: models.pytorch.factory and models.reference both the detector without the NMS "
    "(its raw head, exported without --end2end), the NMS gated by the layerwise and e2e stages against the ONNX "
    "model's own outputs"
)


def difference(a: np.ndarray, b: np.ndarray) -> str | None:
    """How two runs' values of one output differ ('max |diff| 3.2', '4 of 20 values differ', 'shape [1, 5] then
    [1, 7]'), or None where they agree (float outputs within FLOAT_NOISE of their scale, NaN where NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape {list(a.shape)} {a.dtype} then {list(b.shape)} {b.dtype}"
    if a.dtype.kind != "f":
        unequal = int(np.count_nonzero(a != b))
        return f"{unequal} of {count(a.size, 'value')} {'differs' if unequal == 1 else 'differ'}" if unequal else None
    x, y = a.astype(np.float64), b.astype(np.float64)
    same_nan = np.isnan(x) == np.isnan(y)
    finite = np.isfinite(x) & np.isfinite(y)
    other = ~finite & ~(np.isnan(x) & np.isnan(y)) & (x != y)  # inf against another value
    if not same_nan.all() or other.any():
        return f"{int(np.count_nonzero(~same_nan | other))} of {count(a.size, 'value')} differ in finiteness"
    if not finite.any():
        return None
    diff = float(np.max(np.abs(x[finite] - y[finite])))
    scale = float(np.max(np.abs(x[finite])))
    return f"max |diff| {diff:.3g} (largest |value| {scale:.3g})" if diff > FLOAT_NOISE * scale else None


def check_deterministic(first: Mapping[str, np.ndarray], again: Mapping[str, np.ndarray]) -> None:
    """Raise BackendError (exit 1) naming every output that differs between two PyTorch runs of one input."""
    differ = {}
    for name in dict.fromkeys([*first, *again]):
        if name not in first or name not in again:
            differ[name] = "returned by one run only"
        else:
            why = difference(first[name], again[name])
            if why is not None:
                differ[name] = why
    if not differ:
        return
    listed = "; ".join(f"'{n}': {w}" for n, w in differ.items())
    raise BackendError(
        "the PyTorch model is not deterministic: run twice on the same input (sample 0), it gave different "
        f"outputs ({listed}), so it is no reference for the export and nothing was compared or stored. {CAUSE}. "
        f"Fix: {FIX}; and check forward for dropout or sampling left on"
    )


def input_independent(
    samples: Sequence[Mapping[str, np.ndarray]],
    reference: Sequence[Mapping[str, np.ndarray]],
    candidate: Sequence[Mapping[str, np.ndarray]],
) -> str | None:
    """A note where the PyTorch outputs are the same for every sample although the inputs differ and ONNX
    Runtime's outputs do not stay the same (None otherwise, and with fewer than two samples)."""
    if len(samples) < 2 or len(reference) < 2:
        return None

    def constant(rows: Sequence[Mapping[str, np.ndarray]]) -> bool:
        return all(difference(rows[0][n], r[n]) is None for r in rows[1:] for n in rows[0] if n in r)

    if constant(samples) or not constant(reference) or constant(candidate):
        return None
    return (
        f"PyTorch gave the same outputs for all {len(reference)} samples although their inputs differ, and ONNX "
        f"Runtime's outputs differ between them: the PyTorch model's outputs do not depend on its input, so its "
        f"failing checks are the reference's fault, not the export's. {CAUSE} (constant ones here). Fix: {FIX}"
    )
