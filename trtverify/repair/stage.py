"""Stage `repair`: the smallest set of nodes to keep in FP32 so the reference lowered to FP16 or INT8 passes,
found by evaluation and verified (trtverify.repair.search); its files go to `<out>/repair-<precision>/`."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field

from trtverify.compare.checks import CheckResult, failed_check, limit_check
from trtverify.config.loader import LoadedSuite
from trtverify.config.models import Inputs
from trtverify.data.inputs import build_samples
from trtverify.repair.record import Checked, Cost, CurvePoint, RepairRecord
from trtverify.repair.run import repair
from trtverify.repair.sensitivity import Sensitivity
from trtverify.stages.base import StageContext, StageResult, Status, status_of
from trtverify.stages.e2e.stage import gate_checks, task_metrics
from trtverify.util.record import optional
from trtverify.util.words import count

NAME = "repair"


class RepairResult(StageResult):
    """Stage repair: a verified FP32 keep-list for the lowered reference."""

    name: Literal["repair"] = "repair"
    precision: str | None = optional()
    keep: list[str] | None = optional("ONNX node names kept in FP32 (1-minimal)")
    repaired_model: str | None = optional("the repaired ONNX model")
    repair_json: str | None = optional("the full record (repair.json)")
    evaluations: int | None = optional()
    seeds: dict[str, str] | None = optional("nodes the search started from, and why")
    before: Checked | None = optional()
    after: Checked | None = optional()
    cost: Cost | None = optional()
    exports: dict[str, object] | None = Field(default=None, description="the keep-list as each tool takes it")
    curve: list[CurvePoint] | None = optional("every reference tensor's rel_l2 before and after the repair")
    candidate_precision: str | None = optional("what the lowered model computes in, read from its graph")
    tensors: str | None = optional("where the checks apply: outputs, or every tensor (all)")
    rows: dict[str, int] | None = optional("input rows the search used, and the rows held out to verify it")
    verified: Checked | None = optional("the repaired model on the held-out rows")
    stopped: str | None = optional("where nothing passed: why the search ended there")
    calibration: dict[str, object] | None = optional(
        "int8 made here: how it was calibrated (method, calibration_rows; auto: chosen_by, held_out_rows, figures)"
    )
    sensitivity: Sensitivity | None = optional(
        "the sensitivity table and its exclusion lists (stages.repair.sensitivity)"
    )


def _calibration(loaded: LoadedSuite, path: Path) -> list[dict[str, np.ndarray]]:
    """Rows of the calibration file, read like the suite's inputs file (one row per feed)."""
    inputs = Inputs(file=path)
    suite = loaded.suite.model_copy(update={"inputs": inputs})
    return build_samples(dataclasses.replace(loaded, suite=suite))


class _GateTarget:
    """The e2e stage's gates as the repair target: the reference's task metrics once, a candidate's per call."""

    def __init__(self, ctx: StageContext):
        self.ctx = ctx
        self.cfg = ctx.loaded.suite.stages.e2e
        self.reference = task_metrics(ctx, {"reference": Path(ctx.loaded.suite.models.reference)})["reference"]

    def checks(self, path: Path) -> list[CheckResult]:
        assert self.cfg is not None
        metrics = task_metrics(self.ctx, {"repaired": path})["repaired"]
        gates = gate_checks(self.cfg, "repaired", self.reference, metrics)
        return [c.model_copy(update={"stage": NAME}) for c in gates]

    def describe(self) -> list[str]:
        assert self.cfg is not None
        return [f"e2e gate: {g.model_dump(exclude_none=True)}" for g in self.cfg.gates]

    def __call__(self, path: Path) -> list[str]:
        return [f"{c.name} ({c.value:.4g})" for c in self.checks(path) if not c.passed]


def run(ctx: StageContext) -> RepairResult:
    suite = ctx.loaded.suite
    cfg = suite.stages.repair
    assert cfg is not None
    samples = ctx.samples_upto(cfg.samples)
    search_rows, holdout = split(samples, cfg.holdout)
    candidate = Path(suite.models.candidates[cfg.candidate].path) if cfg.candidate else None
    calibration = _calibration(ctx.loaded, Path(cfg.calibration)) if cfg.calibration else []
    checks_target = cfg.target_checks() if cfg.target == "tensors" else []
    gates = _GateTarget(ctx) if cfg.target == "e2e" else None
    with tempfile.TemporaryDirectory(prefix="trtverify-repair-out-") as tmp:
        out = (ctx.out_dir or Path(tmp)) / f"repair-{cfg.precision}"
        try:
            rec = repair(
                Path(suite.models.reference),
                cfg.precision,
                search_rows,
                checks_target,
                out,
                tensors=cfg.tensors,
                calibration=calibration,
                candidate=candidate,
                max_evaluations=cfg.max_evaluations,
                progress=lambda line: ctx.progress(NAME, 0, 0, line),
                extra=gates,
                target=gates.describe() if gates else None,
                holdout=holdout,
                onnxruntime=suite.backends.onnxruntime,
                method=cfg.method,
                sensitivity=cfg.sensitivity,
                sensitivity_checks=cfg.target_checks(),
            )
        except KeyboardInterrupt as exc:  # the search's best so far goes into results.json with the interruption
            partial = getattr(exc, "repair_record", None)
            if partial is not None:
                exc.partial = _interrupted(partial, cfg.tensors, out)  # type: ignore[attr-defined]
            raise
        final_gates = gates.checks(Path(rec.repaired_model)) if gates else []
    checks: list[CheckResult] = list(final_gates)
    for tensor, values in rec.after.values.items():
        for c in checks_target:
            v = values.get(c.metric, float("nan"))
            checks.append(
                CheckResult(
                    name=f"repaired {cfg.precision}: {c.condition} at {tensor}",
                    stage=NAME,
                    metric=c.metric,
                    tensor=tensor,
                    value=v,
                    threshold=c.threshold,
                    op=c.op,
                    passed=c.passes(v),
                )
            )
    other = [f for f in rec.after.failed if "non-finite" in f or "overflows" in f]
    checks.append(
        limit_check(
            f"repaired {cfg.precision}: non-finite values and FP16 overflows",
            NAME,
            "nonfinite",
            len(other),
            0,
            "<=",
            detail={"where": other[:10]} if other else {},
        )
    )
    if "after" in rec.cost.load_errors:  # ONNX Runtime cannot load the repaired model as the suite runs it
        level = suite.backends.onnxruntime.graph_optimization_level
        checks.append(
            failed_check(
                f"repaired {cfg.precision}: loads and runs in ONNX Runtime (graph_optimization_level {level})",
                NAME,
                "loads",
                {"reason": rec.cost.load_errors["after"]},
            )
        )
    if rec.verified is not None:  # the pass must hold on rows the search did not use
        checks.append(
            limit_check(
                f"repaired {cfg.precision}: passes on {count(len(holdout), 'held-out row')}",
                NAME,
                "holdout_failures",
                len(rec.verified.failed),
                0,
                "<=",
                detail={"failed": rec.verified.failed[:10]},
            )
        )
    notes = [f"keep in FP32: {', '.join(rec.keep) or 'nothing'} ({count(rec.evaluations, 'evaluation')})"]
    if rec.stopped:
        notes.append(f"no keep-list passed: {rec.stopped}; the best one is reported")
    models = {"reference": "the reference", "before": "the lowered model", "after": "the repaired model"}
    notes += [f"latency of {models.get(m, m)} {why}" for m, why in rec.cost.not_measured.items()]
    notes += [
        f"latency of {models.get(m, m)} not measured: {why}" for m, why in rec.cost.load_errors.items() if m != "after"
    ]
    return _result(rec, status_of(checks), checks, notes, cfg.tensors, out)


def _interrupted(rec: RepairRecord, tensors: str, out: Path) -> RepairResult:
    """What an interrupted search found: its best keep-list so far, not verified (repair.json has it too)."""
    check = failed_check("repair: the search ended", NAME, "finished", {"stopped": rec.stopped})
    notes = [
        f"{rec.stopped}: the best keep-list so far is {', '.join(rec.keep) or 'nothing'} "
        f"({'passes' if rec.passed else 'fails'} on the search's rows; not minimal, not verified); "
        f"in {out / 'repair.json'}"
    ]
    return _result(rec, "failed", [check], notes, tensors, out)


def _result(
    rec: RepairRecord, status: Status, checks: list[CheckResult], notes: list[str], tensors: str, out: Path
) -> RepairResult:
    return RepairResult(
        status=status,
        checks=checks,
        notes=notes,
        timings={"search_s": rec.seconds, **({"sensitivity_s": rec.sensitivity.seconds} if rec.sensitivity else {})},
        precision=rec.precision,
        keep=rec.keep,
        repaired_model=rec.repaired_model,
        repair_json=str(out / "repair.json"),
        evaluations=rec.evaluations,
        seeds=rec.seeds,
        before=rec.before,
        after=rec.after,
        cost=rec.cost,
        exports=rec.exports,
        curve=rec.curve,
        candidate_precision=rec.candidate_precision,
        tensors=tensors,
        rows=rec.rows,
        verified=rec.verified,
        stopped=rec.stopped,
        calibration=rec.calibration,
        sensitivity=rec.sensitivity,
    )


def split(samples: list, share: float) -> tuple[list, list]:
    """(search rows, held-out rows): every k-th row held out, k = round(1 / share), so both parts span the
    inputs; nothing is held out from fewer than 4 rows or at share 0."""
    if share <= 0 or len(samples) < 4:
        return list(samples), []
    step = max(2, round(1 / share))
    held = [s for i, s in enumerate(samples) if i % step == step - 1]
    return [s for i, s in enumerate(samples) if i % step != step - 1], held
