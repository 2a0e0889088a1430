"""`trtverify repair`: search, verify, and write the repaired model and DIR/repair.json."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from trtverify.config.backends import OnnxRuntimeOptions
from trtverify.config.checks import Check
from trtverify.lint.linter import precision_label, precision_parts
from trtverify.repair.evaluate import Reference, evaluate
from trtverify.repair.record import RepairRecord, checked, cost, record, with_latency
from trtverify.repair.search import Progress, search
from trtverify.util.fsutil import atomic_write_text, to_json
from trtverify.util.words import count


def repair(
    reference: Path,
    precision: str,
    samples: Sequence[dict[str, np.ndarray]],
    checks: Sequence[Check],
    out: Path,
    *,
    tensors: str = "outputs",
    calibration: Sequence[dict[str, np.ndarray]] = (),
    candidate: Path | None = None,
    max_evaluations: int = 50,
    progress: Progress = lambda _: None,
    extra: Callable[[Path], list[str]] | None = None,
    target: list[str] | None = None,
    holdout: Sequence[dict[str, np.ndarray]] = (),
    onnxruntime: OnnxRuntimeOptions | None = None,
    method: str = "auto",
) -> RepairRecord:
    """Search on `samples`; the repaired model is then verified on `holdout` (rows the search never saw) when
    there are any, and the latencies measured in ONNX Runtime with `onnxruntime` (the suite's options).

    OUT/repair.json is written as soon as the search ends (`pending` lists what is still to come), and again at the
    end. Interrupted during the search, it holds the best keep-list so far, and the interruption goes on up with
    that record as its `repair_record`."""

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trtverify-repair-ref-") as tmp:
        return _repair(reference, precision, samples, checks, out, tensors, calibration, candidate, max_evaluations,
                       progress, extra, target, holdout, t0, Path(tmp), onnxruntime, method)  # fmt: skip


def _repair(
    reference: Path,
    precision: str,
    samples: Sequence[dict[str, np.ndarray]],
    checks: Sequence[Check],
    out: Path,
    tensors: str,
    calibration: Sequence[dict[str, np.ndarray]],
    candidate: Path | None,
    max_evaluations: int,
    progress: Progress,
    extra: Callable[[Path], list[str]] | None,
    target: list[str] | None,
    holdout: Sequence[dict[str, np.ndarray]],
    t0: float,
    work: Path,
    onnxruntime: OnnxRuntimeOptions | None,
    method: str,
) -> RepairRecord:
    import onnx

    # one reference pass for the search's rows and the held-out ones (their activation ranges stay unseen by the
    # search); on disk when all of it does not fit half the memory budget
    progress(f"reference: {count(len(samples) + len(holdout), 'row')}")
    ref = Reference.run(reference, [*samples, *holdout], work, search_rows=len(samples), options=onnxruntime)
    result = search(
        reference,
        precision,
        samples,
        checks,
        tensors=tensors,
        calibration=calibration,
        candidate=candidate,
        max_evaluations=max_evaluations,
        progress=progress,
        extra=extra,
        reference_pass=ref,
        method=method,
    )
    seconds = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    where = "every output" if tensors == "outputs" else "every tensor"
    target = [f"{c.condition} on {where}" for c in checks] + list(target or [])
    target.append("no tensor non-finite where the reference's is finite; no cast to FP16 overflowing")
    model = onnx.load(str(reference))
    repaired = out / f"{reference.stem}_{precision}_repaired.onnx"
    rec = record(reference, result, repaired, target, seconds, cost(model, result.keep, samples[0]))
    rec = rec.model_copy(
        update={
            "rows": {"search": len(samples), "holdout": len(holdout)},
            "candidate_precision": precision_label(precision_parts(result.lowered)),
        }
    )
    if result.interrupted is not None:  # what the search found so far, then Ctrl-C / SIGTERM goes on up
        rec = rec.model_copy(update={"pending": ["the rest of the search", "the repaired model", *_LATER]})
        _write(out, rec)
        result.interrupted.repair_record = rec  # type: ignore[attr-defined]
        raise result.interrupted
    onnx.save(result.model, str(repaired))
    before = out / f"{reference.stem}_{precision}.onnx"
    onnx.save(result.lowered, str(before))
    # the keep-list is on disk before anything that could crash ONNX Runtime or take long
    _write(out, rec.model_copy(update={"pending": list(_LATER)}))
    verified = None
    if holdout:
        progress(f"verifying the repaired model on {count(len(holdout), 'held-out row')}")
        verified = evaluate(ref, repaired, holdout, checks, tensors, tuple(result.keep), first=len(samples))
        if extra is not None and verified.passed:  # the e2e gates are the validation set's: same on every row split
            verified.failed += extra(repaired)
            verified.passed = not verified.failed
    progress("timing the reference, the lowered and the repaired model")
    paths = {"reference": reference, "before": before, "after": repaired}
    rec = rec.model_copy(
        update={
            "verified": checked(verified) if verified is not None else None,
            "cost": with_latency(rec.cost, paths, samples[0], onnxruntime or OnnxRuntimeOptions()),
        }
    )
    _write(out, rec)
    return rec


_LATER = ("the verification on held-out rows", "the latencies")


def _write(out: Path, rec: RepairRecord) -> None:
    atomic_write_text(out / "repair.json", to_json(rec.dump()))
