"""Captures with a GPU's own FP16/BF16 arithmetic, written through Polygraphy's own save function (issue 46, item 6).

No TensorRT engine can run on this project's GPU machine (bench/README: TensorRT-RTX refuses Hopper), so the
engine is stood in for by PyTorch CUDA: a small node-by-node interpreter of the ONNX graph in torch (the ops the
demo graphs use: Conv, Relu, Sigmoid, Add, Resize nearest, MaxPool, Gemm, Flatten, Constant, Cast) computes every
tensor on the GPU in float16 or bfloat16 (cuDNN/cuBLAS kernels, real half-precision arithmetic) and keeps each by
its ONNX name: a marked-all capture. Each capture is written with polygraphy.comparator.RunResults.save, the
container `polygraphy run --save-outputs` writes, from the feeds of a kit made by `trtverify capture`.

Steps (the GPU step needs only torch, numpy, onnx and polygraphy; the GPU image has no trtverify dependencies):

    python bench/gpu_capture.py prepare build/gpucap             # here: kits (trtverify capture), models, script
    python bench/gpu_capture.py gpu build/gpucap --out OUT       # GPU: OUT/<model>.tar (captures), OUT/meta.json
    python bench/gpu_capture.py check                            # here: the interpreter in FP32 = ONNX Runtime
    python bench/gpu_capture.py report build/gpucap --gpu OUT    # here: bench/results/gpu_captures.md

Variants per model (runner `torch-cuda-VARIANT` in the files): `fp32` (TF32 off), `fp16` and `bf16` (the FP32
graph with every float tensor, weights and input included, in that type: what a TensorRT engine built with --fp16
/ --bf16 from the FP32 ONNX computes where it does not fall back), `fp16_graph` (the demo's *_fp16.onnx run as
typed: its FP16 tensors in FP16, its FP32 ones in FP32) and `bf16_graph` (ModelOpt AutoCast BF16 of the FP32
ONNX, made by `prepare` as bench/gpu_truth.py makes it, run as typed). The graph inputs and Constant outputs are
left out of a capture (TensorRT's marked outputs are layer outputs). Also `demo/kit/captured/h200_fp16.json`: the
detector's FP16 variant on one validation image without the Conv outputs that only a Relu reads (the first demo
capture; the one bundled in demo/shapes_captured now comes from bench/gpu_capture_demo.py, with the kit's
consistency feeds and validation batches).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
MODELS = {  # name: (demo folder, fp32 onnx, fp16 onnx, input name, rows captured)
    "shapes": ("shapes", "shapes_fp32.onnx", "shapes_fp16.onnx", "images", 2),
    "fashion_mnist": ("fashion_mnist", "fashion_cnn_fp32.onnx", "fashion_cnn_fp16.onnx", "input", 8),
}
# variant: (the graph run: fp32 / fp16 / bf16 file, the type every float tensor is computed in or None: as typed)
VARIANTS = {
    "fp32": ("fp32", None), "fp16": ("fp32", "float16"), "bf16": ("fp32", "bfloat16"),
    "fp16_graph": ("fp16", None), "bf16_graph": ("bf16", None),
}  # fmt: skip
DEMO_ROWS = 1  # the bundled demo capture (demo/shapes_captured): rows of the shapes validation set
WHEEL = "polygraphy-0.53.6-py3-none-any.whl"


# -- the interpreter (torch, any device) -------------------------------------------------------------------------
def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _torch_dtype(onnx_type: int) -> Any:
    import torch
    from onnx import TensorProto

    return {
        TensorProto.FLOAT: torch.float32, TensorProto.FLOAT16: torch.float16, TensorProto.BFLOAT16: torch.bfloat16,
        TensorProto.DOUBLE: torch.float64, TensorProto.INT64: torch.int64, TensorProto.INT32: torch.int32,
        TensorProto.BOOL: torch.bool, TensorProto.UINT8: torch.uint8, TensorProto.INT8: torch.int8,
    }[onnx_type]  # fmt: skip


def _tensor(arr: np.ndarray) -> Any:
    """numpy -> torch, bfloat16 (ml_dtypes, as onnx's numpy_helper gives it) included."""
    import torch

    if arr.dtype.name == "bfloat16":
        return torch.from_numpy(np.array(arr).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.array(arr))


def _pads(pads: list[int] | None, spatial: int) -> tuple[list[int], bool]:
    """ONNX pads [b1, b2, ..., e1, e2, ...] -> (F.pad order, last axis first), and whether begin == end."""
    p = list(pads or [0] * 2 * spatial)
    begin, end = p[:spatial], p[spatial:]
    flat: list[int] = []
    for b, e in zip(reversed(begin), reversed(end)):
        flat += [b, e]
    return flat, begin == end


def _op(node: Any, x: list[Any], compute: Any) -> list[Any]:
    import torch
    import torch.nn.functional as F
    from onnx import numpy_helper

    a, op = _attrs(node), node.op_type
    if op == "Conv":
        w = x[1]
        spatial = w.dim() - 2
        flat, same = _pads(a.get("pads"), spatial)
        inp = x[0] if same else F.pad(x[0], flat)
        pad = a.get("pads", [0] * 2 * spatial)[:spatial] if same else 0
        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[spatial]
        return [conv(inp, w, x[2] if len(x) > 2 and x[2] is not None else None, a.get("strides", 1), pad,
                     a.get("dilations", 1), a.get("group", 1))]  # fmt: skip
    if op == "Relu":
        return [torch.relu(x[0])]
    if op == "Sigmoid":
        return [torch.sigmoid(x[0])]
    if op == "Add":
        return [x[0] + x[1]]
    if op == "Flatten":
        axis = a.get("axis", 1) % max(x[0].dim(), 1)
        return [x[0].reshape(int(np.prod(x[0].shape[:axis], dtype=np.int64)), -1)]
    if op == "Gemm":
        m, n = x[0], x[1]
        m, n = (m.t() if a.get("transA", 0) else m), (n.t() if a.get("transB", 0) else n)
        y = a.get("alpha", 1.0) * (m @ n)
        if len(x) > 2 and x[2] is not None:
            y = y + a.get("beta", 1.0) * x[2]
        return [y]
    if op == "MaxPool":
        k = a["kernel_shape"]
        flat, same = _pads(a.get("pads"), len(k))
        if not same:
            raise NotImplementedError(f"{node.name}: MaxPool with asymmetric pads")
        pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[len(k)]
        return [pool(x[0], k, a.get("strides", k), a.get("pads", [0] * 2 * len(k))[: len(k)], a.get("dilations", 1),
                     bool(a.get("ceil_mode", 0)))]  # fmt: skip
    if op == "Resize":
        modes = (a.get("mode", b"nearest"), a.get("coordinate_transformation_mode", b"half_pixel"),
                 a.get("nearest_mode", b"round_prefer_floor"))  # fmt: skip
        if modes != (b"nearest", b"asymmetric", b"floor"):
            raise NotImplementedError(f"{node.name}: Resize {modes} (only nearest, asymmetric, floor)")
        scales = x[2].float().cpu().tolist() if len(x) > 2 and x[2] is not None and x[2].numel() else None
        if scales is None or scales[:2] != [1.0, 1.0] or any(s != int(s) for s in scales):
            raise NotImplementedError(f"{node.name}: Resize needs integer scales on the spatial axes ({scales})")
        # nearest, asymmetric, floor with an integer scale s: out[i] = in[floor(i / s)], which is F.interpolate's
        return [F.interpolate(x[0], scale_factor=[float(s) for s in scales[2:]], mode="nearest")]
    if op == "Constant":
        t = _tensor(numpy_helper.to_array(a["value"]))
        return [t.to(compute) if compute is not None and t.is_floating_point() else t]
    if op == "Cast":
        to = _torch_dtype(a["to"])
        return [x[0].to(compute if compute is not None and to.is_floating_point else to)]
    raise NotImplementedError(f"{node.name}: op {op} is not in this interpreter (the demo graphs' ops only)")


def interpret(model: Any, feed: dict[str, np.ndarray], device: str, compute: Any = None) -> dict[str, np.ndarray]:
    """Every tensor of `model` (an onnx.ModelProto, nodes in topological order) by its ONNX name, the graph inputs
    included. `compute`: a torch float dtype every float tensor is computed in (the weights and the input cast to
    it; a Cast to a float type casts to it); None runs the graph as typed. Arrays come back as numpy: float16 as
    float16, bfloat16 as float32 (exactly: every bfloat16 value is a float32)."""
    import torch
    from onnx import numpy_helper

    env: dict[str, Any] = {}
    for init in model.graph.initializer:
        t = _tensor(numpy_helper.to_array(init)).to(device)
        env[init.name] = t.to(compute) if compute is not None and t.is_floating_point() else t
    for name, arr in feed.items():
        t = torch.from_numpy(np.ascontiguousarray(arr)).to(device)
        env[name] = t.to(compute) if compute is not None and t.is_floating_point() else t
    keep = list(feed)
    with torch.no_grad():
        for node in model.graph.node:
            outs = _op(node, [env[i] if i else None for i in node.input], compute)
            for name, val in zip(node.output, outs):
                env[name] = val.to(device)
                keep.append(name)
    result = {}
    for name in dict.fromkeys(keep):
        t = env[name]
        t = t.float() if t.dtype == torch.bfloat16 else t
        result[name] = t.cpu().numpy()
    return result


# -- prepare (here) ------------------------------------------------------------------------------------------------
def rows(name: str, n: int | None = None) -> np.ndarray:
    """The first rows of the demo's real data, float32 in [0, 1], as the demo suites feed them."""
    demo, *_rest, default = MODELS[name]
    n = n or default
    if name == "fashion_mnist":
        x = np.load(REPO / "demo" / demo / "data" / "test_subset.npz", allow_pickle=False)["images"][:n]
    else:
        from PIL import Image

        files = sorted((REPO / "demo" / demo / "val" / "images").glob("*.png"))[:n]
        x = np.stack([np.asarray(Image.open(f).convert("RGB")) for f in files]).transpose(0, 3, 1, 2)
    return (x.astype(np.float32) / np.float32(255.0)).copy()


def _kit(d: Path, reference: Path, input_name: str, x: np.ndarray) -> None:
    np.savez(d / "rows.npz", **{input_name: x})
    shutil.rmtree(d / "kit", ignore_errors=True)
    cmd = [sys.executable, "-m", "trtverify", "capture", str(reference), "--inputs", str(d / "rows.npz"),
           "--out", str(d / "kit")]  # fmt: skip
    subprocess.run(cmd, check=True)


def prepare(folder: Path) -> None:
    """Per model FOLDER/<model>/: its fp32, fp16 and (AutoCast) bf16 ONNX, kit/ made by `trtverify capture` from the
    demo's first rows; FOLDER/demo/: the detector and a one-row kit (the bundled demo capture's); this script and the
    Polygraphy wheel beside them."""
    sys.path.insert(0, str(REPO / "bench"))
    from gpu_truth import autocast_bf16

    folder.mkdir(parents=True, exist_ok=True)
    for name, (demo, f32, f16, input_name, _n) in MODELS.items():
        d = folder / name
        d.mkdir(exist_ok=True)
        for f in (f32, f16):
            shutil.copy(REPO / "demo" / demo / f, d / f)
        x = rows(name)
        why = autocast_bf16(d / f32, d / f32.replace("fp32", "bf16"), x, input_name)
        if why is not None:
            raise SystemExit(f"the BF16 candidate of {name} could not be made: {why}")
        _kit(d, d / f32, input_name, x)
    d = folder / "demo"
    d.mkdir(exist_ok=True)
    shutil.copy(REPO / "demo" / "shapes" / MODELS["shapes"][1], d / MODELS["shapes"][1])
    _kit(d, d / MODELS["shapes"][1], MODELS["shapes"][3], rows("shapes", DEMO_ROWS))
    shutil.copy(Path(__file__), folder / "gpu_capture.py")
    for src in (REPO / ".whl" / WHEEL, Path("/work/shared/gpu") / WHEEL):
        if src.is_file():
            shutil.copy(src, folder / WHEEL)
            (folder / WHEEL).chmod(0o644)
            break


def kit_feeds(kit: Path) -> list[dict[str, np.ndarray]]:
    """The kit's feeds, read back from its Polygraphy inputs file with Polygraphy's own loader."""
    from polygraphy.json import load_json

    return [dict(feed) for feed in load_json(str(kit / "inputs.json"))]


# -- the GPU step ---------------------------------------------------------------------------------------------------
def fused_away(model: Any) -> set[str]:
    """Conv outputs that only a Relu reads: TensorRT fuses such a pair when the Conv output is not marked."""
    readers: dict[str, list[str]] = {}
    for node in model.graph.node:
        for i in node.input:
            readers.setdefault(i, []).append(node.op_type)
    graph_outputs = {o.name for o in model.graph.output}
    return {o for node in model.graph.node if node.op_type == "Conv" for o in node.output
            if readers.get(o) == ["Relu"] and o not in graph_outputs}  # fmt: skip


def _save(dest: Path, runner: str, per_feed: list[dict[str, np.ndarray]], feeds: list[dict[str, np.ndarray]]) -> None:
    """RunResults.save (what `polygraphy run --save-outputs` calls), and the feeds as --save-inputs writes them."""
    from polygraphy.comparator import IterationResult, RunResults
    from polygraphy.json import save_json

    iterations = [IterationResult(outputs=t, runner_name=runner) for t in per_feed]
    RunResults([(runner, iterations)]).save(str(dest))
    save_json(feeds, str(dest.with_suffix(".inputs.json")))


def capture(folder: Path, out: Path, device: str = "cuda") -> dict[str, Any]:
    """Captures into FOLDER/<model>/kit/captured/<variant>.json (+ .inputs.json); back in OUT: shapes_<variant>.tar.xz
    each, small.tar.xz (fashion_mnist's captures and the demo's), meta.json (machine, versions, seconds)."""
    import onnx
    import polygraphy
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out.mkdir(parents=True, exist_ok=True)
    cuda = device == "cuda"
    cap = torch.cuda.get_device_capability() if cuda else (0, 0)
    meta: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if cuda else "cpu (dry run)",
        "capability": f"{cap[0]}.{cap[1]}",
        "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "polygraphy": polygraphy.__version__, "onnx": onnx.__version__, "python": sys.version.split()[0],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "tf32": False, "seconds": {},
    }  # fmt: skip
    small = [folder / "demo" / "kit" / "captured"]
    for name, (_demo, f32, *_rest) in MODELS.items():
        d = folder / name
        feeds = kit_feeds(d / "kit")
        (d / "kit" / "captured").mkdir(exist_ok=True)
        for variant, (graph, compute) in VARIANTS.items():
            model = onnx.load(d / f32.replace("fp32", graph))
            drop = {i.name for i in model.graph.input} | {o for n in model.graph.node if n.op_type == "Constant"
                                                          for o in n.output}  # fmt: skip
            t0 = time.perf_counter()
            dtype = getattr(torch, compute) if compute else None
            per_feed = [interpret(model, feed, device, dtype) for feed in feeds]
            if cuda:
                torch.cuda.synchronize()
            meta["seconds"][f"{name}/{variant}"] = round(time.perf_counter() - t0, 3)
            per_feed = [{k: v for k, v in t.items() if k not in drop} for t in per_feed]
            if variant in ("fp16", "bf16"):  # determinism: the same feeds again, bitwise
                again = [interpret(model, feed, device, dtype) for feed in feeds]
                meta.setdefault("repeat_bitwise_identical", {})[f"{name}/{variant}"] = all(
                    np.array_equal(t[k], a[k]) for t, a in zip(per_feed, again) for k in t
                )
            dest = d / "kit" / "captured" / f"{variant}.json"
            _save(dest, f"torch-{device}-{variant}", per_feed, feeds)
            print(f"{name} {variant}: {dest.stat().st_size / 1e6:.1f} MB, {meta['seconds'][f'{name}/{variant}']} s",
                  flush=True)  # fmt: skip
            if name == "shapes":
                with tarfile.open(out / f"{name}_{variant}.tar.xz", "w:xz", preset=1) as tar:
                    for f in (dest, dest.with_suffix(".inputs.json")):
                        tar.add(f, arcname=str(f.relative_to(folder)))
            else:
                small.append(d / "kit" / "captured")
    # the demo's bundled capture: FP16 arithmetic, one feed, what TensorRT would fuse left out
    d = folder / "demo"
    model = onnx.load(d / MODELS["shapes"][1])
    feeds = kit_feeds(d / "kit")
    drop = (
        fused_away(model)
        | {i.name for i in model.graph.input}
        | {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    )
    per_feed = [{k: v for k, v in interpret(model, f, device, torch.float16).items() if k not in drop} for f in feeds]
    (d / "kit" / "captured").mkdir(exist_ok=True)
    dest = d / "kit" / "captured" / "h200_fp16.json"
    _save(dest, f"torch-{device}-fp16", per_feed, feeds)
    meta["demo"] = {
        "tensors": len(per_feed[0]),
        "left_out_fused": sorted(fused_away(model)),
        "bytes": dest.stat().st_size,
    }
    with tarfile.open(out / "small.tar.xz", "w:xz") as tar:
        for c in small:
            tar.add(c, arcname=str(c.relative_to(folder)))
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta))
    return meta


# -- the interpreter against ONNX Runtime (here, FP32) -----------------------------------------------------------------
def ort_all(path: Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every node output of the ONNX file by ONNX Runtime (each marked a graph output; optimisations off)."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(path)
    have = {o.name for o in model.graph.output}
    for node in model.graph.node:
        for o in node.output:
            if o and o not in have:
                model.graph.output.append(onnx.ValueInfoProto(name=o))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feed)))


def check(models: tuple[str, ...] = tuple(MODELS), graph: str = "fp32") -> dict[str, dict[str, float]]:
    """Per model: the worst max-abs and rel_l2 difference over every tensor between the interpreter (as typed, CPU)
    and ONNX Runtime (CPU, which computes FP16 ops of the fp16 graph in FP16 too) on the demo's first rows."""
    import onnx

    res = {}
    for name in models:
        demo, f32, _f16, input_name, _n = MODELS[name]
        path = REPO / "demo" / demo / f32.replace("fp32", graph)
        feed = {input_name: rows(name)}
        mine, theirs = interpret(onnx.load(path), feed, "cpu"), ort_all(path, feed)
        worst_abs = worst_rel = 0.0
        for k, v in theirs.items():
            diff = np.abs(mine[k].astype(np.float64) - v.astype(np.float64))
            worst_abs = max(worst_abs, float(diff.max()))
            worst_rel = max(worst_rel, float(np.linalg.norm(diff) / max(np.linalg.norm(v.astype(np.float64)), 1e-30)))
        res[name] = {"tensors": len(theirs), "max_abs": worst_abs, "rel_l2": worst_rel}
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=("prepare", "gpu", "check", "report"))
    p.add_argument("folder", type=Path, nargs="?", default=REPO / "build" / "gpucap")
    p.add_argument("--out", type=Path, default=None, help="gpu: its output folder; report: the results' stem")
    p.add_argument("--device", default="cuda", help="gpu: cuda, or cpu for a dry run without a GPU")
    p.add_argument("--gpu", type=Path, default=None, help="report: the GPU step's output folder")
    a = p.parse_args(argv)
    if a.step == "prepare":
        prepare(a.folder)
    elif a.step == "gpu":
        capture(a.folder, a.out or a.folder / "gpu_out", a.device)
    elif a.step == "check":
        print(json.dumps({g: check(graph=g) for g in ("fp32", "fp16")}, indent=2))
    else:
        sys.path.insert(0, str(REPO / "bench"))
        from gpu_capture_report import report

        report(a.folder, a.gpu or a.folder / "gpu_out", a.out or REPO / "bench" / "results" / "gpu_captures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
