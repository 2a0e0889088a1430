"""The repaired models are what strongly typed TensorRT builds: TensorRT-RTX parses them with the kept nodes in
FP32 and everything else in FP16 (or INT8), and builds an engine. Needs TensorRT-RTX and a GPU (skipped
elsewhere); run on the GPU machine. Running the engines is not possible there (TensorRT-RTX refuses Hopper),
so what is checked is the parsed network's types and the build."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest

from trtverify.convert.fp16 import to_fp16
from trtverify.convert.int8 import keep_fp32, quantize

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "fp16_repair"
rtx_only = pytest.mark.skipif(importlib.util.find_spec("tensorrt_rtx") is None, reason="tensorrt_rtx not importable")
pytestmark = [pytest.mark.tensorrt, pytest.mark.cuda, rtx_only]


def parse_and_build(path: Path, input_name: str, shape: tuple[int, ...]) -> tuple[dict[str, list[str]], bytes]:
    """{layer name: output dtypes} of the strongly typed network TensorRT-RTX parses, and the built engine."""
    import tensorrt_rtx as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    if hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse_from_file(str(path)), [str(parser.get_error(i)) for i in range(parser.num_errors)]
    layers = {}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        layers[layer.name] = [str(layer.get_output(k).dtype) for k in range(layer.num_outputs)]
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    profile.set_shape(input_name, shape, shape, shape)
    config.add_optimization_profile(profile)
    engine = builder.build_serialized_network(network, config)
    assert engine is not None, "TensorRT-RTX did not build the repaired model"
    return layers, bytes(engine)


def test_rtx_builds_the_repaired_fp16_demo_with_the_batchnorm_in_fp32():
    layers, engine = parse_and_build(DEMO / "fashion_bn_fp16_repaired.onnx", "input", (4, 1, 28, 28))
    kept = {name: types for name, types in layers.items() if name == "/features/post_bn/BatchNormalization"}
    assert kept and all(t == ["DataType.FLOAT"] for t in kept.values()), kept
    convs = {name: types for name, types in layers.items() if name.endswith("/conv/Conv")}
    assert convs and all(t == ["DataType.HALF"] for t in convs.values()), convs
    assert len(engine) > 1000
    print({"layers": len(layers), "kept_fp32": sorted(kept), "engine_bytes": len(engine)})


def test_rtx_builds_an_int8_model_with_one_conv_kept_in_fp32(tmp_path: Path):
    ref = ROOT / "demo" / "fashion_mnist" / "fashion_cnn_fp32.onnx"
    images = np.load(ROOT / "demo" / "fashion_mnist" / "data" / "test_subset.npz")["images"][:32]
    calib = [{"input": images[i : i + 1].astype(np.float32) / 255} for i in range(32)]
    quantize(ref, tmp_path / "int8.onnx", calib)
    kept = keep_fp32(onnx.load(str(tmp_path / "int8.onnx")), onnx.load(str(ref)), ["/features/block3/conv/Conv"])
    onnx.save(kept, str(tmp_path / "kept.onnx"))
    layers, engine = parse_and_build(tmp_path / "kept.onnx", "input", (4, 1, 28, 28))
    assert len(engine) > 1000
    dq = [n for n in layers if "DequantizeLinear" in n]
    assert dq, "no Q/DQ layers: the model was not quantised"
    print({"layers": len(layers), "dequantize_layers": len(dq), "engine_bytes": len(engine)})


def test_rtx_builds_the_fp16_rewrite_of_a_decomposed_layernorm_chain(tmp_path: Path):
    """FP32 islands inside an FP16 graph, with casts only at their borders."""
    ref = ROOT / "tests" / "data" / "encoder" / "encoder.onnx"
    model = onnx.load(str(ref))
    pows = [n.name for n in model.graph.node if n.op_type == "Pow"][:2]
    assert pows
    onnx.save(to_fp16(model, pows), str(tmp_path / "enc.onnx"))
    dims = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    layers, engine = parse_and_build(tmp_path / "enc.onnx", model.graph.input[0].name, tuple(dims))
    for name in pows:
        assert layers[name] == ["DataType.FLOAT"], (name, layers[name])
    assert len(engine) > 1000


MODELOPT = ROOT / "demo" / "modelopt"
BN = "/features/post_bn/BatchNormalization"
# ModelOpt's own candidates (demo/modelopt/README.md), and the two broken ones repaired by trtverify (the BatchNorm
# kept in FP32 inside ModelOpt's graph: convert/islands.py)
MODELOPT_CASES = [
    "fashion_bn_int8",
    "fashion_bn_fp8",
    "fashion_bn_autocast_fp16",
    "fashion_bn_autocast_bf16",
    "fashion_cnn_int4",
    "fashion_bn_int8+repaired",
    "fashion_bn_fp8+repaired",
]


def try_build(path: Path) -> dict:
    """What TensorRT-RTX's strongly typed builder makes of a file: built (with the BatchNorm's layer types), or
    refused with the parser's or builder's messages."""
    import tensorrt_rtx as trt

    class Collect(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.lines: list[str] = []

        def log(self, severity, msg) -> None:  # noqa: ANN001 - TensorRT's callback signature
            if severity <= trt.ILogger.Severity.WARNING:
                self.lines.append(f"{severity}: {msg}")

    logger = Collect()
    builder = trt.Builder(logger)
    flags = 0
    if hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        return {"built": False, "stage": "parse", "errors": errors + logger.lines[-5:]}
    layers = {}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        layers[layer.name] = [str(layer.get_output(k).dtype) for k in range(layer.num_outputs)]
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    profile.set_shape("input", (4, 1, 28, 28), (4, 1, 28, 28), (4, 1, 28, 28))
    config.add_optimization_profile(profile)
    engine = builder.build_serialized_network(network, config)
    if engine is None:
        return {"built": False, "stage": "build", "errors": logger.lines[-8:], "layers": len(layers)}
    return {"built": True, "engine_bytes": len(bytes(engine)), "layers": len(layers), "batchnorm": layers.get(BN)}


@pytest.mark.parametrize("case", MODELOPT_CASES)
def test_rtx_on_modelopt_candidates_and_their_repairs(case: str, tmp_path: Path):
    """Records what the strongly typed builder accepts (printed as one `RTX {json}` line per case, copied into
    docs/tensorrt.md); a repaired model must build with the kept BatchNorm in FP32."""
    import json

    from trtverify.convert.islands import keep_fp32 as islands

    name, _, repaired = case.partition("+")
    path = MODELOPT / f"{name}.onnx"
    if repaired:
        kept = islands(onnx.load(str(path)), onnx.load(str(DEMO / "fashion_bn_fp32.onnx")), [BN])
        path = tmp_path / f"{name}_repaired.onnx"
        onnx.save(kept, str(path))
    result = try_build(path)
    print("RTX", json.dumps({"case": case, **result}))
    if repaired:
        assert result["built"] and result["batchnorm"] == ["DataType.FLOAT"], result
