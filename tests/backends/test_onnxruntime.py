from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.conftest import TINY
from trtverify.backends.base import Backend
from trtverify.config.backends import OnnxRuntimeOptions
from trtverify.config.registry import BACKENDS
from trtverify.util.errors import BackendError, MissingDependency, UsageError

X = np.random.default_rng(0).uniform(-1, 1, (3, 1, 8, 8)).astype(np.float32)


def test_registry_and_protocol():
    assert set(BACKENDS) >= {"onnxruntime", "torch"}
    b = BACKENDS.load("onnxruntime")(TINY / "tiny.onnx")
    assert isinstance(b, Backend)
    with pytest.raises(UsageError, match="did you mean 'onnxruntime'"):
        BACKENDS.load("onnxruntim")


def test_infer_and_metadata():
    b = BACKENDS.load("onnxruntime")(TINY / "tiny.onnx")
    b.load()
    assert [(m.name, m.dtype, m.shape) for m in b.inputs()] == [("input", "float32", ("batch", 1, 8, 8))]
    out = b.infer({"input": X})
    assert list(out) == ["logits"] and out["logits"].shape == (3, 5)


@pytest.mark.parametrize("level", ["disable", "basic", "extended", "all"])
def test_optimisation_levels_agree(level: str):
    b = BACKENDS.load("onnxruntime")(
        TINY / "tiny.onnx", OnnxRuntimeOptions(graph_optimization_level=level, intra_op_num_threads=1)
    )
    ref = BACKENDS.load("onnxruntime")(TINY / "tiny.onnx", OnnxRuntimeOptions(graph_optimization_level="disable"))
    np.testing.assert_allclose(b.infer({"input": X})["logits"], ref.infer({"input": X})["logits"], rtol=1e-5, atol=1e-6)


def test_expose_intermediates_declares_no_wrong_shapes():
    b = BACKENDS.load("onnxruntime")(TINY / "tiny.onnx", OnnxRuntimeOptions(graph_optimization_level="disable"))
    b.load()
    names = b.intermediates()
    assert len(names) >= 5
    exposed = b.expose(names)
    out = b.infer({"input": X})
    assert set(exposed) <= set(out) and "logits" in out
    relu = [n for n in exposed if "Relu" in n]
    assert relu and all(out[n].min() >= 0 for n in relu)
    b.close()  # frees the exposed variant with its folder: a later run is of the model as written
    again = b.infer({"input": X})
    assert list(again) == ["logits"]
    np.testing.assert_array_equal(again["logits"], out["logits"])


def test_feed_mismatch_and_float_cast():
    b = BACKENDS.load("onnxruntime")(TINY / "tiny.onnx")
    with pytest.raises(BackendError, match="missing: input"):
        b.infer({"x": X})
    out = b.infer({"input": X.astype(np.float64)})  # float64 -> float32 is a recorded cast
    assert out["logits"].dtype == np.float32 and b.casts == {"input": ("float64", "float32")}
    with pytest.raises(BackendError, match="expects float32"):
        b.infer({"input": X.astype(np.int32)})


def test_fp16_model_with_fp16_io(tmp_path: Path):
    # a genuinely FP16 graph (FP16 input, weights and output), as FP16 converters produce with keep_io_types=False
    w = helper.make_tensor("w", TensorProto.FLOAT16, [2, 2], np.array([[1, 2], [3, 4]], np.float16).tobytes(), raw=True)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 2])],
        [w],
    )
    path = tmp_path / "fp16.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))
    b = BACKENDS.load("onnxruntime")(path)
    y = b.infer({"x": np.array([[1.0, 1.0]], np.float32)})["y"]
    assert y.dtype == np.float16 and y.tolist() == [[4.0, 6.0]]


def test_broken_model_is_a_backend_error(tmp_path: Path):
    g = helper.make_graph(
        [helper.make_node("NoSuchOp", ["x"], ["y"], name="n")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(g, ir_version=9), str(path))
    # an op ONNX Runtime does not have is a plugin to TensorRT: without a reference nothing it outputs is computed
    with pytest.raises(BackendError, match="nothing it outputs can be computed here: after plugin NoSuchOp 'n'"):
        BACKENDS.load("onnxruntime")(path).infer({"x": np.zeros(1, np.float32)})


@pytest.mark.parametrize("content", [b"", b"hello\n", "truncated"], ids=["empty", "text", "truncated"])
def test_an_unreadable_model_is_named_once(tmp_path: Path, content: bytes | str):
    """`ONNX Runtime cannot load X: X: not a readable ONNX model`: the reader's own text starts with the path."""
    path = tmp_path / "cand.onnx"
    path.write_bytes((TINY / "tiny.onnx").read_bytes()[:200] if content == "truncated" else content)
    with pytest.raises(BackendError) as info:
        BACKENDS.load("onnxruntime")(path).load()
    text = str(info.value)
    assert text.startswith(f"ONNX Runtime cannot load {path}: not a") and text.count("cand.onnx") == 1


def test_cannot_load_says_the_path_once_whatever_form_the_error_gives():
    from trtverify.backends.base import cannot_load

    path = Path("models") / "m.onnx"
    for said in (str(path), str(path.absolute()), "m.onnx"):
        assert str(cannot_load("TensorRT", path, UsageError(f"{said}: too short"))) == (
            f"TensorRT cannot load {path}: too short"
        )
    other = cannot_load("TensorRT", path, ValueError("external data outside the folder"))
    assert str(other) == f"TensorRT cannot load {path}: external data outside the folder"


def test_unavailable_provider_names_the_fix():
    b = BACKENDS.load("onnxruntime")(TINY / "tiny.onnx", OnnxRuntimeOptions(providers=["CUDAExecutionProvider"]))
    with pytest.raises(MissingDependency, match="onnxruntime-gpu") as info:
        b.infer({"input": X})
    assert info.value.exit_code == 3


def test_fp16_on_the_cpu_is_emulated_as_a_gpu_rounds_it(tmp_path: Path):
    """ONNX Runtime's CPU runs FP16 Add/Sub in FP32 inside and drops the casts between them: (x + 300) - 300 keeps
    x there, while FP16 (spacing 0.25 at 300) loses it, as a GPU does. Emulated by default; `fp16_on_cpu: native`
    is ONNX Runtime as it is. The FP16 output stays FP16, and a graph output read inside the graph still works."""
    from trtverify.backends.onnxruntime import OnnxRuntimeBackend

    off = helper.make_tensor("off", TensorProto.FLOAT16, [], np.array([300], np.float16).tobytes(), raw=True)
    g = helper.make_graph(
        [
            helper.make_node("Add", ["x", "off"], ["h"], name="add"),
            helper.make_node("Sub", ["h", "off"], ["y"], name="sub"),
            helper.make_node("Add", ["y", "y"], ["z"], name="twice"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 3]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT16, [1, 3]),
        ],  # fmt: skip
        [off],
    )
    path = tmp_path / "cancel.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))
    x = {"x": np.array([[0.01, 0.1, 0.3]], np.float32)}
    emulated = OnnxRuntimeBackend(path).infer(x)
    native = OnnxRuntimeBackend(path, OnnxRuntimeOptions(fp16_on_cpu="native")).infer(x)
    assert emulated["y"].dtype == np.float16 and emulated["y"].tolist() == [[0.0, 0.0, 0.25]]  # FP16's rounding
    assert emulated["z"].tolist() == [[0.0, 0.0, 0.5]]
    assert native["y"].tolist() != emulated["y"].tolist()  # ONNX Runtime's CPU kept what FP16 cannot
