#!/usr/bin/env python3
"""Build the trtverify shapes detection demo (reproducible, CPU only).

Steps:
  1. write the fixed validation set ``val/`` (200 generated 128x128 images,
     COCO instances JSON, seed 20240612 -- independent of --seed);
  2. train ``shapes_model.ShapesCenterNet`` (CenterNet-style, stride 4) on CPU on
     images generated on the fly (never saved): focal loss on a Gaussian centre
     heatmap, L1 on width/height and centre offset at the object centres;
  3. save the state_dict (``shapes_centernet.pt``, loadable with weights_only=True);
  4. export ONNX FP32 (``shapes_fp32.onnx``, opset 17, TorchScript exporter,
     input ``images`` [batch,3,128,128], outputs ``heatmap`` [batch,3,32,32],
     ``wh`` [batch,2,32,32], ``offset`` [batch,2,32,32]);
  5. make an INT8 QDQ model (``shapes_int8_qdq.onnx``: symmetric QInt8
     activations, symmetric per-channel QInt8 weights, float biases, Q/DQ on
     Conv inputs only, so Sigmoid / heads stay float; MinMax calibration on 256
     generated training images) and an FP16 model with float32 I/O
     (``shapes_fp16.onnx``);
  6. evaluate PyTorch / ORT FP32 / FP16 / INT8 on ``val/`` through
     ``shapes_decode.decode`` with pycocotools (mAP@[.5:.95], AP50, AP75, per class)
     and write ``metrics.json``.

Usage:
  python demo/shapes/make_demo.py [--epochs N | --minutes M] [--threads 2] [--seed S] [--out DIR]

--epochs (default 6; one epoch = 64 steps of 32 freshly generated images) gives a
fixed, seeded schedule; bit-exact weights are expected only for the same torch
version, CPU type and --threads. --minutes M trains for a wall-clock budget
instead (learning-rate schedule driven by elapsed time), which is NOT bit-reproducible.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # demo/onnx_steps.py
import shapes_data  # noqa: E402
import shapes_decode  # noqa: E402
import shapes_model  # noqa: E402
from onnx_steps import make_fp16, make_int8_qdq, ort_session, rename_initializers, seed_everything  # noqa: E402

SEED = 20240612  # training seed (--seed)
VAL_SEED = 20240613  # fixed: the validation set never changes with --seed
N_VAL = 200
N_CALIB = 256
OPSET = 17
BATCH_SIZE = 32
STEPS_PER_EPOCH = 64
MAX_LR = 3e-3
WEIGHT_DECAY = 1e-4
WARMUP = 0.05  # fraction of training with linear LR warm-up, then cosine decay
WH_WEIGHT = 0.1  # CenterNet loss weights
OFF_WEIGHT = 1.0
MIN_OVERLAP = 0.7  # CenterNet Gaussian radius parameter

PT_FILE = "shapes_centernet.pt"
FP32_FILE = "shapes_fp32.onnx"
FP16_FILE = "shapes_fp16.onnx"
INT8_FILE = "shapes_int8_qdq.onnx"
INPUT = shapes_model.INPUT_NAME
OUTPUTS = list(shapes_model.OUTPUT_NAMES)
STRIDE = shapes_model.STRIDE
SIZE = shapes_data.IMAGE_SIZE
NUM_CLASSES = shapes_model.NUM_CLASSES

# RNG streams (np.random.default_rng([seed, STREAM, ...])) for generated images
TRAIN_STREAM, CALIB_STREAM = 1, 2


# ----------------------------------------------------------------------- targets
def gaussian_radius(h: float, w: float, min_overlap: float = MIN_OVERLAP) -> float:
    """CenterNet's (CornerNet's) Gaussian radius for a box of h x w output cells."""
    a1, b1, c1 = 1, h + w, w * h * (1 - min_overlap) / (1 + min_overlap)
    r1 = (b1 + math.sqrt(b1**2 - 4 * a1 * c1)) / 2
    a2, b2, c2 = 4, 2 * (h + w), (1 - min_overlap) * w * h
    r2 = (b2 + math.sqrt(b2**2 - 4 * a2 * c2)) / 2
    a3, b3, c3 = 4 * min_overlap, -2 * min_overlap * (h + w), (min_overlap - 1) * w * h
    r3 = (b3 + math.sqrt(b3**2 - 4 * a3 * c3)) / 2
    return min(r1, r2, r3)


def draw_gaussian(heat: np.ndarray, cx: int, cy: int, radius: int) -> None:
    d = 2 * radius + 1
    sigma = d / 6.0
    ys, xs = np.ogrid[-radius : radius + 1, -radius : radius + 1]
    g = np.exp(-(xs * xs + ys * ys) / (2 * sigma * sigma)).astype(np.float32)
    g[g < np.finfo(np.float32).eps * g.max()] = 0
    hh, ww = heat.shape
    left, r = min(cx, radius), min(ww - cx, radius + 1)
    t, b = min(cy, radius), min(hh - cy, radius + 1)
    np.maximum(
        heat[cy - t : cy + b, cx - left : cx + r],
        g[radius - t : radius + b, radius - left : radius + r],
        out=heat[cy - t : cy + b, cx - left : cx + r],
    )


def make_batch(seed: int, stream: int, index: int, n: int, with_targets: bool = True):
    """n generated images (float32 NCHW in [0,1]) and CenterNet targets."""
    gh = gw = SIZE // STRIDE
    x = np.empty((n, 3, SIZE, SIZE), np.float32)
    heat = np.zeros((n, NUM_CLASSES, gh, gw), np.float32)
    wh = np.zeros((n, 2, gh, gw), np.float32)
    off = np.zeros((n, 2, gh, gw), np.float32)
    mask = np.zeros((n, 1, gh, gw), np.float32)
    for j in range(n):
        img, boxes = shapes_data.make_image(np.random.default_rng([seed, stream, index, j]))
        x[j] = shapes_decode.preprocess(img)
        if not with_targets:
            continue
        for cls, x1, y1, x2, y2 in boxes:
            cx, cy = (x1 + x2) / 2 / STRIDE, (y1 + y2) / 2 / STRIDE
            w, h = (x2 - x1) / STRIDE, (y2 - y1) / STRIDE
            ix, iy = min(int(cx), gw - 1), min(int(cy), gh - 1)
            r = max(0, int(gaussian_radius(h, w)))
            draw_gaussian(heat[j, cls - 1], ix, iy, r)
            heat[j, cls - 1, iy, ix] = 1.0
            wh[j, :, iy, ix] = (w, h)
            off[j, :, iy, ix] = (cx - ix, cy - iy)
            mask[j, 0, iy, ix] = 1.0
    return x, heat, wh, off, mask


def centernet_loss(logits, wh_pred, off_pred, heat, wh, off, mask):
    """Penalty-reduced focal loss (alpha 2, beta 4) + masked L1 on wh / offset."""
    pos = heat.eq(1).float()
    neg = 1.0 - pos
    log_p = F.logsigmoid(logits)
    log_1mp = F.logsigmoid(-logits)
    p = torch.sigmoid(logits)
    pos_loss = (log_p * (1 - p) ** 2 * pos).sum()
    neg_loss = (log_1mp * p**2 * (1 - heat) ** 4 * neg).sum()
    num_pos = pos.sum().clamp(min=1.0)
    focal = -(pos_loss + neg_loss) / num_pos
    n_obj = mask.sum().clamp(min=1.0)
    l_wh = (torch.abs(wh_pred - wh) * mask).sum() / n_obj
    l_off = (torch.abs(off_pred - off) * mask).sum() / n_obj
    return focal + WH_WEIGHT * l_wh + OFF_WEIGHT * l_off, (focal.item(), l_wh.item(), l_off.item())


# ---------------------------------------------------------------------- training
def lr_at(frac: float) -> float:
    if frac < WARMUP:
        return MAX_LR * max(frac / WARMUP, 0.02)
    t = min((frac - WARMUP) / (1 - WARMUP), 1.0)
    return MAX_LR * (0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * t)))


def train(model, seed: int, epochs: int | None, minutes: float | None) -> dict:
    """Train in place on freshly generated images; returns timing info."""
    opt = torch.optim.AdamW(model.parameters(), lr=MAX_LR, weight_decay=WEIGHT_DECAY)
    total_steps = None if minutes else epochs * STEPS_PER_EPOCH
    budget = minutes * 60.0 if minutes else None
    t0, c0 = time.perf_counter(), time.process_time()
    step, acc = 0, np.zeros(4)
    model.train()
    while True:
        elapsed = time.perf_counter() - t0
        frac = elapsed / budget if budget else step / total_steps
        if frac >= 1.0:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(frac)
        x, heat, wh, off, mask = (torch.from_numpy(a) for a in make_batch(seed, TRAIN_STREAM, step, BATCH_SIZE))
        logits, wh_p, off_p = model.forward_logits(x)
        loss, parts = centernet_loss(logits, wh_p, off_p, heat, wh, off, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        acc += (loss.item(), *parts)
        step += 1
        if step % STEPS_PER_EPOCH == 0:
            a = acc / STEPS_PER_EPOCH
            print(
                f"step {step} (epoch {step // STEPS_PER_EPOCH}): loss {a[0]:.3f} focal {a[1]:.3f} "
                f"wh {a[2]:.3f} off {a[3]:.3f} lr {lr_at(frac):.2e} ({time.perf_counter() - t0:.0f}s)",
                flush=True,
            )
            acc[:] = 0
    model.eval()
    return {
        "steps": step,
        "images_seen": step * BATCH_SIZE,
        "train_wall_time_s": round(time.perf_counter() - t0, 1),
        "train_cpu_time_s": round(time.process_time() - c0, 1),
    }


# -------------------------------------------------------------------------- ONNX
def export_fp32(model, path: Path) -> None:
    """TorchScript exporter (dynamo=False), opset 17, BatchNorm folded into Conv."""
    import onnx

    model.eval()
    dummy = torch.zeros(2, 3, SIZE, SIZE)
    dyn = {INPUT: {0: "batch"}, **{o: {0: "batch"} for o in OUTPUTS}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (dummy,),
            str(path),
            dynamo=False,
            export_params=True,
            opset_version=OPSET,
            do_constant_folding=True,
            input_names=[INPUT],
            output_names=OUTPUTS,
            dynamic_axes=dyn,
        )
    m = onnx.load(str(path))
    rename_folded_initializers(m)
    m.doc_string = (
        "ShapesCenterNet (shapes detection demo). input images: float32 [batch,3,128,128] RGB in [0,1] (x/255); "
        "outputs (stride 4): heatmap [batch,3,32,32] sigmoid probabilities (circle, square, triangle), "
        "wh [batch,2,32,32] box size in cells, offset [batch,2,32,32] centre offset in cells."
    )
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))


def rename_folded_initializers(m) -> None:
    """Give the auto-named (onnx::Conv_NN) BN-folded conv weights module-path names."""
    rename: dict[str, str] = {}
    for node in m.graph.node:
        if node.op_type != "Conv":
            continue
        scope = node.name.split("/")[-2]  # '/stage1/stage1.0/stage1.0.0/Conv' -> 'stage1.0.0'
        for role, name in zip(("weight", "bias"), list(node.input)[1:]):
            if name.startswith("onnx::"):
                rename[name] = f"{scope}.{role}_bnfolded"
    if len(set(rename.values())) != len(rename):
        return  # ambiguous scopes: keep the exporter's names
    rename_initializers(m, rename)


INT8_EXTRA_OPTIONS = {
    "ActivationSymmetric": True,  # zero point 0 for activations (TensorRT requirement)
    "WeightSymmetric": True,  # zero point 0 for weights (TensorRT requirement)
    "QuantizeBias": False,  # TensorRT rejects DequantizeLinear on int32 biases
    # Q/DQ on Conv inputs only (TensorRT's recommended placement; it fuses Conv+bias+ReLU).
    # Conv outputs are not quantized, so the heatmap logits, the Sigmoid and the wh /
    # offset regressions stay float instead of passing through an int8 Q/DQ pair.
    "OpTypesToExcludeOutputQuantization": ["Conv"],
}


# -------------------------------------------------------------------- evaluation
def load_val(folder: Path) -> tuple[dict, np.ndarray]:
    from PIL import Image

    doc = json.loads((folder / "instances.json").read_text(encoding="utf-8"))
    imgs = [np.asarray(Image.open(folder / "images" / im["file_name"]).convert("RGB")) for im in doc["images"]]
    x = np.stack([shapes_decode.preprocess(i) for i in imgs])
    return doc, x


def run_model(fn, x: np.ndarray, batch: int = 50) -> dict[str, np.ndarray]:
    parts = [fn(x[i : i + batch]) for i in range(0, len(x), batch)]
    return {k: np.concatenate([p[k] for p in parts]).astype(np.float32) for k in OUTPUTS}


def coco_eval(ann_file: Path, doc: dict, outputs: dict[str, np.ndarray]) -> dict:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    dets = shapes_decode.decode(outputs, image_sizes=[(im["height"], im["width"]) for im in doc["images"]])
    results = []
    for im, d in zip(doc["images"], dets):
        for x1, y1, x2, y2, s, c in d.tolist():
            results.append(
                {"image_id": im["id"], "category_id": int(c), "bbox": [x1, y1, x2 - x1, y2 - y1], "score": s}
            )
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(ann_file))
        dt = gt.loadRes(results)
        ev = COCOeval(gt, dt, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    per_class = {}
    prec = ev.eval["precision"]  # [T, R, K, A, M]
    for k, cat_id in enumerate(ev.params.catIds):
        p = prec[:, :, k, 0, -1]
        per_class[shapes_data.CLASS_NAMES[cat_id]] = round(float(p[p > -1].mean()), 4)
    return {
        "mAP": round(float(ev.stats[0]), 4),
        "AP50": round(float(ev.stats[1]), 4),
        "AP75": round(float(ev.stats[2]), 4),
        "AR100": round(float(ev.stats[8]), 4),
        "AP_per_class": per_class,
        "detections": len(results),
    }


def diff_stats(ref: dict, cand: dict) -> dict:
    return {k: round(float(np.abs(ref[k] - cand[k]).max()), 6) for k in OUTPUTS}


# -------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument(
        "--epochs",
        type=int,
        default=6,
        help=f"epochs of {STEPS_PER_EPOCH} x {BATCH_SIZE} generated images (default 6, ~3-3.5 min on 2 idle cores)",
    )
    g.add_argument(
        "--minutes", type=float, default=None, help="train for this wall-clock budget instead (not bit-reproducible)"
    )
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for torch and ORT (default 2)")
    ap.add_argument("--seed", type=int, default=SEED, help=f"training seed (default {SEED}); val set is fixed")
    ap.add_argument("--out", type=Path, default=HERE, help="output folder (default: this script's folder)")
    args = ap.parse_args()

    import onnx
    import onnxruntime as ort
    import PIL
    import pycocotools

    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    seed_everything(args.seed, args.threads)
    ort.set_default_logger_severity(3)

    # 1. validation set
    val_dir = out / "val"
    t = time.perf_counter()
    ann_file = shapes_data.write_coco(val_dir, N_VAL, VAL_SEED)
    (val_dir / "LICENSE.md").write_text(
        "Generated by demo/shapes/make_demo.py (shapes_data.write_coco, seed "
        f"{VAL_SEED}); public domain, CC0 1.0 (https://creativecommons.org/publicdomain/zero/1.0/).\n",
        encoding="utf-8",
    )
    print(f"wrote {N_VAL} validation images to {val_dir} ({time.perf_counter() - t:.1f}s)", flush=True)

    # 2. train
    model = shapes_model.build()
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"ShapesCenterNet: {n_params:,} parameters; training "
        f"{f'{args.minutes} min' if args.minutes else f'{args.epochs} epochs'} on {args.threads} threads",
        flush=True,
    )
    timing = train(model, args.seed, None if args.minutes else args.epochs, args.minutes)
    print(f"trained: {timing}", flush=True)

    # 3. weights
    pt_path = out / PT_FILE
    torch.save(model.state_dict(), pt_path)
    reloaded = shapes_model.build()
    reloaded.load_state_dict(torch.load(pt_path, weights_only=True))
    reloaded.eval()

    # 4./5. ONNX
    export_fp32(reloaded, out / FP32_FILE)
    calib, *_ = make_batch(args.seed, CALIB_STREAM, 0, N_CALIB, with_targets=False)
    # Q/DQ on Conv inputs only: Relu, Add, Resize and Sigmoid stay float
    make_int8_qdq(
        out / FP32_FILE,
        out / INT8_FILE,
        calib,
        input_name=INPUT,
        extra_options=INT8_EXTRA_OPTIONS,
        op_types=["Conv"],
    )
    make_fp16(out / FP32_FILE, out / FP16_FILE)

    # 6. evaluate
    doc, x = load_val(val_dir)

    @torch.no_grad()
    def torch_fn(xb):
        return dict(zip(OUTPUTS, (t.numpy() for t in reloaded(torch.from_numpy(xb)))))

    runs = {"pytorch_fp32": run_model(torch_fn, x)}
    for key, fname in (("onnx_fp32", FP32_FILE), ("onnx_fp16", FP16_FILE), ("onnx_int8_qdq", INT8_FILE)):
        sess = ort_session(out / fname, args.threads)
        runs[key] = run_model(lambda xb, s=sess: dict(zip(OUTPUTS, s.run(OUTPUTS, {INPUT: xb}))), x)

    metrics = {}
    for key, o in runs.items():
        metrics[key] = coco_eval(ann_file, doc, o)
        if key != "pytorch_fp32":
            metrics[key]["max_abs_diff_vs_pytorch"] = diff_stats(runs["pytorch_fp32"], o)
        print(
            f"{key:14s} mAP {metrics[key]['mAP']:.4f}  AP50 {metrics[key]['AP50']:.4f}  "
            f"AP75 {metrics[key]['AP75']:.4f}",
            flush=True,
        )

    files = {f: (out / f).stat().st_size for f in (PT_FILE, FP32_FILE, FP16_FILE, INT8_FILE)}
    files["val/"] = sum(p.stat().st_size for p in val_dir.rglob("*") if p.is_file())
    result = {
        "task": "detection (COCO bbox mAP, pycocotools)",
        "dataset": {
            "folder": "val",
            "images": len(doc["images"]),
            "annotations": len(doc["annotations"]),
            "seed": VAL_SEED,
            "image_size": [SIZE, SIZE],
            "categories": {c["id"]: c["name"] for c in shapes_data.CATEGORIES},
        },
        "model": {
            "name": "ShapesCenterNet",
            "parameters": n_params,
            "stride": STRIDE,
            "input": {INPUT: ["batch", 3, SIZE, SIZE]},
            "outputs": {
                "heatmap": ["batch", NUM_CLASSES, SIZE // STRIDE, SIZE // STRIDE],
                "wh": ["batch", 2, SIZE // STRIDE, SIZE // STRIDE],
                "offset": ["batch", 2, SIZE // STRIDE, SIZE // STRIDE],
            },
        },
        "decode": {"hook": "shapes_decode:decode", "max_detections": 50, "threshold": 0.05},
        "metrics": metrics,
        "training": {
            "seed": args.seed,
            "epochs": None if args.minutes else args.epochs,
            "minutes_budget": args.minutes,
            "batch_size": BATCH_SIZE,
            "steps_per_epoch": STEPS_PER_EPOCH,
            "max_lr": MAX_LR,
            "weight_decay": WEIGHT_DECAY,
            "optimizer": "AdamW, linear warm-up 5% then cosine",
            "threads": args.threads,
            **timing,
        },
        "int8": {
            "calibration_images": N_CALIB,
            "calibration": "MinMax",
            "op_types_to_quantize": ["Conv"],
            "per_channel": True,
            "extra_options": INT8_EXTRA_OPTIONS,
        },
        "file_sizes_bytes": files,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": ort.__version__,
            "numpy": np.__version__,
            "pillow": PIL.__version__,
            "pycocotools": getattr(pycocotools, "__version__", "unknown"),
            "platform": platform.platform(),
            "cpu": platform.processor() or platform.machine(),
        },
    }
    (out / "metrics.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out / 'metrics.json'}")


if __name__ == "__main__":
    main()
