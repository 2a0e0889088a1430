"""Runs the report tests look at: the demo suite through the CLI, a planted fault, and hostile names."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import ROOT, run_cli
from tests.stages.layerwise.test_layerwise import CNN_INPUTS, DEMO, plant, run_layerwise, suite_text, to_fp16

# names an attacker (or an unlucky exporter) could give nodes and tensors
HOSTILE_IMG = '<img src=x onerror="window.__pwned=1">'
HOSTILE_SCRIPT = "</script><script>window.__pwned=2</script>"
HOSTILE_QUOTE = "\"'&<b>bold</b>"
HOSTILE = (HOSTILE_IMG, HOSTILE_SCRIPT, HOSTILE_QUOTE)

FAULT = "/features/block3/conv/Conv"


def load(out: Path) -> dict:
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


def typed(results: dict):  # noqa: ANN201
    """A results.json dict (possibly edited by a test) as the typed document the renderers read."""
    from trtverify.results.io import parse_results

    return parse_results(json.loads(json.dumps(results)), "test")


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`trtverify run suites/fashion_mnist.yaml` (all four stages; it passes)."""
    out = tmp_path_factory.mktemp("demo") / "out"
    r = run_cli("run", str(ROOT / "suites" / "fashion_mnist.yaml"), "--out", str(out), "-q")
    assert r.code == 0, r.out + r.err
    return out


@pytest.fixture(scope="session")
def failing_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Layerwise on the demo CNN with one Conv's weights x1.05, in FP16: fails, with a first divergence at the fault."""
    tmp = tmp_path_factory.mktemp("fault")
    shutil.copy(DEMO / "fashion_cnn_fp32.onnx", tmp / "ref.onnx")
    plant(tmp / "ref.onnx", tmp / "cand.onnx", FAULT)
    to_fp16(tmp / "cand.onnx", tmp / "cand.onnx")
    # a 5 % scale error: caught by rel_l2 <= 0.01, written out (FP16's default leaves room for deep models)
    checks = "    checks: [{metric: rel_l2, max: 0.01}, {metric: cosine, min: 0.999}]\n"
    stage = run_layerwise(tmp, suite_text("ref.onnx", {"cand": "cand.onnx"}, CNN_INPUTS, checks))
    assert stage["status"] == "failed" and stage["candidates"][0]["first_divergence"]["node"] == FAULT
    return tmp / "out"


def hostile_model(path: Path, scale: float = 1.0) -> None:
    """x -> MatMul -> Add -> Relu -> y, every node and inner tensor named with markup."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((8, 8)) * scale).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], [HOSTILE_SCRIPT], name=HOSTILE_IMG),
        helper.make_node("Add", [HOSTILE_SCRIPT, "B"], [HOSTILE_QUOTE], name=HOSTILE_SCRIPT),
        helper.make_node("Relu", [HOSTILE_QUOTE], ["y"], name=HOSTILE_QUOTE),
    ]
    graph = helper.make_graph(
        nodes,
        "hostile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


@pytest.fixture(scope="session")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Layerwise of the hostile-named model against a copy with weights x1.05 (fails at the MatMul)."""
    tmp = tmp_path_factory.mktemp("hostile")
    hostile_model(tmp / "ref.onnx")
    hostile_model(tmp / "cand.onnx", scale=1.05)
    inputs = "  samples: 2\n  generate:\n    x: {shape: [4, 8], range: [-1, 1]}\n"
    stage = run_layerwise(tmp, suite_text("ref.onnx", {"cand": "cand.onnx"}, inputs))
    cand = stage["candidates"][0]
    assert {r["tensor"] for r in cand["rows"]} >= {HOSTILE_SCRIPT, HOSTILE_QUOTE}, cand["rows"]
    assert cand["first_divergence"]["node"] == HOSTILE_IMG
    return tmp / "out"


# ---------------------------------------------------------------- the perf stage

SUITES = ROOT / "suites"


def _absolute(value: object) -> object:
    """A suite document with its '../' paths made absolute (the copy is written elsewhere)."""
    if isinstance(value, dict):
        return {k: _absolute(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_absolute(v) for v in value]
    if isinstance(value, str) and value.startswith("../"):
        return str((SUITES / value).resolve())
    return value


def derived_suite(folder: Path, source: str, edit) -> Path:  # noqa: ANN001
    """suites/SOURCE with absolute paths, its reference_dir in `folder`, changed by `edit(doc)`."""
    import yaml

    doc = _absolute(yaml.safe_load((SUITES / source).read_text(encoding="utf-8")))
    doc["reference_dir"] = str(folder / "refs")
    edit(doc)
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


QUICK = {"budget_s": 0.15, "warmup": 2, "window": 5, "min_runs": 10, "pytorch": "never"}


@pytest.fixture(scope="session")
def perf_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """suites/perf_demo.yaml (the five real ResNet TensorRT builds read from trtexec exports), its ONNX Runtime
    measurements cut to a fraction of a second each and without PyTorch, so the report tests stay quick."""
    tmp = tmp_path_factory.mktemp("perf")
    suite = derived_suite(tmp, "perf_demo.yaml", lambda doc: doc["stages"]["perf"].update(QUICK))
    r = run_cli("run", str(suite), "--out", str(tmp / "out"), "-q")
    assert r.code == 0, r.out + r.err
    return tmp / "out"


def _layer(name: str, kind: str, precision: str, nodes: list[str], weights: bool = False) -> dict:
    fmt = {"INT8": "Thirty-two wide channel vectorized row major Int8 format", "FP16": "Channel major FP16 format",
           "FP32": "Row major linear FP32"}[precision]  # fmt: skip
    layer = {
        "Name": name,
        "LayerType": kind,
        "Inputs": [{"Name": "in", "Dimensions": [1, 32, 14, 14], "Format/Datatype": fmt}],
        "Outputs": [{"Name": "out", "Dimensions": [1, 32, 14, 14], "Format/Datatype": fmt}],
        "Metadata": "\x1e".join(f"[ONNX Layer: {n}]" for n in nodes),
    }
    if weights:
        layer["Weights"] = {"Type": {"INT8": "Int8", "FP16": "Half", "FP32": "Float"}[precision], "Count": 9}
    return layer


# Hand-made trtexec exports of the Fashion-MNIST CNN (--exportLayerInfo, --exportProfile): no TensorRT engine can be
# built or run here, so these two "engines" are written by hand. Their layer names and ONNX nodes are the demo's own:
# the INT8 one is named like the layers of the real TensorRT-RTX build log of fashion_cnn_int8_qdq.onnx
# (demo/fashion_mnist/buildlogs), the FP16 one like a classic TensorRT build ("Conv + Relu"). Times are invented.
F = "/features/"
FASHION_ENGINES: dict[str, list[tuple[dict, float]]] = {
    "fashion_cnn_fp16.engine": [
        (_layer(f"{F}block1/conv/Conv + {F}block1/relu/Relu", "CaskConvolution", "FP16",
                [f"{F}block1/conv/Conv", f"{F}block1/relu/Relu"], True), 0.031),
        (_layer(f"{F}pool1/MaxPool", "CaskPooling", "FP16", [f"{F}pool1/MaxPool"]), 0.008),
        (_layer(f"{F}block2/conv/Conv + {F}block2/relu/Relu", "CaskConvolution", "FP16",
                [f"{F}block2/conv/Conv", f"{F}block2/relu/Relu"], True), 0.026),
        (_layer(f"{F}pool2/MaxPool", "CaskPooling", "FP16", [f"{F}pool2/MaxPool"]), 0.006),
        (_layer(f"{F}block3/conv/Conv + {F}block3/relu/Relu", "CaskConvolution", "FP16",
                [f"{F}block3/conv/Conv", f"{F}block3/relu/Relu"], True), 0.019),
        (_layer(f"{F}block4/conv/Conv + {F}block4/relu/Relu", "CaskConvolution", "FP16",
                [f"{F}block4/conv/Conv", f"{F}block4/relu/Relu"], True), 0.018),
        (_layer("/classifier/fc1/Gemm + /classifier/relu/Relu", "CaskGemm", "FP16",
                ["/classifier/fc1/Gemm", "/classifier/relu/Relu"], True), 0.011),
        (_layer("/classifier/fc2/Gemm", "CaskGemm", "FP32", ["/classifier/fc2/Gemm"], True), 0.005),
    ],
    "fashion_cnn_int8_qdq.engine": [
        (_layer(f"Reformatting CopyNode for Input Tensor 0 to {F}block1/conv/Conv_myl0_1", "Reformat", "INT8",
                [f"{F}block1/conv/Conv"]), 0.004),
        (_layer(f"{F}block1/conv/Conv_myl0_1", "CaskConvolution", "INT8", [f"{F}block1/conv/Conv"], True), 0.022),
        (_layer("__myl_MulAddMoveReluMulMinMaxRounCastMoveMove_myl0_2", "PointWise", "FP32",
                [f"{F}block1/conv/Conv", f"{F}block1/relu/Relu"]), 0.009),
        (_layer(f"{F}pool1/MaxPool_myl0_3", "CaskPooling", "INT8", [f"{F}pool1/MaxPool"]), 0.005),
        (_layer(f"{F}block2/conv/Conv_myl0_6", "CaskConvolution", "INT8", [f"{F}block2/conv/Conv"], True), 0.017),
        (_layer(f"{F}block3/conv/Conv_myl0_11", "CaskConvolution", "INT8", [f"{F}block3/conv/Conv"], True), 0.014),
        (_layer(f"{F}block4/conv/Conv_myl0_13", "CaskConvolution", "INT8", [f"{F}block4/conv/Conv"], True), 0.014),
        (_layer("/classifier/fc1/Gemm_myl0_19", "CaskGemm", "INT8", ["/classifier/fc1/Gemm"], True), 0.012),
        (_layer("/classifier/fc2/Gemm_myl0_21", "CaskGemm", "FP32", ["/classifier/fc2/Gemm"], True), 0.004),
    ],
}  # fmt: skip


def write_fashion_engines(folder: Path) -> dict[str, Path]:
    """The hand-made exports, one folder per engine (graph.json + profile.json, as trtexec names them)."""
    out = {}
    for stem, layers in FASHION_ENGINES.items():
        d = folder / stem
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{stem}.graph.json").write_text(json.dumps({"Layers": [layer for layer, _ in layers]}))
        profile = [{"count": 100}] + [{"name": layer["Name"], "averageMs": ms, "percentage": 0} for layer, ms in layers]
        (d / f"{stem}.profile.json").write_text(json.dumps(profile))
        out[stem] = d
    return out


@pytest.fixture(scope="session")
def linked_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Fashion-MNIST demo's layerwise and buildlog stages with a perf stage whose two engines are the hand-made
    exports above (int8 against fp16): one results.json where engine layers, layerwise rows and build-log layers
    can all link to each other."""
    tmp = tmp_path_factory.mktemp("linked")
    engines = write_fashion_engines(tmp / "engines")

    def edit(doc: dict) -> None:
        doc["name"] = "fashion_linked"
        for stage in ("framework", "e2e"):
            doc["stages"].pop(stage)
        doc["stages"]["perf"] = dict(
            QUICK,
            batch_sizes=[1],
            candidates=[],
            engines={
                "fp16": {"files": [str(engines["fashion_cnn_fp16.engine"])]},
                "int8": {"files": [str(engines["fashion_cnn_int8_qdq.engine"])], "vs": "fp16"},
            },
        )

    suite = derived_suite(tmp, "fashion_mnist.yaml", edit)
    r = run_cli("run", str(suite), "--out", str(tmp / "out"), "-q")
    assert r.code == 0, r.out + r.err
    return tmp / "out"
