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
from tests.stages.test_layerwise import CNN_INPUTS, DEMO, plant, run_layerwise, suite_text, to_fp16

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
    stage = run_layerwise(tmp, suite_text("ref.onnx", {"cand": "cand.onnx"}, CNN_INPUTS))
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
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
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
