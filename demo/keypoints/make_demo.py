#!/usr/bin/env python3
"""Build the trtverify keypoints demo (reproducible, CPU only, seconds).

Steps:
  1. write the validation set ``val/``: 60 generated 96x96 RGB images (``val/images/``), each with one stick
     figure whose 5 joints are coloured dots (head, left hand, right hand, left foot, right foot), and their COCO
     person_keypoints file ``val/person_keypoints.json`` (bbox: the joints' extent plus 4 px; area: w x h);
  2. train ``KeypointNet`` (heatmaps [N, 5, 16, 16] from a 64x64 person crop) on CPU on 3,000 generated figures,
     cropped as trtverify crops them (``trtverify.tasks.keypoints.crop_box``, padding 1.25) and resized with PIL's
     bilinear filter (as trtverify's preprocess.resize), MSE against Gaussian heatmaps (sigma 1 heatmap pixel);
  3. export ONNX FP32 (``kp_fp32.onnx``, torch.onnx.export defaults but dynamo=False, opset 17, ir_version 8,
     input ``images`` [batch, 3, 64, 64], output ``heatmaps`` [batch, 5, 16, 16]);
  4. the good candidate ``kp_fp16.onnx``: FP16 weights and compute, float32 I/O
     (onnxruntime.transformers.float16, keep_io_types);
  5. the planted fault ``kp_fp16_overflow.onnx``: the FP32 model with its last hidden Conv's weights and bias
     multiplied by 2^S and a Mul by 2^-S after its ReLU (the same function in FP32: a folded scale), then the same
     FP16 conversion: that layer's largest activations, those at the heatmap peaks, pass 65504 and become inf;
  6. write ``metrics.json`` (PCK@0.2 and mean OKS of each model on ``val/`` computed here with numpy).

Usage: python demo/keypoints/make_demo.py [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # demo/onnx_steps.py
sys.path.insert(1, str(HERE.parents[1]))  # trtverify, for its crop geometry
from onnx_steps import make_fp16, ort_session, seed_everything  # noqa: E402

from trtverify.tasks.keypoints import crop, crop_box  # noqa: E402

SEED, VAL_SEED = 20261128, 20261129
SIZE, CROP, HM = 96, 64, 16
K = 5
NAMES = ["head", "left_hand", "right_hand", "left_foot", "right_foot"]
COLOURS = [(255, 60, 60), (60, 255, 60), (60, 120, 255), (255, 230, 40), (40, 230, 230)]
SIGMAS = [0.05, 0.06, 0.06, 0.07, 0.07]
N_VAL, N_TRAIN, STEPS, BATCH = 60, 2000, 250, 32
PADDING = 1.25


def figure(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(image uint8 [SIZE, SIZE, 3], joints [K, 2]) of one stick figure on a noisy background."""
    img = (rng.integers(0, 50, (SIZE, SIZE, 3))).astype(np.uint8)
    h = rng.uniform(34, 70)
    cx, top = rng.uniform(h * 0.35 + 4, SIZE - h * 0.35 - 4), rng.uniform(4, SIZE - h - 4)
    head = np.array([cx + rng.uniform(-3, 3), top + 0.08 * h])
    neck = np.array([cx, top + 0.22 * h])
    hip = np.array([cx + rng.uniform(-3, 3), top + 0.6 * h])
    hands = [
        neck + 0.35 * h * np.array([np.sin(a), np.cos(a)]) for a in (rng.uniform(-2.6, -0.4), rng.uniform(0.4, 2.6))
    ]
    feet = [np.array([hip[0] + s * rng.uniform(0.05, 0.3) * h, top + h - rng.uniform(0, 0.08) * h]) for s in (-1, 1)]
    joints = np.array([head, *hands, *feet])
    im = Image.fromarray(img)
    d = ImageDraw.Draw(im)
    for a, b in [(head, neck), (neck, hands[0]), (neck, hands[1]), (neck, hip), (hip, feet[0]), (hip, feet[1])]:
        d.line([tuple(a), tuple(b)], fill=(150, 150, 150), width=2)
    for (x, y), c in zip(joints, COLOURS):
        d.ellipse([x - 2.5, y - 2.5, x + 2.5, y + 2.5], fill=c)
    return np.asarray(im), joints


def bbox_of(joints: np.ndarray) -> list[float]:
    x0, y0 = joints.min(0) - 4
    x1, y1 = joints.max(0) + 4
    return [float(x0), float(y0), float(x1 - x0), float(y1 - y0)]


def sample(img: np.ndarray, joints: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(model input [3, CROP, CROP] in [0, 1], joints in heatmap pixels) as trtverify crops and resizes."""
    box = crop_box(bbox_of(joints), 1.0, PADDING)
    c = np.asarray(Image.fromarray(crop(img, box)).resize((CROP, CROP), Image.BILINEAR))
    hm_xy = (joints - np.array(box[:2]) + 0.5) * HM / np.array(box[2:]) - 0.5
    return c.transpose(2, 0, 1).astype(np.float32) / 255, hm_xy


def targets(hm_xy: np.ndarray) -> np.ndarray:
    g = np.arange(HM, dtype=np.float32)
    return np.exp(-((g[None, None, :] - hm_xy[:, None, 0:1]) ** 2 + (g[None, :, None] - hm_xy[:, None, 1:2]) ** 2) / 2)


class KeypointNet(torch.nn.Module):
    """64x64 crop -> heatmaps [K, 16, 16]: two stride-2 conv-BN-ReLU, two 3x3 conv-ReLU, a 1x1 head."""

    def __init__(self) -> None:
        super().__init__()
        c = torch.nn.Conv2d
        bn, relu = torch.nn.BatchNorm2d, torch.nn.ReLU
        self.body = torch.nn.Sequential(
            c(3, 16, 3, 2, 1), bn(16), relu(), c(16, 32, 3, 2, 1), bn(32), relu(),
            c(32, 32, 3, 1, 1), relu(), c(32, 32, 3, 1, 1), relu(),
        )  # fmt: skip
        self.head = c(32, K, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def heat_decode(hm: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Arg-max (no refinement) to image pixels: an independent, plain reading for metrics.json."""
    n = hm.shape[0]
    idx = np.nanargmax(np.where(np.isnan(hm), -np.inf, hm).reshape(n, K, -1), -1)
    xy = np.stack([idx % HM, idx // HM], -1).astype(np.float64)
    return (xy + 0.5) * boxes[:, None, 2:] / HM - 0.5 + boxes[:, None, :2]


def scores(pred: np.ndarray, joints: np.ndarray, bboxes: np.ndarray) -> dict:
    d = np.sqrt(((pred - joints) ** 2).sum(-1))
    pck = float((d <= 0.2 * bboxes[:, 2:].max(1)[:, None]).mean())
    area = bboxes[:, 2] * bboxes[:, 3]
    e = d**2 / (2 * np.array(SIGMAS)) ** 2 / (area[:, None] + np.spacing(1)) / 2
    return {"pck@0.2_argmax": round(pck, 4), "mean_oks_argmax": round(float(np.exp(-e).mean()), 4)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    seed_everything(SEED, args.threads)
    import onnx

    t0 = time.time()
    val, images, anns = HERE / "val", [], []
    (val / "images").mkdir(parents=True, exist_ok=True)
    vj, vb = [], []
    for i in range(1, N_VAL + 1):
        img, joints = figure(np.random.default_rng([VAL_SEED, i]))
        Image.fromarray(img).save(val / "images" / f"{i:04d}.png", optimize=True)
        bb = bbox_of(joints)
        kp = [round(float(v), 2) for x, y in joints for v in (x, y, 2)]
        images.append({"id": i, "file_name": f"{i:04d}.png", "width": SIZE, "height": SIZE})
        anns.append({"id": i, "image_id": i, "category_id": 1, "bbox": [round(v, 2) for v in bb], "iscrowd": 0,
                     "area": round(bb[2] * bb[3], 2), "keypoints": kp, "num_keypoints": K})  # fmt: skip
        vj.append(np.array(kp).reshape(K, 3)[:, :2])
        vb.append(anns[-1]["bbox"])
    cat = {"id": 1, "name": "figure", "keypoints": NAMES, "skeleton": []}
    (val / "person_keypoints.json").write_text(json.dumps({"images": images, "annotations": anns, "categories": [cat]}))
    (val / "LICENSE.md").write_text("Generated by demo/keypoints/make_demo.py; public domain, CC0 1.0.\n")

    rng = np.random.default_rng(SEED)
    xs, ys = [], []
    for _ in range(N_TRAIN):
        x, hm_xy = sample(*figure(rng))
        xs.append(x)
        ys.append(targets(hm_xy))
    x_all, y_all = torch.tensor(np.stack(xs)), torch.tensor(np.stack(ys))
    model = KeypointNet()
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 3e-3, total_steps=STEPS)
    t1 = time.time()
    for _ in range(STEPS):
        idx = torch.tensor(rng.integers(0, N_TRAIN, BATCH))
        loss = torch.nn.functional.mse_loss(model(x_all[idx]), y_all[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    train_s = time.time() - t1
    model.eval()

    fp32, fp16, bad = HERE / "kp_fp32.onnx", HERE / "kp_fp16.onnx", HERE / "kp_fp16_overflow.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(2, 3, CROP, CROP),), str(fp32), dynamo=False, opset_version=17,
                          input_names=["images"], output_names=["heatmaps"],
                          dynamic_axes={"images": {0: "batch"}, "heatmaps": {0: "batch"}})  # fmt: skip
    m = onnx.load(str(fp32))
    m.ir_version = 8
    onnx.save(m, str(fp32))
    make_fp16(fp32, fp16)

    # the validation crops, as trtverify makes them
    vx, boxes = [], []
    for i in range(N_VAL):
        img = np.asarray(Image.open(val / "images" / images[i]["file_name"]).convert("RGB"))
        box = crop_box(vb[i], 1.0, PADDING)
        boxes.append(box)
        vx.append(np.asarray(Image.fromarray(crop(img, box)).resize((CROP, CROP), Image.BILINEAR)))
    vx_arr = np.stack(vx).transpose(0, 3, 1, 2).astype(np.float32) * np.float32(1 / 255)
    boxes_arr, joints_arr, bb_arr = np.array(boxes, np.float64), np.stack(vj), np.array(vb)

    # the planted scale: 2^S on the last hidden Conv, so that its top activations on val pass 65504 in FP16
    with torch.no_grad():
        act = model.body(torch.tensor(vx_arr)).numpy()
    top = float(np.percentile(act, 99.9))
    shift = int(np.ceil(np.log2(65504 / top)))  # 2^shift x the 99.9th percentile > 65504
    planted = onnx.load(str(fp32))
    g = planted.graph
    relus = [n for n in g.node if n.op_type == "Relu"]
    last_relu = relus[-1]
    conv = next(n for n in g.node if last_relu.input[0] in n.output)
    inits = {t.name: t for t in g.initializer}
    from onnx import helper, numpy_helper

    for name in conv.input[1:]:
        w = numpy_helper.to_array(inits[name]) * np.float32(2.0**shift)
        inits[name].CopyFrom(numpy_helper.from_array(w.astype(np.float32), name))
    g.initializer.append(numpy_helper.from_array(np.array(2.0**-shift, np.float32), "planted_unscale"))
    out = last_relu.output[0]
    for n in g.node:
        for j, name in enumerate(n.input):
            if name == out:
                n.input[j] = "planted_unscaled"
    k = list(g.node).index(last_relu)
    g.node.insert(k + 1, helper.make_node("Mul", [out, "planted_unscale"], ["planted_unscaled"], name="planted_Mul"))
    onnx.checker.check_model(planted, full_check=True)
    tmp = HERE / "kp_fp32_scaled.onnx"
    onnx.save(planted, str(tmp))
    make_fp16(tmp, bad)

    # ONNX Runtime as it is (its CPU runs FP16 Convs in FP32: no overflow), and as trtverify runs FP16 on the CPU
    # (every FP16 tensor rounded to FP16, as a GPU computes it: the overflow shows)
    from trtverify.backends.onnxruntime import OnnxRuntimeBackend

    metrics: dict = {}
    for key, path in (("fp32", fp32), ("fp32_scaled", tmp), ("fp16", fp16), ("fp16_overflow", bad)):
        for how, run in (
            ("ort", lambda p: ort_session(p, args.threads).run(None, {"images": vx_arr})[0]),
            ("trtverify_emulated", lambda p: OnnxRuntimeBackend(p).infer({"images": vx_arr})["heatmaps"]),
        ):
            hm = run(path)
            pred = heat_decode(hm, boxes_arr)
            nonfinite = int((~np.isfinite(hm)).sum())
            metrics[f"{how}_{key}"] = {**scores(pred, joints_arr, bb_arr), "nonfinite_heatmap_values": nonfinite}
    tmp.unlink()
    with torch.no_grad():
        metrics["pytorch"] = scores(heat_decode(model(torch.tensor(vx_arr)).numpy(), boxes_arr), joints_arr, bb_arr)
    info = {
        "metrics": metrics,
        "planted": {
            "node": conv.name,
            "scale": f"2^{shift}",
            "act_p99.9_fp32": round(top, 3),
            "overflows_above": round(65504 / 2.0**shift, 3),
        },  # fmt: skip
        "training": {"steps": STEPS, "batch": BATCH, "train_s": round(train_s, 1), "final_loss": float(loss.detach())},
        "total_s": round(time.time() - t0, 1),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "onnx": onnx.__version__},
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    (HERE / "metrics.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
