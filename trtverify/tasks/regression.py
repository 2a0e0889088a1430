"""Task `regression`: a model's outputs against target values, per output and over all of them.

Definitions (error e = prediction - target, over the rows of the validation set; an "output" is one column
of the flattened prediction, named by `options.output_names`):
- mae = mean |e| (scikit-learn's `mean_absolute_error`; over all outputs: its `uniform_average`);
- rmse = sqrt(mean e^2) (the square root of scikit-learn's `mean_squared_error`; over all outputs: the root
  of the mean squared error of every element, not a mean of per-output RMSEs);
- max_error = max |e| (scikit-learn's `max_error`, which takes one output; over all outputs: the largest);
- rel_error = mean |e| / max(|target|, eps) (scikit-learn's `mean_absolute_percentage_error`, a fraction, not
  per cent; eps: `options.eps`, default scikit-learn's, float64's machine epsilon; set it to the scale below
  which targets count as zero when targets near 0 occur);
- nonfinite = predicted values that are NaN or inf. Such a value has no bound on its error: it counts as an
  infinite error (mae, rmse, max_error and rel_error become inf), so a gate on any of them fails.

Errors are lower-is-better: gate them with `max_rise` (candidate - reference), e.g.
`{metric: rmse, max_rise: 0.01}`. The accumulator keeps |e| and |e| / max(|t|, eps) per row and output
(float64), so shards merge exactly.

The dataset is an npz of inputs (`images_key`: rows of features [N, F], or images) and targets (`labels_key`:
[N] or [N, K], any shape flattened per row to the prediction's K values).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import Field

from trtverify.config.stages import E2EStage, Strict
from trtverify.tasks.base import State, Task, TaskMetrics, call_hook, largest_drops, select_output
from trtverify.tasks.batches import Batch
from trtverify.tasks.compare import input_rows, read_npz
from trtverify.tasks.datasets import Reader
from trtverify.util.errors import UsageError
from trtverify.util.record import Record

SKLEARN_EPS = float(np.finfo(np.float64).eps)  # sklearn.metrics.mean_absolute_percentage_error's


class RegressionOptions(Strict):
    """Settings of task regression (`stages.e2e.options`)."""

    output_names: list[str] | None = Field(
        default=None, min_length=1, description="a name per output column (default: 0, 1, ...)"
    )
    eps: float = Field(
        default=SKLEARN_EPS, gt=0, description="rel_error's floor of |target| (default: scikit-learn's, 2.2e-16)"
    )


class OutputError(Record):
    """One output column's errors."""

    output: str
    mae: float
    rmse: float
    max_error: float
    rel_error: float
    nonfinite: int


class RegressionMetrics(TaskMetrics):
    mae: float = Field(description="mean |prediction - target| over every row and output")
    rmse: float = Field(description="sqrt(mean (prediction - target)^2) over every row and output")
    max_error: float = Field(description="the largest |prediction - target|")
    rel_error: float = Field(description="mean |prediction - target| / max(|target|, eps)")
    nonfinite: int = Field(description="predicted values that are NaN or inf (their error counts as inf)")
    samples: int = Field(description="rows")
    per_output: list[OutputError]


class OutputErrorRise(Record):
    """One output: the reference's MAE and RMSE, the candidate's, and how much they rose."""

    output: str
    reference_mae: float
    candidate_mae: float
    mae_rise: float
    reference_rmse: float
    candidate_rmse: float
    rmse_rise: float


class RegressionWorst(Record):
    """A row whose error rose most, largest rise first (error: mean |prediction - target| over the outputs)."""

    index: int = Field(description="position in the dataset")
    id: Any = Field(description="the dataset's id of the row")
    reference_error: float
    candidate_error: float
    error_rise: float


class RegressionAccumulator:
    """|error| and relative |error| per row and output."""

    def __init__(self, eps: float = SKLEARN_EPS, names: Sequence[str] | None = None) -> None:
        self.eps = eps
        self.names = list(names) if names is not None else None
        self.ids: list[int] = []
        self._abs: list[np.ndarray] = []
        self._rel: list[np.ndarray] = []
        self._nonfinite: list[np.ndarray] = []

    def update(self, ids: Sequence[int], predictions: np.ndarray, targets: np.ndarray) -> None:
        """Rows of predictions [B, K] against targets [B, K]."""
        pred = np.asarray(predictions, np.float64).reshape(len(predictions), -1)
        truth = np.asarray(targets, np.float64).reshape(len(targets), -1)
        if pred.shape != truth.shape:
            raise ValueError(f"{pred.shape[1]} predicted values per row for {truth.shape[1]} targets")
        if len(ids) != len(pred):
            raise ValueError(f"{len(ids)} ids for {len(pred)} rows")
        if self.names is not None and len(self.names) != pred.shape[1]:
            raise ValueError(f"{len(self.names)} output_names for {pred.shape[1]} outputs")
        if not np.isfinite(truth).all():
            raise ValueError(f"a target of row {ids[int(np.flatnonzero(~np.isfinite(truth).all(axis=1))[0])]} is "
                             "not finite")  # fmt: skip
        bad = ~np.isfinite(pred)
        err = np.abs(np.where(bad, 0.0, pred) - truth)
        err[bad] = math.inf
        self._abs.append(err)
        self._rel.append(err / np.maximum(np.abs(truth), self.eps))
        self._nonfinite.append(bad.sum(axis=0))
        self.ids += [int(i) for i in ids]

    def merge(self, other: RegressionAccumulator) -> None:
        both = set(self.ids) & set(other.ids)
        if both:
            raise ValueError(f"the shards overlap: {len(both)} rows in both (e.g. {min(both)})")
        self.ids += other.ids
        self._abs += other._abs
        self._rel += other._rel
        self._nonfinite += other._nonfinite

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k = self._abs[0].shape[1] if self._abs else 0
        ab = np.concatenate(self._abs) if self._abs else np.zeros((0, k))
        rel = np.concatenate(self._rel) if self._rel else np.zeros((0, k))
        nonfinite = np.sum(self._nonfinite, axis=0) if self._nonfinite else np.zeros(k, np.int64)
        return ab, rel, nonfinite

    def compute(self) -> RegressionMetrics:
        if not self.ids:
            raise ValueError("no rows")
        ab, rel, nonfinite = self._arrays()
        names = self.names or [str(i) for i in range(ab.shape[1])]
        sq = np.square(ab)
        rows = [
            OutputError(
                output=names[j],
                mae=float(ab[:, j].mean()),
                rmse=math.sqrt(float(sq[:, j].mean())),
                max_error=float(ab[:, j].max()),
                rel_error=float(rel[:, j].mean()),
                nonfinite=int(nonfinite[j]),
            )  # fmt: skip
            for j in range(ab.shape[1])
        ]
        return RegressionMetrics(
            mae=float(ab.mean()),
            rmse=math.sqrt(float(sq.mean())),
            max_error=float(ab.max()),
            rel_error=float(rel.mean()),
            nonfinite=int(nonfinite.sum()),
            samples=len(self.ids),
            per_output=rows,
        )

    def per_row(self) -> dict[int, float]:
        """Row position -> its mean |error| over the outputs."""
        ab, _, _ = self._arrays()
        return dict(zip(self.ids, ab.mean(axis=1).tolist()))

    def state(self) -> State:
        ab, rel, nonfinite = self._arrays()
        return {"ids": np.asarray(self.ids, np.int64), "abs": ab, "rel": rel, "nonfinite": nonfinite}

    @classmethod
    def from_state(cls, state: State, eps: float, names: Sequence[str] | None) -> RegressionAccumulator:
        acc = cls(eps, names)
        acc.ids = [int(i) for i in state["ids"]]
        if acc.ids:
            acc._abs = [np.asarray(state["abs"], np.float64)]
            acc._rel = [np.asarray(state["rel"], np.float64)]
            acc._nonfinite = [np.asarray(state["nonfinite"], np.int64)]
        return acc


class RegressionTask(Task):
    name = "regression"
    metrics_type = RegressionMetrics
    per_class_type = OutputErrorRise
    worst_type = RegressionWorst
    reads_arrays = True

    @classmethod
    def read(cls, cfg: E2EStage) -> tuple[Reader, E2EStage]:
        ds = cfg.dataset
        arrays = read_npz(ds.npz, [ds.images_key, ds.labels_key])
        inputs, targets = arrays[ds.images_key], arrays[ds.labels_key]
        if len(targets) != len(inputs):
            raise UsageError(f"{ds.npz}: {len(inputs)} rows of '{ds.images_key}' but {len(targets)} targets "
                             f"('{ds.labels_key}')")  # fmt: skip
        return input_rows(cfg, inputs, lambda i: targets[i])

    def accumulator(self) -> RegressionAccumulator:
        return RegressionAccumulator(self.options.eps, self.options.output_names)

    def restore(self, state: State) -> RegressionAccumulator:
        return RegressionAccumulator.from_state(state, self.options.eps, self.options.output_names)

    def postprocess(self, outputs: dict[str, np.ndarray], batch: Batch, model: str) -> np.ndarray:
        if self.hook is not None:
            pred = np.asarray(call_hook(self.hook, outputs))
        else:
            pred = np.asarray(select_output(outputs, self.cfg.postprocess.output, model))
        if pred.ndim == 0 or len(pred) != len(batch.index) or pred.dtype.kind not in "biuf":
            raise UsageError(f"{model}: regression output {pred.dtype} {list(pred.shape)} is not one row of numbers "
                             f"per sample of the batch of {len(batch.index)}; name the output "
                             "(postprocess.output) or give a postprocess.hook")  # fmt: skip
        return pred

    def update(self, acc: Any, positions: Sequence[int], predictions: Any, labels: Sequence[Any]) -> None:
        try:
            acc.update(list(positions), predictions, np.stack([np.asarray(t) for t in labels]))
        except ValueError as exc:
            raise UsageError(f"regression: {exc}") from exc

    def per_sample(self, acc: Any) -> dict[int, float]:
        return acc.per_row()

    def worst(self, reference: Any, candidate: Any, n: int) -> list[Record]:
        neg = {i: -v for i, v in reference.items()}  # largest_drops ranks drops: an error's rise is a drop of -error
        rows = largest_drops(neg, {i: -v for i, v in candidate.items()}, lambda i: i)
        return [
            RegressionWorst(
                index=i, id=self.reader.ids[i], reference_error=reference[i], candidate_error=candidate[i], error_rise=d
            )  # fmt: skip
            for d, i in rows[:n]
        ]

    def per_class(self, reference: TaskMetrics, candidate: TaskMetrics) -> list[Record]:
        assert isinstance(reference, RegressionMetrics) and isinstance(candidate, RegressionMetrics)
        by = {r.output: r for r in candidate.per_output}
        rows = []
        for r in reference.per_output:
            c = by.get(r.output)
            if c is None:
                continue
            rows.append(OutputErrorRise(output=r.output, reference_mae=r.mae, candidate_mae=c.mae,
                                        mae_rise=c.mae - r.mae, reference_rmse=r.rmse, candidate_rmse=c.rmse,
                                        rmse_rise=c.rmse - r.rmse))  # fmt: skip
        return sorted(rows, key=lambda row: -row.mae_rise if row.mae_rise == row.mae_rise else math.inf)
