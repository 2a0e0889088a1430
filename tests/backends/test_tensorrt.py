"""TensorRT / TensorRT-RTX backends.

CPU tests (run everywhere): options validation, build-mode resolution per TensorRT version,
from_config, metadata from the ONNX file, and MissingDependency (exit code 3, pip command)
where TensorRT or Polygraphy cannot be imported.

GPU tests (`-m tensorrt`): skip themselves where `tensorrt_rtx` / `tensorrt` cannot be
imported. With TensorRT-RTX they build the Fashion-MNIST demo models (FP32, FP16, INT8 Q/DQ)
with every comparable layer output marked. On Hopper (H100/H200) TensorRT-RTX builds engines
but cannot run them: the run test then expects a clear BackendError.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from tests.conftest import ROOT
from trtverify.backends.base import Backend
from trtverify.backends.tensorrt import TensorRTBackend, TensorRTRTXBackend
from trtverify.backends.tensorrt_support import literal, resolve_strongly_typed
from trtverify.config.backends import Backends, TensorRTOptions
from trtverify.config.registry import BACKENDS
from trtverify.util.errors import EXIT_DEPENDENCY, BackendError, MissingDependency, UsageError

DEMO = ROOT / "demo" / "fashion_mnist"
MODELS = {k: DEMO / f"fashion_cnn_{k}.onnx" for k in ("fp32", "fp16", "int8_qdq")}


# ----------------------------------------------------------------------------- options


def test_defaults_and_schema_descriptions():
    o = TensorRTOptions()
    assert o.precisions == [] and o.strongly_typed is None and o.outputs_mode == "mark_all"
    assert o.log_verbosity == "verbose" and o.precision_constraints == "none"
    props = TensorRTOptions.model_json_schema()["properties"]
    undocumented = [k for k, v in props.items() if "description" not in v]
    assert not undocumented, undocumented
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        TensorRTOptions(precision=["fp16"])
    with pytest.raises(ValidationError):
        o.precisions = ["fp16"]  # frozen


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"precisions": ["fp16"], "strongly_typed": True}, "builder flags of weakly typed builds"),
        ({"precisions": ["int8"], "strongly_typed": True}, "Q/DQ"),
        ({"precisions": ["fp16", "fp16"]}, "duplicates"),
        ({"precisions": ["int4"]}, "Input should be"),
        ({"calibration_samples": 8}, "go with precisions: \\[int8\\]"),
        ({"calibration_cache": "calib.cache", "precisions": ["fp16"]}, "go with precisions: \\[int8\\]"),
        ({"calibration_samples": 0, "precisions": ["int8"]}, "greater than or equal to 1"),
        ({"layer_precisions": {"conv1": "fp16"}, "precisions": ["fp16"]}, "precision_constraints: prefer or obey"),
        (
            {"layer_precisions": {"conv1": "fp16"}, "precision_constraints": "obey"},
            "must also be enabled in precisions",
        ),
        ({"precision_constraints": "obey", "strongly_typed": True}, "weakly typed build"),
        ({"profiles": [{"input": {"min": [1, 1], "opt": [4, 1], "max": [2, 1]}}]}, "min <= opt <= max"),
        ({"profiles": [{"input": {"min": [1], "opt": [1, 1], "max": [1, 1]}}]}, "same rank"),
        ({"profiles": [{}]}, "profile 0 is empty"),
        ({"builder_optimization_level": 6}, "less than or equal to 5"),
        ({"workspace_mb": 0}, "greater than or equal to 1"),
        ({"outputs_mode": "all"}, "'mark_all' or 'debug_tensors'"),
        ({"log_verbosity": "debug"}, "'verbose', 'info' or 'warning'"),
    ],
)
def test_invalid_options_say_why(kwargs, message):
    with pytest.raises(ValidationError, match=message):
        TensorRTOptions(**kwargs)


def test_valid_weakly_typed_and_strongly_typed_options():
    weak = TensorRTOptions(
        precisions=["fp16", "int8"],
        strongly_typed=False,
        calibration_samples=16,
        calibration_cache="calib.cache",
        layer_precisions={"/features/block1/conv/Conv": "fp32", "/classifier/fc1/Gemm": "fp16"},
        precision_constraints="obey",
        profiles=[{"input": {"min": [1, 1, 28, 28], "opt": [8, 1, 28, 28], "max": [32, 1, 28, 28]}}],
        builder_optimization_level=3,
        workspace_mb=1024,
    )
    assert weak.profiles[0]["input"].opt == [8, 1, 28, 28]
    strong = TensorRTOptions(strongly_typed=True, precisions=["tf32"])  # tf32 is a math mode, not a type
    assert strong.precisions == ["tf32"]


def test_engine_excludes_build_options(tmp_path: Path):
    engine = tmp_path / "model.engine"
    with pytest.raises(ValidationError, match="engine file not found"):
        TensorRTOptions(engine=engine)
    engine.write_bytes(b"x")
    assert TensorRTOptions(engine=engine, outputs_mode="debug_tensors").engine == engine
    with pytest.raises(ValidationError, match="build options precisions, save_engine have no effect"):
        TensorRTOptions(engine=engine, precisions=["fp16"], save_engine=tmp_path / "b.engine")


def test_paths_are_relative_to_the_suite(tmp_path: Path):
    (tmp_path / "m.engine").write_bytes(b"x")
    o = TensorRTOptions.model_validate({"engine": "m.engine"}, context={"base_dir": tmp_path})
    assert o.engine == (tmp_path / "m.engine").resolve()
    o = TensorRTOptions.model_validate(
        {"timing_cache": "t.cache", "build_log": "logs/b.log"}, context={"base_dir": tmp_path}
    )
    assert o.timing_cache == (tmp_path / "t.cache").resolve() and o.build_log == (tmp_path / "logs" / "b.log").resolve()


@pytest.mark.parametrize(
    ("kwargs", "rtx", "version", "expected"),
    [
        ({}, False, "10.13.0.35", False),
        ({"precisions": ["fp16", "int8"]}, False, "10.13.0.35", False),
        ({"strongly_typed": True}, False, "10.13.0.35", True),
        ({}, False, "11.0.0", True),
        ({"precisions": ["tf32"]}, False, "11.2.1", True),
        ({}, True, "1.7.1.116", True),
        ({"precisions": ["fp8"]}, False, "8.6.1", False),
    ],
)
def test_build_mode_per_version(kwargs, rtx, version, expected):
    assert resolve_strongly_typed(TensorRTOptions(**kwargs), rtx=rtx, version=version) is expected


@pytest.mark.parametrize(
    ("kwargs", "rtx", "version", "message"),
    [
        ({"precisions": ["fp16"]}, False, "11.0.0", "TensorRT 11.0.0 builds strongly typed networks"),
        (
            {"precisions": ["int8"], "calibration_samples": 4},
            True,
            "1.7.1.116",
            "TensorRT-RTX 1.7.1.116 builds strongly typed",
        ),
        ({"strongly_typed": False}, False, "11.1.0", "builds only strongly typed networks"),
        ({"strongly_typed": False}, True, "1.7.1.116", "builds only strongly typed networks"),
        ({"layer_precisions": {"a": "fp32"}, "precision_constraints": "prefer"}, True, "1.7.1", "layer_precisions"),
        ({"precisions": ["fp8"]}, False, "8.5.3", "fp8 needs TensorRT >= 8.6"),
        ({"precisions": ["bf16"]}, False, "8.6.1", "bf16 needs TensorRT >= 9.0"),
    ],
)
def test_build_mode_clashes_with_version(kwargs, rtx, version, message):
    with pytest.raises(ValueError, match=message):
        resolve_strongly_typed(TensorRTOptions(**kwargs), rtx=rtx, version=version)


# ----------------------------------------------------------------------------- backend, CPU


def test_registry_protocol_and_from_config():
    assert BACKENDS.load("tensorrt") is TensorRTBackend and BACKENDS.load("tensorrt-rtx") is TensorRTRTXBackend
    assert {"tensorrt", "tensorrt-rtx"} <= set(BACKENDS)
    feeds = [{"input": np.zeros((2, 1, 28, 28), np.float32)}]
    b = TensorRTBackend.from_config(MODELS["fp32"], Backends(tensorrt=TensorRTOptions(precisions=["fp16"])), feeds)
    assert isinstance(b, Backend) and b.options.precisions == ["fp16"] and len(b.calibration_feeds) == 1
    r = TensorRTRTXBackend.from_config(MODELS["fp16"], Backends(tensorrt=TensorRTOptions(precisions=["fp16"])), ())
    assert r.options == TensorRTOptions()  # reads backends.tensorrt_rtx only; absent -> defaults
    r = TensorRTRTXBackend.from_config(MODELS["fp16"], Backends(tensorrt_rtx={"log_verbosity": "info"}))
    assert r.options.log_verbosity == "info" and r.name == "tensorrt-rtx"


def test_metadata_comes_from_the_onnx_file_without_tensorrt():
    b = TensorRTRTXBackend(MODELS["int8_qdq"])
    assert [(m.name, m.dtype, m.shape) for m in b.inputs()] == [("input", "float32", ("batch", 1, 28, 28))]
    assert [(m.name, m.dtype) for m in b.outputs()] == [("logits", "float32")]


@pytest.mark.parametrize(
    ("cls", "blocked", "fix"),
    [
        (TensorRTBackend, ("tensorrt",), "pip install tensorrt polygraphy"),
        (TensorRTBackend, ("tensorrt", "polygraphy"), "pip install tensorrt polygraphy"),
        (TensorRTRTXBackend, ("tensorrt_rtx",), "pip install tensorrt-rtx polygraphy"),
    ],
)
@pytest.mark.parametrize("call", ["load", "intermediates", "infer"])
def test_missing_tensorrt_is_exit_3_with_the_pip_command(monkeypatch, cls, blocked, fix, call):
    # sys.modules[name] = None makes `import name` fail: this stands in for a machine without TensorRT.
    for name in blocked:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delenv("POLYGRAPHY_USE_TENSORRT_RTX", raising=False)  # restored after the test
    b = cls(MODELS["fp32"])
    with pytest.raises(MissingDependency) as info:
        if call == "infer":
            b.infer({"input": np.zeros((1, 1, 28, 28), np.float32)})
        else:
            getattr(b, call)()
    assert info.value.exit_code == EXIT_DEPENDENCY == 3
    assert info.value.fix.startswith(fix) and f"the {cls.name} backend" in str(info.value)


def test_missing_polygraphy_is_exit_3(monkeypatch):
    if importlib.util.find_spec("tensorrt") is None:
        pytest.skip("needs tensorrt importable (to reach the polygraphy import); covered above together with tensorrt")
    monkeypatch.setitem(sys.modules, "polygraphy", None)
    with pytest.raises(MissingDependency, match="polygraphy") as info:
        TensorRTBackend(MODELS["fp32"]).load()
    assert info.value.exit_code == 3 and info.value.fix == "pip install polygraphy"


def test_prebuilt_engine_has_nothing_to_build_or_expose(tmp_path: Path):
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"not an engine")
    b = TensorRTBackend(MODELS["fp32"], TensorRTOptions(engine=engine))
    assert b.intermediates() == [] and b.expose(["/features/block1/relu/Relu_output_0"]) == []
    with pytest.raises(UsageError, match="prebuilt engine: nothing to build"):
        b.build()


def test_output_names_are_matched_literally():
    names = ["(Unnamed Layer* 12) [Shuffle]_output", "a?b", "x[0]", "plain/name_output_0"]
    for n in names:
        assert fnmatch.fnmatchcase(n, literal(n))
        assert fnmatch.filter(names, literal(n)) == [n]


# ----------------------------------------------------------------------------- GPU (TensorRT-RTX / TensorRT)


def _usable(module: str) -> bool:
    try:
        __import__(module)
        __import__("polygraphy")
    except Exception:
        return False
    return True


rtx_only = pytest.mark.skipif(not _usable("tensorrt_rtx"), reason="tensorrt_rtx and polygraphy not importable here")
trt_only = pytest.mark.skipif(not _usable("tensorrt"), reason="tensorrt and polygraphy not importable here")


def _feed(n: int = 4) -> dict[str, np.ndarray]:
    images = np.load(DEMO / "data" / "test_subset.npz")["images"][:n]
    return {"input": (images / 255.0).astype(np.float32)}


def _build_all_marked(cls, model: Path, tmp_path: Path, **options) -> TensorRTBackend:
    b = cls(model, TensorRTOptions(build_log=tmp_path / f"{model.stem}.log", **options))
    b.load()
    names = b.intermediates()
    assert names, "no markable intermediates"
    exposed = b.expose(names)
    assert exposed and set(exposed) <= set(names)
    engine = b.build()
    assert isinstance(engine, bytes) and len(engine) > 1000
    assert b.marked == exposed and b.build_info["marked"] == len(exposed)
    return b


def _assert_verbose_log_mentions(b: TensorRTBackend, names: list[str]) -> None:
    log = b.build_log
    assert log == b.options.build_log.read_text(encoding="utf-8")
    assert sum(1 for ln in log.splitlines() if ln.startswith("[X]")) > 50, "no VERBOSE TensorRT messages captured"
    build_part = log.split("Building engine with configuration", 1)
    assert len(build_part) == 2, "Polygraphy's build message missing from the log"
    missing = [n for n in names if n not in build_part[1]]
    assert not missing, f"marked outputs not mentioned after the build started: {missing}"


@pytest.mark.tensorrt
@pytest.mark.cuda
@rtx_only
@pytest.mark.parametrize("kind", list(MODELS))
def test_rtx_builds_demo_models_with_every_layer_output_marked(kind: str, tmp_path: Path):
    b = _build_all_marked(TensorRTRTXBackend, MODELS[kind], tmp_path)
    assert b.strongly_typed is True and b.build_info["library"] == "TensorRT-RTX"
    assert not any("QuantizeLinear" in n for n in b.marked)  # Q/DQ plumbing is not offered for comparison
    assert "/features/block1/relu/Relu_output_0" in b.marked and "logits" not in b.marked
    _assert_verbose_log_mentions(b, b.marked)
    print(f"{kind}: {b.build_info}")


@pytest.mark.tensorrt
@pytest.mark.cuda
@rtx_only
def test_rtx_debug_tensor_mode_builds(tmp_path: Path):
    b = TensorRTRTXBackend(MODELS["fp32"], TensorRTOptions(outputs_mode="debug_tensors"))
    b.load()
    exposed = b.expose(b.intermediates())
    assert len(b.build()) > 1000 and b.build_info["outputs_mode"] == "debug_tensors" and b.marked == exposed


@pytest.mark.tensorrt
@pytest.mark.cuda
@rtx_only
def test_rtx_timing_cache_is_reported_as_a_no_op(tmp_path: Path):
    b = TensorRTRTXBackend(MODELS["fp16"], TensorRTOptions(timing_cache=tmp_path / "t.cache", log_verbosity="info"))
    b.build()
    assert any("timing_cache has no effect" in w for w in b.warnings)
    assert "# warning: timing_cache has no effect" in b.build_log
    assert not any(ln.startswith("[X]") for ln in b.build_log.splitlines())  # info: TensorRT VERBOSE left out
    assert any(ln.startswith("[V]") for ln in b.build_log.splitlines())  # TensorRT INFO kept


@pytest.mark.tensorrt
@pytest.mark.cuda
@rtx_only
def test_rtx_engine_run_on_this_gpu_is_a_clear_error_or_works(tmp_path: Path):
    saved = tmp_path / "fp32.engine"
    b = TensorRTRTXBackend(MODELS["fp32"], TensorRTOptions(save_engine=saved))
    try:
        out = b.infer(_feed())
    except BackendError as exc:
        assert "min=(4, 1, 28, 28)" in b.build_log  # profile spans the fed batch (dynamic batch dimension)
        msg = str(exc)
        assert "cannot run engines on this GPU" in msg and "compute capabilit" in msg, msg
        assert saved.stat().st_size == b.build_info["engine_bytes"]  # the build itself worked
        with pytest.raises(BackendError, match="cannot run engines on this GPU"):
            TensorRTRTXBackend(MODELS["fp32"], TensorRTOptions(engine=saved)).load()
        return
    finally:
        b.close()
    assert out["logits"].shape == (4, 10)
    pytest.skip("the engine ran on this GPU (no unsupported-GPU error to check)")


@pytest.mark.tensorrt
@pytest.mark.cuda
@trt_only
def test_tensorrt_builds_weakly_or_strongly_typed_with_every_layer_output_marked(tmp_path: Path):
    import tensorrt

    major = int(tensorrt.__version__.split(".")[0])
    if major >= 11:
        b = _build_all_marked(TensorRTBackend, MODELS["fp16"], tmp_path)  # precision from the graph
        assert b.strongly_typed is True
    else:
        b = _build_all_marked(TensorRTBackend, MODELS["fp32"], tmp_path, precisions=["fp16"])
        assert b.strongly_typed is False
    _assert_verbose_log_mentions(b, b.marked)
    out = b.infer(_feed())
    assert out["logits"].shape == (4, 10) and set(b.marked) <= set(out)
