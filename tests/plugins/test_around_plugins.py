"""Graphs with plugin nodes run around them: ONNX Runtime computes everything it can, a reference computes the
plugin, and what waits on a plugin without one is said, never compared, and fails `graph outputs compared`.

The models are exported by torch.onnx.export with a user plugin mid-graph (tests/plugins/exported.py); PyTorch's
forward of the same module is the truth the split run must reproduce."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.plugins.exported import export_scale_shift, sample

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    ref, fp16 = export_scale_shift(tmp_path_factory.mktemp("scale_shift"))
    assert fp16 is not None
    return ref, fp16


def _backend(path: Path, hooks: dict[str, str] | None = None):  # noqa: ANN202
    from trtverify.backends.onnxruntime import OnnxRuntimeBackend
    from trtverify.config.backends import OnnxRuntimeOptions

    options = OnnxRuntimeOptions()
    if hooks is not None:
        options = options.model_copy(update={"plugins": hooks, "plugin_path": [str(path.parent)]})
    b = OnnxRuntimeBackend(path, options)
    b.load()
    return b


def test_whole_graph_in_one_session_is_refused_by_onnx_runtime(models: tuple[Path, Path]) -> None:
    """The premise: ONNX Runtime alone cannot load the graph (the issue's `is not a registered function/op`)."""
    import onnxruntime as ort

    with pytest.raises(Exception, match="ScaleShift_TRT"):
        ort.InferenceSession(str(models[0]), providers=["CPUExecutionProvider"])


def test_split_run_equals_pytorch_and_exposes_every_tensor(models: tuple[Path, Path]) -> None:
    ref, _ = models
    b = _backend(ref, {"ScaleShift_TRT": "hooks:scale_shift"})
    assert b.uncomputed() == {}
    names = b.expose(b.intermediates())
    out = b.infer(sample())
    assert set(names) <= set(out) and "/ScaleShift_TRT_output_0" in out
    relu = out["/Relu_output_0"]
    bias = np.linspace(-0.5, 0.5, 8, dtype=np.float32).reshape(1, -1, 1, 1)
    np.testing.assert_allclose(out["/ScaleShift_TRT_output_0"], relu * 0.5 + bias, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out["gate"], 1 / (1 + np.exp(-relu)), rtol=1e-5, atol=1e-6)
    assert out["y"].shape == (1, 8, 16, 16) and out["y"].min() >= 0


def test_without_a_reference_the_rest_is_computed_and_the_plugins_side_named(models: tuple[Path, Path]) -> None:
    b = _backend(models[0])
    missing = b.uncomputed()
    assert set(missing) == {"/ScaleShift_TRT_output_0", "/c2/Conv_output_0", "y"}
    assert set(missing.values()) == {"after plugin ScaleShift_TRT '/ScaleShift_TRT' (no reference)"}
    assert "/Relu_output_0" in b.intermediates() and "y" not in b.intermediates()
    out = b.infer(sample())
    assert set(out) == {"gate"}  # the output that does not wait on the plugin


def test_fp16_candidate_after_the_plugin_is_rounded_as_a_gpu_computes_it(models: tuple[Path, Path]) -> None:
    """Types after a plugin are unknown to shape inference: each segment is emulated once its inputs are known, so
    the Conv after the plugin is FP16 (not an FP32 value that would hide FP16's error)."""
    b = _backend(models[1], {"ScaleShift_TRT": "hooks:scale_shift"})
    b.expose(b.intermediates())
    out = b.infer(sample())
    assert out["/ScaleShift_TRT_output_0"].dtype == np.float16
    assert out["/c2/Conv_output_0"].dtype == np.float16
    assert out["y"].dtype == np.float32  # keep_io_types: the graph output is cast back


def test_a_reference_returning_the_wrong_outputs_is_named(models: tuple[Path, Path]) -> None:
    from trtverify.util.errors import BackendError

    b = _backend(models[0], {"ScaleShift_TRT": "hooks:wrong_count"})
    b.expose(["/c2/Conv_output_0"])
    with pytest.raises(BackendError) as exc:
        b.infer(sample())
    assert "ScaleShift_TRT" in str(exc.value) and "hooks:wrong_count" in str(exc.value)


def _results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def test_layerwise_without_a_hook_fails_naming_the_plugin(models: tuple[Path, Path], tmp_path: Path) -> None:
    ref, fp16 = models
    r = run_cli("layerwise", str(ref), str(fp16), "--out", str(tmp_path / "o"))
    assert r.code == 1, r.err
    assert "graph outputs compared" in r.out and "--plugin OP=module:callable" in r.out
    assert "3 tensors after plugin ScaleShift_TRT '/ScaleShift_TRT' (no reference), not compared" in r.out
    cand = next(s for s in _results(tmp_path / "o")["stages"] if s["name"] == "layerwise")["candidates"][0]
    assert cand["after_plugins"] == {"after plugin ScaleShift_TRT '/ScaleShift_TRT' (no reference)": 3}
    after = [row for row in cand["rows"] if row.get("not_comparable")]
    assert {row["tensor"] for row in after} == {"/ScaleShift_TRT_output_0", "/c2/Conv_output_0", "y"}
    compared = {row["tensor"] for row in cand["rows"] if not row.get("not_comparable")}
    assert {"/c1/Conv_output_0", "/Relu_output_0", "gate"} <= compared  # the convolution before it is compared
    assert cand["unmatched"]["reference_only"] == []


def test_layerwise_with_the_users_hook_compares_everything(models: tuple[Path, Path], tmp_path: Path) -> None:
    ref, fp16 = models
    out = tmp_path / "o"
    r = run_cli("layerwise", str(ref), str(fp16), "--plugin", "ScaleShift_TRT=hooks:scale_shift", "--out", str(out),
                cwd=ref.parent)  # fmt: skip
    assert r.code == 0, r.out + r.err
    cand = next(s for s in _results(out)["stages"] if s["name"] == "layerwise")["candidates"][0]
    assert cand.get("after_plugins") is None
    assert all(not row.get("not_comparable") for row in cand["rows"]) and len(cand["rows"]) == 6
    # the suite it wrote reruns from anywhere: the hook's folder is in its python_path
    rerun = run_cli("run", str(out / "suite.yaml"), "--out", str(tmp_path / "again"))
    assert rerun.code == 0, rerun.out + rerun.err


def test_allow_uncompared_lets_a_run_pass_and_says_so(models: tuple[Path, Path], tmp_path: Path) -> None:
    ref, fp16 = models
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"name: allowed\nmodels:\n  reference: {ref}\n  candidates: {{fp16: {fp16}}}\n"
        "inputs:\n  generate: {x: {shape: [1, 3, 16, 16], range: [0, 1]}}\n"
        "stages:\n  layerwise: {allow_uncompared: [y]}\n"
    )
    r = run_cli("run", str(suite), "--out", str(tmp_path / "o"))
    assert r.code == 0, r.out + r.err
    assert "after plugin ScaleShift_TRT" in r.out


@pytest.mark.parametrize(
    ("value", "expected"),
    [("ScaleShift_TRT", "is not OP=module:callable"), ("ScaleShift_TRT=hooks", "neither 'module:callable'")],
)
def test_a_malformed_plugin_option_is_a_usage_error(
    models: tuple[Path, Path], tmp_path: Path, value: str, expected: str
) -> None:
    r = run_cli("layerwise", str(models[0]), str(models[1]), "--plugin", value, "--out", str(tmp_path / "o"))
    assert r.code == 2 and expected in r.err


def test_suite_plugins_key_is_checked_with_file_and_line(tmp_path: Path, models: tuple[Path, Path]) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"name: bad\nplugins:\n  ScaleShift_TRT: not a hook\nmodels:\n  reference: {models[0]}\n"
        "inputs:\n  generate: {x: {shape: [1, 3, 16, 16]}}\nstages:\n  layerwise: {}\n"
    )
    r = run_cli("validate", str(suite))
    assert r.code == 2 and "suite.yaml:3" in r.err and "neither 'module:callable'" in r.err


def test_repair_runs_the_users_plugin_and_refuses_to_search_without_it(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    ref = models[0]
    ok = run_cli("repair", str(ref), "--precision", "fp16", "--plugin", "ScaleShift_TRT=hooks:scale_shift",
                 "--out", str(tmp_path / "ok"), cwd=ref.parent)  # fmt: skip
    assert ok.code == 0, ok.out + ok.err
    repair = json.loads((tmp_path / "ok" / "repair-fp16" / "repair.json").read_text())
    assert repair["before"]["passed"] is True
    blind = run_cli("repair", str(ref), "--precision", "fp16", "--out", str(tmp_path / "blind"))
    assert blind.code == 2 and "nothing computes the output(s) y (after plugin ScaleShift_TRT" in blind.out


def test_run_takes_plugin_options_over_the_suites_found_in_the_current_folder(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    ref, fp16 = models
    suite = tmp_path / "suites" / "suite.yaml"
    suite.parent.mkdir()
    suite.write_text(
        f"name: cli\nplugins: {{ScaleShift_TRT: hooks:wrong_count}}\nmodels:\n  reference: {ref}\n"
        f"  candidates: {{fp16: {fp16}}}\ninputs:\n  generate: {{x: {{shape: [1, 3, 16, 16], range: [0, 1]}}}}\n"
        "stages:\n  layerwise: {}\n"
    )
    r = run_cli("run", str(suite), "--plugin", "ScaleShift_TRT=hooks:scale_shift", "--out", str(tmp_path / "o"),
                cwd=ref.parent)  # fmt: skip
    assert r.code == 0, r.out + r.err  # the suite's own reference (wrong) is replaced, and hooks.py found here
    r = run_cli("run", str(suite), "--plugin", "ScaleShift_TRT=hooks:scale_shift", "--out", str(tmp_path / "p"),
                cwd=tmp_path)  # fmt: skip
    assert r.code == 2 and "module 'hooks' not found" in r.out + r.err
