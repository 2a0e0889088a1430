"""Build models with TensorRT-RTX through trtverify's backend and keep the VERBOSE build logs.

Run on a GPU machine where `tensorrt_rtx` and `polygraphy` import:

    python tests/data/buildlogs/rtx/make_buildlogs.py --out DIR [--no-resnet]

For the Fashion-MNIST demo models (FP32, FP16, INT8 Q/DQ) and a ResNet-18 (random weights,
exported here with torch/torchvision when they are installed) it builds: the model as is
(`unmarked`), with every comparable layer output marked (`mark_all`, what
`intermediates()` offers), with everything Polygraphy's mark-all would mark including Q/DQ
outputs (`polygraphy_all`), and with the comparable outputs as debug tensors
(`debug_tensors`). Then it tries to run the marked FP32 engine once. Writes
DIR/buildlogs.tgz (one log per build) and DIR/summary.json; prints a table.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from trtverify.backends.tensorrt import TensorRTRTXBackend  # noqa: E402
from trtverify.config.backends import TensorRTOptions  # noqa: E402

DEMO = ROOT / "demo" / "fashion_mnist"
RESNET_EXPORT = """
import sys, torch, torchvision
m = torchvision.models.resnet18(weights=None).eval()
torch.onnx.export(m, torch.randn(1, 3, 224, 224), sys.argv[1], input_names=["input"], output_names=["logits"],
                  opset_version=17, dynamo=False, dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
print("torch", torch.__version__, "torchvision", torchvision.__version__)
"""


def _gpu() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except Exception as exc:  # noqa: BLE001
        return f"unknown ({exc})"


def _resnet(work: Path) -> tuple[Path | None, str]:
    path = work / "resnet18.onnx"
    p = subprocess.run([sys.executable, "-c", RESNET_EXPORT, str(path)], capture_output=True, text=True, timeout=300)
    return (path if p.returncode == 0 and path.is_file() else None), (p.stdout + p.stderr)[-2000:]


def _one(model: Path, label: str, mode: str, logs: Path) -> dict:
    rec: dict = {"model": label, "mode": mode}
    log_path = logs / f"{label}__{mode}.log"
    opts = {"build_log": log_path}
    if mode == "debug_tensors":
        opts["outputs_mode"] = "debug_tensors"
    b = TensorRTRTXBackend(model, TensorRTOptions(**opts))
    t0 = time.perf_counter()
    try:
        b.load()
        names = b.intermediates()
        kinds = b._kinds()
        rec["intermediates"] = len(names)
        rec["layer_outputs"] = len(kinds)
        if mode in ("mark_all", "debug_tensors"):
            rec["exposed"] = len(b.expose(names))
        elif mode == "polygraphy_all":
            rec["exposed"] = len(b.expose(list(kinds)))
        b.build()
        rec.update(b.build_info)
        rec["warnings"] = b.warnings
        after = b.build_log.split("Building engine with configuration", 1)[-1]
        rec["marked_named_in_build_log"] = sum(1 for n in b.marked if n in after)
        rec["ok"] = True
    except Exception as exc:  # noqa: BLE001 - the summary records every failure
        rec["ok"] = False
        rec["error"] = f"{type(exc).__name__}: {exc}"[-3000:]
        rec["traceback"] = traceback.format_exc()[-3000:]
        if not log_path.exists() and b.build_log:
            log_path.write_text(b.build_log, encoding="utf-8")
    rec["wall_s"] = round(time.perf_counter() - t0, 3)
    rec["_backend"] = b
    return rec


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--no-resnet", action="store_true")
    args = ap.parse_args()
    out: Path = args.out
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    import polygraphy
    import tensorrt_rtx

    env = {
        "python": platform.python_version(),
        "tensorrt_rtx": tensorrt_rtx.__version__,
        "polygraphy": polygraphy.__version__,
        "gpu": _gpu(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    print(json.dumps(env))
    models = [(DEMO / f"fashion_cnn_{k}.onnx", f"fashion_cnn_{k}") for k in ("fp32", "fp16", "int8_qdq")]
    if not args.no_resnet:
        path, note = _resnet(Path("/tmp"))
        env["resnet18_export"] = note.strip().splitlines()[-1:] if note.strip() else []
        if path is not None:
            models.append((path, "resnet18"))
    records = []
    for model, label in models:
        for mode in ("unmarked", "mark_all", "polygraphy_all", "debug_tensors"):
            rec = _one(model, label, mode, logs)
            rec.pop("_backend").close()
            records.append(rec)
            print(
                f"{label:22} {mode:15} ok={rec['ok']!s:5} marked={rec.get('marked', '-')!s:4} "
                f"engine={rec.get('engine_bytes', '-')!s:8} build_s={rec.get('build_s', '-')!s:7} "
                f"named_in_log={rec.get('marked_named_in_build_log', '-')!s:4} {rec.get('error', '')[:300]}",
                flush=True,
            )
    # running: TensorRT-RTX's runtime on this GPU
    run = {}
    images = np.load(DEMO / "data" / "test_subset.npz")["images"][:4]
    feed = {"input": (images / 255.0).astype(np.float32)}
    b = TensorRTRTXBackend(models[0][0])
    b.load()
    b.expose(b.intermediates())
    try:
        outs = b.infer(feed)
        run = {"ran": True, "outputs": len(outs), "logits": np.asarray(outs["logits"]).round(3).tolist()}
    except Exception as exc:  # noqa: BLE001
        run = {"ran": False, "error": f"{type(exc).__name__}: {exc}", "runtime_log_tail": b.runtime_log[-3000:]}
    finally:
        b.close()
    print(json.dumps(run, indent=1))
    (out / "summary.json").write_text(
        json.dumps({"env": env, "builds": records, "run": run}, indent=1), encoding="utf-8"
    )
    with tarfile.open(out / "buildlogs.tgz", "w:gz") as tar:
        for p in sorted(logs.iterdir()):
            tar.add(p, arcname=f"buildlogs/{p.name}")
    for p in logs.iterdir():
        p.unlink()
    logs.rmdir()
    return 0 if all(r["ok"] for r in records if r["mode"] in ("unmarked", "mark_all")) else 1


if __name__ == "__main__":
    sys.exit(main())
