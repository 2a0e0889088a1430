#!/usr/bin/env python3
"""Build the trtverify shapes segmentation demo (reproducible, CPU only).

Steps:
  1. write the fixed validation set ``val/`` (100 generated 128x128 RGB images in
     ``val/images/``, their class-id masks as 8-bit "L" PNGs in ``val/masks/``,
     generator keys [20240614, 3, i] -- independent of --seed and different from
     those of demo/shapes/val);
  2. train ``seg_model.ShapesUNet`` on CPU on images generated on the fly
     (``shapes_data.make_sample``, never saved) with pixel-wise cross-entropy:
     all epochs but the last on 64x64 images (same 12-48 px shapes, so more shape
     pixels per unit of compute), the last epoch on full 128x128 images; plus a
     training-only auxiliary 1x1 classifier on the 1/8-resolution encoder output
     (deep supervision, weight 0.4, not part of the saved model), which makes the
     shape classes emerge much earlier than with the plain loss;
  3. save the state_dict (``shapes_seg.pt``, loadable with weights_only=True);
  4. export ONNX FP32 (``seg_fp32.onnx``, opset 17, TorchScript exporter, input
     ``images`` [batch,3,128,128], output ``logits`` [batch,4,128,128], BatchNorm folded);
  5. make an FP16 model with float32 I/O (``seg_fp16.onnx``) and an INT8 QDQ model
     (``seg_int8_qdq.onnx``: symmetric QInt8 activations, symmetric per-channel
     QInt8 weights, float biases, Q/DQ on Conv inputs only, MinMax calibration on
     128 generated training images);
  6. evaluate PyTorch / ORT FP32 / FP16 / INT8 on ``val/`` (confusion matrix ->
     mIoU, per-class IoU, pixel accuracy, frequency-weighted IoU) and write
     ``metrics.json``.

Usage:
  python demo/shapes_seg/make_demo.py [--epochs N] [--threads 2] [--seed S] [--out DIR]

--epochs (default 13; one epoch = 100 steps of 32 freshly generated images, the
last one at 128x128, the others at 64x64) gives a fixed, seeded schedule; bit-exact
weights are expected only for the same torch version, CPU type and --threads.
"""

from __future__ import annotations

import argparse
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
sys.path.insert(1, str(HERE.parent / "shapes"))
sys.path.insert(2, str(HERE.parent))  # demo/onnx_steps.py
import seg_model  # noqa: E402
import shapes_data  # noqa: E402
from onnx_steps import make_fp16, make_int8_qdq, ort_session, rename_initializers, seed_everything  # noqa: E402

SEED = 20240612  # training seed (--seed)
VAL_SEED = 20240614  # fixed: the validation set never changes with --seed
N_VAL = 100
N_CALIB = 128
OPSET = 17
EPOCHS = 13
BATCH_SIZE = 32
SMALL_SIZE = 64  # image size of all epochs but the last
AUX_WEIGHT = 0.4  # deep supervision on the 1/8-resolution encoder output (training only)
STEPS_PER_EPOCH = 100
MAX_LR = 5e-3
WEIGHT_DECAY = 1e-4
WARMUP = 0.05  # fraction of training with linear LR warm-up, then cosine decay

PT_FILE = "shapes_seg.pt"
FP32_FILE = "seg_fp32.onnx"
FP16_FILE = "seg_fp16.onnx"
INT8_FILE = "seg_int8_qdq.onnx"
INPUT = seg_model.INPUT_NAME
OUTPUT = seg_model.OUTPUT_NAME
NUM_CLASSES = seg_model.NUM_CLASSES
CLASS_NAMES = seg_model.CLASS_NAMES
SIZE = shapes_data.IMAGE_SIZE

# RNG streams for generated images: training image j of step s is
# make_sample(np.random.default_rng([seed, TRAIN_STREAM, s, j]), size), calibration image j
# is [seed, CALIB_STREAM, 0, j], validation image i (1-based) is [VAL_SEED, VAL_STREAM, i].
TRAIN_STREAM, CALIB_STREAM, VAL_STREAM = 1, 2, 3


def preprocess(image_uint8_hwc: np.ndarray) -> np.ndarray:
    """uint8 [H, W, 3] RGB -> float32 [3, H, W] in [0, 1] (pixel / 255)."""
    return np.ascontiguousarray(image_uint8_hwc.transpose(2, 0, 1), dtype=np.float32) / np.float32(255.0)


def make_batch(seed: int, stream: int, index: int, n: int, size: int = SIZE) -> tuple[np.ndarray, np.ndarray]:
    """n generated images (float32 NCHW in [0,1]) and their label maps (int64 [n, size, size])."""
    x = np.empty((n, 3, size, size), np.float32)
    y = np.empty((n, size, size), np.int64)
    for j in range(n):
        img, _, labels = shapes_data.make_sample(np.random.default_rng([seed, stream, index, j]), size)
        x[j] = preprocess(img)
        y[j] = labels
    return x, y


# --------------------------------------------------------------------- val set
def write_val(folder: Path, n: int, seed: int) -> None:
    from PIL import Image

    (folder / "images").mkdir(parents=True, exist_ok=True)
    (folder / "masks").mkdir(parents=True, exist_ok=True)
    for i in range(1, n + 1):
        img, _, labels = shapes_data.make_sample(np.random.default_rng([seed, VAL_STREAM, i]))
        name = f"{i:06d}.png"
        Image.fromarray(img, mode="RGB").save(folder / "images" / name, optimize=True)
        Image.fromarray(labels, mode="L").save(folder / "masks" / name, optimize=True)
    (folder / "LICENSE.md").write_text(
        f"Generated by demo/shapes_seg/make_demo.py (shapes_data.make_sample, generator keys "
        f"[{seed}, {VAL_STREAM}, i] for image i); public domain, CC0 1.0 "
        "(https://creativecommons.org/publicdomain/zero/1.0/).\n",
        encoding="utf-8",
    )


def load_val(folder: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
    from PIL import Image

    names = sorted(p.name for p in (folder / "images").glob("*.png"))
    x = np.stack([preprocess(np.asarray(Image.open(folder / "images" / f).convert("RGB"))) for f in names])
    y = np.stack([np.asarray(Image.open(folder / "masks" / f)) for f in names])
    return names, x, y


# -------------------------------------------------------------------- training
def lr_at(frac: float) -> float:
    if frac < WARMUP:
        return MAX_LR * max(frac / WARMUP, 0.02)
    t = min((frac - WARMUP) / (1 - WARMUP), 1.0)
    return MAX_LR * (0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * t)))


def train(model, seed: int, epochs: int) -> dict:
    """Train in place on freshly generated images; returns timing info.

    All epochs but the last use SMALL_SIZE x SMALL_SIZE images, the last epoch full
    SIZE x SIZE ones. A 1x1 auxiliary classifier on the output of the deepest
    encoder stage (``enc3``, 1/8 resolution), read through a forward hook, adds
    AUX_WEIGHT x cross-entropy against the label map subsampled at the centres of
    the 8x8 cells; it exists only here and is thrown away after training.
    """
    deepest = model.enc3
    aux_head = torch.nn.Conv2d(deepest[-1][0].out_channels, NUM_CLASSES, 1)
    feats: list[torch.Tensor] = []
    hook = deepest.register_forward_hook(lambda _m, _i, o: feats.append(o))
    params = list(model.parameters()) + list(aux_head.parameters())
    opt = torch.optim.AdamW(params, lr=MAX_LR, weight_decay=WEIGHT_DECAY)
    total_steps = epochs * STEPS_PER_EPOCH
    small_steps = (epochs - 1) * STEPS_PER_EPOCH
    t0, c0 = time.perf_counter(), time.process_time()
    loss_acc, correct, seen = 0.0, 0, 0
    model.train()
    for step in range(total_steps):
        frac = step / total_steps
        for g in opt.param_groups:
            g["lr"] = lr_at(frac)
        size = SMALL_SIZE if step < small_steps else SIZE
        x, y = (torch.from_numpy(a) for a in make_batch(seed, TRAIN_STREAM, step, BATCH_SIZE, size))
        feats.clear()
        logits = model(x)
        loss = F.cross_entropy(logits, y) + AUX_WEIGHT * F.cross_entropy(aux_head(feats[0]), y[:, 4::8, 4::8])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss_acc += loss.item()
        correct += int((logits.detach().argmax(1) == y).sum())
        seen += y.numel()
        if (step + 1) % STEPS_PER_EPOCH == 0:
            print(
                f"step {step + 1} (epoch {(step + 1) // STEPS_PER_EPOCH}, {size}px): "
                f"loss {loss_acc / STEPS_PER_EPOCH:.4f} "
                f"pixel acc {correct / seen:.4f} lr {lr_at(frac):.2e} ({time.perf_counter() - t0:.0f}s)",
                flush=True,
            )
            loss_acc, correct, seen = 0.0, 0, 0
    hook.remove()
    model.eval()
    return {
        "steps": total_steps,
        "images_seen": total_steps * BATCH_SIZE,
        "steps_at_64px": small_steps,
        "steps_at_128px": total_steps - small_steps,
        "train_wall_time_s": round(time.perf_counter() - t0, 1),
        "train_cpu_time_s": round(time.process_time() - c0, 1),
    }


# ------------------------------------------------------------------------ ONNX
def export_fp32(model, path: Path) -> None:
    """TorchScript exporter (dynamo=False), opset 17, BatchNorm folded into Conv."""
    import onnx

    model.eval()
    dummy = torch.zeros(2, 3, SIZE, SIZE)
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
            output_names=[OUTPUT],
            dynamic_axes={INPUT: {0: "batch"}, OUTPUT: {0: "batch"}},
        )
    m = onnx.load(str(path))
    rename_folded_initializers(m)
    m.doc_string = (
        "ShapesUNet (shapes segmentation demo). input images: float32 [batch,3,128,128] RGB in [0,1] (x/255); "
        "output logits: float32 [batch,4,128,128] class scores, channel = class id "
        "(0 background, 1 circle, 2 square, 3 triangle); argmax over channels = label map."
    )
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))


def rename_folded_initializers(m) -> None:
    """Give the auto-named (onnx::Conv_NN) BN-folded conv weights module-path names."""
    rename: dict[str, str] = {}
    for node in m.graph.node:
        if node.op_type != "Conv":
            continue
        scope = node.name.strip("/").split("/")[:-1]  # '/up2/fuse/fuse.0/Conv' -> up2.fuse.0
        path = ".".join(p.rsplit(".", 1)[-1] if k else p for k, p in enumerate(scope))
        for role, name in zip(("weight", "bias"), list(node.input)[1:]):
            if name.startswith("onnx::"):
                rename[name] = f"{path}.{role}_bnfolded"
    if len(set(rename.values())) != len(rename):
        return  # ambiguous scopes: keep the exporter's names
    rename_initializers(m, rename)


INT8_EXTRA_OPTIONS = {
    "ActivationSymmetric": True,  # zero point 0 for activations (TensorRT requirement)
    "WeightSymmetric": True,  # zero point 0 for weights (TensorRT requirement)
    "QuantizeBias": False,  # keep biases float (as in demo/shapes; TensorRT fuses them into the conv)
    # Q/DQ on Conv inputs only (TensorRT's recommended placement; it fuses Conv+bias+ReLU).
    # Conv outputs are not quantized, so the final logits stay float.
    "OpTypesToExcludeOutputQuantization": ["Conv"],
}


# ------------------------------------------------------------------ evaluation
def run_model(fn, x: np.ndarray, batch: int = 50) -> np.ndarray:
    return np.concatenate([fn(x[i : i + batch]) for i in range(0, len(x), batch)]).astype(np.float32)


def confusion_matrix(gt: np.ndarray, pred: np.ndarray, k: int = NUM_CLASSES) -> np.ndarray:
    """int64 [k, k], rows = ground-truth class, columns = predicted class."""
    return np.bincount(gt.astype(np.int64).ravel() * k + pred.astype(np.int64).ravel(), minlength=k * k).reshape(k, k)


def seg_metrics(cm: np.ndarray) -> dict:
    tp = np.diag(cm).astype(np.float64)
    gt_total = cm.sum(axis=1).astype(np.float64)
    union = gt_total + cm.sum(axis=0) - tp  # TP + FN + FP
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(union > 0, tp / union, np.nan)
    freq = gt_total / cm.sum()
    return {
        "mIoU": round(float(np.nanmean(iou)), 4),
        "pixel_accuracy": round(float(tp.sum() / cm.sum()), 4),
        "fwIoU": round(float(np.nansum(freq * iou)), 4),
        "IoU_per_class": {name: round(float(v), 4) for name, v in zip(CLASS_NAMES, iou)},
        "confusion_matrix": cm.tolist(),
    }


def diff_stats(ref: np.ndarray, cand: np.ndarray) -> dict:
    return {
        "max_abs": float(f"{np.abs(ref - cand).max():.3g}"),
        "rel_l2": float(f"{np.linalg.norm((ref - cand).ravel()) / np.linalg.norm(ref.ravel()):.3g}"),
        "argmax_agreement": round(float((ref.argmax(1) == cand.argmax(1)).mean()), 6),
    }


# ------------------------------------------------------------------------ main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--epochs",
        type=int,
        default=EPOCHS,
        help=f"epochs of {STEPS_PER_EPOCH} x {BATCH_SIZE} generated images, the last at {SIZE}x{SIZE}, "
        f"the others at {SMALL_SIZE}x{SMALL_SIZE} (default {EPOCHS})",
    )
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for torch and ORT (default 2)")
    ap.add_argument("--seed", type=int, default=SEED, help=f"training seed (default {SEED}); val set is fixed")
    ap.add_argument("--out", type=Path, default=HERE, help="output folder (default: this script's folder)")
    args = ap.parse_args()
    if args.epochs < 1:
        ap.error("--epochs must be >= 1")

    import onnx
    import onnxruntime as ort
    import PIL

    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    seed_everything(args.seed, args.threads)
    ort.set_default_logger_severity(3)

    # 1. validation set
    val_dir = out / "val"
    t = time.perf_counter()
    write_val(val_dir, N_VAL, VAL_SEED)
    print(f"wrote {N_VAL} validation images + masks to {val_dir} ({time.perf_counter() - t:.1f}s)", flush=True)

    # 2. train
    model = seg_model.build()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"ShapesUNet: {n_params:,} parameters; training {args.epochs} epochs on {args.threads} threads", flush=True)
    timing = train(model, args.seed, args.epochs)
    print(f"trained: {timing}", flush=True)

    # 3. weights
    pt_path = out / PT_FILE
    torch.save(model.state_dict(), pt_path)
    reloaded = seg_model.build()
    reloaded.load_state_dict(torch.load(pt_path, weights_only=True))
    reloaded.eval()

    # 4./5. ONNX
    export_fp32(reloaded, out / FP32_FILE)
    make_fp16(out / FP32_FILE, out / FP16_FILE)
    calib, _ = make_batch(args.seed, CALIB_STREAM, 0, N_CALIB)
    # Q/DQ on Conv inputs only: Relu, Add and Resize stay float
    make_int8_qdq(
        out / FP32_FILE,
        out / INT8_FILE,
        calib,
        input_name=INPUT,
        extra_options=INT8_EXTRA_OPTIONS,
        op_types=["Conv"],
    )

    # 6. evaluate
    names, x, y = load_val(val_dir)

    @torch.no_grad()
    def torch_fn(xb):
        return reloaded(torch.from_numpy(xb)).numpy()

    runs = {"pytorch_fp32": run_model(torch_fn, x)}
    for key, fname in (("onnx_fp32", FP32_FILE), ("onnx_fp16", FP16_FILE), ("onnx_int8_qdq", INT8_FILE)):
        sess = ort_session(out / fname, args.threads)
        runs[key] = run_model(lambda xb, s=sess: s.run([OUTPUT], {INPUT: xb})[0], x)

    metrics = {}
    for key, logits in runs.items():
        metrics[key] = seg_metrics(confusion_matrix(y, logits.argmax(1)))
        if key != "pytorch_fp32":
            metrics[key]["logits_diff_vs_pytorch"] = diff_stats(runs["pytorch_fp32"], logits)
        iou = " ".join(f"{k} {v:.4f}" for k, v in metrics[key]["IoU_per_class"].items())
        print(
            f"{key:14s} mIoU {metrics[key]['mIoU']:.4f}  pixel acc {metrics[key]['pixel_accuracy']:.4f}  "
            f"fwIoU {metrics[key]['fwIoU']:.4f}  ({iou})",
            flush=True,
        )
    rel = metrics["onnx_fp32"]["logits_diff_vs_pytorch"]["rel_l2"]
    if not rel < 1e-5:
        print(f"WARNING: ORT FP32 vs PyTorch rel_l2 {rel:g} >= 1e-5", flush=True)

    files = {f: (out / f).stat().st_size for f in (PT_FILE, FP32_FILE, FP16_FILE, INT8_FILE)}
    files["val/"] = sum(p.stat().st_size for p in val_dir.rglob("*") if p.is_file())
    counts = np.bincount(y.ravel(), minlength=NUM_CLASSES)
    result = {
        "task": "segmentation (confusion matrix: IoU_c = TP/(TP+FP+FN), mIoU over 4 classes incl. background)",
        "dataset": {
            "folder": "val",
            "images": len(names),
            "image_size": [SIZE, SIZE],
            "generator_keys": f"[{VAL_SEED}, {VAL_STREAM}, i] for image i = 1..{N_VAL}",
            "masks": "val/masks/*.png, 8-bit L, pixel value = class id",
            "classes": dict(enumerate(CLASS_NAMES)),
            "pixels_per_class": {n: int(c) for n, c in zip(CLASS_NAMES, counts)},
        },
        "model": {
            "name": "ShapesUNet",
            "parameters": n_params,
            "input": {INPUT: ["batch", 3, SIZE, SIZE]},
            "output": {OUTPUT: ["batch", NUM_CLASSES, SIZE, SIZE]},
        },
        "metrics": metrics,
        "training": {
            "seed": args.seed,
            "epochs": args.epochs,
            "batch_size": BATCH_SIZE,
            "steps_per_epoch": STEPS_PER_EPOCH,
            "max_lr": MAX_LR,
            "weight_decay": WEIGHT_DECAY,
            "optimizer": "AdamW, linear warm-up 5% then cosine",
            "image_size": f"{SMALL_SIZE}x{SMALL_SIZE} for all epochs but the last, {SIZE}x{SIZE} for the last",
            "loss": f"cross-entropy + {AUX_WEIGHT} x cross-entropy of a training-only 1x1 classifier "
            "on enc3 (1/8 resolution) against labels[4::8, 4::8]",
            "threads": args.threads,
            **timing,
        },
        "int8": {
            "calibration_images": N_CALIB,
            "calibration": "MinMax",
            "calibration_generator_keys": f"[{args.seed}, {CALIB_STREAM}, 0, j]",
            "op_types_to_quantize": ["Conv"],
            "activation_type": "QInt8",
            "weight_type": "QInt8",
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
            "platform": platform.platform(),
            "cpu": platform.processor() or platform.machine(),
        },
    }
    (out / "metrics.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out / 'metrics.json'}")


if __name__ == "__main__":
    main()
