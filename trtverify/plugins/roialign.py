"""ROIAlign_TRT in numpy, as TensorRT's plugin computes it (TensorRT OSS plugin/roiAlignPlugin, roiAlignKernel.cu).

Inputs X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2 in the input's scale), batch_indices [R] (int32); output
Y [R, C, output_height, output_width] in X's type. The plugin follows ONNX's RoiAlign (opset 16) with TensorRT's
attribute spellings: `mode` 1 = avg, 0 = max; `coordinate_transformation_mode` 1 = half_pixel (rois shifted by -0.5
pixel), 0 = output_half_pixel (no shift, rois forced to at least 1 x 1). ONNX's words ('avg', 'half_pixel', ...) are
accepted too. Each output bin averages (or takes the max of) sampling_ratio x sampling_ratio bilinear samples, or
ceil(roi size / output size) per side when sampling_ratio is 0. A sample further than one pixel outside the map is 0.
Max mode takes, per sample, the largest of the four weighted corner values, as ONNX Runtime does.
One difference from ONNX Runtime: an adaptive grid of 0 samples (a half_pixel roi of zero height or width) divides
0 by 0 in the plugin, giving NaN, where ONNX Runtime gives 0; the reference gives NaN.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trtverify.plugins.attrs import PluginError, float_input, get_choice, get_float, get_int

OP = "ROIAlign_TRT"
BUDGET = 1 << 22  # elements of one [rois, samples, samples, channels] temporary: rois are gathered in chunks


def _axis(start: np.ndarray, size: np.ndarray, bins: int, grid: int, extent: int):
    """Per roi and sample along one axis: low and high pixel, their weights, and whether the sample counts."""
    f32 = np.float32
    step = size / f32(bins)  # binSize
    offset = start[:, None] + np.arange(bins, dtype=f32)[None, :] * step[:, None]  # [r, bins]
    frac = step / f32(grid)
    where = offset[:, :, None] + (np.arange(grid, dtype=f32) + f32(0.5))[None, None, :] * frac[:, None, None]
    where = where.reshape(start.shape[0], bins * grid)  # [r, bins * grid], bin-major
    inside = ~((where < f32(-1)) | (where > f32(extent)))
    where = np.where(where <= 0, f32(0), where)
    low = where.astype(np.int64)
    top = low >= extent - 1
    low = np.where(top, extent - 1, low)
    high = np.where(top, extent - 1, low + 1)
    where = np.where(top, low.astype(f32), where)
    lfrac = where - low.astype(f32)
    return low, high, f32(1) - lfrac, lfrac, inside


def _max(feat: np.ndarray, bidx: np.ndarray, ys, xs, out_h: int, out_w: int, grid: tuple[int, int]) -> np.ndarray:
    """Max mode for rois sharing one sample grid: [r, C, out_h, out_w]; each sample is the largest of its four
    weighted corners, 0 outside the map."""
    y_lo, y_hi, hy, ly, y_in = ys
    x_lo, x_hi, hx, lx, x_in = xs
    b = bidx[:, None, None]

    def corner(yi: np.ndarray, xi: np.ndarray, wy: np.ndarray, wx: np.ndarray) -> np.ndarray:
        weight = (wy[:, :, None] * wx[:, None, :])[..., None]
        return weight * feat[b, yi[:, :, None], xi[:, None, :]]  # [r, Sy, Sx, C]

    value = np.fmax(corner(y_lo, x_lo, hy, hx), corner(y_lo, x_hi, hy, lx))
    value = np.fmax(np.fmax(value, corner(y_hi, x_lo, ly, hx)), corner(y_hi, x_hi, ly, lx))
    value = np.where((y_in[:, :, None] & x_in[:, None, :])[..., None], value, np.float32(0))
    r, channels = value.shape[0], value.shape[-1]
    pooled = value.reshape(r, out_h, grid[0], out_w, grid[1], channels).max(axis=(2, 4))
    return pooled.transpose(0, 3, 1, 2)


def _weights(axis, bins: int, grid: int, i: int) -> tuple[int, np.ndarray]:
    """Roi i's bilinear weights along one axis as a [bins, pixels] matrix over the pixels it touches, and the first
    of those pixels: a bin's average along both axes is then Wy @ X @ Wx.T (its samples' weights factorise)."""
    low, high, w_low, w_high, inside = (a[i] for a in axis)
    if not inside.any():
        return 0, np.zeros((bins, 1), dtype=np.float32)
    first = int(low[inside].min())
    span = int(high[inside].max()) - first + 1
    row = (np.repeat(np.arange(bins), grid) * span - first)[inside]
    w = np.bincount(
        np.concatenate([row + low[inside], row + high[inside]]),
        np.concatenate([w_low[inside], w_high[inside]]).astype(np.float64),
        minlength=bins * span,
    )
    return first, w.reshape(bins, span).astype(np.float32)


def _average(x: np.ndarray, bidx: np.ndarray, ys, xs, out_h: int, out_w: int, grid: tuple[int, int]) -> np.ndarray:
    """Average mode for rois sharing one sample grid: [r, C, out_h, out_w], one small matrix product per roi."""
    out = np.empty((bidx.size, x.shape[1], out_h, out_w), dtype=np.float32)
    for i in range(bidx.size):
        y0, wy = _weights(ys, out_h, grid[0], i)
        x0, wx = _weights(xs, out_w, grid[1], i)
        patch = x[bidx[i], :, y0 : y0 + wy.shape[1], x0 : x0 + wx.shape[1]]  # [C, h, w]
        rows = np.matmul(wy, patch)  # [C, out_h, w]
        out[i] = np.matmul(rows, wx.T)
    return out / np.float32(grid[0] * grid[1])


def roi_align(x: Any, rois: Any, batch_indices: Any, **attributes: Any) -> np.ndarray:
    """ROIAlign_TRT: Y [R, C, output_height, output_width]."""
    out_h = get_int(OP, attributes, "output_height", 1)
    out_w = get_int(OP, attributes, "output_width", 1)
    sampling = get_int(OP, attributes, "sampling_ratio", 0)
    scale = np.float32(get_float(OP, attributes, "spatial_scale", 1.0))
    avg = get_choice(OP, attributes, "mode", 1, {"avg": 1, "max": 0}) == 1
    aligned = get_choice(OP, attributes, "coordinate_transformation_mode", 1, {"half_pixel": 1, "output_half_pixel": 0})
    if out_h <= 0 or out_w <= 0 or sampling < 0 or not scale > 0:
        raise PluginError(
            f"{OP}: output_height/output_width must be > 0, sampling_ratio >= 0 and spatial_scale > 0; "
            f"got {out_h}, {out_w}, {sampling}, {scale}"
        )
    x = float_input(OP, "X", x, (4,))
    rois = float_input(OP, "rois", rois, (2,))
    if rois.shape[1] != 4:
        raise PluginError(f"{OP}: rois must be [R, 4], got {list(rois.shape)}")
    if batch_indices is None:
        raise PluginError(f"{OP}: input 'batch_indices' is missing")
    bidx = np.asarray(batch_indices).astype(np.int64).reshape(-1)
    count = rois.shape[0]
    if bidx.shape[0] != count:
        raise PluginError(f"{OP}: batch_indices has {bidx.shape[0]} values for {count} rois")
    batch, channels, height, width = x.shape
    if count and (bidx.min() < 0 or bidx.max() >= batch):
        raise PluginError(f"{OP}: batch_indices must be in [0, {batch}), got {bidx.min()}..{bidx.max()}")

    f32 = np.float32
    r = rois.astype(f32)
    shift = f32(0.5 if aligned else 0)
    x1, y1 = r[:, 0] * scale - shift, r[:, 1] * scale - shift
    w, h = (r[:, 2] * scale - shift) - x1, (r[:, 3] * scale - shift) - y1
    if not aligned:
        w, h = np.maximum(w, f32(1)), np.maximum(h, f32(1))
    if sampling > 0:
        grid_h = np.full(count, sampling, dtype=np.int64)
        grid_w = grid_h.copy()
    else:
        grid_h = np.ceil(h / f32(out_h)).astype(np.int64)
        grid_w = np.ceil(w / f32(out_w)).astype(np.int64)

    y = np.zeros((count, channels, out_h, out_w), dtype=f32)
    planes = x.astype(f32)
    feat = planes.transpose(0, 2, 3, 1) if not avg else None  # [N, H, W, C]: a gathered sample is a channel row
    empty = (grid_h <= 0) | (grid_w <= 0)
    if empty.any():  # no samples: the plugin divides its zero sum by the sample count (0 / 0 is NaN)
        with np.errstate(invalid="ignore", divide="ignore"):
            fill = f32(0) / (grid_h[empty] * grid_w[empty]).astype(f32) if avg else f32(0)
        y[empty] = np.asarray(fill, dtype=f32)[:, None, None, None] if avg else f32(0)
    for gh, gw in sorted(set(zip(grid_h[~empty].tolist(), grid_w[~empty].tolist()))):
        members = np.flatnonzero((grid_h == gh) & (grid_w == gw))
        chunk = max(1, BUDGET // (out_h * gh * out_w * gw * channels))
        for part in range(0, members.size, chunk):
            sel = members[part : part + chunk]
            ys = _axis(y1[sel], h[sel], out_h, gh, height)
            xs = _axis(x1[sel], w[sel], out_w, gw, width)
            if avg:
                y[sel] = _average(planes, bidx[sel], ys, xs, out_h, out_w, (gh, gw))
            else:
                y[sel] = _max(feat, bidx[sel], ys, xs, out_h, out_w, (gh, gw))
    return y.astype(x.dtype)
