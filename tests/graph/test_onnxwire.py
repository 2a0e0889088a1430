"""The wire-level reader/rewriter must agree with onnx's own parser on real models."""

from pathlib import Path

import onnx
import pytest

from tests.conftest import DATA, ROOT
from trtverify.graph.onnxinfo import graph_io, load_io
from trtverify.graph.onnxwire import io_model

MODELS = [
    ROOT / "demo" / "fashion_mnist" / "fashion_cnn_fp32.onnx",
    ROOT / "demo" / "fashion_mnist" / "fashion_cnn_fp16.onnx",
    ROOT / "demo" / "fashion_mnist" / "fashion_cnn_int8_qdq.onnx",
    DATA / "encoder" / "encoder.onnx",
    DATA / "tiny" / "tiny.onnx",
]


@pytest.mark.parametrize("path", MODELS, ids=[p.name for p in MODELS])
def test_io_model_matches_onnx(path: Path):
    full = onnx.load(str(path))
    assert graph_io(io_model(path)) == graph_io(full)
    assert {i.name for i in io_model(path).graph.initializer} == {i.name for i in full.graph.initializer}


def test_garbage_is_a_clear_error(tmp_path: Path):
    from trtverify.util.errors import UsageError

    (tmp_path / "g.onnx").write_bytes(b"\x00\xff\x13 not a model")
    with pytest.raises(UsageError, match="not a readable ONNX model"):
        load_io(tmp_path / "g.onnx")
