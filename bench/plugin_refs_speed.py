"""Time the built-in NMS and RoIAlign references (trtverify/plugins) on detector-sized inputs.

    PYTHONPATH=. .venv/bin/python bench/plugin_refs_speed.py

YOLO-shaped: 8400 anchors (80x80 + 40x40 + 20x20 grids at strides 8, 16, 32 of a 640 image), 80 classes, batch 1.
'realistic' scores are sigmoids of logits around -7 with 30 objects, each lighting about 40 neighbouring anchors in
its class; 'uniform' scores are uniform in [0, 1] (every class has thousands of candidates: the worst case).
Prints the median of 5 runs for each case.
"""

from __future__ import annotations

import time

import numpy as np

from trtverify.plugins.batchednms import batched_nms_dynamic
from trtverify.plugins.efficientnms import efficient_nms
from trtverify.plugins.roialign import roi_align
from trtverify.plugins.trtbatchednms import trt_batched_nms

CLASSES = 80


def yolo_boxes(rng: np.random.Generator) -> np.ndarray:
    centres, sizes = [], []
    for stride in (8, 16, 32):
        cells = 640 // stride
        ys, xs = np.meshgrid(np.arange(cells), np.arange(cells), indexing="ij")
        centres.append(np.stack([xs.ravel(), ys.ravel()], axis=1) * stride + stride / 2)
        sizes.append(rng.uniform(2, 8, (cells * cells, 2)) * stride)
    c, s = np.concatenate(centres), np.concatenate(sizes)
    return np.concatenate([c - s / 2, c + s / 2], axis=1).astype(np.float32)[None]  # [1, 8400, 4]


def realistic_scores(rng: np.random.Generator, boxes: np.ndarray) -> np.ndarray:
    logits = rng.normal(-7, 1.5, (1, boxes.shape[1], CLASSES))
    centres = (boxes[0, :, :2] + boxes[0, :, 2:]) / 2
    for _ in range(30):
        spot, klass = rng.uniform(0, 640, 2), rng.integers(CLASSES)
        near = np.argsort(np.linalg.norm(centres - spot, axis=1))[:40]
        logits[0, near, klass] = rng.normal(2, 1.5, near.size)
    return (1 / (1 + np.exp(-logits))).astype(np.float32)


def timed(fn, *args, **kwargs) -> float:
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        fn(*args, **kwargs)
        runs.append(time.perf_counter() - start)
    return float(np.median(runs))


def main() -> None:
    rng = np.random.default_rng(0)
    boxes = yolo_boxes(rng)
    cases = {"realistic": realistic_scores(rng, boxes), "uniform": rng.uniform(0, 1, (1, 8400, CLASSES)).astype("f4")}
    for name, scores in cases.items():
        for threshold in (0.25, 0.001):
            common = dict(iou_threshold=0.45, max_output_boxes=100, background_class=-1, box_coding=0)
            t = timed(efficient_nms, boxes, scores, score_threshold=threshold, score_activation=0, **common)
            print(f"EfficientNMS_TRT      {name:9} threshold {threshold:<5}  {t * 1000:7.1f} ms")
        for top_k in (1000, 4096):
            t = timed(
                batched_nms_dynamic,
                boxes[:, :, None],
                scores,
                shareLocation=1,
                backgroundLabelId=-1,
                numClasses=CLASSES,
                topK=top_k,
                keepTopK=100,
                scoreThreshold=0.25,
                iouThreshold=0.45,
                isNormalized=0,
                clipBoxes=0,
            )
            print(f"BatchedNMSDynamic_TRT {name:9} topK {top_k:<5}            {t * 1000:7.1f} ms")
        t = timed(
            trt_batched_nms,
            boxes[:, :, None],
            scores,
            num_classes=CLASSES,
            background_label_id=-1,
            topk=5000,
            keep_topk=100,
            score_threshold=0.25,
            iou_threshold=0.45,
        )
        print(f"TRTBatchedNMS         {name:9} topk 5000             {t * 1000:7.1f} ms")
    features = rng.normal(size=(1, 256, 200, 336)).astype(np.float32)  # FPN P2 of an 800 x 1344 image
    corner = rng.uniform(0, 1200, (1000, 2))
    rois = np.concatenate([corner, corner + rng.uniform(16, 256, (1000, 2))], axis=1).astype(np.float32)
    batch = np.zeros(1000, dtype=np.int32)
    for sampling in (2, 0):
        t = timed(
            roi_align,
            features,
            rois,
            batch,
            output_height=7,
            output_width=7,
            sampling_ratio=sampling,
            spatial_scale=0.25,
        )
        print(f"ROIAlign_TRT          1000 rois x 256 ch, 7x7, sampling_ratio {sampling}  {t * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
