"""Captured candidates checked against themselves and against each other (docs/captured.md#captures-against-each-
other-and-consistency).

Within one capture, from the kit's consistency feeds (trtverify/data/kitfeeds.py), each a check in results.json:
- determinism: the `repeat` feed's iteration equals feed 0's, every tensor, bit for bit;
- duplicated rows: the two rows of the `duplicated_row` feed give identical outputs, bit for bit;
- repeated batch: each row of the `repeated_batch` feed's outputs equals row 0 of feed 0's within TACTIC_TOLERANCE;
- marking (`unmarked:`, an outputs-only capture of the same engine): the marked capture's graph outputs equal the
  outputs-only capture's within TACTIC_TOLERANCE; else the per-layer verdict is about another engine.

Between captures (two or more captured candidates): per pair, on the feeds both captured, the first tensor in the ONNX
graph's topological order that differs at all, and the first whose difference breaks both candidates' checks.

TACTIC_TOLERANCE: the largest rel_l2 by which a row's outputs moved when only the batch around it changed, measured with
PyTorch CUDA (cuDNN benchmark mode and cuBLAS choose kernels per shape, as TensorRT's tactics do) on four torchvision
models on an H200 (ViT-B/16, the fifth, outputs zeros from its zero-initialised head: no figure)
(bench/consistency_tolerance.py, bench/results/consistency_tolerance_cuda.json): FP32 4.1e-7, TF32 (TensorRT's default
for FP32 engines) 6.3e-4, FP16 4.3e-4, BF16 3.7e-3; ONNX Runtime's CPU (FP32) gave 0 (bitwise) on the demo CNNs,
tiny.onnx and bert_tiny.onnx (bench/consistency_tolerance_cpu.py). The tolerance is about 8 to 10 times the worst: 5e-3
for FP32/TF32/FP16, 4e-2 for BF16; INT8/FP8/INT4 were not measured and take BF16's. Duplicated rows and repeated runs
were identical bit for bit in every one of those measurements, so those checks are bitwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from trtverify.backends.captured import CapturedBackend
from trtverify.compare.checks import CheckResult, TensorSeries, evaluate, extras_for, limit_check
from trtverify.config.checks import Check
from trtverify.config.models import Candidate
from trtverify.stages.layerwise.capmodels import CapturePair, CaptureParting
from trtverify.stages.layerwise.models import LayerwiseCandidate
from trtverify.stages.layerwise.reference import NAME, ReferencePass
from trtverify.toolout.captures import ONE_FEED, Capture, read_capture
from trtverify.toolout.kit import MANIFEST, Kit, find_kit, read_kit
from trtverify.util.errors import UsageError
from trtverify.util.words import count

TACTIC_TOLERANCE = {"fp32": 5e-3, "tf32": 5e-3, "fp16": 5e-3, "bf16": 4e-2, "int8": 4e-2, "fp8": 4e-2, "int4": 4e-2}
TOLERANCE_SOURCE = (
    "a batch-size tactic change: about 10x the worst rel_l2 measured when only the batch changed (PyTorch CUDA on "
    "torchvision models, bench/results/consistency_tolerance_cuda.json; INT8/FP8/INT4 not measured, BF16's used)"
)
BITWISE = "bitwise (measured: 0 on every model and precision of bench/results/consistency_tolerance_cuda.json)"


def tactic_tolerance(precision: str) -> float:
    return TACTIC_TOLERANCE.get(precision, max(TACTIC_TOLERANCE.values()))


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _max_abs(a: np.ndarray, b: np.ndarray) -> float:
    """The largest |a - b|; inf where they disagree about which values are non-finite, or in shape."""
    if np.shape(a) != np.shape(b):
        return float("inf")
    a, b = _f64(a), _f64(b)
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not np.array_equal(fa, fb) or not np.array_equal(a[~fa], b[~fb], equal_nan=True):
        return float("inf")
    return float(np.abs(a[fa] - b[fb]).max()) if fa.any() else 0.0


def _rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    """||a - b|| / ||b|| (0 where both are zero; inf where not finite or shapes differ)."""
    if np.shape(a) != np.shape(b):
        return float("inf")
    a, b = _f64(a), _f64(b)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return 0.0 if np.array_equal(a, b, equal_nan=True) else float("inf")
    num, den = float(np.linalg.norm(a - b)), float(np.linalg.norm(b))
    return 0.0 if num == 0 else num / den if den else float("inf")


def _topo(ref: ReferencePass) -> Callable[[str], int]:
    pos = {n: i for i, n in enumerate(ref.order)}
    return lambda n: pos.get(n, len(pos))


def _where(ref: ReferencePass, tensor: str) -> dict[str, object]:
    p = ref.graph.producers.get(tensor)
    return {"node": p.node if p else None, "op_type": p.op_type if p else None, "topo_index": p.index if p else -1}


def _determinism(name: str, cap: Capture, it: int, ref: ReferencePass) -> CheckResult:
    a, b = cap.iterations[0], cap.iterations[it]
    names = sorted((n for n in a if n in b), key=_topo(ref))
    worst, first, differing = 0.0, None, 0
    for n in names:
        d = _max_abs(a[n](), b[n]())
        if d > 0:
            differing += 1
            first = first or n
            worst = max(worst, d)
    detail = {"iterations": [0, it], "tensors": len(names), "differing": differing, "tolerance": BITWISE}
    if first:
        detail["first_differing"] = first
    return limit_check(f"{name}: repeated iterations identical (determinism)", NAME, "max_abs_diff", worst, 0, "<=",
                       candidate=name, tensor=first, detail=detail)  # fmt: skip


def _row_wise(cap: Capture, it: int, rows: int, names: Sequence[str]) -> list[str]:
    return [n for n in names if n in cap.shapes[it] and len(cap.shapes[it][n]) >= 1 and cap.shapes[it][n][0] == rows]


def _duplicated(name: str, cap: Capture, entry: dict, outputs: list[str], ref: ReferencePass) -> CheckResult | str:
    it, rows = entry["iteration"], entry["rows"]
    r0, r1 = (entry["duplicated_rows"] + [0, 1])[:2]
    outs = _row_wise(cap, it, rows, outputs)
    if not outs:
        return f"duplicated rows not checked: no graph output of the capture has the batch's {rows} rows first"
    tensors = cap.iterations[it]
    worst, at = 0.0, None
    for n in outs:
        arr = tensors[n]()
        d = _max_abs(arr[r0], arr[r1])
        if d > worst or at is None:
            worst, at = d, n
    detail: dict[str, object] = {"iteration": it, "rows": [r0, r1], "outputs": outs, "tolerance": BITWISE}
    if worst > 0:  # where the rows part first, in the graph's order (every captured tensor with the batch first)
        for n in sorted(_row_wise(cap, it, rows, list(tensors)), key=_topo(ref)):
            arr = tensors[n]()
            if _max_abs(arr[r0], arr[r1]) > 0:
                detail["first_tensor_rows_differ"] = n
                break
    return limit_check(f"{name}: duplicated rows of one batch identical", NAME, "max_abs_diff", worst, 0, "<=",
                       candidate=name, tensor=at, detail=detail)  # fmt: skip


def _repeated(name: str, cap: Capture, entry: dict, outputs: list[str], tol: float, ref: ReferencePass,
              batch: int) -> CheckResult | str:  # fmt: skip
    it, rows = entry["iteration"], entry["rows"]
    single, rep = cap.iterations[0], cap.iterations[it]

    def comparable(n: str) -> bool:
        s, r = cap.shapes[0].get(n), cap.shapes[it].get(n)
        return bool(s and r and s[0] == batch and r[0] == rows and s[1:] == r[1:])

    outs = [n for n in outputs if comparable(n)]
    if not outs:
        return "repeated batch not checked: no graph output has the batch's rows first in both feeds"

    def worst_row(n: str) -> tuple[float, int]:
        one, many = single[n]()[0], rep[n]()
        return max((_rel_l2(many[k], one), k) for k in range(rows))

    worst, at, row = -1.0, None, 0
    for n in outs:
        v, k = worst_row(n)
        if v > worst:
            worst, at, row = v, n, k
    against = f"row 0 of feed 0 (iteration 0, a batch of {batch})"
    detail: dict[str, object] = {"iteration": it, "rows": rows, "against": against, "worst_row": row, "outputs": outs,
                                 "tolerance": TOLERANCE_SOURCE}  # fmt: skip
    if worst > tol:
        for n in sorted((n for n in rep if comparable(n)), key=_topo(ref)):
            if worst_row(n)[0] > tol:
                detail["first_tensor_beyond"] = n
                break
    return limit_check(f"{name}: repeated batch rows equal the single row", NAME, "rel_l2", worst, tol, "<=",
                       candidate=name, tensor=at, detail=detail)  # fmt: skip


def _open(path: Path, runner: str | None) -> tuple[Capture, Kit, Path]:
    manifest = find_kit(path)
    if manifest is None:
        raise UsageError(f"{path}: no capture kit ({MANIFEST}) in its folder or the one above: keep the capture in the "
                         "kit's folder")  # fmt: skip
    return read_capture(path, runner), read_kit(manifest), path


def _unmarked(name: str, backend: CapturedBackend, spec: Candidate, outputs: list[str], tol: float,
              ref: ReferencePass, samples: int) -> CheckResult:  # fmt: skip
    assert spec.unmarked is not None
    marked, kit = backend.capture, backend.kit
    plain, plain_kit, path = _open(Path(spec.unmarked), spec.unmarked_runner)
    if plain_kit.sample_digests[:1] != kit.sample_digests[:1]:
        raise UsageError(f"{path}: made from another kit than {backend.captured} ({plain_kit.describe()} against "
                         f"{kit.describe()}): both captures of one engine come from the same kit's feeds")  # fmt: skip
    its = min(len(plain.iterations), len(kit.sample_digests), len(marked.iterations))
    names = [n for n in outputs if n in plain.iterations[0] and n in marked.iterations[0]]
    if not names:
        raise UsageError(f"{path}: holds none of {backend.model_path.name}'s graph outputs ({', '.join(outputs)})")
    worst, at, at_it = -1.0, names[0], 0
    vs_ref: dict[str, float] = {}
    for i in range(its):
        for n in names:
            v = _rel_l2(marked.iterations[i][n](), plain.iterations[i][n]())
            if v > worst:
                worst, at, at_it = v, n, i
            if i < samples and (i, n) in ref.store:
                vs_ref[n] = max(vs_ref.get(n, 0.0), _rel_l2(plain.iterations[i][n](), ref.store.get(i, n)))
    if worst > tol:
        message = (
            f"marking every tensor changed the engine's outputs (rel_l2 {worst:.3g} on '{at}', feed {at_it}, beyond "
            f"{tol:g}): the per-layer verdict describes another engine than the one deployed; trust the outputs-only "
            f"capture {path} for the verdict on the outputs"
        )
    else:
        message = (f"marking every tensor left the outputs as the outputs-only capture's (rel_l2 {worst:.3g} <= {tol:g}"
                   f"): the per-layer verdict describes the engine deployed")  # fmt: skip
    detail = {"unmarked": str(path), "feeds": its, "outputs": names, "message": message,
              "outputs_only_vs_reference_rel_l2": vs_ref, "tolerance": TOLERANCE_SOURCE}  # fmt: skip
    return limit_check(f"{name}: marking every tensor left the outputs unchanged", NAME, "rel_l2", worst, tol, "<=",
                       candidate=name, tensor=at, detail=detail)  # fmt: skip


def _one_feed(kind: str) -> str:
    """Why a capture of this kind holds no consistency feeds."""
    return ONE_FEED.get(kind, "made without the consistency feeds of the kit's inputs.json")


def within(
    name: str, backend: object, spec: Candidate, precision: str, ref: ReferencePass, samples: int
) -> tuple[list[CheckResult], list[str]]:
    """The consistency checks of a captured candidate, and what they checked or could not check (one line each)."""
    if not isinstance(backend, CapturedBackend):
        return [], []
    cap, kit = backend.capture, backend.kit
    outputs = [m.name for m in backend.outputs()]
    tol = tactic_tolerance(precision)
    checks: list[CheckResult] = []
    said: list[str] = []
    if spec.unmarked is not None:
        checks.append(_unmarked(name, backend, spec, outputs, tol, ref, samples))
        said.append(f"marking: outputs against the outputs-only capture {spec.unmarked}")
    if len(cap.iterations) < kit.iterations() or backend.iteration is not None:
        why = "one iteration chosen" if backend.iteration is not None else (
            f"the capture holds the kit's {count(len(kit.sample_digests), 'feed')} only ({_one_feed(cap.kind)})"
            if kit.consistency else "the kit has no consistency feeds (made before they were written)")  # fmt: skip
        return checks, [*said, f"consistency feeds not checked: {why}"]
    batch = kit.inputs[0]["shape"][0] if kit.inputs and kit.inputs[0]["shape"] else 1
    for entry in kit.consistency:
        if entry["role"] == "repeat":
            got: CheckResult | str = _determinism(name, cap, entry["iteration"], ref)
        elif entry["role"] == "duplicated_row":
            got = _duplicated(name, cap, entry, outputs, ref)
        else:
            got = _repeated(name, cap, entry, outputs, tol, ref, batch)
        if isinstance(got, str):
            said.append(got)
        else:
            checks.append(got)
            said.append(f"{entry['role'].replace('_', ' ')} (feed {entry['iteration']}): checked")
    said += [f"no {role.replace('_', ' ')} feed in the kit: {why}" for role, why in kit.not_possible.items()]
    return checks, said


def _iterations(spec: Candidate, cap: Capture, kit: Kit) -> dict[str, int]:
    """digest -> iteration of the capture (first occurrence; only the chosen one with `iteration:`)."""
    digests = (kit.sample_digests + [c["digest"] for c in kit.consistency])[: len(cap.iterations)]
    out: dict[str, int] = {}
    for i, d in enumerate(digests):
        if spec.iteration is None or spec.iteration == i:
            out.setdefault(d, i)
    return out


def between(
    candidates: Sequence[LayerwiseCandidate],
    specs: dict[str, Candidate],
    checks_of: Callable[[str, str], Callable[[str], Sequence[Check]]],
    ref: ReferencePass,
) -> list[CapturePair] | None:
    """Every pair of captured candidates compared with each other, tensor by tensor in the graph's order (None: fewer
    than two). `checks_of(name, precision)`: the candidate's checks of each tensor."""
    names = [c.name for c in candidates if specs[c.name].captured is not None]
    if len(names) < 2:
        return None
    precision = {c.name: c.precision for c in candidates}
    opened = {}
    for n in names:
        spec = specs[n]
        assert spec.captured is not None
        manifest = find_kit(Path(spec.captured))
        if manifest is None:
            continue  # the candidate itself was refused already
        cap = read_capture(Path(spec.captured), spec.runner)
        opened[n] = (cap, _iterations(spec, cap, read_kit(manifest)))
    pairs = []
    ordered = [n for n in names if n in opened]
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            pairs.append(_pair(a, b, opened[a], opened[b], checks_of(a, precision[a]), checks_of(b, precision[b]), ref))
    return pairs


def _pair(a: str, b: str, ca: tuple[Capture, dict[str, int]], cb: tuple[Capture, dict[str, int]],
          checks_a: Callable[[str], Sequence[Check]], checks_b: Callable[[str], Sequence[Check]],
          ref: ReferencePass) -> CapturePair:  # fmt: skip
    (cap_a, its_a), (cap_b, its_b) = ca, cb
    feeds = [(its_a[d], its_b[d]) for d in its_a if d in its_b]
    if not feeds:
        return CapturePair(a=a, b=b, feeds=0, tensors=0, identical=False, first_difference=None, first_parting=None,
                           not_compared="no feed in common: made from different kits' feeds")  # fmt: skip
    names = sorted((n for n in cap_a.names() if n in set(cap_b.names())), key=_topo(ref))
    first_diff = first_part = None
    compared = 0
    for n in names:
        series = TensorSeries(n, n)
        differs = False
        for ia, ib in feeds:
            if n not in cap_a.iterations[ia] or n not in cap_b.iterations[ib]:
                continue
            x, y = cap_a.iterations[ia][n](), cap_b.iterations[ib][n]()
            differs = differs or _max_abs(x, y) != 0
            series.add(x, y, extras_for([*checks_a(n), *checks_b(n)]))
        if not series.samples:
            continue
        compared += 1
        if not differs:
            continue
        ev_a, ev_b = evaluate(series, checks_a(n), stage=NAME), evaluate(series, checks_b(n), stage=NAME)
        metrics = {k: v for k, v in series.worst().items() if v == v}
        parting = CaptureParting(tensor=n, **_where(ref, n), metrics=metrics,  # type: ignore[arg-type]
                                 failed=(ev_a.failed and ev_b.failed and sorted(set(ev_a.failed) | set(ev_b.failed)))
                                 or None)  # fmt: skip
        first_diff = first_diff or parting
        if ev_a.failed and ev_b.failed and first_part is None:
            first_part = parting
    return CapturePair(a=a, b=b, feeds=len(feeds), tensors=compared, identical=first_diff is None,
                       first_difference=first_diff, first_parting=first_part)  # fmt: skip


__all__ = ["TACTIC_TOLERANCE", "between", "tactic_tolerance", "within"]
