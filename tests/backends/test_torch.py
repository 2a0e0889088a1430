import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.conftest import TINY  # noqa: E402
from trtverify.config.backends import TorchOptions  # noqa: E402
from trtverify.config.models import PyTorchModel  # noqa: E402
from trtverify.config.registry import BACKENDS  # noqa: E402
from trtverify.util.errors import MissingDependency, UsageError  # noqa: E402

X = np.random.default_rng(1).uniform(-1, 1, (2, 1, 8, 8)).astype(np.float32)


def _backend(**spec):
    spec.setdefault("output_names", ["logits"])
    return BACKENDS.load("torch")(PyTorchModel(**spec), search_path=[TINY], default_input_names=["input"])


def _onnx_logits():
    return BACKENDS.load("onnxruntime")(TINY / "tiny.onnx").infer({"input": X})["logits"]


@pytest.mark.parametrize(
    "spec",
    [
        {"factory": "tinymodel:build", "weights": TINY / "tiny.pt"},
        {"torchscript": TINY / "tiny_script.pt"},
        {"exported": TINY / "tiny_exported.pt2"},
    ],
    ids=["factory+weights", "torchscript", "torch.export"],
)
def test_every_source_matches_onnx(spec):
    out = _backend(**spec).infer({"input": X})
    np.testing.assert_allclose(out["logits"], _onnx_logits(), rtol=1e-4, atol=1e-5)


def test_eval_mode_and_no_grad():
    b = _backend(factory="tinymodel:build", weights=TINY / "tiny.pt")
    b.load()
    assert not b._model.training
    out = b.infer({"input": X})
    assert isinstance(out["logits"], np.ndarray)


def test_factory_kwargs_and_strict_weights():
    b = _backend(factory="tinymodel:build", kwargs={"classes": 3}, weights=TINY / "tiny.pt")
    from trtverify.util.errors import BackendError

    with pytest.raises(BackendError, match="size mismatch"):
        b.load()


def test_unnamed_outputs_need_output_names():
    b = BACKENDS.load("torch")(
        PyTorchModel(factory="tinymodel:build_two_heads"), search_path=[TINY], default_input_names=["input"]
    )
    with pytest.raises(UsageError, match="name them with models.pytorch.output_names"):
        b.infer({"input": X})
    b = BACKENDS.load("torch")(
        PyTorchModel(factory="tinymodel:build_two_heads", output_names=["logits"]),
        search_path=[TINY],
        default_input_names=["input"],
    )
    with pytest.raises(UsageError, match="has 1 name"):
        b.infer({"input": X})


def test_expose_submodule_outputs():
    b = _backend(factory="tinymodel:build", weights=TINY / "tiny.pt")
    assert "conv1" in b.intermediates()
    assert b.expose(["conv1", "nope"]) == ["conv1"]
    out = b.infer({"input": X})
    assert out["conv1"].shape == (2, 4, 8, 8)


def test_cuda_requested_without_gpu_is_exit_3():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    b = BACKENDS.load("torch")(
        PyTorchModel(torchscript=TINY / "tiny_script.pt", output_names=["logits"]), TorchOptions(device="cuda")
    )
    with pytest.raises(MissingDependency) as info:
        b.load()
    assert info.value.exit_code == 3


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_matches_cpu():
    cpu = _backend(factory="tinymodel:build", weights=TINY / "tiny.pt").infer({"input": X})["logits"]
    gpu = BACKENDS.load("torch")(
        PyTorchModel(factory="tinymodel:build", weights=TINY / "tiny.pt", output_names=["logits"]),
        TorchOptions(device="cuda"),
        search_path=[TINY],
        default_input_names=["input"],
    ).infer({"input": X})["logits"]
    np.testing.assert_allclose(gpu, cpu, rtol=1e-3, atol=1e-4)
