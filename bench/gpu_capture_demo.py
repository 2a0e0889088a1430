"""Second GPU round of issue 46: the demo detector's captures with the kit's consistency feeds and its validation
batches, and a planted FP16 overflow captured on the GPU against trtverify's emulation of the same candidate.

The same interpreter as bench/gpu_capture.py (PyTorch CUDA, node by node, every tensor by its ONNX name) computes, in
real FP16 on the GPU:
- demo: the detector (FP32 graph, every float tensor FP16) on every iteration of the kit's inputs.json (its feed and
  the consistency feeds: repeat, duplicated row, repeated batch), marked-all (two whole passes: determinism) and
  outputs-only (a third pass keeping the graph outputs only), and its e2e validation batches (outputs only): the
  kit of suites/shapes_captured.yaml (16 validation images in batches of 8), and the whole validation set (200
  images, batches of 25) for the e2e figure;
- planted: the detector with one Conv's weights and bias times 2**PLANT_K and its reader's weights times 2**-PLANT_K
  (FP32 math the same, exactly: powers of two), whose Conv output then overflows FP16 (`plant_overflow`); its FP16
  ONNX (demo/onnx_steps.make_fp16, as the demo's *_fp16.onnx) run as typed, and the planted FP32 graph cast to FP16.

Steps (the GPU step needs torch, numpy and onnx only; it writes .npz files, and the captures are written here with
Polygraphy's own RunResults.save, the function behind `polygraphy run --save-outputs`):

    python bench/gpu_capture_demo.py prepare build/gpucap2           # here: kits (trtverify capture), models, feeds
    python3 gpu_capture_demo.py gpu SEND --out OUT                   # GPU, SEND a copy of build/gpucap2/send:
                                                                     # OUT/*.npz, OUT/meta.json
    python bench/gpu_capture_demo.py finish build/gpucap2 --gpu OUT  # here: the demo bundle, the figures
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gpu_capture import interpret  # noqa: E402

REPO = HERE.parent
PLANT_CONV = "/stage3/stage3.0/stage3.0.0/Conv"  # its output overflows FP16 once scaled (max 7.9 on the kit's feed)
PLANT_K = 14  # 7.9 * 2**14 = 1.3e5 > 65504, FP16's largest finite value
REFERENCE = REPO / "demo" / "shapes" / "shapes_fp32.onnx"
FEED = REPO / "demo" / "shapes_captured" / "kit" / "inputs.npz"  # validation image 000001.png / 255


def plant_overflow(src: Path, dst: Path, conv: str = PLANT_CONV, k: int = PLANT_K) -> str:
    """Write `src` with `conv`'s weights and bias times 2**k and the weights of the Convs reading its Relu times
    2**-k: the FP32 results are the same (powers of two, ReLU(2**k x) = 2**k ReLU(x)), but `conv`'s output grows
    2**k times and overflows FP16. Returns the planted Conv's output tensor."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(src)
    nodes = {n.name: n for n in model.graph.node}
    node = nodes[conv]
    readers = [n for n in model.graph.node if node.output[0] in n.input]
    if [r.op_type for r in readers] != ["Relu"]:
        raise SystemExit(f"{conv}: its output must be read by one Relu alone")
    after = [n for n in model.graph.node if readers[0].output[0] in n.input]
    if not after or any(n.op_type != "Conv" or n.input[0] != readers[0].output[0] for n in after):
        raise SystemExit(f"{conv}: its Relu must be read by Convs alone")
    scale = {node.input[1]: 2.0**k, node.input[2]: 2.0**k, **{n.input[1]: 2.0**-k for n in after}}
    for init in model.graph.initializer:
        if init.name in scale:
            arr = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array((arr * np.float32(scale[init.name])).astype(arr.dtype), init.name))
    onnx.save(model, dst)
    return str(node.output[0])


def _capture_kit(model: Path, out: Path, suite: Path | None = None) -> None:
    cmd = [sys.executable, "-m", "trtverify", "capture", str(model), "--inputs", str(FEED), "--out", str(out)]
    subprocess.run(cmd + (["--suite", str(suite)] if suite else []), check=True, cwd=REPO)


def _feeds(kit: Path, e2e: bool = False) -> list[np.ndarray]:
    from polygraphy.json import load_json

    return [np.asarray(f["images"]) for f in load_json(str(kit / ("e2e" if e2e else "") / "inputs.json"))]


FULL_SUITE = """name: shapes_e2e_full
models: {reference: REF, candidates: {fp16: FP16}}
python_path: [SHAPES]
inputs: {file: FEEDFILE}
stages:
  e2e:
    task: detection
    dataset: {coco: SHAPES/val/instances.json}
    preprocess: {scale: 0.00392156862745098, layout: NCHW}
    postprocess: {hook: "shapes_decode:decode"}
    batch_size: 25
    gates: [{metric: map, max_drop: 0.01, min: 0.75}, {metric: ap50, max_drop: 0.01}, {metric: f1, max_drop: 0.02}]
"""


def prepare(folder: Path) -> None:
    """FOLDER/kits/: the kits (not sent to the GPU: their JSON feeds are large); FOLDER/send/: what the GPU step needs
    (this script, the interpreter, the models, every feed as one compressed .npz)."""
    sys.path.insert(0, str(REPO / "demo"))
    from onnx_steps import make_fp16

    kits, send = folder / "kits", folder / "send"
    shutil.rmtree(folder, ignore_errors=True)
    kits.mkdir(parents=True)
    send.mkdir()
    _capture_kit(REFERENCE, kits / "demo", REPO / "suites" / "shapes_captured.yaml")
    shapes = REPO / "demo" / "shapes"
    full = FULL_SUITE.replace("REF", str(REFERENCE)).replace("FP16", str(shapes / "shapes_fp16.onnx"))
    (folder / "e2e_full.yaml").write_text(full.replace("SHAPES", str(shapes)).replace("FEEDFILE", str(FEED)))
    _capture_kit(REFERENCE, kits / "e2e_full", folder / "e2e_full.yaml")
    tensor = plant_overflow(REFERENCE, send / "planted_fp32.onnx")
    make_fp16(send / "planted_fp32.onnx", send / "planted_fp16.onnx")
    _capture_kit(send / "planted_fp32.onnx", kits / "planted")
    feeds = {f"demo|{i}": x for i, x in enumerate(_feeds(kits / "demo"))}
    feeds |= {f"demo_e2e|{i}": x for i, x in enumerate(_feeds(kits / "demo", e2e=True))}
    feeds |= {f"full_e2e|{i}": x for i, x in enumerate(_feeds(kits / "e2e_full", e2e=True))}
    feeds["planted|0"] = _feeds(kits / "planted")[0]
    np.savez_compressed(send / "feeds.npz", **feeds)
    for f in (HERE / "gpu_capture.py", Path(__file__), REFERENCE):
        shutil.copy(f, send / f.name)
    (send / "planted.json").write_text(json.dumps({"conv": PLANT_CONV, "k": PLANT_K, "tensor": tensor}) + "\n")
    print({f.name: f.stat().st_size for f in send.iterdir()})


# -- the GPU step ---------------------------------------------------------------------------------------------------
def _outputs_of(model: Any) -> set[str]:
    return {o.name for o in model.graph.output}


def _layer_outputs(model: Any, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What a marked-all capture holds: layer outputs (no graph input, no Constant output)."""
    drop = {i.name for i in model.graph.input} | {o for n in model.graph.node if n.op_type == "Constant"
                                                  for o in n.output}  # fmt: skip
    return {k: v for k, v in tensors.items() if k not in drop}


def gpu(send: Path, out: Path, device: str = "cuda") -> dict[str, Any]:
    import onnx
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out.mkdir(parents=True, exist_ok=True)
    cuda = device == "cuda"
    cap = torch.cuda.get_device_capability() if cuda else (0, 0)
    meta: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if cuda else "cpu (dry run)", "capability": f"{cap[0]}.{cap[1]}",
        "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "onnx": onnx.__version__, "python": sys.version.split()[0], "tf32": False,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "seconds": {},
    }  # fmt: skip
    feeds = dict(np.load(send / "feeds.npz", allow_pickle=False))
    fp16 = torch.float16

    def run(model: Any, prefix: str, outputs_only: bool, compute: Any = fp16) -> dict[int, dict[str, np.ndarray]]:
        keys = sorted((k for k in feeds if k.split("|")[0] == prefix), key=lambda k: int(k.split("|")[1]))
        t0 = time.perf_counter()
        res = {}
        for k in keys:
            got = _layer_outputs(model, interpret(model, {"images": feeds[k]}, device, compute))
            res[int(k.split("|")[1])] = {n: v for n, v in got.items() if n in _outputs_of(model)} if outputs_only \
                else got  # fmt: skip
        if cuda:
            torch.cuda.synchronize()
        meta["seconds"][f"{prefix}{' outputs' if outputs_only else ''}"] = round(time.perf_counter() - t0, 3)
        return res

    def save(name: str, per_it: dict[int, dict[str, np.ndarray]]) -> None:
        np.savez_compressed(out / name, **{f"{i}|{n}": a for i, t in per_it.items() for n, a in t.items()})

    model = onnx.load(send / "shapes_fp32.onnx")
    marked, again = run(model, "demo", False), run(model, "demo", False)
    meta["demo_two_passes_bitwise_identical"] = all(np.array_equal(marked[i][n], again[i][n], equal_nan=True)
                                                    for i in marked for n in marked[i])  # fmt: skip
    for i, t in marked.items():  # one file per iteration: each under the 16 MB a file may bring back
        save(f"demo_marked_{i}.npz", {i: t})
    outs = {"demo_outputs_only": run(model, "demo", True), "demo_e2e": run(model, "demo_e2e", True),
            "full_e2e": run(model, "full_e2e", True)}  # fmt: skip
    np.savez_compressed(out / "outputs.npz", **{f"{k}|{i}|{n}": a for k, per in outs.items()
                                                for i, t in per.items() for n, a in t.items()})  # fmt: skip
    planted = {
        "graph": run(onnx.load(send / "planted_fp16.onnx"), "planted", False, None)[0],  # the FP16 ONNX as typed
        "cast": run(onnx.load(send / "planted_fp32.onnx"), "planted", False)[0],  # the FP32 graph, every tensor FP16
    }
    np.savez_compressed(out / "planted.npz", **{f"{k}|{n}": a for k, t in planted.items() for n, a in t.items()})
    meta["files"] = {f.name: f.stat().st_size for f in out.iterdir()}
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta))
    return meta


# -- finish (here) -------------------------------------------------------------------------------------------------
def _per_it(npz: Path, prefix: str | None = None) -> dict[int, dict[str, np.ndarray]]:
    res: dict[int, dict[str, np.ndarray]] = {}
    with np.load(npz, allow_pickle=False) as z:
        for key in z.files:
            parts = key.split("|")
            if prefix is not None:
                if parts[0] != prefix:
                    continue
                parts = parts[1:]
            res.setdefault(int(parts[0]), {})[parts[1]] = z[key]
    return dict(sorted(res.items()))


def save_capture(dest: Path, runner: str, per_it: dict[int, dict[str, np.ndarray]]) -> int:
    """Polygraphy's own RunResults.save (what `polygraphy run --save-outputs` calls); the file's bytes."""
    from polygraphy.comparator import IterationResult, RunResults

    dest.parent.mkdir(parents=True, exist_ok=True)
    its = [IterationResult(outputs=t, runner_name=runner) for _i, t in sorted(per_it.items())]
    RunResults([(runner, its)]).save(str(dest))
    return dest.stat().st_size


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=("prepare", "gpu", "finish"))
    p.add_argument("folder", type=Path, nargs="?", default=REPO / "build" / "gpucap2")
    p.add_argument("--out", type=Path, default=None, help="gpu: its output folder")
    p.add_argument("--device", default="cuda", help="gpu: cuda, or cpu for a dry run without a GPU")
    p.add_argument("--gpu", type=Path, default=None, help="finish: the GPU step's output folder")
    a = p.parse_args(argv)
    if a.step == "prepare":
        prepare(a.folder)
    elif a.step == "gpu":
        gpu(a.folder, a.out or a.folder / "gpu_out", a.device)
    else:
        from gpu_capture_finish import finish

        finish(a.folder, a.gpu or a.folder / "gpu_out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
