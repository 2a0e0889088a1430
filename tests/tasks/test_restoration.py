"""Restoration metrics against scikit-image (peak_signal_noise_ratio, structural_similarity with Wang et al.'s
Gaussian window, rgb2ycbcr's BT.601 luma): per image then averaged, on Y and RGB, both data ranges, border crop;
NaN and inf outputs, merging shards, options and shapes refused with a clear error, LPIPS skipped cleanly."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from trtverify.tasks.restoration import MAX_PSNR, RestorationAccumulator, RestorationOptions, ssim
from trtverify.util.errors import UsageError

# the cross-check library: in the dev extra (pinned in constraints/ci.txt), so CI runs these; a machine without
# the dev extra skips them and says why
skimage_color = pytest.importorskip("skimage.color", reason="scikit-image (the dev extra) cross-checks PSNR/SSIM")
skimage_metrics_mod = pytest.importorskip("skimage.metrics", reason="scikit-image (the dev extra)")
rgb2ycbcr = skimage_color.rgb2ycbcr
peak_signal_noise_ratio = skimage_metrics_mod.peak_signal_noise_ratio
structural_similarity = skimage_metrics_mod.structural_similarity


def images(seed: int, n: int = 4, shape: tuple[int, int] = (40, 36)) -> tuple[list, list]:
    """uint8 targets [H, W, 3] and outputs near them, float [H, W, 3] in [0, 1] (a few values out of range)."""
    rng = np.random.default_rng(seed)
    targets = [rng.integers(0, 256, (*shape, 3)).astype(np.uint8) for _ in range(n)]
    outputs = [t / 255.0 + rng.normal(0, 0.03 * (k + 1), t.shape) for k, t in enumerate(targets)]
    return targets, outputs


def skimage_metrics(targets: list, outputs: list, channels: str, data_range: float, crop: int) -> tuple[float, float]:
    """The mean over images of scikit-image's PSNR and SSIM, the outputs clipped (and at 255 rounded) here."""
    psnrs, ssims = [], []
    for t, o in zip(targets, outputs):
        o = np.clip(o, 0, 1) * data_range
        o = np.round(o) if data_range == 255 else o
        t = t / 255.0 * data_range
        if channels == "y":  # rgb2ycbcr: Y in [16, 235] for RGB in [0, 1]
            o, t = (rgb2ycbcr(x / data_range)[..., 0] / 255.0 * data_range for x in (o, t))
        o, t = o[crop:-crop, crop:-crop], t[crop:-crop, crop:-crop]
        psnrs.append(peak_signal_noise_ratio(t, o, data_range=data_range))
        kw = {"channel_axis": -1} if channels == "rgb" else {}
        ssims.append(
            structural_similarity(
                t, o, data_range=data_range, gaussian_weights=True, sigma=1.5, use_sample_covariance=False, **kw
            )
        )
    return float(np.mean(psnrs)), float(np.mean(ssims))


@pytest.mark.parametrize("channels", ["y", "rgb"])
@pytest.mark.parametrize("data_range", [1.0, 255.0])
def test_psnr_and_ssim_agree_with_scikit_image(channels: str, data_range: float):
    targets, outputs = images(1)
    acc = RestorationAccumulator(RestorationOptions(channels=channels, data_range=data_range, crop_border=3))
    acc.update(range(4), outputs, targets, [None] * 4)
    m = acc.compute()
    want_psnr, want_ssim = skimage_metrics(targets, outputs, channels, data_range, 3)
    assert m.psnr == pytest.approx(want_psnr, abs=1e-9) and m.ssim == pytest.approx(want_ssim, abs=1e-9)
    per = acc.per_image()["psnr"]
    assert m.psnr_min == min(per.values()) < m.psnr and per[0] > per[3]  # noisier images score lower
    assert [r.name for r in m.per_class] == ["R", "G", "B"] and m.samples == 4
    assert 0 < m.clipped_share < 0.2 and m.nonfinite == 0


def test_ssim_of_one_channel_is_wang_et_al_on_known_cases():
    rng = np.random.default_rng(2)
    a = rng.random((30, 30)) * 255
    assert ssim(a, a, 255) == pytest.approx(1.0)
    assert ssim(a, 255 - a, 255) < 0  # anti-correlated structure
    b = np.clip(a + rng.normal(0, 20, a.shape), 0, 255)
    want = structural_similarity(a, b, data_range=255, gaussian_weights=True, sigma=1.5, use_sample_covariance=False)
    assert ssim(a, b, 255) == pytest.approx(want, abs=1e-12)
    with pytest.raises(ValueError, match="at least 11 x 11 pixels"):
        ssim(a[:10], b[:10], 255)


def test_the_crop_defaults_to_the_scale_and_an_exact_image_scores_the_cap():
    targets, _ = images(3, n=1)
    exact = [targets[0] / 255.0]
    wrong_border = [exact[0].copy()]
    wrong_border[0][:2] = 1 - wrong_border[0][:2]  # the two top rows: cut by a scale-2 crop
    acc = RestorationAccumulator(RestorationOptions())
    acc.update([0, 1], [exact[0], wrong_border[0]], [targets[0], targets[0]], [2, 2])
    m = acc.compute()
    assert m.psnr == MAX_PSNR and m.ssim == pytest.approx(1.0)
    acc = RestorationAccumulator(RestorationOptions(crop_border=0))
    acc.update([0], wrong_border, targets, [2])
    assert acc.compute().psnr < 30  # the same rows, not cut: counted


def test_nan_is_the_largest_error_and_inf_clips():
    target = np.full((16, 16, 3), 200, np.uint8)
    target[:, :8] = 10
    out = target / 255.0
    nan, inf = out.copy(), out.copy()
    nan[0, 0, 0] = nan[0, 15, 0] = np.nan  # dark target -> white; bright target -> black
    inf[0, 0, 0], inf[0, 15, 0] = np.inf, -np.inf
    acc = RestorationAccumulator(RestorationOptions(channels="rgb", crop_border=0))
    acc.update([0, 1], [nan, inf], [target, target], [1, 1])
    mse = [v for v in acc._mse]
    assert mse[0] == pytest.approx(((255 - 10) ** 2 + 200**2) / target.size)
    assert mse[1] == pytest.approx(((255 - 10) ** 2 + 200**2) / target.size)
    assert acc.compute().nonfinite == 4


def test_output_and_target_ranges_and_layouts():
    targets, outputs = images(4, n=2)
    base = RestorationAccumulator(RestorationOptions(crop_border=1))
    base.update([0, 1], outputs, targets, [1, 1])
    shifted = RestorationAccumulator(
        RestorationOptions(crop_border=1, output_range=(-1.0, 1.0), target_range=(0.0, 1.0))
    )  # the model gives [-1, 1]; float targets in [0, 1], stored channels first
    shifted.update([0, 1], [o * 2 - 1 for o in outputs], [(t / 255.0).transpose(2, 0, 1) for t in targets], [1, 1])
    assert shifted.compute().psnr == pytest.approx(base.compute().psnr, abs=1e-9)


def test_shards_merge_to_the_whole():
    targets, outputs = images(5, n=6)
    whole = RestorationAccumulator(RestorationOptions())
    whole.update(range(6), outputs, targets, [1] * 6)
    a, b = RestorationAccumulator(RestorationOptions()), RestorationAccumulator(RestorationOptions())
    a.update(range(3), outputs[:3], targets[:3], [1] * 3)
    b.update(range(3, 6), outputs[3:], targets[3:], [1] * 3)
    restored = RestorationAccumulator.from_state(a.state(), RestorationOptions(), [])
    restored.merge(RestorationAccumulator.from_state(b.state(), RestorationOptions(), []))
    assert restored.compute() == whole.compute()
    with pytest.raises(ValueError, match="overlap: 3 images in both"):
        restored.merge(b)


def test_shapes_that_do_not_fit_are_refused_naming_the_image():
    targets, outputs = images(6, n=1)
    acc = RestorationAccumulator(RestorationOptions())
    with pytest.raises(ValueError, match=r"image 7: output of shape \[20, 18, 3\] .* target of shape \[40, 36, 3\]"):
        acc.update([7], [outputs[0][::2, ::2]], targets, [2])
    with pytest.raises(ValueError, match="set options.scale or options.crop_border"):
        acc.update([7], outputs, targets, [None])


def test_options_are_checked():
    with pytest.raises(ValueError, match="must increase"):
        RestorationOptions(output_range=(1.0, 0.0))
    with pytest.raises(ValueError, match="data_range"):
        RestorationOptions(data_range=2.0)
    with pytest.raises(ValueError, match="extra"):
        RestorationOptions.model_validate({"crop": 4})


@pytest.mark.skipif(importlib.util.find_spec("lpips") is not None, reason="lpips is installed here")
def test_lpips_asked_for_without_its_package_is_skipped_and_said():
    from trtverify.tasks.restoration import _lpips_net

    net, why = _lpips_net()
    assert net is None and why[0].startswith("lpips: the lpips package cannot be imported")


def test_a_task_error_is_a_usage_error():
    from trtverify.tasks.restoration import RestorationTask

    task = RestorationTask.__new__(RestorationTask)
    task.options = RestorationOptions()
    acc = RestorationAccumulator(task.options)
    targets, outputs = images(7, n=1)
    with pytest.raises(UsageError, match="restoration: image 0: output of shape"):
        task.update(acc, [0], {"images": [outputs[0][:8]], "sizes": [(20, 18)]}, targets)


def _task(**options):
    from tests.conftest import ROOT
    from trtverify.config.stages import E2EStage
    from trtverify.tasks.restoration import RestorationTask

    cfg = E2EStage.model_validate(
        {
            "task": "restoration",
            "dataset": {"npz": str(ROOT / "demo" / "restoration" / "val.npz")},
            "gates": [{"metric": "psnr", "max_drop": 0.1}],
            "options": options,
        }
    )
    return RestorationTask.open(cfg)


def test_postprocess_reads_nchw_and_nhwc_and_refuses_what_is_not_an_image_batch():
    from trtverify.tasks.batches import Batch

    batch = Batch([0, 1], np.zeros((2, 3, 32, 32), np.float32), [None, None], [(32, 32), (32, 32)])
    out = np.random.default_rng(8).random((2, 3, 64, 64)).astype(np.float32)
    nchw = _task().postprocess({"sr": out}, batch, "m")
    nhwc = _task(output_layout="NHWC").postprocess({"sr": out.transpose(0, 2, 3, 1)}, batch, "m")
    assert all(np.array_equal(a, b) and a.shape == (64, 64, 3) for a, b in zip(nchw["images"], nhwc["images"]))
    with pytest.raises(UsageError, match=r"m: restoration output of shape \[2, 10\] \(float32\) is not a batch"):
        _task().postprocess({"logits": np.zeros((2, 10), np.float32)}, batch, "m")
    task = _task(channels="rgb")
    acc = task.accumulator()
    task.update(acc, [0, 1], nchw, [task.reader.label(0), task.reader.label(1)])
    assert acc.compute().samples == 2 and acc.compute().psnr < 15  # noise against real targets, crop 2 from the sizes
