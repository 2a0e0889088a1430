"""The reference of the demo's own TensorRT plugin, `ShapesBoxDecode` (numpy only, no torch).

A plugin reference in trtverify's signature: the node's inputs as numpy arrays in the node's input order, its
attributes as keyword arguments (attributes it does not know, such as `plugin_version`, are accepted and ignored),
and its output(s) returned in the node's output order:

    trtverify layerwise shapes_plugin_nms.onnx shapes_plugin_nms_fp16.onnx \
        --plugin ShapesBoxDecode=shapes_plugins:decode

`ShapesBoxDecode` (domain "shapes", in demo/plugins/shapes_plugin_nms.onnx) turns the shapes CenterNet's raw maps
into one corner box per heatmap position; the torch version that the PyTorch module runs is
`shapes_plugin_models.box_decode`.
"""

from __future__ import annotations

import numpy as np


def decode(wh: np.ndarray, offset: np.ndarray, *, stride: int = 4, **_ignored: object) -> np.ndarray:
    """wh, offset [B, 2, H, W] in grid cells -> boxes [B, H*W, 4] (x1, y1, x2, y2) in input pixels.

    Position p = row * W + col is centred at ((col + offset_x) * stride, (row + offset_y) * stride) and is
    max(wh, 0) * stride wide and high. Computed in float32; returned in the inputs' dtype (a plugin's FP16 run
    gives FP16 boxes)."""
    wh = np.asarray(wh)
    offset = np.asarray(offset)
    if wh.ndim != 4 or wh.shape[1] != 2 or offset.shape != wh.shape:
        raise ValueError(f"ShapesBoxDecode: wh and offset must both be [B, 2, H, W], got {wh.shape} and {offset.shape}")
    b, _, h, w = wh.shape
    s = np.float32(stride)
    rows, cols = np.meshgrid(np.arange(h, dtype=np.float32), np.arange(w, dtype=np.float32), indexing="ij")
    whf, off = wh.astype(np.float32), offset.astype(np.float32)
    cx = (cols + off[:, 0]) * s
    cy = (rows + off[:, 1]) * s
    bw = np.maximum(whf[:, 0], np.float32(0)) * s
    bh = np.maximum(whf[:, 1], np.float32(0)) * s
    half = np.float32(2)
    boxes = np.stack([cx - bw / half, cy - bh / half, cx + bw / half, cy + bh / half], axis=-1)
    return boxes.reshape(b, h * w, 4).astype(wh.dtype, copy=False)
