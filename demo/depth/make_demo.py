"""Regenerate the depth demo (demo/depth/README.md): synthetic scenes, a tiny encoder-decoder trained on the CPU,
its FP32 ONNX export, an FP16 candidate and an INT8 candidate calibrated on near scenes only (the planted fault).

    /work/main/.venv/bin/python demo/depth/make_demo.py      # about 20 s on 2 CPU cores

Seeded; writes depth_fp32.onnx, depth_fp16.onnx, depth_int8_near.onnx, val.npz and metrics.json beside it.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from onnx_steps import make_fp16, make_int8_qdq, ort_session, seed_everything  # noqa: E402

SEED = 0
SIZE = 32  # images and depth maps are SIZE x SIZE
MIN_D, MAX_D = 0.5, 25.0  # the model's output range (metres)
TRAIN, VAL, CALIB = 3000, 48, 64
STEPS, BATCH = 600, 64
NEAR = 8.0  # the calibration scenes of the planted candidate end here (a far wall at most NEAR metres away)
DROPOUT = 0.05  # share of ground-truth pixels without depth (0), as a depth sensor leaves them
OPSET, IR_VERSION = 17, 8
INPUT, OUTPUT = "images", "depth"


def scene(rng: np.random.Generator, far: tuple[float, float] = (10.0, 20.0)) -> tuple[np.ndarray, np.ndarray]:
    """One scene: (uint8 RGB image [SIZE, SIZE, 3], depth in metres [SIZE, SIZE]). A far wall, a floor whose depth
    falls towards the camera below the horizon, boxes standing on the floor; colours fade into grey fog with depth
    (the cue the model learns), plus texture and noise."""
    wall = rng.uniform(*far)
    horizon = rng.integers(10, 18)
    rows = np.arange(SIZE, dtype=np.float64)
    floor = np.where(rows > horizon, 1.6 * SIZE / np.maximum(rows - horizon, 1e-6) / 2.0, np.inf)
    col_depth = np.minimum(floor, wall)  # per row
    depth = np.repeat(col_depth[:, None], SIZE, axis=1)
    albedo = np.empty((SIZE, SIZE, 3))
    albedo[:] = rng.uniform(0.05, 0.5, 3)  # the wall's colour
    checker = ((np.arange(SIZE)[None, :] // 4 + rows[:, None].astype(int) // 2) % 2)[..., None]
    floor_rows = rows[:, None] > horizon
    albedo = np.where(floor_rows[..., None], 0.15 + 0.2 * checker * rng.uniform(0.5, 1.0), albedo)
    boxes = sorted(rng.uniform(1.5, min(wall, 15.0), rng.integers(1, 4)), reverse=True)  # far first
    for z in boxes:
        bottom = int(np.clip(horizon + 0.8 * SIZE / z, horizon + 1, SIZE))  # where the floor is z away
        height = int(np.clip(40 / z, 2, SIZE))
        width = int(np.clip(30 / z * rng.uniform(0.6, 1.6), 2, SIZE))
        left = rng.integers(0, SIZE - width + 1)
        top = max(bottom - height, 0)
        depth[top:bottom, left : left + width] = z
        albedo[top:bottom, left : left + width] = rng.uniform(0.05, 0.5, 3)
    fog = np.exp(-depth / 8.0)[..., None]
    image = albedo * fog + 0.85 * (1 - fog) + rng.normal(0, 0.01, albedo.shape)
    return (np.clip(image, 0, 1) * 255).round().astype(np.uint8), depth.astype(np.float32)


def scenes(rng: np.random.Generator, n: int, far: tuple[float, float] = (10.0, 20.0)) -> tuple[np.ndarray, np.ndarray]:
    pairs = [scene(rng, far) for _ in range(n)]
    return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


class TinyDepth(nn.Module):
    """Encoder (two stride-2 convs) and decoder (nearest 2x upsampling, a skip, convs); depth in [MIN_D, MAX_D]
    from a sigmoid."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU())
        self.down1 = nn.Sequential(nn.Conv2d(16, 24, 3, stride=2, padding=1), nn.ReLU())
        self.down2 = nn.Sequential(nn.Conv2d(24, 32, 3, stride=2, padding=1), nn.ReLU())
        self.up1 = nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv2d(32, 24, 3, padding=1), nn.ReLU())
        self.up2 = nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv2d(24, 16, 3, padding=1), nn.ReLU())
        self.head = nn.Conv2d(16, 1, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.stem(x)
        d1 = self.down1(s)
        y = self.up1(self.down2(d1)) + d1
        y = self.up2(y) + s
        return MIN_D + (MAX_D - MIN_D) * torch.sigmoid(self.head(y))


def to_input(images: np.ndarray) -> np.ndarray:
    return (images.astype(np.float32) / 255.0).transpose(0, 3, 1, 2)


def train(model: nn.Module, images: np.ndarray, depth: np.ndarray, rng: np.random.Generator) -> dict:
    x, y = torch.from_numpy(to_input(images)), torch.from_numpy(np.log(depth))[:, None]
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, STEPS)
    t0 = time.perf_counter()
    for _ in range(STEPS):
        idx = torch.from_numpy(rng.integers(0, len(x), BATCH))
        loss = (torch.log(model(x[idx])) - y[idx]).abs().mean()  # L1 on log depth
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    model.eval()
    return {
        "steps": STEPS,
        "batch": BATCH,
        "final_loss": round(float(loss), 4),
        "wall_s": round(time.perf_counter() - t0),
    }


def export(model: nn.Module, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.zeros(2, 3, SIZE, SIZE),),
            str(path),
            dynamo=False,
            opset_version=OPSET,
            input_names=[INPUT],
            output_names=[OUTPUT],
            dynamic_axes={INPUT: {0: "batch"}, OUTPUT: {0: "batch"}},
        )
    set_ir(path)


def set_ir(path: Path) -> None:
    import onnx

    m = onnx.load(str(path))
    m.ir_version = IR_VERSION  # older ONNX Runtime builds read IR 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))


def eigen(truth: np.ndarray, pred: np.ndarray, lo: float = 1e-3, hi: float = MAX_D) -> dict[str, float]:
    """Eigen et al. (2014) metrics, per image then averaged (monodepth's compute_errors), for metrics.json."""
    rows = []
    for d, p in zip(truth, pred):
        m = (d >= lo) & (d <= hi)
        d, p = d[m].astype(np.float64), np.clip(p[m].astype(np.float64), lo, hi)
        r = np.maximum(p / d, d / p)
        errors = [np.mean(np.abs(p - d) / d), np.mean((p - d) ** 2 / d), np.sqrt(np.mean((p - d) ** 2))]
        errors.append(np.sqrt(np.mean((np.log(p) - np.log(d)) ** 2)))
        rows.append([*errors, *[np.mean(r < 1.25**k) for k in (1, 2, 3)]])
    names = ["abs_rel", "sq_rel", "rmse", "rmse_log", "delta1", "delta2", "delta3"]
    return {k: round(float(v), 4) for k, v in zip(names, np.mean(rows, axis=0))}


def main() -> None:
    seed_everything(SEED, threads=2)
    rng = np.random.default_rng(SEED)
    train_x, train_y = scenes(rng, TRAIN)
    val_x, val_y = scenes(rng, VAL)
    calib_x, _ = scenes(rng, CALIB, far=(4.0, NEAR))  # near scenes only: the calibration set of the planted fault
    holes = rng.random(val_y.shape) < DROPOUT
    val_y = np.where(holes, 0.0, val_y).astype(np.float32)  # 0 = no depth measured there
    model = TinyDepth()
    info = train(model, train_x, train_y, rng)
    fp32, fp16, int8 = HERE / "depth_fp32.onnx", HERE / "depth_fp16.onnx", HERE / "depth_int8_near.onnx"
    export(model, fp32)
    make_fp16(fp32, fp16)
    set_ir(fp16)
    # INT8 QDQ (quantize_static's defaults of the repo's demos, every op it can), calibrated on near scenes only
    make_int8_qdq(fp32, int8, to_input(calib_x), input_name=INPUT, extra_options={"ActivationSymmetric": True,
                  "WeightSymmetric": True})  # fmt: skip
    set_ir(int8)
    np.savez_compressed(HERE / "val.npz", images=val_x, depth=val_y)
    figures = {}
    for name, path in (("fp32", fp32), ("fp16", fp16), ("int8_near", int8)):
        sess = ort_session(path, threads=2)
        pred = sess.run(None, {INPUT: to_input(val_x)})[0][:, 0]
        figures[name] = eigen(val_y, pred)
    with torch.no_grad():
        figures["pytorch"] = eigen(val_y, model(torch.from_numpy(to_input(val_x))).numpy()[:, 0])
    meta = {
        "seed": SEED,
        "train": info,
        "scenes": {"train": TRAIN, "val": VAL, "calib": CALIB, "size": SIZE, "calib_far_wall_max_m": NEAR},
        "parameters": sum(p.numel() for p in model.parameters()),
        "metrics_val (min_depth 0.001, max_depth 25, per image then averaged)": figures,
        "versions": {
            "torch": torch.__version__,
            "numpy": np.__version__,
            "onnx": __import__("onnx").__version__,
            "onnxruntime": __import__("onnxruntime").__version__,
        },  # fmt: skip
    }
    (HERE / "metrics.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
