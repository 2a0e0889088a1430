from pathlib import Path

import numpy as np
import pytest

from tests.conftest import write_suite
from trtverify.config.loader import load_suite
from trtverify.errors import SuiteError, UsageError
from trtverify.inputs import HookError, build_samples, check_samples
from trtverify.onnxinfo import TensorMeta

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
