"""Oracle check (not part of the project): run TensorRT OSS's and mmdeploy's own CUDA kernels on cases, compare with
trtverify's numpy references. `python cases.py write` makes build/oracle/cases/; the device runs run.sh; `python
cases.py compare OUTDIR` compares."""

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.plugins.conftest import FOUR_BOXES, FOUR_SCORES, random_detections  # noqa: E402
from trtverify.plugins.batchednms import batched_nms_dynamic  # noqa: E402
from trtverify.plugins.efficientnms import efficient_nms  # noqa: E402
from trtverify.plugins.roialign import roi_align  # noqa: E402
from trtverify.plugins.trtbatchednms import trt_batched_nms  # noqa: E402

HERE = Path(__file__).resolve().parent
CASES = HERE / "cases"  # written here (not committed: tens of MB)
f4 = np.float32


def yolo(seed, uniform=False, quant=None):
    rng = np.random.default_rng(seed)
    centres, sizes = [], []
    for stride in (8, 16, 32):
        cells = 640 // stride
        ys, xs = np.meshgrid(np.arange(cells), np.arange(cells), indexing="ij")
        centres.append(np.stack([xs.ravel(), ys.ravel()], axis=1) * stride + stride / 2)
        sizes.append(rng.uniform(2, 8, (cells * cells, 2)) * stride)
    c, s = np.concatenate(centres), np.concatenate(sizes)
    boxes = np.concatenate([c - s / 2, c + s / 2], axis=1).astype(f4)[None]
    if uniform:
        scores = rng.uniform(0, 1, (1, 8400, 80)).astype(f4)
    else:
        logits = rng.normal(-7, 1.5, (1, 8400, 80))
        for _ in range(30):
            spot, k = rng.uniform(0, 640, 2), rng.integers(80)
            near = np.argsort(np.linalg.norm(c - spot, axis=1))[:40]
            logits[0, near, k] = rng.normal(2, 1.5, near.size)
        scores = (1 / (1 + np.exp(-logits))).astype(f4)
    if quant:
        scores = (np.round(scores / quant) * quant).astype(f4)
    return boxes, scores


def enms_cases():
    four_b, four_s = FOUR_BOXES, FOUR_SCORES
    base = dict(
        score_threshold=0.25,
        iou_threshold=0.5,
        max_output_boxes=6,
        background_class=-1,
        score_activation=0,
        class_agnostic=0,
        box_coding=0,
    )
    out = []

    def add(name, boxes, scores, anchors=None, half=False, **kw):
        out.append((name, boxes, scores, anchors, half, {**base, **kw}))

    add("four", four_b, four_s)
    add("four_agnostic", four_b, four_s, class_agnostic=1)
    add("four_max2", four_b, four_s, max_output_boxes=2)
    add("four_bg1", four_b, four_s, background_class=1)
    add("four_thr06", four_b, four_s, score_threshold=0.6)
    add("iou_half", np.array([[[0, 0, 10, 10], [0, 0, 10, 5]]], f4), np.array([[[0.9], [0.8]]], f4))
    add("ties_classes", np.array([[[0, 0, 1, 1], [5, 5, 6, 6]]], f4), np.array([[[0.1, 0.5], [0.5, 0.1]]], f4))
    add("ties_overlap", np.array([[[1, 1, 11, 11], [0, 0, 10, 10]]], f4), np.array([[[0.5], [0.5]]], f4))
    add(
        "sigmoid",
        np.array([[[0, 0, 1, 1], [5, 5, 6, 6], [9, 9, 10, 10]]], f4),
        np.array([[[2.0], [-1.0], [0.0]]], f4),
        score_threshold=0.5,
        score_activation=1,
    )
    add(
        "coding1",
        np.array([[[5, 5, 10, 10], [6, 6, 10, 10], [25, 25, 10, 4]]], f4),
        np.array([[[0.9], [0.8], [0.7]]], f4),
        box_coding=1,
    )
    add("swapped", np.array([[[10, 10, 0, 0], [0, 0, 10, 10]]], f4), np.array([[[0.9], [0.8]]], f4))
    pcb = np.array([[[[0, 0, 10, 10], [50, 50, 60, 60]], [[40, 40, 50, 50], [51, 51, 61, 61]]]], f4)
    add("per_class_boxes", pcb, np.array([[[0.9, 0.8], [0.7, 0.6]]], f4))
    add("batch2", np.concatenate([four_b, four_b]), np.concatenate([four_s, four_s * f4(0.27)]))
    add(
        "anchors0",
        np.array([[[1, 1, 1, 1], [1, 0, -1, 0]]], f4),
        np.array([[[0.9], [0.8]]], f4),
        np.array([[[0, 0, 10, 10], [20, 20, 30, 30]]], f4),
    )
    add(
        "anchors1",
        np.array([[[0.1, -0.2, np.log(2), 0]]], f4),
        np.array([[[0.9]]], f4),
        np.array([[[5, 5, 10, 10]]], f4),
        box_coding=1,
    )
    add(
        "anchors_per_image",
        np.zeros((2, 1, 4), f4),
        np.full((2, 1, 1), 0.9, f4),
        np.array([[[0, 0, 1, 1]], [[5, 5, 6, 6]]], f4),
    )
    dense_b = np.array([[[0, 0, 1, 1], [5, 5, 6, 6], [9, 9, 10, 10]]], f4)
    dense_s = np.array([[[0.9], [0.0005], [0.0001]]], f4)
    add("dense", dense_b, dense_s, score_threshold=0.001)
    add(
        "dense_bg",
        np.repeat(dense_b[:, :, None], 2, axis=2)[:, :, 0],
        np.concatenate([dense_s, dense_s], axis=2),
        score_threshold=0.001,
        background_class=1,
    )
    add("dense_sigmoid", dense_b, np.log(dense_s / (1 - dense_s)).astype(f4), score_threshold=0.001, score_activation=1)
    x = np.arange(5001, dtype=f4)[:, None] * 2
    add(
        "cap5000",
        np.concatenate([x, np.zeros_like(x), x + 1, np.ones_like(x)], axis=1)[None],
        np.linspace(1, 0.5, 5001, dtype=f4)[None, :, None],
        max_output_boxes=5001,
    )
    add("four_fp16", four_b, four_s, half=True)
    b, s = random_detections(0, batch=2, count=300, classes=4)
    add("random", b, s, max_output_boxes=2000, iou_threshold=0.45)
    add("random_agnostic", b, s, max_output_boxes=2000, iou_threshold=0.45, class_agnostic=1)
    b, s = yolo(1)
    add("yolo", b, s, max_output_boxes=100, iou_threshold=0.45)
    add("yolo_agnostic", b, s, max_output_boxes=100, iou_threshold=0.45, class_agnostic=1)
    add("yolo_dense", b, s, max_output_boxes=300, iou_threshold=0.45, score_threshold=0.001)
    add("yolo_fp16", b, s, half=True, max_output_boxes=100, iou_threshold=0.45)
    logits = np.log(s / (1 - s)).astype(f4)
    add("yolo_sigmoid", b, logits, max_output_boxes=100, iou_threshold=0.45, score_activation=1)
    b, s = yolo(2, uniform=True)
    add("uniform", b, s, max_output_boxes=100, iou_threshold=0.45)
    b, s = yolo(3, quant=0.05)
    add("yolo_ties", b, s, max_output_boxes=300, iou_threshold=0.45, score_threshold=0.1)
    return out


def bnms_cases():
    base = dict(
        shareLocation=1,
        backgroundLabelId=-1,
        numClasses=2,
        topK=4,
        keepTopK=4,
        scoreThreshold=0.25,
        iouThreshold=0.5,
        isNormalized=1,
        clipBoxes=0,
        scoreBits=16,
        caffeSemantics=1,
    )
    out = []

    def add(name, boxes, scores, half=False, **kw):
        if boxes.ndim == 3:
            boxes = boxes[:, :, None]
        out.append((name, boxes, scores, half, {**base, **kw}))

    fb, fs = FOUR_BOXES, FOUR_SCORES
    add("four", fb, fs)
    add("four_keep2", fb, fs, keepTopK=2)
    add("four_top2", fb, fs, topK=2, keepTopK=2)
    add("four_top3", fb, fs, topK=3, keepTopK=3)
    add("four_keep_gt_top", fb, fs, topK=2, keepTopK=3)
    add("four_bg0", fb, fs, backgroundLabelId=0)
    add("four_thr06", fb, fs, scoreThreshold=0.6)
    add("four_pixels_caffe", fb, fs, isNormalized=0)
    add("four_topk_gt_n", fb, fs, topK=10, keepTopK=6)
    one = dict(numClasses=1, topK=2, keepTopK=2)
    hb = np.array([[[0, 0, 10, 10], [0, 0, 10, 5]]], f4)
    hs = np.array([[[0.9], [0.8]]], f4)
    add("iou_half_norm", hb, hs, **one)
    add("iou_half_caffe", hb, hs, **one, isNormalized=0)
    add("iou_half_nocaffe", hb, hs, **one, isNormalized=0, caffeSemantics=0)
    add("iou_half_nocaffe_036", hb, hs, **one, isNormalized=0, caffeSemantics=0, iouThreshold=0.36)
    db = np.array([[[0, 0, 1, 1], [5, 5, 6, 6]]], f4)
    add("caffe_disjoint_014", db, hs, **one, isNormalized=0, iouThreshold=0.14)
    add("caffe_disjoint_015", db, hs, **one, isNormalized=0, iouThreshold=0.15)
    cb = np.array([[[-0.5, 0.2, 1.5, 0.8]]], f4)
    add("clip", cb, np.array([[[0.9]]], f4), numClasses=1, topK=1, keepTopK=1, clipBoxes=1)
    add("clip_pixels", cb, np.array([[[0.9]]], f4), numClasses=1, topK=1, keepTopK=1, clipBoxes=1, isNormalized=0)
    add("ties", db, np.array([[[0.5, 0.5], [0.5, 0.5]]], f4), topK=2, keepTopK=2)
    pcb = np.array([[[[0, 0, 10, 10], [50, 50, 60, 60]], [[40, 40, 50, 50], [51, 51, 61, 61]]]], f4)
    add("per_class", pcb, np.array([[[0.9, 0.8], [0.7, 0.6]]], f4), shareLocation=0, topK=2, keepTopK=2)
    add("batch2", np.concatenate([fb, fb]), np.concatenate([fs, fs * f4(0.27)]))
    sb = np.array([[[0, 0, 1, 1], [5, 5, 6, 6]]], f4)
    ss = np.array([[[0.30], [0.31]]], f4)
    add("fp16_bits16", sb, ss, half=True, **one)
    add("fp16_bits2", sb, ss, half=True, **one, scoreBits=2)
    add("four_fp16", fb, fs, half=True)
    b, s = random_detections(3, batch=2, count=200, classes=3)
    add("random", b, s, numClasses=3, topK=600, keepTopK=600, scoreThreshold=0.3, iouThreshold=0.45)
    add(
        "random_fp16_bits8",
        b,
        s,
        half=True,
        numClasses=3,
        topK=600,
        keepTopK=600,
        scoreThreshold=0.3,
        iouThreshold=0.45,
        scoreBits=8,
    )
    b, s = yolo(1)
    add("yolo_pixels", b, s, numClasses=80, topK=1000, keepTopK=100, iouThreshold=0.45, isNormalized=0)
    add("yolo_norm", b / f4(640), s, numClasses=80, topK=1000, keepTopK=100, iouThreshold=0.45, clipBoxes=1)
    b, s = yolo(3, quant=0.05)
    add("yolo_ties", b, s, numClasses=80, topK=500, keepTopK=200, iouThreshold=0.45, scoreThreshold=0.1, isNormalized=0)
    return out


def mmd_cases():
    base = dict(
        num_classes=2,
        background_label_id=-1,
        iou_threshold=0.5,
        score_threshold=0.25,
        topk=-1,
        keep_topk=4,
        is_normalized=0,
        clip_boxes=0,
        return_index=1,
    )
    out = []

    def add(name, boxes, scores, **kw):
        if boxes.ndim == 3:
            boxes = boxes[:, :, None]
        out.append((name, boxes, scores, {**base, **kw}))

    fb, fs = FOUR_BOXES, FOUR_SCORES
    add("four", fb, fs)
    add("four_per_class", np.repeat(fb[:, :, None], 2, axis=2), fs)
    add("four_top2", fb, fs, topk=2, keep_topk=2)
    add("four_topbig", fb, fs, topk=100)
    add("four_keep_gt_top", fb, fs, topk=2, keep_topk=3)
    add("four_clip", fb / f4(20), fs, clip_boxes=1)
    add("four_bg0", fb, fs, background_label_id=0)
    inv = np.array([[[0, 0, 10, 10], [10, 10, 0, 0]]], f4)
    add("inverted", inv, np.array([[[0.9], [0.8]]], f4), num_classes=1, keep_topk=2)
    hb = np.array([[[0, 0, 10, 10], [0, 0, 10, 5]]], f4)
    add("iou_half", hb, np.array([[[0.9], [0.8]]], f4), num_classes=1, keep_topk=2)
    b, s = random_detections(5, batch=2, count=150, classes=3)
    add("random", b, s, num_classes=3, keep_topk=150, score_threshold=0.8, iou_threshold=0.45)
    b, s = yolo(1)
    add("yolo", b, s, num_classes=80, topk=5000, keep_topk=100, iou_threshold=0.45)
    return out


def roi_cases():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2, 5, 13, 17)).astype(f4)
    corner = rng.uniform(-4, 16, size=(40, 2))
    size = rng.uniform(0.5, 20, size=(40, 2))
    rois = np.concatenate([corner, corner + size], axis=1).astype(f4)
    rois = np.concatenate([rois, np.array([[0, 1, 3, 1], [2, 3, 1, 1], [5, 5, 5, 9]], f4)])
    batch = np.concatenate([rng.integers(0, 2, 40), [0, 1, 0]]).astype(np.int32)
    out = []
    for avg in (1, 0):
        for aligned in (1, 0):
            for sr in (0, 2):
                out.append(
                    (
                        f"roi_m{avg}_a{aligned}_s{sr}",
                        x,
                        rois,
                        batch,
                        dict(
                            output_height=3,
                            output_width=4,
                            sampling_ratio=sr,
                            spatial_scale=0.75,
                            mode=avg,
                            coordinate_transformation_mode=aligned,
                        ),
                    )
                )
    lin = np.arange(16, dtype=f4).reshape(1, 1, 4, 4)
    out.append(
        (
            "roi_linear",
            lin,
            np.array([[0, 0, 2, 2], [0, 0, 4, 4], [10, 10, 12, 12]], f4),
            np.zeros(3, np.int32),
            dict(
                output_height=2,
                output_width=2,
                sampling_ratio=0,
                spatial_scale=1.0,
                mode=1,
                coordinate_transformation_mode=0,
            ),
        )
    )
    return out


def write():
    CASES.mkdir(exist_ok=True)
    manifest = []
    for name, boxes, scores, anchors, half, a in enms_cases():
        bx = boxes if boxes.ndim == 4 else boxes[:, :, None]
        B, N, C = scores.shape
        hdr = [
            B,
            N,
            C,
            bx.shape[2],
            anchors is not None,
            0 if anchors is None else anchors.shape[0],
            half,
            a["max_output_boxes"],
            a["background_class"],
            a["score_activation"],
            a["class_agnostic"],
            a["box_coding"],
            5000,
        ]
        with open(CASES / f"enms_{name}.bin", "wb") as f:
            f.write(
                np.array(hdr, np.int32).tobytes() + np.array([a["score_threshold"], a["iou_threshold"]], f4).tobytes()
            )
            f.write(bx.astype(f4).tobytes() + scores.astype(f4).tobytes())
            if anchors is not None:
                f.write(anchors.astype(f4).tobytes())
        manifest.append(["enms", name])
    for name, boxes, scores, half, a in bnms_cases():
        B, N, C = scores.shape
        hdr = [
            B,
            N,
            C,
            boxes.shape[2],
            half,
            a["backgroundLabelId"],
            a["topK"],
            a["keepTopK"],
            a["isNormalized"],
            a["clipBoxes"],
            a["scoreBits"],
            a["caffeSemantics"],
        ]
        with open(CASES / f"bnms_{name}.bin", "wb") as f:
            f.write(
                np.array(hdr, np.int32).tobytes() + np.array([a["scoreThreshold"], a["iouThreshold"]], f4).tobytes()
            )
            f.write(boxes.astype(f4).tobytes() + scores.astype(f4).tobytes())
        manifest.append(["bnms", name])
    for name, boxes, scores, a in mmd_cases():
        B, N, C = scores.shape
        hdr = [
            B,
            N,
            C,
            boxes.shape[2],
            a["background_label_id"],
            a["topk"],
            a["keep_topk"],
            a["is_normalized"] | (a["clip_boxes"] << 1),
        ]
        with open(CASES / f"mmd_{name}.bin", "wb") as f:
            f.write(
                np.array(hdr, np.int32).tobytes() + np.array([a["score_threshold"], a["iou_threshold"]], f4).tobytes()
            )
            f.write(boxes.astype(f4).tobytes() + scores.astype(f4).tobytes())
        manifest.append(["mmd", name])
    for name, x, rois, batch, a in roi_cases():
        N, C, H, W = x.shape
        hdr = [
            N,
            C,
            H,
            W,
            len(rois),
            a["output_height"],
            a["output_width"],
            a["sampling_ratio"],
            a["mode"],
            a["coordinate_transformation_mode"],
        ]
        with open(CASES / f"roi_{name}.bin", "wb") as f:
            f.write(np.array(hdr, np.int32).tobytes() + f4(a["spatial_scale"]).tobytes())
            f.write(x.tobytes() + rois.tobytes() + batch.tobytes())
        manifest.append(["roi", name])
    (CASES / "manifest.json").write_text(json.dumps(manifest))
    print(len(manifest), "cases")


def show_rows(num, boxes, scores, classes, n=8):
    return [
        (int(classes[i]), round(float(scores[i]), 5), [round(float(v), 3) for v in boxes[i]])
        for i in range(min(num, n))
    ]


def compare(outdir):
    outdir = Path(outdir)
    bad = 0
    for name, boxes, scores, anchors, half, a in enms_cases():
        ref = efficient_nms(
            boxes.astype(np.float16) if half else boxes,
            scores.astype(np.float16) if half else scores,
            None if anchors is None else (anchors.astype(np.float16) if half else anchors),
            **a,
        )
        B, M = scores.shape[0], a["max_output_boxes"]
        raw = np.fromfile(outdir / f"enms_{name}.out", dtype=np.uint8)
        num = raw[: 4 * B].view(np.int32)
        rest = raw[4 * B :]
        ob = rest[: B * M * 16].view(f4).reshape(B, M, 4)
        os_ = rest[B * M * 16 : B * M * 20].view(f4).reshape(B, M)
        oc = rest[B * M * 20 :].view(np.int32).reshape(B, M)
        ok = True
        notes = []
        for b in range(B):
            n = int(num[b])
            if n != int(ref[0][b, 0]):
                ok = False
                notes.append(f"image {b}: num {n} vs ref {int(ref[0][b, 0])}")
                continue
            tol = 2e-3 if half else 1e-5
            same_order = (
                np.allclose(ob[b, :n], ref[1][b, :n].astype(f4), rtol=tol, atol=tol)
                and np.array_equal(oc[b, :n], ref[3][b, :n])
                and np.allclose(os_[b, :n], ref[2][b, :n].astype(f4), rtol=tol, atol=tol)
            )
            pad_ok = not ob[b, n:].any() and not os_[b, n:].any() and not oc[b, n:].any()
            if not same_order:

                def key(bb, ss, cc):  # noqa: ANN001, ANN202
                    return sorted(
                        (int(c), round(float(s), 3), tuple(np.round(x, 2).tolist())) for x, s, c in zip(bb, ss, cc)
                    )

                as_set = key(ob[b, :n], os_[b, :n], oc[b, :n]) == key(
                    ref[1][b, :n].astype(f4), ref[2][b, :n].astype(f4), ref[3][b, :n]
                )
                notes.append(f"image {b}: order differs; same set: {as_set}")
                ok = False
            if not pad_ok:
                ok = False
                notes.append(f"image {b}: padding not zero")
        if not ok:
            bad += 1
            print(f"ENMS {name}: MISMATCH {notes}")
            print("   trt:", show_rows(int(num[0]), ob[0], os_[0], oc[0]))
            print("   ref:", show_rows(int(ref[0][0, 0]), ref[1][0], ref[2][0], ref[3][0]))
        else:
            print(f"ENMS {name}: ok (num {num.tolist()})")
    for name, boxes, scores, half, a in bnms_cases():
        ref = batched_nms_dynamic(
            boxes.astype(np.float16) if half else boxes, scores.astype(np.float16) if half else scores, **a
        )
        B, K = scores.shape[0], a["keepTopK"]
        raw = np.fromfile(outdir / f"bnms_{name}.out", dtype=np.uint8)
        num = raw[: 4 * B].view(np.int32)
        rest = raw[4 * B :].view(f4)
        ob = rest[: B * K * 4].reshape(B, K, 4)
        os_ = rest[B * K * 4 : B * K * 5].reshape(B, K)
        oc = rest[B * K * 5 :].reshape(B, K)
        tol = 2e-3 if half else 1e-5
        good = np.array_equal(num, ref[0][:, 0])
        good = (
            good
            and np.allclose(ob, ref[1].astype(f4), rtol=tol, atol=tol)
            and np.allclose(os_, ref[2].astype(f4), rtol=tol, atol=tol)
            and np.array_equal(oc, ref[3].astype(f4))
        )
        if good:
            print(f"BNMS {name}: ok (num {num.tolist()})")
        else:
            bad += 1
            print(f"BNMS {name}: MISMATCH num {num.tolist()} vs {ref[0][:, 0].tolist()}")
            print(
                "   trt:",
                [
                    (float(c), round(float(s), 5), ob[0, i].round(3).tolist())
                    for i, (c, s) in enumerate(zip(oc[0][:8], os_[0][:8]))
                ],
            )
            print(
                "   ref:",
                [
                    (float(c), round(float(s), 5), ref[1][0, i].astype(f4).round(3).tolist())
                    for i, (c, s) in enumerate(zip(ref[3][0][:8], ref[2][0][:8]))
                ],
            )
    for name, boxes, scores, a in mmd_cases():
        dets, labels, index = trt_batched_nms(boxes, scores, **a)
        B, K = scores.shape[0], a["keep_topk"]
        raw = np.fromfile(outdir / f"mmd_{name}.out", dtype=np.uint8)
        od = raw[: B * K * 20].view(f4).reshape(B, K, 5)
        ol = raw[B * K * 20 : B * K * 24].view(np.int32).reshape(B, K)
        oi = raw[B * K * 24 :].view(np.int32).reshape(B, K)
        good = np.allclose(od, dets, rtol=1e-5, atol=1e-5) and np.array_equal(ol, labels) and np.array_equal(oi, index)
        if good:
            print(f"MMD {name}: ok (dets {int((ol >= 0).sum())})")
        else:
            bad += 1
            print(f"MMD {name}: MISMATCH")
            print("   trt:", od[0][:6].round(3).tolist(), ol[0][:6].tolist(), oi[0][:6].tolist())
            print("   ref:", dets[0][:6].round(3).tolist(), labels[0][:6].tolist(), index[0][:6].tolist())
    for name, x, rois, batch, a in roi_cases():
        ref = roi_align(x, rois, batch, **a)
        got = np.fromfile(outdir / f"roi_{name}.out", dtype=f4).reshape(ref.shape)
        same_nan = np.array_equal(np.isnan(got), np.isnan(ref))
        diff = np.nanmax(np.abs(got - ref)) if np.isfinite(ref).any() else 0
        if same_nan and diff <= 1e-5:
            print(f"ROI {name}: ok (max diff {diff:.2e}, nan {int(np.isnan(got).sum())})")
        else:
            bad += 1
            print(f"ROI {name}: MISMATCH same_nan={same_nan} max diff {diff}")
    print("mismatches:", bad)


if __name__ == "__main__":
    write() if sys.argv[1] == "write" else compare(sys.argv[2])
