"""Image restoration and super-resolution: PSNR and SSIM of each output image against its high-quality target.

Conventions (those of the super-resolution literature, e.g. BasicSR's `calculate_psnr` / `calculate_ssim` and the
MATLAB code they reproduce):
- the model's output is read in `output_range` ([0, 1] by default), mapped to [0, `data_range`] and clipped there;
  with data_range 255 it is also rounded to 8-bit levels, as saving it as an image would (BasicSR's `tensor2img`);
  uint8 targets are [0, 255], uint16 [0, 65535], float targets are read in `target_range` (default: output_range);
- an output value that is not finite: +inf and -inf clip to the range's ends; a NaN counts as the largest error
  possible there (the end of the range farthest from the target), and `nonfinite` counts them all;
- `crop_border` pixels are cut from each side of both images first (default: the SR scale, the target's size over
  the input's; 0 for restoration at the input's size);
- channels `y`: the luma of ITU-R BT.601 as MATLAB's rgb2ycbcr computes it (Y = 16 + 65.481 R + 128.553 G +
  24.966 B for R, G, B in [0, 1], so [16, 235] of 255), in data_range units; one-channel images are their own Y;
  channels `rgb`: every channel;
- PSNR = 10 log10(data_range^2 / MSE) per image (capped at MAX_PSNR for an image reproduced exactly), then the mean
  over images; SSIM: Wang et al. 2004 (an 11 x 11 Gaussian window of sigma 1.5, K1 0.01, K2 0.03, population
  (co)variances), the mean of its map over the window positions inside the image, per channel then averaged, per
  image then averaged;
- LPIPS (Zhang et al. 2018, AlexNet) only with `lpips: true` and where the `lpips` package is installed: else the
  metrics say why it was skipped.

The accumulator keeps a few numbers per image (MSE, SSIM, per-channel MSE), so shards merge exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from trtverify.config.types import Strict
from trtverify.tasks.base import ClassRow, State, Task, TaskMetrics, call_hook, class_deltas, largest_drops
from trtverify.tasks.base import select_output as _select_output
from trtverify.tasks.batches import Batch
from trtverify.util.errors import UsageError
from trtverify.util.record import Record, optional
from trtverify.util.words import count

MAX_PSNR = 100.0  # dB: an image reproduced exactly (MSE 0) would be +inf; the mean stays a number
K1, K2, WINDOW, SIGMA = 0.01, 0.03, 11, 1.5
BT601_Y = np.array([65.481, 128.553, 24.966]) / 255.0  # Y of R, G, B in [0, 1], over 255
CLIPPED_SHARE = 0.5  # a reference with more of its output values outside output_range than this: wrong range?


class RestorationOptions(Strict):
    """`stages.e2e.options` of task restoration."""

    channels: Literal["y", "rgb"] = Field(default="y", description="PSNR and SSIM on BT.601 luma (y) or RGB")
    data_range: Literal[1.0, 255.0] = Field(
        default=255.0, description="the images' range in the metrics; 255 rounds the output to 8-bit levels"
    )
    output_range: tuple[float, float] = Field(default=(0.0, 1.0), description="the model's black and white")
    target_range: tuple[float, float] | None = Field(
        default=None, description="float targets' black and white (default: output_range); integer targets: 0..max"
    )
    scale: int | None = Field(default=None, ge=1, description="SR scale; default: the target's size over the input's")
    crop_border: int | None = Field(default=None, ge=0, description="pixels cut from each side; default: the scale")
    output_layout: Literal["NCHW", "NHWC"] = Field(default="NCHW", description="the model output's layout")
    lpips: bool = Field(default=False, description="also LPIPS (AlexNet), where the lpips package is installed")

    @field_validator("output_range", "target_range")
    @classmethod
    def _increasing(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and not value[0] < value[1]:
            raise ValueError(f"[black, white] must increase, got {list(value)}")
        return value


class ChannelPSNR(ClassRow):
    """One channel of the output (R, G, B), whatever `channels` the headline metrics use."""

    name: str
    psnr: float = Field(description="mean over images of this channel's PSNR (dB)")


class RestorationMetrics(TaskMetrics):
    psnr: float = Field(description="mean over images of PSNR (dB), on the channels the options name")
    ssim: float = Field(description="mean over images of SSIM")
    psnr_min: float = Field(description="the lowest image PSNR (dB)")
    ssim_min: float = Field(description="the lowest image SSIM")
    lpips: float | None = optional("mean over images of LPIPS (lower is better); only with options.lpips")
    skipped: list[str] = Field(default_factory=list, description="metrics asked for and not computed, and why")
    per_class: list[ChannelPSNR] | None = optional("per output channel (R, G, B): its PSNR")
    samples: int = Field(description="images")
    nonfinite: int = Field(description="output values that were NaN or infinite")
    clipped_share: float = Field(description="share of the output values outside output_range (clipped)")


class ChannelPSNRDelta(ClassRow):
    """One output channel: the reference's PSNR, the candidate's and the difference."""

    name: str | None
    reference_psnr: float | None
    candidate_psnr: float | None
    delta_psnr: float | None = optional("candidate - reference")


class RestorationWorst(Record):
    """An image whose PSNR dropped, largest drop first."""

    index: int = Field(description="position in the dataset")
    id: Any = Field(description="the dataset's id of the image (npz position)")
    reference_psnr: float
    candidate_psnr: float
    psnr_drop: float
    reference_ssim: float
    candidate_ssim: float


def _gaussian() -> np.ndarray:
    x = np.arange(WINDOW, dtype=np.float64) - (WINDOW - 1) / 2
    g = np.exp(-(x**2) / (2 * SIGMA**2))
    return g / g.sum()


_G = _gaussian()


def _filter(x: np.ndarray) -> np.ndarray:
    """The 11 x 11 Gaussian window over a 2-D image, at the positions where it fits inside ('valid')."""
    rows = np.lib.stride_tricks.sliding_window_view(x, WINDOW, axis=1) @ _G
    return np.lib.stride_tricks.sliding_window_view(rows, WINDOW, axis=0) @ _G


def ssim(a: np.ndarray, b: np.ndarray, data_range: float) -> float:
    """SSIM of two 2-D images (Wang et al. 2004, eq. 13, averaged over the window positions inside the image)."""
    if min(a.shape) < WINDOW:
        raise ValueError(
            f"SSIM needs images of at least {WINDOW} x {WINDOW} pixels after cropping, got {list(a.shape)}"
        )
    c1, c2 = (K1 * data_range) ** 2, (K2 * data_range) ** 2
    mu_a, mu_b = _filter(a), _filter(b)
    var_a = _filter(a * a) - mu_a**2
    var_b = _filter(b * b) - mu_b**2
    cov = _filter(a * b) - mu_a * mu_b
    num = (2 * mu_a * mu_b + c1) * (2 * cov + c2)
    den = (mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2)
    return float(np.mean(num / den))


def psnr(mse: float, data_range: float) -> float:
    """10 log10(data_range^2 / mse), at most MAX_PSNR."""
    return MAX_PSNR if mse <= 0 else min(MAX_PSNR, 10.0 * math.log10(data_range**2 / mse))


def to_y(img: np.ndarray, data_range: float) -> np.ndarray:
    """[H, W, C] in [0, data_range] -> [H, W, 1]: BT.601 luma (MATLAB rgb2ycbcr's Y) for 3 channels, else as is."""
    if img.shape[-1] != 3:
        return img
    return (img @ BT601_Y + 16.0 / 255.0 * data_range)[..., None]


def as_hwc(arr: np.ndarray) -> np.ndarray:
    """A target or output image [H, W], [H, W, C] or [C, H, W] (C 1, 3 or 4) -> [H, W, C]."""
    arr = np.asarray(arr)
    if arr.ndim == 2:
        return arr[..., None]
    if arr.ndim != 3:
        raise ValueError(f"an image must be [H, W], [H, W, C] or [C, H, W], got shape {list(arr.shape)}")
    if arr.shape[0] in (1, 3, 4) and arr.shape[-1] not in (1, 3, 4):
        return arr.transpose(1, 2, 0)
    return arr


class RestorationAccumulator:
    """Per image: MSE and SSIM on the measured channels, MSE per output channel; counts of odd output values."""

    def __init__(self, options: RestorationOptions, lpips_net: Any = None, skipped: Sequence[str] = ()) -> None:
        self.o = options
        self.lpips_net = lpips_net
        self.skipped = list(skipped)
        self._ids: list[int] = []
        self._mse: list[float] = []
        self._ssim: list[float] = []
        self._lpips: list[float] = []
        self._channel_mse: list[np.ndarray] = []
        self._nonfinite = 0
        self._clipped = 0
        self._values = 0

    def _target(self, label: np.ndarray) -> np.ndarray:
        t = as_hwc(label)
        if t.dtype.kind in "iub":  # 0 is black, the type's largest value white (uint8: 255)
            lo, hi = 0.0, 1.0 if t.dtype.kind == "b" else float(np.iinfo(t.dtype).max)
        else:
            lo, hi = self.o.target_range or self.o.output_range
        return np.clip((t.astype(np.float64) - lo) / (hi - lo), 0.0, 1.0) * self.o.data_range

    def _output(self, out: np.ndarray, target: np.ndarray) -> np.ndarray:
        lo, hi = self.o.output_range
        x = (np.asarray(out, np.float64) - lo) / (hi - lo) * self.o.data_range
        nan = np.isnan(x)
        self._nonfinite += int(np.count_nonzero(~np.isfinite(x)))
        self._clipped += int(np.count_nonzero((x < 0) | (x > self.o.data_range)))  # inf too; not NaN
        self._values += x.size
        if nan.any():  # the largest error possible at that pixel
            x[nan] = np.where(target[nan] < self.o.data_range / 2, self.o.data_range, 0.0)
        x = np.clip(x, 0.0, self.o.data_range)
        return np.round(x) if self.o.data_range == 255.0 else x

    def update(
        self, ids: Sequence[int], outputs: Sequence[np.ndarray], labels: Sequence[np.ndarray], scales: Sequence[Any]
    ) -> None:
        """Add images: each model output [H, W, C] (in output_range), its target and the SR scale (None: unknown)."""
        if not len(ids) == len(outputs) == len(labels) == len(scales):
            raise ValueError(f"{len(ids)} ids, {len(outputs)} outputs and {len(labels)} targets")
        r = self.o.data_range
        for image_id, out, label, scale in zip(ids, outputs, labels, scales):
            target = self._target(label)
            if np.shape(out) != target.shape:
                raise ValueError(
                    f"image {image_id}: output of shape {list(np.shape(out))} (as HWC) for a target of shape "
                    f"{list(target.shape)}"
                )
            pred = self._output(out, target)
            border = self.o.crop_border if self.o.crop_border is not None else self.o.scale or scale
            if border is None:
                raise ValueError(
                    f"image {image_id}: the target's size is not a whole multiple of the input's: set options.scale "
                    "or options.crop_border"
                )
            if border:
                pred, target = pred[border:-border, border:-border], target[border:-border, border:-border]
            if pred.size == 0:
                raise ValueError(f"image {image_id}: nothing left after cropping {border} pixels from each side")
            self._channel_mse.append(((pred - target) ** 2).mean(axis=(0, 1)))
            if self.lpips_net is not None:
                self._lpips.append(self.lpips_net(pred / r, target / r))
            a, b = (to_y(pred, r), to_y(target, r)) if self.o.channels == "y" else (pred, target)
            self._mse.append(float(((a - b) ** 2).mean()))
            self._ssim.append(float(np.mean([ssim(a[..., c], b[..., c], r) for c in range(a.shape[-1])])))
            self._ids.append(int(image_id))

    def merge(self, other: RestorationAccumulator) -> None:
        """Add the images of another shard of the same validation set."""
        both = set(self._ids) & set(other._ids)
        if both:
            raise ValueError(f"the shards overlap: {count(len(both), 'image')} in both (e.g. {min(both)})")
        self._ids += other._ids
        self._mse += other._mse
        self._ssim += other._ssim
        self._lpips += other._lpips
        self._channel_mse += other._channel_mse
        self._nonfinite += other._nonfinite
        self._clipped += other._clipped
        self._values += other._values

    def per_image(self) -> dict[str, dict[int, float]]:
        """'psnr' and 'ssim': image id -> its value."""
        r = self.o.data_range
        return {
            "psnr": {i: psnr(m, r) for i, m in zip(self._ids, self._mse)},
            "ssim": dict(zip(self._ids, self._ssim)),
        }

    def compute(self) -> RestorationMetrics:
        if not self._ids:
            raise ValueError("no images")
        r = self.o.data_range
        psnrs = [psnr(m, r) for m in self._mse]
        channels = np.stack(self._channel_mse)  # [images, C]
        names = ["R", "G", "B"] if channels.shape[1] == 3 else [str(c) for c in range(channels.shape[1])]
        return RestorationMetrics(
            psnr=float(np.mean(psnrs)),
            ssim=float(np.mean(self._ssim)),
            psnr_min=float(min(psnrs)),
            ssim_min=float(min(self._ssim)),
            lpips=float(np.mean(self._lpips)) if self._lpips else None,
            skipped=self.skipped,
            per_class=[
                ChannelPSNR(class_=c, name=names[c], psnr=float(np.mean([psnr(m, r) for m in channels[:, c]])))
                for c in range(channels.shape[1])
            ],
            samples=len(self._ids),
            nonfinite=self._nonfinite,
            clipped_share=self._clipped / self._values if self._values else 0.0,
        )

    def state(self) -> State:
        return {
            "ids": np.asarray(self._ids, np.int64),
            "mse": np.asarray(self._mse, np.float64),
            "ssim": np.asarray(self._ssim, np.float64),
            "lpips": np.asarray(self._lpips, np.float64),
            "channel_mse": np.stack(self._channel_mse) if self._channel_mse else np.zeros((0, 0)),
            "counts": np.array([self._nonfinite, self._clipped, self._values], np.int64),
        }

    @classmethod
    def from_state(cls, state: State, options: RestorationOptions, skipped: Sequence[str]) -> RestorationAccumulator:
        acc = cls(options, None, skipped)
        acc._ids = [int(i) for i in state["ids"]]
        acc._mse = [float(v) for v in state["mse"]]
        acc._ssim = [float(v) for v in state["ssim"]]
        acc._lpips = [float(v) for v in state["lpips"]]
        acc._channel_mse = list(np.asarray(state["channel_mse"], np.float64))
        acc._nonfinite, acc._clipped, acc._values = (int(v) for v in state["counts"])
        return acc


def _lpips_net() -> tuple[Any, list[str]]:
    """LPIPS (AlexNet) as a function of two [H, W, 3] images in [0, 1], or None and why it is skipped."""
    try:
        import lpips  # noqa: F401  (optional: only where it is installed)
        import torch
    except ImportError as exc:
        return None, [f"lpips: the lpips package cannot be imported ({exc}); pip install lpips"]
    try:  # its AlexNet weights come from torchvision's download cache
        net = lpips.LPIPS(net="alex", verbose=False).eval()
    except Exception as exc:  # noqa: BLE001 - no weights offline, a broken install: skipped, and said why
        return None, [f"lpips: the LPIPS network cannot be made ({type(exc).__name__}: {exc})"]

    def score(a: np.ndarray, b: np.ndarray) -> float:
        if a.shape[-1] != 3:
            a, b = np.repeat(a[..., :1], 3, axis=-1), np.repeat(b[..., :1], 3, axis=-1)
        ta, tb = (torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)))[None].float() * 2 - 1 for x in (a, b))
        with torch.no_grad():
            return float(net(ta, tb).item())

    return score, []


class RestorationTask(Task):
    name = "restoration"
    metrics_type = RestorationMetrics
    per_class_type = ChannelPSNRDelta
    worst_type = RestorationWorst
    reads_arrays = True

    def _lpips(self) -> tuple[Any, list[str]]:
        if not self.options.lpips:
            return None, []
        if not hasattr(self, "_lpips_cache"):
            self._lpips_cache = _lpips_net()
        return self._lpips_cache

    def accumulator(self) -> RestorationAccumulator:
        return RestorationAccumulator(self.options, *self._lpips())

    def restore(self, state: State) -> RestorationAccumulator:
        return RestorationAccumulator.from_state(state, self.options, self._lpips()[1])

    def postprocess(self, outputs: dict[str, np.ndarray], batch: Batch, model: str) -> dict[str, list[Any]]:
        if self.hook is not None:
            images = [as_hwc(np.asarray(x)) for x in call_hook(self.hook, outputs, image_sizes=batch.sizes)]
        else:
            raw = np.asarray(_select_output(outputs, self.cfg.postprocess.output, model))
            if raw.ndim != 4 or raw.dtype.kind != "f":
                raise UsageError(
                    f"{model}: restoration output of shape {list(raw.shape)} ({raw.dtype}) is not a batch of float "
                    f"images [B, C, H, W] ({self.options.output_layout}); name the right output or give a "
                    "postprocess.hook"
                )
            images = list(raw.transpose(0, 2, 3, 1) if self.options.output_layout == "NCHW" else raw)
        if len(images) != len(batch.index):
            raise UsageError(f"{model}: postprocessing returned {len(images)} images for a batch of {len(batch.index)}")
        return {"images": images, "sizes": list(batch.sizes)}

    def update(self, acc: Any, positions: Sequence[int], predictions: Any, labels: Sequence[Any]) -> None:
        scales = []
        for label, (h, w) in zip(labels, predictions["sizes"]):
            th, tw = as_hwc(label).shape[:2] if np.ndim(label) in (2, 3) else (0, 0)
            whole = th % h == 0 and tw % w == 0 and th // h == tw // w and th >= h
            scales.append(th // h if whole else None)
        try:
            acc.update(list(positions), predictions["images"], labels, scales)
        except ValueError as exc:  # outputs that do not fit the targets
            raise UsageError(f"restoration: {exc}") from exc

    def per_sample(self, acc: Any) -> dict[str, dict[int, float]]:
        return acc.per_image()

    def worst(self, reference: Any, candidate: Any, n: int) -> list[Record]:
        rows = largest_drops(reference["psnr"], candidate["psnr"], lambda i: i)  # keys are dataset positions
        return [
            RestorationWorst(
                index=i,
                id=self.reader.ids[i],
                reference_psnr=reference["psnr"][i],
                candidate_psnr=candidate["psnr"][i],
                psnr_drop=d,
                reference_ssim=reference["ssim"][i],
                candidate_ssim=candidate["ssim"][i],
            )
            for d, i in rows[:n]
        ]

    def sanity(self, metrics: TaskMetrics) -> list[str]:
        assert isinstance(metrics, RestorationMetrics)
        reasons = []
        if metrics.nonfinite:
            reasons.append(f"{count(metrics.nonfinite, 'output value')} NaN or infinite")
        if metrics.clipped_share > CLIPPED_SHARE:
            reasons.append(
                f"{metrics.clipped_share:.1%} of the output values lie outside options.output_range "
                f"{list(self.options.output_range)}: is that the model's range?"
            )
        return reasons

    def per_class(self, reference: TaskMetrics, candidate: TaskMetrics) -> list[Record]:
        assert isinstance(reference, RestorationMetrics) and isinstance(candidate, RestorationMetrics)
        assert reference.per_class is not None and candidate.per_class is not None, "computed metrics, not read back"
        return class_deltas(reference.per_class, candidate.per_class, "class_", "psnr", ChannelPSNRDelta)
