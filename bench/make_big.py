"""A big MLP with its weights in external data (over protobuf's 2 GiB), and its FP16 twin.

Written tensor by tensor with numpy, so making it costs one weight matrix of memory, not the model:

    x [1, tokens, H] -> 12 x ( MatMul(H, 4H) -> Add -> Relu -> MatMul(4H, H) -> Add -> residual Add ) -> y

The FP16 twin holds the same weights in FP16 and casts its input and output (as onnxconverter-common's
keep_io_types does), so both take and give FP32. At the defaults (12 blocks, H = 3584) the FP32 weights
are 4.93 GB and the FP16 twin's 2.47 GB. Never commit them: bench/layerwise_vs_polygraphy.py --big makes
them in a temporary folder and removes them.

Usage: python bench/make_big.py OUT_DIR [--blocks 12] [--hidden 3584] [--tokens 16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

OPSET = 17


def _external(name: str, array: np.ndarray, data: Path, handle) -> object:
    """A TensorProto whose bytes are appended to `handle` (the file `data`), 64-byte aligned."""
    import onnx
    from onnx import helper

    pad = (-handle.tell()) % 64
    handle.write(b"\0" * pad)
    offset = handle.tell()
    raw = np.ascontiguousarray(array).tobytes()
    handle.write(raw)
    t = onnx.TensorProto()
    t.name = name
    t.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
    t.dims.extend(array.shape)
    t.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", data.name), ("offset", str(offset)), ("length", str(len(raw)))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def build_pair(out: Path, blocks: int = 12, hidden: int = 3584, tokens: int = 16, seed: int = 0) -> dict:
    """Write out/big.onnx (+ big.onnx.data) and out/big_fp16.onnx (+ big_fp16.onnx.data); return their sizes."""
    import onnx
    from onnx import TensorProto, helper

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    ffn = 4 * hidden
    fp32_path, fp16_path = out / "big.onnx", out / "big_fp16.onnx"
    fp32_data, fp16_data = out / "big.onnx.data", out / "big_fp16.onnx.data"
    nodes32, nodes16, inits32, inits16 = [], [], [], []
    with open(fp32_data, "wb") as f32, open(fp16_data, "wb") as f16:
        for b in range(blocks):
            for tag, shape in ((f"b{b}.up", (hidden, ffn)), (f"b{b}.down", (ffn, hidden))):
                w = rng.standard_normal(shape, dtype=np.float32)
                w *= np.float32(1.0 / np.sqrt(shape[0]))
                bias = (rng.standard_normal(shape[1], dtype=np.float32) * np.float32(0.01)).astype(np.float32)
                inits32 += [_external(f"{tag}.w", w, fp32_data, f32), _external(f"{tag}.b", bias, fp32_data, f32)]
                inits16 += [
                    _external(f"{tag}.w", w.astype(np.float16), fp16_data, f16),
                    _external(f"{tag}.b", bias.astype(np.float16), fp16_data, f16),
                ]
                del w
        fp32_bytes, fp16_bytes = f32.tell(), f16.tell()

    def block_nodes(src: str, b: int) -> tuple[list, str]:
        n = [
            helper.make_node("MatMul", [src, f"b{b}.up.w"], [f"b{b}.up"], name=f"/b{b}/up/MatMul"),
            helper.make_node("Add", [f"b{b}.up", f"b{b}.up.b"], [f"b{b}.up_bias"], name=f"/b{b}/up/Add"),
            helper.make_node("Relu", [f"b{b}.up_bias"], [f"b{b}.act"], name=f"/b{b}/Relu"),
            helper.make_node("MatMul", [f"b{b}.act", f"b{b}.down.w"], [f"b{b}.down"], name=f"/b{b}/down/MatMul"),
            helper.make_node("Add", [f"b{b}.down", f"b{b}.down.b"], [f"b{b}.down_bias"], name=f"/b{b}/down/Add"),
            helper.make_node("Add", [src, f"b{b}.down_bias"], [f"b{b}.out"], name=f"/b{b}/residual"),
        ]
        return n, f"b{b}.out"

    src32 = src16 = "x"
    nodes16.append(helper.make_node("Cast", ["x"], ["x_fp16"], to=TensorProto.FLOAT16, name="/input/Cast"))
    src16 = "x_fp16"
    for b in range(blocks):
        n, src32 = block_nodes(src32, b)
        nodes32 += n
        n, src16 = block_nodes(src16, b)
        nodes16 += n
    nodes32.append(helper.make_node("Identity", [src32], ["y"], name="/output/Identity"))
    nodes16.append(helper.make_node("Cast", [src16], ["y"], to=TensorProto.FLOAT, name="/output/Cast"))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, hidden])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, tokens, hidden])
    for nodes, inits, path in ((nodes32, inits32, fp32_path), (nodes16, inits16, fp16_path)):
        graph = helper.make_graph(nodes, "big_mlp", [x], [y], initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
        model.ir_version = 8
        onnx.save(model, str(path))
    return {
        "fp32": str(fp32_path),
        "fp16": str(fp16_path),
        "fp32_weight_bytes": fp32_bytes,
        "fp16_weight_bytes": fp16_bytes,
        "blocks": blocks,
        "hidden": hidden,
        "tokens": tokens,
        "nodes": len(nodes32),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--blocks", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=3584)
    ap.add_argument("--tokens", type=int, default=16)
    a = ap.parse_args(argv)
    info = build_pair(a.out, a.blocks, a.hidden, a.tokens)
    print(f"FP32 {info['fp32_weight_bytes'] / 1e9:.2f} GB -> {info['fp32']}")
    print(f"FP16 {info['fp16_weight_bytes'] / 1e9:.2f} GB -> {info['fp16']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
