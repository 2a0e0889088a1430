"""Paired fractions and verdicts of `trtverify layerwise` across exporters: the table of
docs/stages/layerwise.md#pairing-two-exports-of-one-model.

Three architectures (tests/stages/layerwise/test_pairing_exports.py: a ResNet-style CNN, a pre-norm GELU transformer
encoder, a two-scale detector head), each exported from one torch module by TorchScript (opset 17) and by
dynamo; the reference is one export, the candidate the other export converted to FP16
(`convert_float_to_float16`, keep_io_types) or INT8 (`quantize_static`, defaults); plus issue 36's own
encoder (4 layers, d_model 128, ReLU, layers cloned by nn.TransformerEncoder so that every layer holds the
same weights). Each row is one `trtverify run` of a layerwise suite, in-process.

    .venv/bin/python bench/pairing_exports.py [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.stages.layerwise.test_pairing_exports import (  # noqa: E402
    SHAPES,
    Encoder,
    build,
    export,
    layerwise,
    to_fp16,
    to_int8,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="keep the models and results here")
    args = ap.parse_args()
    folder = args.out or Path(tempfile.mkdtemp(prefix="trtverify-pairing-"))
    folder.mkdir(parents=True, exist_ok=True)
    cases = []
    import torch

    for arch in SHAPES:
        model = build(arch)
        for exporter in ("ts", "dy"):
            export(model, arch, folder / f"{arch}_{exporter}.onnx", dynamo=exporter == "dy")
        np.savez(folder / f"{arch}_x.npz", x=np.random.default_rng(0).standard_normal((4, *SHAPES[arch]), np.float32))
        cases.append((arch, folder / f"{arch}_x.npz"))
    torch.manual_seed(0)
    issue = Encoder(layers=4, d=128, heads=4, ffn=256, activation="relu").eval()
    for exporter in ("ts", "dy"):
        export(issue, "encoder", folder / f"issue36_{exporter}.onnx", dynamo=exporter == "dy", shape=(8, 128))
    np.savez(folder / "issue36_x.npz", x=np.random.default_rng(0).standard_normal((4, 8, 128), np.float32))
    cases.append(("issue36", folder / "issue36_x.npz"))

    print("| architecture | reference | candidate | paired | by structure | with a counterpart | verdict | pairing |")
    print("|---|---|---|---|---|---|---|---|")
    names = {"ts": "TorchScript", "dy": "dynamo"}
    for arch, inputs in cases:
        rows = np.load(inputs)["x"]
        for ref, cand in (("ts", "dy"), ("dy", "ts")):
            for kind in ("fp16", "int8"):
                target = folder / f"{arch}_{cand}_{kind}.onnx"
                if kind == "fp16":
                    to_fp16(folder / f"{arch}_{cand}.onnx", target)
                else:
                    to_int8(folder / f"{arch}_{cand}.onnx", target, rows)
                t0 = time.perf_counter()
                stage = layerwise(folder, f"{arch}_{ref}.onnx", target.name, inputs.name)
                wall = time.perf_counter() - t0
                c = stage["candidates"][0]
                p = c["paired"]
                share = p["paired"] / p["reference_tensors"]
                pairing_s = stage["timings"].get("c.pairing_s", 0.0)
                print(
                    f"| {arch} | {names[ref]} FP32 | {names[cand]} {kind.upper()} | {p['paired']} of "
                    f"{p['reference_tensors']} ({share:.0%}) | {p['by'].get('structure', 0)} | "
                    f"{p['with_counterpart']} | {stage['status']} | {pairing_s * 1000:.0f} ms of {wall:.1f} s |"
                )


if __name__ == "__main__":
    main()
