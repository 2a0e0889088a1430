"""`trtverify repair` side by side with the tools users reach for, on the same models, data and target.

    pip install -c constraints/ci.txt -e '.[torch]' onnxconverter-common==1.16.0 nncf==3.4.0
    python bench/repair_vs_peers.py [--out bench/results/repair_vs_peers.json]

FP16: onnxconverter-common `auto_convert_mixed_precision` (bisects over the node list, converting with
`onnxruntime.transformers.float16` and a `node_block_list`). INT8: NNCF `quantize_with_accuracy_control`
(quantises, then reverts quantised ops to FP32 greedily until the metric drop holds). Both get the same
samples, the same calibration data and the same target as trtverify:

- FP16: every output's rel_l2 <= 0.01 and cosine >= 0.999 against the FP32 reference, as a validate_fn;
- INT8: NNCF's metric is the mean cosine of the outputs against the FP32 reference (1.0 for the
  reference itself) with max_drop 0.001 (absolute), trtverify's target cosine >= 0.999.

Measured per tool: the keep-list size (nodes left in FP32 that the tool chose), evaluations (calls of
the target), wall time, the final metric, whether the model is valid (ONNX checker, ONNX Runtime
runs it, outputs finite) and passes the target, and `hidden_nonfinite`: intermediate tensors that are
non-finite where the reference's are finite, or casts to FP16 that overflow, which ONNX Runtime's CPU
provider can keep out of the outputs while a GPU engine computes with them.

Models: the FP16 repair demo (a BatchNorm variance FP16 cannot hold), a decomposed LayerNorm
overflowing FP16, the Fashion-MNIST INT8 demo model (nothing wrong), and a CNN with an outlier
activation channel. The planted models are made here with torch.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.stages.layerwise.test_layerwise_real_tools import ConvReluNet, LayerNormNet, export  # noqa: E402
from trtverify.config.checks import Check  # noqa: E402
from trtverify.repair.evaluate import Reference, evaluate  # noqa: E402
from trtverify.repair.search import search  # noqa: E402

CHECKS = [Check(metric="rel_l2", max=0.01), Check(metric="cosine", min=0.999)]
INT8_CHECKS = [Check(metric="cosine", min=0.999)]


def run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-30))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    den = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / den) if den else (1.0 if not a.any() and not b.any() else 0.0)


def final(ref: onnx.ModelProto, model: onnx.ModelProto | None, samples: list[dict], checks: list[Check]) -> dict:
    """Worst output metrics of `model` over the samples, and whether it is valid and passes."""
    if model is None:
        return {"valid": False, "passes": False}
    try:
        onnx.checker.check_model(model, full_check=True)
        worst = {"rel_l2": 0.0, "cosine": 1.0}
        finite = True
        for feed in samples:
            for a, b in zip(run(ref, feed), run(model, feed)):
                finite &= bool(np.isfinite(b).all())
                worst["rel_l2"] = max(worst["rel_l2"], rel_l2(a, b))
                worst["cosine"] = min(worst["cosine"], cosine(a, b))
    except Exception as exc:  # a peer's model that does not load or run: recorded, the bench goes on
        return {"valid": False, "passes": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    passes = finite and all(c.passes(worst[c.metric]) for c in checks)
    return {"valid": finite, "passes": passes, **worst, "hidden_nonfinite": hidden(ref, model, samples)}


def hidden(ref: onnx.ModelProto, model: onnx.ModelProto, samples: list[dict]) -> int:
    """Intermediate tensors non-finite where the reference's are finite, and casts to FP16 that overflow: what a
    GPU engine computes with, and ONNX Runtime's CPU provider may hide from the outputs (it drops a cast pair
    FP32 -> FP16 -> FP32 around ops it has no FP16 kernel for)."""
    with tempfile.TemporaryDirectory() as tmp:
        rpath, cpath = Path(tmp) / "ref.onnx", Path(tmp) / "cand.onnx"
        onnx.save(ref, str(rpath))
        onnx.save(model, str(cpath))
        ev = evaluate(Reference.run(rpath, samples), cpath, samples, [], "outputs", ())
    return len(ev.nonfinite) + len(ev.overflows)


def fp32_nodes(model: onnx.ModelProto) -> int:
    """Compute nodes whose float outputs stay FP32 in a mixed model (casts and graph I/O plumbing left out)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in [*inferred.graph.value_info, *inferred.graph.output]}
    return sum(
        1
        for n in model.graph.node
        if n.op_type not in ("Cast", "Constant") and any(types.get(o) == onnx.TensorProto.FLOAT for o in n.output)
    )


def ours(reference: Path, precision: str, samples: list[dict], calib: list[dict], checks: list[Check]) -> dict:
    t0 = time.perf_counter()
    result = search(reference, precision, samples, checks, calibration=calib)
    seconds = time.perf_counter() - t0
    ref = onnx.load(str(reference))
    return {
        "keep": len(result.keep),
        "nodes": list(result.keep),
        "evaluations": len(result.steps),
        "seconds": round(seconds, 2),
        **final(ref, result.model, samples, checks),
    }


def amp_fp16(reference: Path, samples: list[dict]) -> dict:
    try:
        from onnxconverter_common.auto_mixed_precision import auto_convert_mixed_precision
    except ImportError:
        return {"skipped": "onnxconverter-common not installed"}
    calls = 0

    def validate(res0: list[np.ndarray], res1: list[np.ndarray]) -> bool:
        nonlocal calls
        calls += 1
        return all(np.isfinite(b).all() and rel_l2(a, b) <= 0.01 and cosine(a, b) >= 0.999 for a, b in zip(res0, res1))

    ref = onnx.load(str(reference))
    t0 = time.perf_counter()
    model, error = None, None
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints every attempt
            model = auto_convert_mixed_precision(ref, samples[0], validate_fn=validate, keep_io_types=True)
    except Exception as exc:  # the peer fails: that is a result
        error = f"{type(exc).__name__}: {str(exc)[:200]}"
    out = {"evaluations": calls, "seconds": round(time.perf_counter() - t0, 2)}
    if model is not None:
        out["keep"] = fp32_nodes(model)
    if error:
        out["error"] = error
    return {**out, **final(ref, model, samples, CHECKS)}


def nncf_int8(reference: Path, samples: list[dict], calib: list[dict]) -> dict:
    try:
        import nncf
    except ImportError:
        return {"skipped": "nncf not installed"}
    ref = onnx.load(str(reference))
    refs = [run(ref, feed) for feed in samples]
    calls = 0

    def validation_fn(model: onnx.ModelProto, data: list[dict]) -> tuple[float, list[float]]:
        nonlocal calls
        calls += 1
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        values = [min(cosine(a, b) for a, b in zip(r, sess.run(None, feed))) for r, feed in zip(refs, data)]
        return float(np.mean(values)), values

    t0 = time.perf_counter()
    model, error = None, None
    try:
        model = nncf.quantize_with_accuracy_control(
            ref,
            nncf.Dataset(calib),
            nncf.Dataset(samples),
            validation_fn,
            max_drop=0.001,
            subset_size=len(calib),
        )
    except Exception as exc:  # the peer fails: that is a result
        error = f"{type(exc).__name__}: {str(exc)[:200]}"
    out: dict = {"evaluations": calls, "seconds": round(time.perf_counter() - t0, 2)}
    if model is not None:
        quantized = nncf.quantize(ref, nncf.Dataset(calib), subset_size=len(calib))
        out["keep"] = _quantized_ops(quantized) - _quantized_ops(model)
    if error:
        out["error"] = error
    return {**out, **final(ref, model, samples, INT8_CHECKS)}


def _quantized_ops(model: onnx.ModelProto) -> int:
    dq = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    plumbing = ("QuantizeLinear", "DequantizeLinear")
    return sum(1 for n in model.graph.node if n.op_type not in plumbing and dq & set(n.input))


def feeds(name: str, shape: tuple[int, ...], n: int, scale: float = 1.0, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{name: (rng.standard_normal(shape) * scale).astype(np.float32)} for _ in range(n)]


def cases(work: Path) -> list[dict]:
    import torch

    out = []
    fashion = np.load(ROOT / "demo" / "fashion_mnist" / "data" / "test_subset.npz")["images"].astype(np.float32) / 255
    real = [{"input": fashion[i : i + 32]} for i in range(0, 128, 32)]
    real_calib = [{"input": fashion[i : i + 1]} for i in range(1000, 1064)]
    out.append({"name": "fp16_repair demo (BatchNorm variance 1e8)", "precision": "fp16",
                "model": ROOT / "demo" / "fp16_repair" / "fashion_bn_fp32.onnx", "samples": real})  # fmt: skip
    torch.manual_seed(0)
    export(LayerNormNet(), (2, 32), work / "layernorm.onnx", opset=13)
    out.append({"name": "decomposed LayerNorm, activations ~1000", "precision": "fp16",
                "model": work / "layernorm.onnx", "samples": feeds("x", (4, 32), 4, scale=300)})  # fmt: skip
    out.append({"name": "Fashion-MNIST CNN (nothing wrong)", "precision": "int8",
                "model": ROOT / "demo" / "fashion_mnist" / "fashion_cnn_fp32.onnx", "samples": real,
                "calib": real_calib})  # fmt: skip
    net = ConvReluNet()
    with torch.no_grad():
        net.c1.bias[5] = 300.0
        net.c2.weight[:, 5] /= 300.0
    export(net, (1, 3, 32, 32), work / "outlier.onnx")
    out.append({"name": "CNN with an outlier activation channel", "precision": "int8",
                "model": work / "outlier.onnx", "samples": feeds("x", (2, 3, 32, 32), 4),
                "calib": feeds("x", (1, 3, 32, 32), 32, seed=1)})  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "repair_vs_peers.json")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases(Path(tmp)):
            samples, calib = case["samples"], case.get("calib", case["samples"])
            checks = CHECKS if case["precision"] == "fp16" else INT8_CHECKS
            row = {"case": case["name"], "precision": case["precision"]}
            row["trtverify"] = ours(case["model"], case["precision"], samples, calib, checks)
            if case["precision"] == "fp16":
                row["onnxconverter-common auto_convert_mixed_precision"] = amp_fp16(case["model"], samples)
            else:
                row["nncf quantize_with_accuracy_control"] = nncf_int8(case["model"], samples, calib)
            rows.append(row)
            print(json.dumps(row), flush=True)
    versions = {"onnxruntime": ort.__version__, "onnx": onnx.__version__}
    for mod in ("onnxconverter_common", "nncf"):
        with contextlib.suppress(ImportError):
            versions[mod] = __import__(mod).__version__
    args.out.write_text(json.dumps({"versions": versions, "cases": rows}, indent=2) + "\n")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
