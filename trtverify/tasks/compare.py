"""Task `compare`: no labels; each candidate's outputs against the reference's on the validation set.

For every model output and every row (sample) of the validation set:
- rel_l2 = ||candidate - reference||_2 / ||reference||_2 over the row's elements of that output, the
  definition `trtverify.compare.metrics` uses (0 when both are zero, inf when only the reference is);
- max_abs = max |candidate - reference| over the row's elements.
A non-finite candidate value (NaN, inf) where the reference is finite makes the row's errors inf.

A candidate's metrics are the distribution over all rows: rel_l2 p50 / p95 / max and max_abs, per output
(`per_output`) and over every output (the worst output's value: what the gates name);
`worst` names the rows with the largest rel_l2. The reference compared with itself scores 0 everywhere, so a
gate `{metric: rel_l2_p95, max_rise: 0.01}` is a ceiling on the candidate's p95.

How the e2e stage drives it (`stages/e2e/stage.py`): the reference's accumulator is made first, and over each
chunk of the data the reference runs before the candidates, its post-processing first in one ordered thread;
so the reference's outputs of a row are kept when a candidate's row arrives, and each candidate keeps only its
per-row errors (a few numbers per row and output). The reference's kept outputs are its outputs on the whole
validation set (memory: the reference's output size x rows). Shards merge: their rows add.

The dataset is an npz of inputs (`images_key`): images [N, H, W], [N, H, W, C], [N, C, H, W], or rows of
features [N, F] (fed as float rows: `preprocess.scale` defaults to 1 for them, `mean`/`std` are per feature);
a labels array is not needed (and not read).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from trtverify.config.stages import E2EStage, Strict
from trtverify.tasks.base import State, Task, TaskMetrics, largest_drops
from trtverify.tasks.batches import Batch
from trtverify.tasks.datasets import Reader, nhwc, npz_array, open_npz
from trtverify.util.errors import UsageError
from trtverify.util.record import Record

PERCENTILES = (50, 95)


def read_npz(path: Any, keys: Sequence[str]) -> dict[str, np.ndarray]:
    """The arrays `keys` of the npz at `path`, read now (no pickle), each of numbers with one row per sample;
    UsageError naming the file and key."""
    out = {}
    with open_npz(path) as data:
        for key in keys:
            arr = npz_array(data, key, path)
            if arr.ndim == 0:
                raise UsageError(f"{path}: array '{key}' must hold numbers, one row per sample, got {arr.dtype} "
                                 f"{list(arr.shape)}")  # fmt: skip
            out[key] = arr
    return out


def input_rows(cfg: E2EStage, inputs: np.ndarray, label: Any) -> tuple[Reader, E2EStage]:
    """A reader of the npz inputs (`images_key`) and the stage settings to read them with: images as the other
    tasks read them (uint8 HWC until preprocessing), or rows of features [N, F], fed as float rows: layout is
    moot (features last), `preprocess.scale` 1 unless the suite sets it, resize and grayscale refused."""
    ds = cfg.dataset
    n = len(inputs) if ds.limit is None else min(ds.limit, len(inputs))
    info = {"source": str(ds.npz)}
    if inputs.ndim == 2:
        pre = cfg.preprocess
        if pre.hook is None:
            if pre.resize is not None or pre.grayscale:
                raise UsageError(f"{ds.npz}: '{ds.images_key}' holds rows of features {list(inputs.shape)}, not "
                                 "images: remove preprocess.resize and preprocess.grayscale")  # fmt: skip
            for k in ("mean", "std"):
                v = getattr(pre, k)
                if v is not None and len(v) not in (1, inputs.shape[1]):
                    raise UsageError(f"{ds.npz}: preprocess.{k} has {len(v)} values for rows of "
                                     f"{inputs.shape[1]} features: give one per feature")  # fmt: skip
            scale = pre.scale if "scale" in pre.model_fields_set else 1.0
            pre = pre.model_copy(update={"layout": "NHWC", "scale": scale})  # NHWC: the last axis, untouched
        cfg = cfg.model_copy(update={"preprocess": pre})
        return Reader(list(range(n)), lambda i: inputs[i], label, ds.class_names, info=info), cfg
    inputs, info["layout"] = nhwc(inputs, ds, "rows of features [N, F] or images [N,H,W], [N,H,W,C] or [N,C,H,W]")
    return Reader(list(range(n)), lambda i: inputs[i], label, ds.class_names, info=info), cfg


def row_errors(ref: np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of two [B, ...] arrays: rel_l2 and max_abs (float64); inf where the candidate is not finite and
    the reference is, or where only the reference is zero. A NaN or inf in both, the same, differs by nothing."""
    r = np.asarray(ref, np.float64).reshape(len(ref), -1)
    c = np.asarray(cand, np.float64).reshape(len(cand), -1)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(c - r)
    d[~np.isfinite(d)] = math.inf  # NaN or inf in the candidate (or the reference): no bound on the error
    same = (np.isnan(r) & np.isnan(c)) | (np.isinf(r) & (r == c))  # the same NaN or inf in both: no difference
    d[same] = 0.0
    r = np.where(np.isfinite(r), r, 0.0)  # the norm of the reference over its finite values
    max_abs = d.max(axis=1) if d.shape[1] else np.zeros(len(d))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        num = np.sqrt(np.square(d).sum(axis=1))
        den = np.sqrt(np.square(r).sum(axis=1))
        rel = np.where(den == 0, np.where(num == 0, 0.0, math.inf), num / np.where(den == 0, 1.0, den))
    return rel, max_abs


def percentile(values: np.ndarray, q: float) -> float:
    """numpy's default (linear) percentile, inf where it interpolates towards an inf (numpy gives NaN there)."""
    s = np.sort(np.asarray(values, np.float64))
    pos = q / 100 * (len(s) - 1)
    lo, frac = int(math.floor(pos)), pos - math.floor(pos)
    if frac == 0:
        return float(s[lo])
    a, b = float(s[lo]), float(s[lo + 1])
    return math.inf if math.isinf(b) else a + frac * (b - a)


def _stats(rel: np.ndarray, max_abs: np.ndarray) -> dict[str, float]:
    if not rel.size:
        return {"rel_l2_p50": math.nan, "rel_l2_p95": math.nan, "rel_l2_max": math.nan, "max_abs": math.nan}
    p50, p95 = (percentile(rel, q) for q in PERCENTILES)
    return {"rel_l2_p50": p50, "rel_l2_p95": p95, "rel_l2_max": float(rel.max()), "max_abs": float(max_abs.max())}


class OutputErrors(Record):
    """One model output: the distribution of the per-row errors against the reference's."""

    output: str
    rel_l2_p50: float
    rel_l2_p95: float
    rel_l2_max: float
    max_abs: float


class CompareMetrics(TaskMetrics):
    """A model's outputs against the reference's (the reference's own: 0)."""

    rel_l2_p50: float = Field(description="median over the rows of rel_l2 (the largest over the outputs)")
    rel_l2_p95: float = Field(description="95th percentile over the rows of rel_l2 (linear interpolation)")
    rel_l2_max: float = Field(description="the largest rel_l2 of any row and output")
    max_abs: float = Field(description="the largest |candidate - reference| of any element")
    inf_rows: int = Field(description="rows where an output's rel_l2 is inf (a NaN or inf the reference lacks)")
    rows: int = Field(description="rows compared")
    per_output: list[OutputErrors]


class OutputRise(Record):
    """One output: the candidate's rel_l2 p95 and max_abs against the reference (per_class of task compare)."""

    output: str
    candidate_rel_l2_p95: float
    candidate_rel_l2_max: float
    candidate_max_abs: float


class CompareWorst(Record):
    """A row whose outputs moved most from the reference's, largest rel_l2 first."""

    index: int = Field(description="position in the dataset")
    id: Any = Field(description="the dataset's id of the row")
    output: str = Field(description="the output where the row's rel_l2 is largest")
    rel_l2: float
    row_max_abs: float = Field(description="max |candidate - reference| of that output on the row")


class CompareOptions(Strict):
    """Settings of task compare (`stages.e2e.options`)."""

    outputs: list[str] | None = Field(default=None, min_length=1, description="outputs compared (default: all)")


class CompareAccumulator:
    """The reference's outputs by row (`reference` None: this is the reference), or a candidate's errors by row
    and output against them."""

    def __init__(self, reference: CompareAccumulator | None) -> None:
        self.reference = reference
        self.kept: dict[int, dict[str, np.ndarray]] = {}  # the reference's outputs of each row
        self.ids: list[int] = []
        self.rel: dict[str, list[float]] = {}
        self.max_abs: dict[str, list[float]] = {}

    def update(self, positions: Sequence[int], outputs: dict[str, np.ndarray]) -> None:
        if self.reference is None:
            for k, i in enumerate(positions):
                self.kept[int(i)] = {name: np.array(v[k]) for name, v in outputs.items()}
                for name in outputs:
                    self.rel.setdefault(name, []).append(0.0)
                    self.max_abs.setdefault(name, []).append(0.0)
            self.ids += [int(i) for i in positions]
            return
        ref_rows = [self.reference.kept.get(int(i)) for i in positions]
        if any(r is None for r in ref_rows):
            raise ValueError("a candidate's row came before the reference's (the reference runs first)")
        for name, cand in outputs.items():
            if name not in ref_rows[0]:  # type: ignore[operator]
                raise ValueError(f"output '{name}' is not an output of the reference ({', '.join(ref_rows[0])})")  # type: ignore[arg-type]
            ref = np.stack([r[name] for r in ref_rows])  # type: ignore[index]
            if ref.shape != cand.shape:
                raise ValueError(f"output '{name}': shape {list(cand.shape)}, the reference's {list(ref.shape)}")
            rel, mx = row_errors(ref, cand)
            self.rel.setdefault(name, []).extend(rel.tolist())
            self.max_abs.setdefault(name, []).extend(mx.tolist())
        self.ids += [int(i) for i in positions]

    def merge(self, other: CompareAccumulator) -> None:
        both = set(self.ids) & set(other.ids)
        if both:
            raise ValueError(f"the shards overlap: {len(both)} rows in both (e.g. {min(both)})")
        if self.rel and set(self.rel) != set(other.rel):
            raise ValueError(f"cannot merge outputs {sorted(other.rel)} into {sorted(self.rel)}")
        self.ids += other.ids
        for name in other.rel:
            self.rel.setdefault(name, []).extend(other.rel[name])
            self.max_abs.setdefault(name, []).extend(other.max_abs[name])

    def compute(self) -> CompareMetrics:
        if not self.ids:
            raise ValueError("no rows")
        rows = [OutputErrors(output=n, **_stats(np.asarray(self.rel[n]), np.asarray(self.max_abs[n])))
                for n in self.rel]  # fmt: skip
        overall = {k: max(getattr(r, k) for r in rows) for k in ("rel_l2_p50", "rel_l2_p95", "rel_l2_max", "max_abs")}
        inf_rows = int(np.isinf(np.asarray([self.rel[n] for n in self.rel])).any(axis=0).sum())
        return CompareMetrics(**overall, inf_rows=inf_rows, rows=len(self.ids), per_output=rows)

    def per_row(self) -> dict[int, tuple[float, str, float]]:
        """Row position -> (its largest rel_l2 over the outputs, that output, its max_abs)."""
        out: dict[int, tuple[float, str, float]] = {}
        for k, i in enumerate(self.ids):
            best = max(self.rel, key=lambda n: (self.rel[n][k], n))
            out[i] = (self.rel[best][k], best, self.max_abs[best][k])
        return out

    def state(self) -> State:
        names = list(self.rel)
        return {
            "ids": np.asarray(self.ids, np.int64),
            "names": np.asarray(names, dtype=np.str_),
            "rel": np.asarray([self.rel[n] for n in names], np.float64).reshape(len(names), len(self.ids)),
            "max_abs": np.asarray([self.max_abs[n] for n in names], np.float64).reshape(len(names), len(self.ids)),
        }

    @classmethod
    def from_state(cls, state: State) -> CompareAccumulator:
        acc = cls(None)
        acc.ids = [int(i) for i in state["ids"]]
        for k, n in enumerate(str(n) for n in state["names"]):
            acc.rel[n] = [float(v) for v in state["rel"][k]]
            acc.max_abs[n] = [float(v) for v in state["max_abs"][k]]
        return acc


class CompareTask(Task):
    name = "compare"
    metrics_type = CompareMetrics
    per_class_type = OutputRise
    worst_type = CompareWorst

    def __init__(self, cfg: E2EStage, reader: Reader, search_path: Sequence[Path] = ()):
        super().__init__(cfg, reader, search_path)
        self._reference: CompareAccumulator | None = None

    @classmethod
    def read(cls, cfg: E2EStage) -> tuple[Reader, E2EStage]:
        inputs = read_npz(cfg.dataset.npz, [cfg.dataset.images_key])[cfg.dataset.images_key]
        return input_rows(cfg, inputs, lambda i: None)

    def accumulator(self) -> CompareAccumulator:
        """The first one made is the reference's (the e2e stage makes it first); the others compare with it."""
        acc = CompareAccumulator(self._reference)
        if self._reference is None:
            self._reference = acc
        return acc

    def restore(self, state: State) -> CompareAccumulator:
        return CompareAccumulator.from_state(state)

    def postprocess(self, outputs: dict[str, np.ndarray], batch: Batch, model: str) -> dict[str, np.ndarray]:
        wanted = self.options.outputs if self.options is not None and self.options.outputs else list(outputs)
        missing = [n for n in wanted if n not in outputs]
        if missing:
            raise UsageError(f"{model}: no output {', '.join(missing)} (outputs: {', '.join(outputs)}); fix "
                             "stages.e2e.options.outputs")  # fmt: skip
        out = {n: np.asarray(outputs[n]) for n in wanted}
        for n, v in out.items():
            if v.ndim == 0 or len(v) != len(batch.index):
                raise UsageError(f"{model}: output '{n}' of shape {list(v.shape)} has no batch axis of "
                                 f"{len(batch.index)} rows; task compare compares outputs row by row")  # fmt: skip
        return out

    def update(self, acc: Any, positions: Sequence[int], predictions: Any, labels: Sequence[Any]) -> None:
        try:
            acc.update(list(positions), predictions)
        except ValueError as exc:
            raise UsageError(f"compare: {exc}") from exc

    def per_sample(self, acc: Any) -> dict[int, tuple[float, str, float]]:
        return acc.per_row()

    def worst(self, reference: Any, candidate: Any, n: int) -> list[Record]:
        rel = {i: -v[0] for i, v in candidate.items()}  # largest_drops ranks drops: a rise of rel_l2 from 0
        rows = largest_drops({i: 0.0 for i in candidate}, rel, lambda i: i)
        return [
            CompareWorst(
                index=i,
                id=self.reader.ids[i],
                output=candidate[i][1],
                rel_l2=candidate[i][0],
                row_max_abs=candidate[i][2],
            )  # fmt: skip
            for _, i in rows[:n]
        ]

    def per_class(self, reference: TaskMetrics, candidate: TaskMetrics) -> list[Record]:
        assert isinstance(candidate, CompareMetrics)
        rows = sorted(candidate.per_output, key=lambda r: (-r.rel_l2_p95, r.output))
        return [OutputRise(output=r.output, candidate_rel_l2_p95=r.rel_l2_p95, candidate_rel_l2_max=r.rel_l2_max,
                           candidate_max_abs=r.max_abs) for r in rows]  # fmt: skip
