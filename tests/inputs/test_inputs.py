from pathlib import Path

import numpy as np
import pytest

from tests.conftest import write_suite
from trtverify.config.loader import load_suite
from trtverify.data.inputs import HookError, build_samples, check_samples
from trtverify.graph.onnxinfo import TensorMeta
from trtverify.util.errors import SuiteError, UsageError

HEAD = "name: t\nmodels: {reference: tiny.onnx}\nstages: {framework: {}}\n"


def _load(tiny_dir: Path, inputs: str):
    # framework needs pytorch; these tests only build inputs, so give a source
    text = (
        HEAD.replace(
            "{reference: tiny.onnx}",
            "{reference: tiny.onnx, pytorch: {torchscript: tiny_script.pt, output_names: [logits]}}",
        )
        + inputs
    )
    return load_suite(write_suite(tiny_dir, text))


def test_generated_inputs_are_deterministic_and_respect_range(tiny_dir: Path):
    loaded = _load(
        tiny_dir, "inputs:\n  samples: 3\n  seed: 7\n  generate:\n    input: {shape: [2, 1, 8, 8], range: [-2, 3]}\n"
    )
    a, b = build_samples(loaded), build_samples(loaded)
    assert len(a) == 3
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x["input"], y["input"])
    assert not np.array_equal(a[0]["input"], a[1]["input"])
    x = np.stack([s["input"] for s in a])
    assert x.dtype == np.float32 and x.min() >= -2 and x.max() <= 3


def test_integer_inputs_cover_the_inclusive_range(tiny_dir: Path):
    loaded = _load(tiny_dir, "inputs:\n  generate:\n    input: {shape: [1000], dtype: int64, range: [0, 3]}\n")
    values = set(np.unique(build_samples(loaded)[0]["input"]).tolist())
    assert values == {0, 1, 2, 3}


def test_npz_with_arrays_scale_dtype_and_batches(tiny_dir: Path):
    imgs = np.arange(10 * 64, dtype=np.uint8).reshape(10, 1, 8, 8)
    np.savez(tiny_dir / "data.npz", images=imgs, labels=np.arange(10))
    loaded = _load(
        tiny_dir,
        "inputs:\n  file: data.npz\n  batch_size: 4\n  arrays:\n    input: {key: images, dtype: float32, scale: 0.5}\n",
    )
    samples = build_samples(loaded)
    assert len(samples) == 2  # 10 rows // 4, remainder dropped
    assert samples[1]["input"].dtype == np.float32 and samples[1]["input"].shape == (4, 1, 8, 8)
    np.testing.assert_allclose(samples[1]["input"], imgs[4:8] * 0.5)


def test_npz_missing_key_is_located(tiny_dir: Path):
    np.savez(tiny_dir / "data.npz", images=np.zeros((2, 1, 8, 8)))
    loaded = _load(tiny_dir, "inputs:\n  file: data.npz\n  arrays:\n    input: {key: pixels}\n")
    with pytest.raises(
        SuiteError, match=r"suite.yaml:7: inputs.arrays.input: data.npz has no array 'pixels' \(it has: images\)"
    ):
        build_samples(loaded)


def test_npy_single_array(tiny_dir: Path):
    np.save(tiny_dir / "x.npy", np.ones((3, 1, 8, 8), np.float32))
    loaded = _load(tiny_dir, "inputs:\n  file: x.npy\n  arrays: {input: {}}\n")
    assert [s["input"].shape for s in build_samples(loaded)] == [(1, 1, 8, 8)] * 3


def test_pickled_npz_refused(tiny_dir: Path):
    np.savez(tiny_dir / "bad.npz", input=np.array([object()], dtype=object))
    loaded = _load(tiny_dir, "inputs:\n  file: bad.npz\n")
    with pytest.raises(UsageError, match="without pickle"):
        build_samples(loaded)


def test_hook_inputs(tiny_dir: Path):
    (tiny_dir / "feeds.py").write_text(
        "import numpy as np\n"
        "def make(n, scale=1.0):\n"
        "    for i in range(n):\n"
        "        yield {'input': np.full((1, 1, 8, 8), i * scale, np.float32)}\n"
        "def broken():\n"
        "    yield {'input': 1}\n"
        "    raise ValueError('dataset missing')\n"
    )
    loaded = _load(
        tiny_dir, "python_path: [.]\ninputs:\n  samples: 2\n  hook: feeds:make\n  args: {n: 5, scale: 2.0}\n"
    )
    samples = build_samples(loaded)
    assert len(samples) == 2 and samples[1]["input"][0, 0, 0, 0] == 2.0
    loaded = _load(tiny_dir, "python_path: [.]\ninputs:\n  hook: feeds:broken\n")
    with pytest.raises(HookError, match="raised ValueError: dataset missing"):
        build_samples(loaded)
    loaded = _load(tiny_dir, "python_path: [.]\ninputs:\n  hook: feeds:nothing_here\n")
    with pytest.raises(UsageError, match="has no attribute 'nothing_here'"):
        build_samples(loaded)


def test_check_samples():
    meta = [TensorMeta("input", "float32", ("batch", 1, 8, 8))]
    check_samples([{"input": np.zeros((3, 1, 8, 8))}], meta, "x")
    with pytest.raises(UsageError, match="zero samples"):
        check_samples([], meta, "x")
    with pytest.raises(
        UsageError, match="sample 0 does not match the model inputs; missing: input; not inputs of the model: x"
    ):
        check_samples([{"x": np.zeros(1)}], meta, "x")
    with pytest.raises(UsageError, match="dimension 1 is 3"):
        check_samples([{"input": np.zeros((1, 3, 8, 8))}], meta, "x")


def _fixed_batch_model(path: Path, batch: int = 4) -> Path:
    """A real ONNX model whose input fixes the batch: x [4, 3, 8, 8] -> Relu -> y."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "fixed_batch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3, 8, 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


FIXED_SUITE = """\
name: fixed
models: {reference: fixed.onnx, candidates: {same: fixed.onnx}}
inputs: {file: x.npz}
stages: {layerwise: {}}
"""


def test_an_array_of_exactly_the_fixed_input_shape_is_one_sample(tmp_path: Path):
    from trtverify.runner import preflight

    _fixed_batch_model(tmp_path / "fixed.onnx")
    x = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    loaded = load_suite(write_suite(tmp_path, FIXED_SUITE))
    samples = build_samples(loaded)
    assert len(samples) == 1 and samples[0]["x"].shape == (4, 3, 8, 8)
    np.testing.assert_array_equal(samples[0]["x"], x)
    check_samples(samples, preflight(loaded), "fixed")


def test_the_fixed_batch_model_runs_end_to_end_with_one_sample(tmp_path: Path):
    from tests.conftest import run_cli

    _fixed_batch_model(tmp_path / "fixed.onnx")
    np.savez(tmp_path / "x.npz", x=np.ones((4, 3, 8, 8), np.float32))
    r = run_cli("run", str(write_suite(tmp_path, FIXED_SUITE)), "--out", str(tmp_path / "out"), timeout=120)
    assert r.code == 0, r.out + r.err


def test_rows_of_a_fixed_batch_model_still_need_batch_size(tmp_path: Path):
    _fixed_batch_model(tmp_path / "fixed.onnx")
    np.savez(tmp_path / "x.npz", x=np.ones((8, 3, 8, 8), np.float32))  # two batches of 4, not one sample
    loaded = load_suite(write_suite(tmp_path, FIXED_SUITE))
    with pytest.raises(UsageError, match=r"dimension 0 is 1 but the model fixes it to 4.*inputs.batch_size: N"):
        check_samples(build_samples(loaded), [TensorMeta("x", "float32", (4, 3, 8, 8))], "fixed")
    loaded = load_suite(write_suite(tmp_path, FIXED_SUITE.replace("{file: x.npz}", "{file: x.npz, batch_size: 4}")))
    assert [s["x"].shape for s in build_samples(loaded)] == [(4, 3, 8, 8)] * 2


def test_rows_of_a_model_without_a_batch_axis_are_fed_one_row_each(tmp_path: Path):
    """torchvision's detectors take one image [3, H, W]: a file of rows [N, 3, H, W] is N samples of [3, H, W]
    (a real torchvision SSDlite export, tests/data/torchvision), and a batch_size over 1 is refused."""
    import shutil

    from trtverify.runner import preflight

    data = Path(__file__).resolve().parents[1] / "data" / "torchvision"
    shutil.copy(data / "ssdlite.onnx", tmp_path / "ssdlite.onnx")
    shutil.copy(data / "inputs.npz", tmp_path / "x.npz")
    suite = (
        "name: tv\nmodels: {reference: ssdlite.onnx, candidates: {same: ssdlite.onnx}}\n"
        "inputs: {file: x.npz}\nstages: {layerwise: {}}\n"
    )
    loaded = load_suite(write_suite(tmp_path, suite))
    samples = build_samples(loaded)
    assert [s["image"].shape for s in samples] == [(3, 160, 160)] * 2
    np.testing.assert_array_equal(samples[1]["image"], np.load(tmp_path / "x.npz")["image"][1])
    check_samples(samples, preflight(loaded), "ssdlite")
    loaded = load_suite(write_suite(tmp_path, suite.replace("{file: x.npz}", "{file: x.npz, batch_size: 2}")))
    with pytest.raises(SuiteError, match=r"no batch axis.*leave batch_size out"):
        build_samples(loaded)
