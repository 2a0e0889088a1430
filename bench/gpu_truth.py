"""How close trtverify's CPU figures for FP16/BF16 (and FP8 Q/DQ) are to a GPU's own arithmetic (issue 38, item 7).

trtverify runs FP16 and BF16 candidates on a CPU emulated (trtverify/graph/onnxemulate.py: FP32 compute, every
FP16/BF16 tensor rounded to its type) and Q/DQ graphs through ONNX Runtime. This script measures, on the demo
models, each lowered model's error against FP32 twice: (a) as trtverify does, on the CPU, and (b) with PyTorch
CUDA's own kernels (cuDNN/cuBLAS FP16 and BF16, FP8 E4M3 matmuls through torch._scaled_mm), and says where the
CPU figure is within what of the GPU's.

Three steps; the GPU step needs only torch and numpy (the GPU image has no pydantic):

    python bench/gpu_truth.py prepare build/gputruth      # here: inputs, model code and weights into one folder
    python bench/gpu_truth.py gpu build/gputruth --out OUT  # on the GPU machine: raw outputs, OUT/gpu_*.npz
    python bench/gpu_truth.py report build/gputruth --gpu OUT [--out bench/results/gpu_truth]  # here: CPU + table

Models: demo/fashion_mnist (FashionCNN, 2000 test images; top-1 agreement with FP32 besides rel_l2) and
demo/shapes (ShapesCenterNet, the 200 validation images; heatmap, wh, offset). Candidates:

- fp16: CPU, the committed demo/*_fp16.onnx (convert_float_to_float16, keep_io_types) through trtverify's ONNX
  Runtime backend (emulated); GPU, the PyTorch model with BatchNorm folded into its convolutions (as in the
  ONNX file) and `.half()` (FP32 input and output cast, as keep_io_types); and the same under
  `torch.autocast(float16)`.
- bf16: CPU, ModelOpt AutoCast `--low_precision_type bf16 --keep_io_types` of demo/*_fp32.onnx, made when the
  report runs (skipped with the reason where ModelOpt is missing), emulated; GPU, `.bfloat16()` and autocast.
- fp8 (the classifier's two Linear layers, the rest FP32): inputs and weights scaled per tensor (amax / 448) to
  FP8 E4M3. CPU: the arithmetic of a Q/DQ pair in ONNX Runtime (dequantized values, FP32 matmul), computed
  with torch on the CPU; GPU: torch._scaled_mm (Hopper FP8 tensor cores, FP32 output).

rel_l2 is trtverify's (||candidate - reference|| / ||reference|| over the whole tensor). Each side is measured
against its own FP32 reference (CPU: the FP32 ONNX file in ONNX Runtime; GPU: PyTorch FP32 with TF32 off); the
report also gives the two FP32 references' distance and the CPU candidate's distance from the GPU candidate.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
MODELS = {  # name: (demo folder, model module, weights, fp32 onnx, fp16 onnx, input name, output names)
    "fashion_mnist": ("fashion_mnist", "fmnist_model.py", "fashion_cnn.pt", "fashion_cnn_fp32.onnx",
                      "fashion_cnn_fp16.onnx", "input", ("logits",)),
    "shapes": ("shapes", "shapes_model.py", "shapes_centernet.pt", "shapes_fp32.onnx", "shapes_fp16.onnx",
               "images", ("heatmap", "wh", "offset")),
}  # fmt: skip
FP8_MAX = 448.0  # largest finite float8_e4m3fn
AGREE = 2.0  # a CPU figure within this factor of the GPU's (either way) is called a match


# -- prepare (here) ------------------------------------------------------------------------------------------
def prepare(folder: Path) -> None:
    """Inputs (uint8, as stored), model code and weights into `folder`, which the GPU run reads alone."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for demo, module, weights, *_rest in MODELS.values():
        for f in (module, weights):
            shutil.copy(REPO / "demo" / demo / f, folder / f)
    fm = np.load(REPO / "demo" / "fashion_mnist" / "data" / "test_subset.npz", allow_pickle=False)
    files = sorted((REPO / "demo" / "shapes" / "val" / "images").glob("*.png"))
    shapes = np.stack([np.asarray(Image.open(f).convert("RGB")) for f in files]).transpose(0, 3, 1, 2)
    np.savez_compressed(folder / "inputs.npz", fashion_mnist=fm["images"], labels=fm["labels"], shapes=shapes)
    shutil.copy(Path(__file__), folder / "gpu_truth.py")


def inputs(folder: Path) -> dict[str, np.ndarray]:
    """float32 inputs in [0, 1] (pixel / 255, as both demos expect)."""
    z = np.load(folder / "inputs.npz", allow_pickle=False)
    return {m: z[m].astype(np.float32) / np.float32(255.0) for m in MODELS}


# -- the models in PyTorch (GPU step; the FP8 emulation also runs here) --------------------------------------
def load_torch(folder: Path, name: str) -> Any:
    import torch

    _demo, module, weights, *_rest = MODELS[name]
    spec = importlib.util.spec_from_file_location(f"gt_{name}", folder / module)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = mod.build()
    model.load_state_dict(torch.load(folder / weights, map_location="cpu", weights_only=True))
    return model.eval()


def fold_bn(model: Any) -> Any:
    """A copy with every BatchNorm2d that follows a Conv2d in a Sequential folded into it (as the ONNX export)."""
    import copy

    from torch import nn
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    model = copy.deepcopy(model)
    for seq in [m for m in model.modules() if isinstance(m, nn.Sequential)]:
        keys = list(seq._modules)
        for a, b in zip(keys, keys[1:]):
            conv, bn = seq._modules[a], seq._modules[b]
            if isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d):
                seq._modules[a] = fuse_conv_bn_eval(conv, bn)
                seq._modules[b] = nn.Identity()
    return model


def as_arrays(out: Any) -> list[np.ndarray]:
    outs = out if isinstance(out, tuple) else (out,)
    return [o.float().cpu().numpy() for o in outs]


def fp8_linears(model: Any, scaled_mm: bool) -> Any:
    """A copy whose Linear layers compute in FP8 E4M3 (input and weight scaled per tensor to amax / 448), FP32
    out: with torch._scaled_mm (a GPU's FP8 tensor cores) or, scaled_mm False, as a Q/DQ pair computes it in
    ONNX Runtime (the FP8 values dequantized, an FP32 matmul)."""
    import copy

    import torch
    from torch import nn

    class Fp8Linear(nn.Module):
        def __init__(self, lin: nn.Linear) -> None:
            super().__init__()
            self.register_buffer("w", lin.weight.detach().float().clone())
            self.register_buffer("b", lin.bias.detach().float().clone())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            e4m3 = torch.float8_e4m3fn
            sx = x.abs().amax().clamp(min=1e-12) / FP8_MAX
            sw = self.w.abs().amax().clamp(min=1e-12) / FP8_MAX
            xq, wq = (x / sx).to(e4m3), (self.w / sw).to(e4m3)
            if not scaled_mm:
                return (xq.float() * sx) @ (wq.float() * sw).t() + self.b
            m, k = x.shape
            n = self.w.shape[0]
            pm, pk, pn = (-m) % 16, (-k) % 16, (-n) % 16  # _scaled_mm wants multiples of 16; zeros add nothing
            xp = torch.nn.functional.pad(xq.float(), (0, pk, 0, pm)).to(e4m3)
            wp = torch.nn.functional.pad(wq.float(), (0, pk, 0, pn)).to(e4m3)
            y = torch._scaled_mm(xp, wp.t(), scale_a=sx.reshape(()), scale_b=sw.reshape(()), out_dtype=torch.float32)
            return y[:m, :n] + self.b

    model = copy.deepcopy(model)
    for parent in list(model.modules()):
        for key, child in list(parent._modules.items()):
            if isinstance(child, nn.Linear):
                parent._modules[key] = Fp8Linear(child)
    return model


def run_torch(model: Any, x: np.ndarray, device: str, dtype: Any = None, autocast: Any = None) -> list[np.ndarray]:
    import copy

    import torch

    m = copy.deepcopy(model).to(device)  # .to(dtype) works in place: each variant from the FP32 weights
    if dtype is not None:
        m = m.to(dtype)
    outs: list[list[np.ndarray]] = []
    with torch.no_grad():
        for i in range(0, len(x), 100):
            t = torch.from_numpy(x[i : i + 100]).to(device)
            if dtype is not None:
                t = t.to(dtype)
            if autocast is not None:
                with torch.autocast(device, dtype=autocast):
                    outs.append(as_arrays(m(t)))
            else:
                outs.append(as_arrays(m(t)))
    return [np.concatenate(parts) for parts in zip(*outs)]


def gpu(folder: Path, out: Path, device: str = "cuda") -> None:
    """Raw outputs of every variant on the GPU: out/gpu_<model>.npz (keys '<variant>/<output>'), out/gpu_meta.json."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # the FP32 reference must be FP32, not TF32
    torch.backends.cudnn.allow_tf32 = False
    out.mkdir(parents=True, exist_ok=True)
    xs = inputs(folder)
    cuda = device == "cuda"  # device 'cpu': a dry run of this step, to try the script without a GPU
    cap = torch.cuda.get_device_capability() if cuda else (0, 0)
    meta: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if cuda else "cpu (dry run)",
        "capability": f"{cap[0]}.{cap[1]}",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "skipped": {},
    }
    for name, (*_a, outputs) in MODELS.items():
        model, x = load_torch(folder, name), xs[name]
        folded = fold_bn(model)
        variants: dict[str, tuple[Any, Any, Any]] = {  # variant: (model, its dtype, autocast's dtype)
            "fp32": (model, None, None),
            "fp32_folded": (folded, None, None),
            "fp16": (folded, torch.float16, None),
            "bf16": (folded, torch.bfloat16, None),
            "fp16_autocast": (folded, None, torch.float16),
            "bf16_autocast": (folded, None, torch.bfloat16),
        }
        if any(isinstance(m, torch.nn.Linear) for m in model.modules()):
            if cap >= (8, 9):
                variants["fp8_linear"] = (fp8_linears(model, scaled_mm=True), None, None)
                # the Q/DQ arithmetic on the GPU's own FP32 kernels: what _scaled_mm's accumulation alone changes
                variants["fp8_linear_qdq"] = (fp8_linears(model, scaled_mm=False), None, None)
            else:
                meta["skipped"][f"{name}/fp8_linear"] = f"compute capability {cap} has no FP8 tensor cores"
        arrays: dict[str, np.ndarray] = {}
        for variant, (m, dtype, autocast) in variants.items():
            t0 = time.perf_counter()
            got = dict(zip(outputs, run_torch(m, x, device, dtype, autocast)))
            if len(outputs) > 1:  # a file per variant: the device returns files of 16 MiB at most
                np.savez_compressed(out / f"gpu_{name}.{variant}.npz", **{f"{variant}/{o}": a for o, a in got.items()})
            else:
                arrays.update({f"{variant}/{o}": a for o, a in got.items()})
            if cuda:
                torch.cuda.synchronize()
            print(f"{name} {variant}: {time.perf_counter() - t0:.2f} s", flush=True)
        if arrays:
            np.savez_compressed(out / f"gpu_{name}.npz", **arrays)
    (out / "gpu_meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta))


# -- the CPU side, as trtverify runs it ----------------------------------------------------------------------
def run_ort(path: Path, input_name: str, x: np.ndarray, outputs: tuple[str, ...]) -> tuple[list[np.ndarray], Any]:
    """Outputs of trtverify's ONNX Runtime backend (CPU provider: FP16/BF16 emulated), in batches of 100."""
    from trtverify.backends.onnxruntime import OnnxRuntimeBackend

    b = OnnxRuntimeBackend(path)
    b.load()
    parts = [b.infer({input_name: x[i : i + 100]}) for i in range(0, len(x), 100)]
    emulated = b.emulated
    b.close()
    return [np.concatenate([p[o] for p in parts]).astype(np.float32) for o in outputs], emulated


def autocast_bf16(src: Path, dst: Path, calib: np.ndarray, input_name: str) -> str | None:
    """ModelOpt AutoCast BF16 of src into dst; None, or why it could not be made."""
    if importlib.util.find_spec("modelopt") is None:
        return "nvidia-modelopt is not installed (pip install -e '.[modelopt]')"
    npz = dst.with_suffix(".calib.npz")
    np.savez(npz, **{input_name: calib})
    cmd = [sys.executable, "-m", "modelopt.onnx.autocast", "--keep_io_types", "--providers", "cpu",
           "--low_precision_type", "bf16", "--onnx_path", str(src), "--output_path", str(dst),
           "--calibration_data", str(npz)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return f"AutoCast failed: {done.stderr.strip().splitlines()[-1:]}"
    return None


def cpu(folder: Path, work: Path) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, str], dict[str, int]]:
    """CPU outputs per model: '<variant>/<output>' arrays; skipped variants with why; tensors emulated per file."""
    xs = inputs(folder)
    res: dict[str, dict[str, np.ndarray]] = {}
    skipped: dict[str, str] = {}
    emulated: dict[str, int] = {}
    for name, (demo, _m, _w, f32, f16, input_name, outputs) in MODELS.items():
        x, d = xs[name], REPO / "demo" / demo
        arrays: dict[str, np.ndarray] = {}
        files = {"fp32": d / f32, "fp16": d / f16}
        bf16 = work / f"{name}_bf16.onnx"
        shutil.copy(d / f32, work / f"{name}_fp32.onnx")
        why = autocast_bf16(work / f"{name}_fp32.onnx", bf16, x[:64], input_name)
        if why is None:
            files["bf16"] = bf16
        else:
            skipped[f"{name}/bf16"] = why
        for variant, path in files.items():
            outs, n = run_ort(path, input_name, x, outputs)
            emulated[f"{name}/{variant}"] = int(n or 0)
            arrays.update({f"{variant}/{o}": a for o, a in zip(outputs, outs)})
        import torch

        if any(isinstance(m, torch.nn.Linear) for m in load_torch(folder, name).modules()):
            model = load_torch(folder, name)  # batches of 100 as on the GPU: the same per-batch FP8 scales
            ref = run_torch(model, x, "cpu")
            q = run_torch(fp8_linears(model, scaled_mm=False), x, "cpu")
            arrays.update({f"fp32_torch/{o}": a for o, a in zip(outputs, ref)})
            arrays.update({f"fp8_linear/{o}": a for o, a in zip(outputs, q)})
        res[name] = arrays
    return res, skipped, emulated


# -- the report ------------------------------------------------------------------------------------------------
def rel_l2(c: np.ndarray, r: np.ndarray) -> float:
    c64, r64 = c.astype(np.float64), r.astype(np.float64)
    return float(np.linalg.norm(c64 - r64) / max(np.linalg.norm(r64), 1e-30))


def verdict(c: float, g: float) -> str:
    if g == 0 and c == 0:
        return "both exact"
    ratio = c / g if g else float("inf")
    within = max(ratio, 1 / ratio) if ratio else float("inf")
    side = "under" if ratio < 1 else "over"
    word = "matches" if within <= AGREE else ("UNDERSTATES" if ratio < 1 else "overstates")
    return f"{word}: CPU {within:.2f}x {side} the GPU"


GPU_VARIANTS = {"fp16": ("fp16", "fp16_autocast"), "bf16": ("bf16", "bf16_autocast"), "fp8_linear": ("fp8_linear",)}


def rows(cpu_out: dict[str, dict[str, np.ndarray]], gpu_out: dict[str, dict[str, np.ndarray]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, (*_a, outputs) in MODELS.items():
        c, g = cpu_out[name], gpu_out[name]
        for prec, gvars in GPU_VARIANTS.items():
            cref = "fp32_torch" if prec == "fp8_linear" else "fp32"
            for gv in gvars:
                if f"{prec}/{outputs[0]}" not in c or f"{gv}/{outputs[0]}" not in g:
                    continue
                for o in outputs:
                    cr, gr = c[f"{cref}/{o}"], g[f"fp32/{o}"]
                    cc, gc = c[f"{prec}/{o}"], g[f"{gv}/{o}"]
                    row: dict[str, Any] = {
                        "model": name, "precision": prec, "gpu_variant": gv, "output": o,
                        "cpu_rel_l2": rel_l2(cc, cr), "gpu_rel_l2": rel_l2(gc, gr),
                        "cpu_vs_gpu_candidate_rel_l2": rel_l2(cc, gc), "fp32_cpu_vs_gpu_rel_l2": rel_l2(cr, gr),
                    }  # fmt: skip
                    row["ratio"] = row["cpu_rel_l2"] / row["gpu_rel_l2"] if row["gpu_rel_l2"] else None
                    if name == "fashion_mnist":
                        row["cpu_top1_agree"] = float(np.mean(cc.argmax(1) == cr.argmax(1)))
                        row["gpu_top1_agree"] = float(np.mean(gc.argmax(1) == gr.argmax(1)))
                    row["verdict"] = verdict(row["cpu_rel_l2"], row["gpu_rel_l2"])
                    out.append(row)
    return out


def markdown(result: dict[str, Any]) -> str:
    m = result["gpu"]
    lines = [
        f"GPU: {m['device']} (compute capability {m['capability']}), torch {m['torch']}, CUDA {m['cuda']}, "
        f"cuDNN {m['cudnn']}, TF32 off; CPU: ONNX Runtime {result['cpu']['onnxruntime']} through trtverify's "
        f"backend (FP16/BF16 emulated), torch {result['cpu']['torch']}. {result['date']}.",
        "",
        "| model | precision | GPU arithmetic | output | CPU rel_l2 | GPU rel_l2 | CPU / GPU | CPU cand. vs GPU cand. "
        "| top-1 agree CPU / GPU | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    same = result["autocast_identical"]
    for r in result["rows"]:
        if r["gpu_variant"].endswith("_autocast") and same.get(f"{r['model']}/{r['gpu_variant']}"):
            continue  # bitwise the plain variant's outputs: said below the table
        top = f"{r['cpu_top1_agree']:.4f} / {r['gpu_top1_agree']:.4f}" if "cpu_top1_agree" in r else ""
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        lines.append(
            f"| {r['model']} | {r['precision']} | {r['gpu_variant']} | {r['output']} | {r['cpu_rel_l2']:.3g} "
            f"| {r['gpu_rel_l2']:.3g} | {ratio} | {r['cpu_vs_gpu_candidate_rel_l2']:.3g} | {top} | {r['verdict']} |"
        )
    if same:
        both = ", ".join(f"{k} ({'identical' if v else 'different'})" for k, v in same.items())
        lines.append(f"\ntorch.autocast against .half()/.bfloat16() of the same folded model, bitwise: {both}.")
    for k, v in result["gpu_scaled_mm_vs_qdq_rel_l2"].items():
        lines.append(
            f"\nOn the GPU, {k}: torch._scaled_mm against the same Q/DQ arithmetic in FP32 kernels on the same inputs: "
            f"rel_l2 {v:.3g} (the FP8 tensor cores' accumulation)."
        )
    fp32 = max(r["fp32_cpu_vs_gpu_rel_l2"] for r in result["rows"])
    lines.append(f"\nThe two FP32 references (ONNX Runtime CPU, PyTorch CUDA) differ by rel_l2 <= {fp32:.2g}.")
    for k, why in {**result["skipped"], **m.get("skipped", {})}.items():
        lines.append(f"\nSkipped {k}: {why}")
    return "\n".join(lines) + "\n"


def report(folder: Path, gpu_dir: Path, out: Path) -> dict[str, Any]:
    import onnxruntime
    import torch

    with tempfile.TemporaryDirectory(prefix="gpu-truth-") as tmp:
        cpu_out, skipped, emulated = cpu(folder, Path(tmp))
    gpu_out: dict[str, dict[str, np.ndarray]] = {name: {} for name in MODELS}
    for name in MODELS:
        for f in sorted(gpu_dir.glob(f"gpu_{name}*.npz")):
            gpu_out[name].update(np.load(f, allow_pickle=False))
    result = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "gpu": json.loads((gpu_dir / "gpu_meta.json").read_text()),
        "cpu": {"onnxruntime": onnxruntime.__version__, "torch": torch.__version__, "emulated_tensors": emulated},
        "agree_factor": AGREE,
        "skipped": skipped,
        "rows": rows(cpu_out, gpu_out),
        "gpu_scaled_mm_vs_qdq_rel_l2": {  # the same GPU inputs: what the FP8 tensor cores' accumulation changes
            f"{name}/{k.split('/')[1]}": rel_l2(g[k], g[k.replace("fp8_linear_qdq", "fp8_linear")])
            for name, g in gpu_out.items()
            for k in g
            if k.startswith("fp8_linear_qdq/")
        },
        "autocast_identical": {
            f"{name}/{v}": all(np.array_equal(g[k], g[k.replace(v, v.split("_")[0], 1)]) for k in g if k.startswith(v))
            for name, g in gpu_out.items()
            for v in ("fp16_autocast", "bf16_autocast")
            if any(k.startswith(v) for k in g)
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=("prepare", "gpu", "report"))
    p.add_argument("folder", type=Path, help="the folder prepare writes and the GPU step reads")
    p.add_argument("--out", type=Path, default=None, help="gpu: its output folder; report: the results' stem")
    p.add_argument("--device", default="cuda", help="gpu: cuda, or cpu for a dry run without a GPU")
    p.add_argument("--gpu", type=Path, default=None, help="report: the GPU step's output folder")
    a = p.parse_args(argv)
    if a.step == "prepare":
        prepare(a.folder)
    elif a.step == "gpu":
        gpu(a.folder, a.out or a.folder / "gpu_out", a.device)
    else:
        result = report(a.folder, a.gpu or a.folder / "gpu_out", a.out or REPO / "bench" / "results" / "gpu_truth")
        sys.stdout.write(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
