"""backends.onnxruntime.custom_op_libraries: ONNX Runtime's own mechanism for ops it does not have. The library is
onnxruntime-extensions' (a [dev] dependency), standing in for a team's plugin kernels such as mmdeploy's
libmmdeploy_onnxruntime_ops.so: its `ai.onnx.contrib::Inverse` is, to ONNX Runtime alone, an unknown op."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli

extensions = pytest.importorskip("onnxruntime_extensions", reason="the [dev] extra installs onnxruntime-extensions")


def _model(path: Path) -> Path:
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    nodes = [
        h.make_node("Add", ["x", "eye"], ["shifted"], name="shift"),
        h.make_node("Inverse", ["shifted"], ["inv"], name="inverse", domain="ai.onnx.contrib"),
        h.make_node("Mul", ["inv", "two"], ["y"], name="double"),
    ]
    inits = [
        onnx.numpy_helper.from_array((np.eye(3) * 3).astype(np.float32), "eye"),
        onnx.numpy_helper.from_array(np.array(2, np.float32), "two"),
    ]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [3, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, [3, 3])], inits)  # fmt: skip
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.contrib", 1)], ir_version=8)
    onnx.save(m, str(path))
    return path


def _suite(tmp_path: Path, libraries: bool) -> Path:
    model = _model(tmp_path / "inverse.onnx")
    backends = f"backends:\n  onnxruntime:\n    custom_op_libraries: [{extensions.get_library_path()}]\n"
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"name: lib\nmodels:\n  reference: {model}\n  candidates: {{same: {model}}}\n"
        "inputs:\n  generate: {x: {shape: [3, 3], range: [0, 0.5]}}\n"
        + (backends if libraries else "")
        + "stages:\n  layerwise: {}\n"
    )
    return suite


def test_a_library_runs_its_ops_and_everything_is_compared(tmp_path: Path) -> None:
    r = run_cli("run", str(_suite(tmp_path, True)), "--out", str(tmp_path / "o"))
    assert r.code == 0, r.out + r.err
    stage = json.loads((tmp_path / "o" / "results.json").read_text())["stages"][0]
    rows = stage["candidates"][0]["rows"]
    assert [row["tensor"] for row in rows] == ["shifted", "inv", "y"] and not any(r.get("not_comparable") for r in rows)


def test_without_the_library_the_op_is_a_plugin_without_a_reference(tmp_path: Path) -> None:
    r = run_cli("run", str(_suite(tmp_path, False)), "--out", str(tmp_path / "o"))
    assert r.code == 1
    assert "after plugin Inverse 'inverse' (no reference)" in r.out and "custom_op_libraries" in r.out


def test_a_library_that_is_not_there_is_a_suite_error(tmp_path: Path) -> None:
    suite = _suite(tmp_path, True)
    suite.write_text(suite.read_text().replace(extensions.get_library_path(), "missing/libops.so"))
    r = run_cli("validate", str(suite))
    assert r.code == 2 and "suite.yaml:9" in r.err and "custom_op_libraries" in r.err, r.err
