#!/usr/bin/env python3
"""Build the trtverify restoration demo: a tiny x2 super-resolution net (reproducible, CPU only, seconds).

Steps:
  1. generate synthetic RGB textures (oriented gratings, discs and bars with sharp edges), 64 x 64; the
     low-quality input is each texture averaged over 2 x 2 pixels (32 x 32), both stored as uint8;
  2. train ``TinySR`` (3 convolutions, a pixel shuffle, plus the bilinear upscale of the input) for
     STEPS steps of BATCH freshly generated textures with an L1 loss;
  3. the shipped net, ``sr_fp32.onnx``: the trained one with its first convolution's weights and bias multiplied
     by 2^17 and its features multiplied by 2^-17 after the ReLU (a rescale left after the layer instead of
     folded into it, as nets trained without normalisation carry). In FP32 it is the same function
     (ReLU(s x) = s ReLU(x); powers of two scale exactly). Exported with ``torch.onnx.export``'s defaults
     (input ``lr`` [batch, 3, 32, 32] in [0, 1], output ``sr`` [batch, 3, 64, 64] in [0, 1], dynamic batch);
  4. the planted fault, ``sr_fp16_overflow.onnx``: its plain FP16 conversion, float32 I/O (onnxruntime's
     float16 converter). The first convolution's largest features pass FP16's 65504 and become inf; where they
     meet the next convolution's weights of both signs the output turns to NaN: patches of noise in the
     bright, busy parts of the image;
  5. the good candidate, ``sr_fp16.onnx``: the same conversion keeping the nodes up to the rescale in FP32 (what
     the planted candidate's lint advises; TensorRT: those layers' precision constrained to FP32);
  6. write the validation set ``val.npz`` (``images`` uint8 [N, 32, 32, 3], ``labels`` uint8 [N, 64, 64, 3],
     generator keys [VAL_SEED, i], independent of --seed) and ``metrics.json`` (mean PSNR on Y, crop 2, as the
     suite measures, in numpy here), the FP16 models run by ONNX Runtime as they are (its CPU runs FP16
     convolutions in FP32: no overflow shows) and emulated as a GPU computes FP16 (trtverify's default).

The trained weights are saved as ``sr.pt`` (``--reuse`` loads them instead of training).

Usage: python demo/restoration/make_demo.py [--steps N] [--threads 2] [--seed S] [--reuse]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # demo/onnx_steps.py
from onnx_steps import make_fp16, ort_session, seed_everything  # noqa: E402

SEED = 20261128
VAL_SEED = 20261129
N_VAL = 24
HR = 64
STEPS = 300
BATCH = 16
LR_RATE = 3e-3
PT_FILE = "sr.pt"
PLANT_SCALE = 2.0**17  # the planted fault: conv1 x 2^17, its features x 2^-17 after the ReLU


class TinySR(nn.Module):
    def __init__(self, width: int = 24) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        self.conv3 = nn.Conv2d(width, 12, 3, padding=1)
        self.shuffle = nn.PixelShuffle(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv3(F.relu(self.conv2(F.relu(self.conv1(x)))))
        return self.shuffle(y) + F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)


def texture(rng: np.random.Generator, size: int = HR) -> np.ndarray:
    """A float [size, size, 3] texture in [0, 1]: two coloured gratings, then discs and bars with sharp edges."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    img = np.zeros((size, size, 3)) + rng.uniform(0.2, 0.6, 3)
    for _ in range(2):
        angle, freq = rng.uniform(0, np.pi), rng.uniform(0.08, 0.6)
        wave = np.sin((np.cos(angle) * xx + np.sin(angle) * yy) * freq + rng.uniform(0, 2 * np.pi))
        img += 0.25 * wave[..., None] * rng.uniform(-1, 1, 3)
    for _ in range(rng.integers(2, 6)):
        colour = rng.uniform(0, 1, 3)
        cx, cy, r = rng.uniform(0, size, 2).tolist() + [rng.uniform(3, size / 4)]
        if rng.random() < 0.5:
            mask = (xx - cx) ** 2 + (yy - cy) ** 2 < r**2
        else:
            mask = (np.abs(xx - cx) < r) & (np.abs(yy - cy) < r / 3)
        img[mask] = colour
    return np.clip(img, 0, 1)


def pair(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """uint8 (low-quality [32, 32, 3], high-quality [64, 64, 3])."""
    hr = np.round(texture(rng) * 255)
    lr = np.round(hr.reshape(HR // 2, 2, HR // 2, 2, 3).mean(axis=(1, 3)))
    return lr.astype(np.uint8), hr.astype(np.uint8)


def batch(seed: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    pairs = [pair(np.random.default_rng([seed, step, j])) for j in range(BATCH)]
    lr = np.stack([p[0] for p in pairs]).transpose(0, 3, 1, 2) / 255.0
    hr = np.stack([p[1] for p in pairs]).transpose(0, 3, 1, 2) / 255.0
    return torch.from_numpy(lr).float(), torch.from_numpy(hr).float()


def train(seed: int, steps: int) -> TinySR:
    model = TinySR()
    opt = torch.optim.Adam(model.parameters(), lr=LR_RATE)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    for step in range(steps):
        x, y = batch(seed, step)
        loss = F.l1_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"step {step}: L1 {loss.item():.4f}")
    return model.eval()


def export(model: nn.Module, path: Path) -> None:
    """torch.onnx.export with its defaults, a dynamic batch."""
    batch_dim = torch.export.Dim("batch", min=1, max=256)
    torch.onnx.export(model, (torch.zeros(2, 3, HR // 2, HR // 2),), str(path), input_names=["lr"],
                      output_names=["sr"], dynamic_shapes=({0: batch_dim},))  # fmt: skip
    import onnx

    m = onnx.load(str(path))  # one file: the exporter may write the weights beside it
    # the exporter's float32 shape annotations: onnxruntime's FP16 converter leaves them, and the checker refuses them
    del m.graph.value_info[:]
    onnx.save(m, str(path), save_as_external_data=False)
    data = path.with_name(path.name + ".data")
    if data.exists():
        data.unlink()


class Planted(TinySR):
    """The same function in FP32, its first convolution's features PLANT_SCALE times larger and scaled back down
    after the ReLU (a rescale placed after the layer instead of folded into it)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.conv1(x)) * (1.0 / PLANT_SCALE)
        y = self.conv3(F.relu(self.conv2(h)))
        return self.shuffle(y) + F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)


def planted(model: TinySR) -> TinySR:
    bad = Planted()
    bad.load_state_dict(model.state_dict())
    with torch.no_grad():
        bad.conv1.weight *= PLANT_SCALE
        bad.conv1.bias *= PLANT_SCALE
    return bad.eval()


def drop_round_trips(graph) -> None:
    """Remove the Cast to FP16 then back to FP32 the converter puts between two nodes it keeps in FP32 (with
    them the kept chain would still overflow: the rounding to FP16 is what overflows)."""
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    def cast_to(node, elem: int) -> bool:
        return node.op_type == "Cast" and any(a.name == "to" and a.i == elem for a in node.attribute)

    dropped = set()
    for up in graph.node:
        if not cast_to(up, 1):
            continue
        down = producer.get(up.input[0])  # the Cast to FP16 before it
        if down is None or not cast_to(down, 10) or producer.get(down.input[0]) is None:
            continue
        if any(c is not up for c in consumers[down.output[0]]):
            continue  # an FP16 node reads the rounded value too: keep the pair
        for c in consumers.get(up.output[0], []):
            c.input[:] = [down.input[0] if i == up.output[0] else i for i in c.input]
        dropped.update((id(up), id(down)))
    kept = [n for n in graph.node if id(n) not in dropped]
    del graph.node[:]
    graph.node.extend(kept)


def make_fp16_keeping_rescale(fp32_path: Path, out_path: Path) -> None:
    """FP16 but for the first convolution, its ReLU and the rescale after it (the nodes up to the first Mul), kept
    in FP32 as the candidate's lint advises (TensorRT: those layers' precision constrained to FP32)."""
    import onnx
    from onnx_steps import toposort_graph
    from onnxruntime.transformers.float16 import convert_float_to_float16

    m = onnx.load(str(fp32_path))
    keep = []
    for node in m.graph.node:
        keep.append(node.name)
        if node.op_type == "Mul":
            break
    m = convert_float_to_float16(m, keep_io_types=True, node_block_list=keep)
    drop_round_trips(m.graph)
    toposort_graph(m.graph)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(out_path))


def y_psnr(out: np.ndarray, hr: np.ndarray, crop: int = 2) -> float:
    """Mean PSNR on BT.601 Y (0..255, outputs rounded to 8 bits, NaN as the farthest value), `crop` cut."""
    x = out.transpose(0, 2, 3, 1) * 255.0
    x = np.where(np.isnan(x), np.where(hr < 128, 255.0, 0.0), x)
    x = np.round(np.clip(x, 0, 255))
    coef = np.array([65.481, 128.553, 24.966]) / 255.0
    ya, yb = x @ coef + 16, hr.astype(np.float64) @ coef + 16
    ya, yb = ya[:, crop:-crop, crop:-crop], yb[:, crop:-crop, crop:-crop]
    mse = ((ya - yb) ** 2).mean(axis=(1, 2))
    return float(np.mean(10 * np.log10(255.0**2 / mse)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--reuse", action="store_true", help=f"load {PT_FILE} instead of training")
    args = ap.parse_args()
    seed_everything(args.seed, args.threads)
    t0 = time.time()
    if args.reuse:
        model = TinySR()
        model.load_state_dict(torch.load(HERE / PT_FILE, weights_only=True))
        model.eval()
    else:
        model = train(args.seed, args.steps)
        torch.save(model.state_dict(), HERE / PT_FILE)
    train_s = time.time() - t0
    if args.reuse and (HERE / "metrics.json").exists():  # the training's time, not the loading's
        train_s = json.loads((HERE / "metrics.json").read_text()).get("train_s", train_s)
    shipped = planted(model)
    export(shipped, HERE / "sr_fp32.onnx")
    make_fp16(HERE / "sr_fp32.onnx", HERE / "sr_fp16_overflow.onnx")
    make_fp16_keeping_rescale(HERE / "sr_fp32.onnx", HERE / "sr_fp16.onnx")

    pairs = [pair(np.random.default_rng([VAL_SEED, i])) for i in range(N_VAL)]
    lr, hr = np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])
    np.savez_compressed(HERE / "val.npz", images=lr, labels=hr)
    x = (lr.transpose(0, 3, 1, 2) / 255.0).astype(np.float32)
    results = {}
    bilinear = F.interpolate(torch.from_numpy(x), scale_factor=2.0, mode="bilinear", align_corners=False)
    results["bilinear_upscale"] = y_psnr(bilinear.numpy(), hr)
    with torch.no_grad():
        results["pytorch_trained"] = y_psnr(model(torch.from_numpy(x)).numpy(), hr)
        results["pytorch_shipped"] = y_psnr(shipped(torch.from_numpy(x)).numpy(), hr)
    import onnx
    import onnxruntime as ort

    from trtverify.graph.onnxemulate import FP16, emulate

    for name in ("sr_fp32", "sr_fp16", "sr_fp16_overflow"):
        out = ort_session(HERE / f"{name}.onnx", args.threads).run(None, {"lr": x})[0]
        results[f"{name}_ort_native"] = y_psnr(out, hr)
        if name != "sr_fp32":  # as a GPU computes FP16 (trtverify's default on the CPU: every FP16 tensor rounded)
            twin, _ = emulate(onnx.load(str(HERE / f"{name}.onnx")), frozenset({FP16}))
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep the rounding casts
            sess = ort.InferenceSession(twin.SerializeToString(), so, providers=["CPUExecutionProvider"])
            out = sess.run(None, {"lr": x})[0]
            results[f"{name}_emulated"] = y_psnr(out, hr)
            results[f"{name}_emulated_nonfinite"] = int(np.count_nonzero(~np.isfinite(out)))
    meta = {
        "psnr_y_crop2_db": {k: round(v, 4) if isinstance(v, float) else v for k, v in results.items()},
        "train_s": round(train_s, 1),
        "steps": args.steps,
        "seed": args.seed,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "command": "python demo/restoration/make_demo.py",
    }
    (HERE / "metrics.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
