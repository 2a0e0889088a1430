#!/usr/bin/env python3
"""Build the regression demo: a tiny MLP that predicts air density and the speed of sound from raw sensor
readings (pressure in pascals, temperature in kelvin, relative humidity), trained on the CPU in seconds on
synthetic data, and its FP16 conversions.

The model normalises its inputs itself ((x - mean) / std, buffers fixed from the training data), as deployed
models often do. Pressure in pascals (50,000-110,000 Pa) is beyond FP16's largest finite value, 65,504: the
naive FP16 conversion casts the raw input to FP16, every pressure above 65,520 Pa becomes inf, the first tanh
saturates, and the outputs are finite but wrong. The good conversion keeps the normalisation in FP32 (the
converter's node_block_list), so only values of order 1 reach FP16.

Writes, beside this file:
  regress_fp32.onnx        the reference (torch.onnx.export, TorchScript exporter, opset 17, dynamic batch)
  regress_fp16.onnx        FP16 weights and activations, the normalisation (Sub, Div) in FP32: passes
  regress_fp16_naive.onnx  everything FP16 (onnxruntime.transformers.float16 defaults): the planted fault
  data/val.npz             1,000 validation rows: inputs [N, 3] float32, targets [N, 2] float32

Usage: /work/main/.venv/bin/python demo/regression/make_demo.py   (CPU, a few seconds; deterministic)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from onnx_steps import seed_everything, toposort_graph  # noqa: E402

R_DRY, R_VAPOUR = 287.05, 461.5  # J/(kg K)


def sample(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Readings [n, 3] (pressure Pa, temperature K, relative humidity) and targets [n, 2] (density kg/m^3,
    speed of sound m/s)."""
    p = rng.uniform(50_000, 110_000, n)
    t = rng.uniform(250, 320, n)
    h = rng.uniform(0, 1, n)
    e_sat = 610.94 * np.exp(17.625 * (t - 273.15) / (t - 273.15 + 243.04))  # Magnus formula, Pa
    e = h * e_sat
    rho = (p - e) / (R_DRY * t) + e / (R_VAPOUR * t)
    c = 331.3 * np.sqrt(t / 273.15) * (1 + 0.0016 * h)
    return np.stack([p, t, h], 1).astype(np.float32), np.stack([rho, c], 1).astype(np.float32)


class Regressor(torch.nn.Module):
    def __init__(self, mean: np.ndarray, std: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean))
        self.register_buffer("std", torch.tensor(std))
        self.body = torch.nn.Sequential(
            torch.nn.Linear(3, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2)
        )
        self.register_buffer("out_scale", torch.tensor([1.0, 20.0]))
        self.register_buffer("out_shift", torch.tensor([0.9, 340.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body((x - self.mean) / self.std) * self.out_scale + self.out_shift


def drop_round_trips(graph) -> None:
    """Remove the converter's FP32 -> FP16 -> FP32 Cast pairs in front of the nodes it keeps in FP32 (it casts
    the graph input to FP16 before casting it back for them): they feed the FP32 value on."""
    import onnx

    made = {o: n for n in graph.node for o in n.output}
    rewire, dead = {}, []
    for n in graph.node:
        src = made.get(n.input[0]) if n.op_type == "Cast" else None
        to = next((a.i for a in n.attribute if a.name == "to"), None)
        if src is not None and src.op_type == "Cast" and to == onnx.TensorProto.FLOAT:
            rewire[n.output[0]] = src.input[0]
            dead.append(n)
    for n in graph.node:
        n.input[:] = [rewire.get(i, i) for i in n.input]
    for n in dead:
        graph.node.remove(n)
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    for n in [n for n in graph.node if n.op_type == "Cast" and n.output[0] not in used]:
        graph.node.remove(n)


def convert(fp32: Path, out: Path, keep_fp32: list[str]) -> None:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    m = convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True, node_block_list=keep_fp32 or None)
    drop_round_trips(m.graph)
    toposort_graph(m.graph)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(out))


def main() -> None:
    seed_everything(0, 1)
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    x, y = sample(8000, rng)
    xv, yv = sample(1000, np.random.default_rng(1))
    model = Regressor(x.mean(0), x.std(0))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    xt, yt = torch.tensor(x), torch.tensor(y)
    scale = torch.tensor([1.0, 20.0])
    for _epoch in range(60):
        for idx in torch.randperm(len(xt)).split(128):
            loss = torch.mean(((model(xt[idx]) - yt[idx]) / scale) ** 2)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        mae = (model(torch.tensor(xv)) - torch.tensor(yv)).abs().mean(0).tolist()
    print(f"trained in {time.perf_counter() - t0:.1f} s; validation MAE density {mae[0]:.4f}, sound {mae[1]:.3f}")
    (HERE / "data").mkdir(exist_ok=True)
    np.savez_compressed(HERE / "data" / "val.npz", inputs=xv, targets=yv)
    fp32 = HERE / "regress_fp32.onnx"
    torch.onnx.export(
        model, (torch.tensor(xv[:1]),), str(fp32), input_names=["readings"], output_names=["estimates"],
        dynamic_axes={"readings": {0: "batch"}, "estimates": {0: "batch"}}, opset_version=17, dynamo=False,
    )  # fmt: skip
    import onnx

    m = onnx.load(str(fp32))
    m.ir_version = 8  # older ONNX Runtime reads it
    onnx.save(m, str(fp32))
    norm = [n.name for n in m.graph.node if n.op_type in ("Sub", "Div")][:2]
    convert(fp32, HERE / "regress_fp16.onnx", norm)
    convert(fp32, HERE / "regress_fp16_naive.onnx", [])
    print(f"kept in FP32 in regress_fp16.onnx: {', '.join(norm)}; wrote {HERE}")


if __name__ == "__main__":
    main()
