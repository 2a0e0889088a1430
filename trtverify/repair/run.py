"""`trtverify repair`: search, verify, and write the repaired model and DIR/repair.json."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from trtverify.config.backends import OnnxRuntimeOptions
from trtverify.config.checks import Check
from trtverify.config.stages import Sensitivity as SensitivityOptions
from trtverify.lint.linter import precision_label, precision_parts
from trtverify.repair.evaluate import Reference, evaluate
from trtverify.repair.record import RepairRecord, checked, cost, exports, record, with_latency
from trtverify.repair.search import Lowering, Progress, Search, search
from trtverify.repair.sensitivity import Sensitivity, layerwise_suspects, table, unaddressable, write
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
    sensitivity: SensitivityOptions | None = None,
    sensitivity_checks: Sequence[Check] = (),
) -> RepairRecord:
    """Search on `samples`; the repaired model is then verified on `holdout` (rows the search never saw) when
    there are any, and the latencies measured in ONNX Runtime with `onnxruntime` (the suite's options).

    OUT/repair.json is written as soon as the search ends (`pending` lists what is still to come), and again at the
    end. Interrupted during the search, it holds the best keep-list so far, and the interruption goes on up with
    that record as its `repair_record`. With `sensitivity`, the sensitivity table follows, judged on
    `sensitivity_checks` (default: `checks`), on the search's rows (repair/sensitivity.py)."""

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trtverify-repair-ref-") as tmp:
        rec, made = _repair(reference, precision, samples, checks, out, tensors, calibration, candidate,
                            max_evaluations, progress, extra, target, holdout, t0, Path(tmp), onnxruntime,
                            method)  # fmt: skip
        if sensitivity is None:
            return rec
        ref, result = made
        progress("sensitivity table")
        before = out / f"{reference.stem}_{precision}.onnx"
        sens = _table(reference, precision, candidate, before, ref, result, samples, list(sensitivity_checks or checks),
                      tensors, sensitivity, out, progress, Path(tmp))  # fmt: skip
        rec = rec.model_copy(update={"sensitivity": sens})
        _write(out, rec)
        return rec


def _table(
    reference: Path,
    precision: str,
    candidate: Path | None,
    lowered: Path,
    ref: Reference,
    result: Search,
    samples: Sequence[dict[str, np.ndarray]],
    checks: list[Check],
    tensors: str,
    opts: SensitivityOptions,
    out: Path,
    progress: Progress,
    work: Path,
) -> Sensitivity:
    """The table of the model the search lowered: FP16 made again from the reference (no calibration), the INT8
    made here read back from the lowered file the search wrote (calibrated once), or the given candidate."""
    from trtverify.convert.islands import lowered_nodes

    given = candidate if candidate is not None else (lowered if precision != "fp16" else None)
    lowering = Lowering(reference, precision, [], work, given)
    lowerable = lowered_nodes(lowering.qdq, lowering.reference) if lowering.qdq is not None else lowering.labels
    assert result.before is not None
    sens = table(ref, lowering, lowerable, samples, checks, tensors, result.before, result.seeds,
                 bound=opts.suspects, max_trials=opts.max_trials, seconds=opts.seconds, op_types=opts.op_types,
                 layerwise=layerwise_suspects(opts.suspects_from) if opts.suspects_from else None,
                 progress=progress)  # fmt: skip
    op_types = {n.name: n.op_type for n in lowering.reference.graph.node}
    listed = exports(sens.exclude, Path(), precision, op_types)
    sens = sens.model_copy(update={"unaddressable": unaddressable(sens.exclude, set(op_types) - {""})})
    return write(sens, out / "sensitivity", listed, recipe=candidate is None)


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
) -> tuple[RepairRecord, tuple[Reference, Search]]:
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
    return rec, (ref, result)


_LATER = ("the verification on held-out rows", "the latencies")


def _write(out: Path, rec: RepairRecord) -> None:
    atomic_write_text(out / "repair.json", to_json(rec.dump()))
