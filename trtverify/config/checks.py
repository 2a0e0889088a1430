"""Tensor metrics as the suite names them, and checks (a threshold on one metric).

The table says what each metric is, which way is better and which thresholds make sense;
`trtverify.compare.metrics` computes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from trtverify.config.types import Strict
from trtverify.util.errors import unknown

Better = Literal["lower", "higher"]


@dataclass(frozen=True)
class MetricSpec:
    name: str
    better: Better
    doc: str
    low: float | None = None  # valid threshold range (inclusive)
    high: float | None = None
    params: dict[str, Any] = field(default_factory=dict)  # parameter -> default

    @property
    def threshold_key(self) -> str:
        return "max" if self.better == "lower" else "min"


METRICS: dict[str, MetricSpec] = {
    m.name: m
    for m in [
        MetricSpec("max_abs", "lower", "largest |b - a|", low=0.0),
        MetricSpec("mean_abs", "lower", "mean |b - a|", low=0.0),
        MetricSpec("max_rel", "lower", "largest |b - a| / |a| (0/0 = 0, x/0 = inf)", low=0.0),
        MetricSpec("rel_l2", "lower", "||b - a||_2 / ||a||_2", low=0.0),
        MetricSpec("cosine", "higher", "cosine similarity of the flattened tensors", low=-1.0, high=1.0),
        MetricSpec("sqnr", "higher", "signal-to-quantisation-noise ratio in dB: 10 log10(sum a^2 / sum (b-a)^2)"),
        MetricSpec(
            "frac_outside_tol",
            "lower",
            "fraction of elements with |b - a| > atol + rtol * |a|",
            low=0.0,
            high=1.0,
            params={"atol": 1e-5, "rtol": 1e-3},
        ),
        MetricSpec(
            "topk_agreement",
            "higher",
            "fraction of rows (last axis = classes) whose top-k class sets agree; k=1 is argmax agreement",
            low=0.0,
            high=1.0,
            params={"k": 1},
        ),
    ]
}

# computed for every pair, whatever the checks ask for
BASE_METRICS = ("max_abs", "mean_abs", "max_rel", "rel_l2", "cosine", "sqnr")


def metric_key(name: str, params: dict[str, Any] | None) -> str:
    """Stable key of a (possibly parameterised) metric, e.g. 'topk_agreement@k=5'."""
    spec = METRICS[name]
    if not spec.params:
        return name
    p = {**spec.params, **(params or {})}
    return name + "@" + ",".join(f"{k}={p[k]:g}" if isinstance(p[k], float) else f"{k}={p[k]}" for k in sorted(p))


def better_of(key: str) -> Better:
    """Which way a metric key ('rel_l2', 'topk_agreement@k=5') is better."""
    return METRICS[key.split("@")[0]].better


class Check(Strict):
    """One threshold on one metric, e.g. {metric: cosine, min: 0.9999}."""

    metric: str = Field(description=f"one of: {', '.join(METRICS)}")
    min: float | None = Field(default=None, description="lowest passing value (higher-is-better metrics)")
    max: float | None = Field(default=None, description="highest passing value (lower-is-better metrics)")
    atol: float | None = Field(default=None, ge=0, description="frac_outside_tol: absolute tolerance (default 1e-5)")
    rtol: float | None = Field(default=None, ge=0, description="frac_outside_tol: relative tolerance (default 1e-3)")
    k: int | None = Field(default=None, ge=1, description="topk_agreement: size of the top-k sets (default 1)")

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, v: str) -> str:
        if v not in METRICS:
            raise ValueError(unknown("metric", v, METRICS))
        return v

    @model_validator(mode="after")
    def _threshold(self) -> Check:
        spec = METRICS[self.metric]
        want = spec.threshold_key
        other = "min" if want == "max" else "max"
        if getattr(self, other) is not None:
            raise ValueError(
                f"'{self.metric}' is {'lower' if want == 'max' else 'higher'}-is-better: give '{want}', not '{other}'"
            )
        value = getattr(self, want)
        if value is None:
            raise ValueError(f"'{self.metric}' needs a threshold: {{metric: {self.metric}, {want}: VALUE}}")
        if value != value:
            raise ValueError(f"threshold '{want}' is NaN")
        if spec.low is not None and value < spec.low:
            raise ValueError(f"threshold {want}: {value} is out of range for {self.metric} (must be >= {spec.low:g})")
        if spec.high is not None and value > spec.high:
            raise ValueError(f"threshold {want}: {value} is out of range for {self.metric} (must be <= {spec.high:g})")
        for p in ("atol", "rtol", "k"):
            if getattr(self, p) is not None and p not in spec.params:
                allowed = ", ".join(spec.params) or "none"
                raise ValueError(f"'{p}' does not apply to metric '{self.metric}' (its parameters: {allowed})")
        return self

    @property
    def threshold(self) -> float:
        return float(self.max if self.max is not None else self.min)  # type: ignore[arg-type]

    @property
    def params(self) -> dict[str, Any]:
        spec = METRICS[self.metric]
        return {p: (getattr(self, p) if getattr(self, p) is not None else d) for p, d in spec.params.items()}

    @property
    def key(self) -> str:
        """The metric key this check reads ('rel_l2', 'topk_agreement@k=5')."""
        return metric_key(self.metric, self.params)

    @property
    def op(self) -> str:
        return "<=" if self.max is not None else ">="

    @property
    def condition(self) -> str:
        """'rel_l2 <= 0.01': how checks on this threshold are named."""
        return f"{self.key} {self.op} {self.threshold:g}"

    def passes(self, value: float) -> bool:
        if value != value:  # NaN never passes
            return False
        return value <= self.threshold if self.max is not None else value >= self.threshold
