"""The wire-level reader/rewriter must agree with onnx's own parser on real models."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.conftest import DATA, ROOT
from trtverify.graph.onnxinfo import graph_io, load_io
from trtverify.graph.onnxwire import externalize, io_model

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


@pytest.mark.parametrize("path", MODELS, ids=[p.name for p in MODELS])
def test_externalize_round_trips_every_weight(path: Path, tmp_path: Path):
    externalize(path, tmp_path / "m.onnx")
    light = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    assert light.ByteSize() < 40_000  # the weights left the protobuf
    back = onnx.load(str(tmp_path / "m.onnx"))
    full = onnx.load(str(path))
    assert [n.SerializeToString() for n in back.graph.node] == [n.SerializeToString() for n in full.graph.node]
    a = {i.name: numpy_helper.to_array(i) for i in full.graph.initializer}
    b = {i.name: numpy_helper.to_array(i) for i in back.graph.initializer}
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    onnx.checker.check_model(str(tmp_path / "m.onnx"))


def test_externalize_rehomes_existing_external_data(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    model = onnx.load(str(MODELS[0]))
    onnx.save(model, str(src / "ext.onnx"), save_as_external_data=True, location="orig.data", size_threshold=0)
    (tmp_path / "dst").mkdir()
    externalize(src / "ext.onnx", tmp_path / "dst" / "m.onnx")
    back = onnx.load(str(tmp_path / "dst" / "m.onnx"))
    w = {i.name: numpy_helper.to_array(i) for i in back.graph.initializer}
    for i in onnx.load(str(MODELS[0])).graph.initializer:  # `model` itself was rewritten by onnx.save
        np.testing.assert_array_equal(w[i.name], numpy_helper.to_array(i))


def test_garbage_is_a_clear_error(tmp_path: Path):
    from trtverify.util.errors import UsageError

    (tmp_path / "g.onnx").write_bytes(b"\x00\xff\x13 not a model")
    with pytest.raises(UsageError, match="not a readable ONNX model"):
        load_io(tmp_path / "g.onnx")
