"""The sensitivity table of a lowered model: how much of its output error each suspect node, and each op type,
accounts for, found by evaluation with repair's lowering and evaluation (search.Lowering, evaluate.evaluate).

Each trial is one evaluation of the lowered model with one keep-list:

- *kept alone*: the node (or every lowered node of the op type) in FP32, everything else lowered; the share of the
  lowered model's output error this removes is `share_kept`;
- *lowered alone*: the node (or op type) lowered, every other lowered node kept in FP32; the share of the lowered
  model's output error it causes on its own is `share_lowered`.

Both shares are of the error above the floor, the error with every lowered node kept (one trial first): a
candidate's parts keeping cannot undo (AutoCast's BF16 casts of the graph inputs) are nobody's share.

The output error is the worst rel_l2 over the model's float outputs (a detector's: the tensors flowing into its NMS,
as `--method auto` judges them: calibrate.judged_tensors), on the search's rows; non-finite counts as infinite (a
trial that makes the output finite again removes all of it, one that keeps it non-finite none). A row's score is the
larger share, in [0, 1] (a node that needs a partner to fix the output still shows, lowered alone, what it breaks;
lowered alone, a node can cause more error than the whole lowered model, whose later rounding hides it); rows whose
keeping alone passes the target come first. The suspects are a layerwise run's first divergence and root causes
where its results.json is given, the first node the lowered model shows non-finite, the nodes reading an overflowing
cast, then repair's seeds and the nodes adding the most error (layerwise's amplification ranking: output rel_l2
minus the inputs' largest) in turn, at most `suspects` of them; the op types are those of the lowered nodes, the
most added error first (every one: a Q/DQ'd Add can hold the error without adding any by that measure; one whose
only node is in the table takes that node's trials). `max_trials` and `seconds` (checked before each trial) bound
the work; what was not tried is listed, with why.

The exclusion list is the shortest prefix of the node ranking (rows with a score) whose keeping passes the target,
each prefix evaluated in turn within the same bounds; where none passed, the rows scoring at least SCORE_FLOOR,
marked not verified. It is written for ModelOpt (`nodes_to_exclude`, anchored patterns: ModelOpt matches them with
re.match), trtexec (`--layerPrecisions=NAME:fp32,...`; its parser splits the list at commas and each entry at its
last colon, and TensorRT's ONNX parser names each layer after its ONNX node) and trtverify (`keep:`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field

from trtverify.config.checks import Check
from trtverify.convert.modelopt import exact_patterns
from trtverify.repair.calibrate import judged_tensors
from trtverify.repair.evaluate import Evaluation, Reference, evaluate
from trtverify.repair.search import Lowering, Progress, added_errors
from trtverify.util.errors import UsageError
from trtverify.util.fsutil import atomic_write_text
from trtverify.util.record import Record, omitted, optional
from trtverify.util.words import count

SCORE_FLOOR = 0.1  # where no prefix passed, the exclusion list holds the rows accounting for at least this share


class Trial(Record):
    """One row of the table: a node or an op type, kept alone and lowered alone."""

    kind: Literal["node", "op_type"]
    name: str = Field(description="the ONNX node name (or label), or the op type")
    op_type: str
    nodes: int = Field(description="lowered nodes it covers")
    why: str = Field(description="why it is a suspect")
    kept_alone: float | None = optional("output error with it alone in FP32 (null: non-finite, or not tried)")
    kept_alone_passes: bool | None = optional("the target passes with it alone in FP32")
    lowered_alone: float | None = optional("output error with it alone lowered (null: non-finite, or not tried)")
    lowered_alone_passes: bool | None = optional("the target passes with it alone lowered")
    share_kept: float | None = optional("share of the lowered model's output error keeping it alone removes")
    share_lowered: float | None = optional("share of the lowered model's output error lowering it alone causes")
    score: float = Field(description="the larger share, between 0 and 1 (0 where neither was tried)")
    rank: int = 0


class Sensitivity(Record):
    """The sensitivity table (repair.json `sensitivity`, and the stage result's)."""

    precision: str
    error: str = Field(description="what the output error is")
    baseline: float | None = Field(description="output error of the lowered model, nothing kept (null: non-finite)")
    baseline_passes: bool
    floor: float = Field(
        description="output error with every lowered node kept: what keeping cannot remove (the shares are of the "
        "error above it; 0 where it is non-finite)"
    )
    nodes: list[Trial] = Field(description="the suspect nodes, ranked")
    op_types: list[Trial] = Field(description="the lowered op types, ranked")
    exclude: list[str] = Field(description="the exclusion list: ONNX node names to keep in FP32")
    exclude_passes: bool | None = Field(description="the target passes with the exclusion list kept (null: not run)")
    exclude_why: str
    not_tried: dict[str, str] = omitted(dict, "suspects and op types not tried, and why")
    untried_lowered: int = Field(
        description="lowered nodes that were not suspects (no added error, or beyond the bound)"
    )
    lowered: int = Field(description="lowered nodes (those keeping can change)")
    trials: int = Field(description="evaluations made")
    seconds: float
    stopped: str | None = optional("why the trials ended before the table was complete")
    files: dict[str, str] = omitted(dict, "the exclusion list as each tool takes it: tool -> file")
    unaddressable: dict[str, str] = omitted(
        dict, "nodes of the exclusion list a tool cannot address by name (unnamed, or a comma for trtexec), and why"
    )


@dataclass
class Budget:
    max_trials: int
    seconds: float
    t0: float = 0.0
    used: int = 0

    def left(self) -> str | None:
        """Why no more trials may run, or None."""
        if self.used >= self.max_trials:
            return f"the budget of {count(self.max_trials, 'trial')} ran out"
        if time.monotonic() - self.t0 >= self.seconds:
            return f"the budget of {self.seconds:g} s ran out"
        return None


def output_error(ev: Evaluation, outputs: Sequence[str]) -> float:
    """The worst rel_l2 over `outputs`; infinite where one is non-finite (or not compared)."""
    if any(o in ev.nonfinite for o in outputs):
        return math.inf
    values = [ev.errors.get(o, math.inf) for o in outputs]
    return max(values, default=math.inf)


def _share_removed(base: float, floor: float, err: float) -> float:
    """The part of the lowered model's error above the floor (every lowered node kept) that a trial no longer has."""
    if math.isinf(base):
        return 0.0 if math.isinf(err) else 1.0
    span = base - floor
    return 0.0 if span <= 0 else (base - err) / span


def _share_caused(base: float, floor: float, err: float) -> float:
    """The part of the lowered model's error above the floor that a trial has on its own."""
    if math.isinf(err):
        return 1.0
    if math.isinf(base):
        return 0.0
    span = base - floor
    return 0.0 if span <= 0 else (err - floor) / span


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def layerwise_suspects(path: Path) -> dict[str, str]:
    """The suspects a layerwise run found (its results.json): each candidate's first divergence and root causes,
    in their rank; node -> why."""
    import json

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        stages = [s for s in doc["stages"] if s.get("name") == "layerwise"]
        candidates = [c for s in stages for c in s.get("candidates") or []]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(
            f"{path}: not a trtverify results.json ({exc}); give the results.json of a layerwise run"
        ) from exc
    if not candidates:
        raise UsageError(f"{path}: no layerwise stage with a candidate in it; run `trtverify layerwise` first")
    found: dict[str, str] = {}
    for c in candidates:
        first = c.get("first_divergence") or {}
        if first.get("node"):
            found.setdefault(first["node"], f"layerwise: first divergence of {c.get('name')} ({first.get('tensor')})")
        method = c.get("root_cause_method", "")
        for rc in c.get("root_causes") or []:
            if rc.get("node"):
                found.setdefault(rc["node"], f"layerwise: root cause #{rc.get('rank')} of {c.get('name')} ({method} "
                                 f"{rc.get('score', float('nan')):.3g})")  # fmt: skip
    return found


def suspects(
    ref: Reference,
    before: Evaluation,
    seeds: dict[str, str],
    lowerable: Sequence[str],
    bound: int,
    layerwise: dict[str, str] | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """(suspect node -> why, in trial order; nodes beyond the bound -> why not tried). `layerwise`: a layerwise
    run's suspects (layerwise_suspects), tried first."""
    allowed = set(lowerable)
    found: dict[str, str] = {n: why for n, why in (layerwise or {}).items() if n in allowed}
    for t in before.nonfinite[:1]:  # the first (topological order): the others follow from it, or show later
        node = ref.graph.producers[t].node
        if node in allowed:
            found.setdefault(node, f"first non-finite output: {t}")
    for cast, readers in before.overflows.items():
        for node in readers:
            if node in allowed:
                found.setdefault(node, f"reads {cast}, a cast to FP16 that overflows")
    # then repair's seeds and the nodes adding the most error, in turn: many seeds (a backbone's flushed weights)
    # must not crowd out the nodes where the error grows, nor the other way round
    seeded = [(n, f"repair seed: {why}") for n, why in seeds.items() if n in allowed]
    added = sorted(((a, n) for n, a in added_errors(ref, before).items() if n in allowed and a > 0), reverse=True)
    adding = [(n, f"adds rel_l2 {a:.3g}") for a, n in added]
    for i in range(max(len(seeded), len(adding))):
        for source in (seeded, adding):
            if i < len(source):
                found.setdefault(*source[i])
    chosen = dict(list(found.items())[:bound])
    beyond = {
        n: f"beyond the bound of {count(bound, 'suspect')} ({why})" for n, why in found.items() if n not in chosen
    }
    return chosen, beyond


def table(
    ref: Reference,
    lowering: Lowering,
    lowerable: Sequence[str],
    samples: Sequence[dict[str, np.ndarray]],
    checks: Sequence[Check],
    tensors: str,
    before: Evaluation,
    seeds: dict[str, str],
    *,
    bound: int = 10,
    max_trials: int = 40,
    seconds: float = 300.0,
    op_types: bool = True,
    layerwise: dict[str, str] | None = None,
    progress: Progress = lambda _: None,
) -> Sensitivity:
    """The sensitivity table of `lowering`'s model (see the module docstring). `before`: its evaluation with
    nothing kept (repair's first); `lowerable`: its lowered nodes, in topological order."""
    budget = Budget(max_trials, seconds, time.monotonic())
    judged, judged_why = judged_tensors(ref)
    base = output_error(before, judged)
    ops = _op_types(lowering)
    order = list(lowerable)

    def run(keep: Sequence[str], what: str) -> Evaluation:
        budget.used += 1
        graph, _ = lowering.runnable(keep)
        ev = evaluate(ref, graph, samples, checks, tensors, tuple(keep))
        err = output_error(ev, judged)
        progress(f"sensitivity trial {budget.used}: {what}: output rel_l2 {err:.4g}{', passes' if ev.passed else ''}")
        return ev

    def trial(kind: str, name: str, members: list[str], why: str) -> Trial:
        row: dict = {"kind": kind, "name": name, "why": why, "nodes": len(members),
                     "op_type": name if kind == "op_type" else ops.get(name, "")}  # fmt: skip
        shares = []
        if budget.left() is None:
            ev = run(members, f"{name} kept alone")
            err = output_error(ev, judged)
            shares.append(_share_removed(base, floor, err))
            row.update(kept_alone=_finite(err), kept_alone_passes=ev.passed, share_kept=shares[-1])
        if budget.left() is None:
            rest = [n for n in order if n not in set(members)]
            ev = run(rest, f"{name} lowered alone")
            err = output_error(ev, judged)
            shares.append(_share_caused(base, floor, err))
            row.update(lowered_alone=_finite(err), lowered_alone_passes=ev.passed, share_lowered=shares[-1])
        return Trial(**row, score=min(1.0, max(0.0, *shares)))

    # the floor: what keeping every lowered node leaves (a candidate's parts keeping cannot undo, e.g. AutoCast's
    # BF16 casts of the inputs); the shares are of the error above it
    floor = output_error(run(order, "every lowered node kept (the floor)"), judged) if order else 0.0
    floor = floor if math.isfinite(floor) else 0.0
    chosen, not_tried = suspects(ref, before, seeds, order, bound, layerwise)
    stopped: str | None = None
    nodes: list[Trial] = []
    for node, why in chosen.items():
        if (left := budget.left()) is not None:
            not_tried[node] = stopped = left
            continue
        nodes.append(trial("node", node, [node], why))
    types: list[Trial] = []
    if op_types:
        added = added_errors(ref, before)
        by_type: dict[str, list[str]] = {}
        for n in order:
            by_type.setdefault(ops.get(n, "?"), []).append(n)
        total_of = {t: sum(max(added.get(n, 0.0), 0.0) for n in members) for t, members in by_type.items()}
        for t in sorted(by_type, key=lambda t: -total_of[t]):
            total = total_of[t]
            same = next((r for r in nodes if [r.name] == by_type[t]), None)
            if same is not None:  # its one node is in the table already: the same two trials
                why = f"1 lowered node, adding rel_l2 {total:.3g} (the node's trials)"
                types.append(same.model_copy(update={"kind": "op_type", "name": t, "why": why}))
                continue
            if (why := budget.left()) is not None:
                not_tried[f"op type {t}"] = stopped = why
                continue
            types.append(trial("op_type", t, by_type[t], f"{count(len(by_type[t]), 'lowered node')}, adding "
                               f"rel_l2 {total:.3g} in all"))  # fmt: skip
    nodes, types = _ranked(nodes), _ranked(types)
    if before.passed:
        exclude, passes, why = [], True, "the lowered model passes with nothing kept"
    else:
        exclude, passes, why = _exclusion(nodes, budget, run)
    return Sensitivity(
        precision=lowering.precision,
        error=f"worst rel_l2 over {judged_why} on the searched rows",
        baseline=_finite(base),
        floor=floor,
        baseline_passes=before.passed,
        nodes=nodes,
        op_types=types,
        exclude=exclude,
        exclude_passes=passes,
        exclude_why=why,
        not_tried=not_tried,
        untried_lowered=len(order) - len(nodes),
        lowered=len(order),
        trials=budget.used,
        seconds=time.monotonic() - budget.t0,
        stopped=stopped,
    )


def _op_types(lowering: Lowering) -> dict[str, str]:
    from trtverify.graph.onnxgraph import GraphIndex

    g = GraphIndex.from_model(lowering.reference)
    return {g.label(i): n.op_type for i, n in enumerate(g.nodes)}


def _ranked(rows: list[Trial]) -> list[Trial]:
    """Passing when kept alone first, then the larger score, then the larger share kept."""
    key = [(not r.kept_alone_passes, -r.score, -(r.share_kept or 0.0)) for r in rows]
    order = sorted(range(len(rows)), key=lambda i: key[i])
    return [rows[i].model_copy(update={"rank": k + 1}) for k, i in enumerate(order)]


def _exclusion(
    nodes: list[Trial], budget: Budget, run: Callable[[Sequence[str], str], Evaluation]
) -> tuple[list[str], bool | None, str]:
    """The shortest prefix of the ranking that passes (kept alone is the prefix of one, already evaluated)."""
    scored = [r.name for r in nodes if r.score > 0]
    if not scored:
        return [], None, "no suspect accounts for any of the output error"
    if nodes[0].kept_alone_passes:
        return [nodes[0].name], True, "the top node kept alone passes"
    for k in range(2, len(scored) + 1):
        if (why := budget.left()) is not None:
            floor = [r.name for r in nodes if r.score >= SCORE_FLOOR]
            return (
                floor,
                None,
                (
                    f"no prefix passed before {why}: the nodes accounting for at least {SCORE_FLOOR:.0%} of the error, "
                    "not verified"
                ),
            )
        if run(scored[:k], f"the top {k} kept").passed:
            return scored[:k], True, f"the top {k} nodes kept together pass; fewer do not"
    return (
        scored,
        False,
        (
            f"even all {count(len(scored), 'node')} with a score kept together fail: the error is spread beyond the "
            "suspects (raise the bound, or see the op types)"
        ),
    )


def unaddressable(names: Sequence[str], model_names: set[str]) -> dict[str, str]:
    """The names ModelOpt or trtexec cannot take: a node without a name (trtverify labels it `<op_type>_<index>`),
    or a name with a comma (trtexec splits --layerPrecisions at commas)."""
    out = {}
    for n in names:
        if n not in model_names:
            out[n] = "an unnamed node (trtverify's label): name it in the ONNX file for ModelOpt and trtexec"
        elif "," in n:
            out[n] = (
                "a comma in its name: trtexec's --layerPrecisions cannot give it (use ModelOpt or the repaired ONNX)"
            )
    return out


def write(sens: Sensitivity, folder: Path, exports: dict[str, object], recipe: bool) -> Sensitivity:
    """The exclusion list as files in `folder`: ModelOpt's patterns, trtexec's flags, trtverify's keep-list.
    `exports`: repair's exports of the list (record.exports); `recipe`: the lowering is trtverify's own (fp16 or
    int8 made from the reference), so a suite recipe (`from: reference`) makes it again."""
    folder.mkdir(parents=True, exist_ok=True)
    names = sens.exclude
    files = {
        "modelopt": folder / "modelopt_nodes_to_exclude.txt",
        "trtexec": folder / "trtexec_layer_precisions.txt",
        "trtverify": folder / "keep.yaml",
    }
    atomic_write_text(files["modelopt"], "".join(f"{p}\n" for p in exact_patterns(names)))
    atomic_write_text(files["trtexec"], f"{exports.get('trtexec') or ''}\n")
    import yaml

    lines = [
        "# trtverify's keep-list: `trtverify convert REF --keep NODE ...`, or a suite candidate recipe",
        f"# (models.candidates.NAME: {{from: reference, precision: {sens.precision}, keep: [...]}})"
        if recipe
        else "# (the nodes repair keeps in FP32 inside the candidate: docs/stages/repair.md)",
        yaml.safe_dump({"keep": list(names)}, sort_keys=False).rstrip(),
    ]
    atomic_write_text(files["trtverify"], "\n".join(lines) + "\n")
    return sens.model_copy(update={"files": {k: str(v) for k, v in files.items()}})
