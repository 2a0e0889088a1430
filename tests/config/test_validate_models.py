"""`validate` (and `run` before any stage) checks the suite against its models: the names and sizes
a later stage reads (post-processing output, framework and layerwise rename/ignore, candidates'
inputs and outputs, class_names, dataset files), each a problem with the suite's file and line."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import TINY, run_cli
from trtverify.config.loader import load_suite
from trtverify.runner import preflight
from trtverify.util.errors import SuiteError

E2E = """\
name: m
models:
  reference: tiny.onnx
  candidates: {same: tiny.onnx}
inputs:
  generate:
    input: {shape: [1, 1, 8, 8]}
stages:
  e2e:
    task: classification
    dataset: {npz: data.npz}
    preprocess: {resize: [8, 8], grayscale: true}
    postprocess: {output: logits}
    gates: [{metric: accuracy, max_drop: 0.5}]
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name in ("tiny.onnx", "two_heads.onnx", "tiny_script.pt"):
        shutil.copy(TINY / name, tmp_path / name)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "data.npz", images=rng.integers(0, 255, (4, 8, 8, 1), dtype=np.uint8), labels=np.arange(4))
    return tmp_path


def _problems(folder: Path, text: str) -> list[str]:
    path = folder / "suite.yaml"
    path.write_text(text)
    try:
        preflight(load_suite(path))
    except SuiteError as exc:
        return [str(p) for p in exc.problems]
    return []


def test_the_examples_pass(folder: Path):
    assert _problems(folder, E2E) == []


def test_a_postprocess_output_typo_is_exit_2_at_validate_and_at_run_start(folder: Path):
    path = folder / "suite.yaml"
    path.write_text(E2E.replace("{output: logits}", "{output: logit}"))
    want = (
        f"{path}:13: stages.e2e.postprocess.output: 'logit' is not an output of tiny.onnx; did you mean 'logits'? "
        "(its outputs: logits)"
    )
    r = run_cli("validate", str(path), block=("torch", "tensorrt"))  # validate needs neither
    assert r.code == 2 and want in r.err and "Traceback" not in r.err
    r = run_cli("run", str(path), "--out", str(folder / "o"))
    assert r.code == 2 and want in r.err
    assert not (folder / "o" / "results.json").exists()  # refused before any stage ran


def test_class_names_must_match_the_output_width(folder: Path):
    text = E2E.replace("{npz: data.npz}", "{npz: data.npz, class_names: [a, b, c]}")
    assert _problems(folder, text) == [
        f"{folder / 'suite.yaml'}:11: stages.e2e.dataset.class_names: 3 class names but output 'logits' of "
        "tiny.onnx has 5 classes (shape ['batch', 5])"
    ]
    five = E2E.replace("{npz: data.npz}", "{npz: data.npz, class_names: [a, b, c, d, e]}")
    assert _problems(folder, five) == []


def test_dataset_arrays_and_preprocess_input_are_looked_up(folder: Path):
    text = E2E.replace("{npz: data.npz}", "{npz: data.npz, labels_key: y}").replace(
        "grayscale: true}", "grayscale: true, input: image}"
    )
    found = _problems(folder, text)
    assert any("stages.e2e.dataset.labels_key: data.npz has no array 'y'" in p and "images, labels" in p for p in found)
    assert any(
        "stages.e2e.preprocess.input: 'image' is not an input of tiny.onnx (its inputs: input)" in p for p in found
    )
    (folder / "broken.npz").write_bytes(b"PK\x03\x04 not a zip")
    found = _problems(folder, E2E.replace("data.npz", "broken.npz"))
    assert len(found) == 1 and "stages.e2e.dataset.npz" in found[0] and "not a readable .npz" in found[0]


def test_candidates_must_have_the_reference_inputs_and_outputs(folder: Path):
    import onnx
    from onnx import TensorProto, helper

    # reference two_heads (logits, features); candidate tiny (logits only)
    text = E2E.replace("reference: tiny.onnx", "reference: two_heads.onnx")
    found = _problems(folder, text)
    assert len(found) == 1 and "models.candidates.same: tiny.onnx has no output(s) features" in found[0]

    # an int64, rank-2 'input' and an extra input
    x = helper.make_tensor_value_info("input", TensorProto.INT64, ["batch", 64])
    extra = helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("logits", TensorProto.INT64, ["batch", 64])
    graph = helper.make_graph([helper.make_node("Identity", ["input"], ["logits"])], "g", [x, extra], [y])
    onnx.save(helper.make_model(graph), folder / "odd.onnx")
    found = _problems(folder, E2E.replace("candidates: {same: tiny.onnx}", "candidates: {odd: odd.onnx}"))
    joined = "\n".join(found)
    assert "odd.onnx has input(s) mask that the reference tiny.onnx lacks" in joined
    assert "input 'input' is int64 in odd.onnx but float32 in tiny.onnx" in joined
    assert "input 'input' has rank 2 ['batch', 64] in odd.onnx but rank 4 ['batch', 1, 8, 8] in tiny.onnx" in joined


LAYERWISE = """\
name: m
models:
  reference: tiny.onnx
  candidates: {same: tiny.onnx}
  pytorch: {torchscript: tiny_script.pt, output_names: [out]}
inputs:
  generate:
    input: {shape: [1, 1, 8, 8]}
stages:
  layerwise:
    rename: {RENAME_SRC: RENAME_DST}
    ignore: [LW_IGNORED]
  framework:
    rename: {out: FW_DST}
    ignore: [FW_IGNORED]
"""


def _layerwise(**names: str) -> str:
    text = LAYERWISE
    for key, value in names.items():
        text = text.replace(key.upper(), value)
    return text


def test_rename_and_ignore_name_real_tensors(folder: Path):
    good = _layerwise(
        rename_src="/Relu_output_0", rename_dst="/Relu_output_0", lw_ignored="/Flatten_output_0", fw_dst="logits"
    )
    assert _problems(folder, good.replace("FW_IGNORED", "out")) == []
    bad = _layerwise(rename_src="/relu", rename_dst="/Relu_output_0", lw_ignored="/flat", fw_dst="logit")
    found = _problems(folder, bad.replace("FW_IGNORED", "features"))
    assert [p.split(": ", 1)[1] for p in found] == [
        "stages.framework.rename.out: 'logit' is not an output of tiny.onnx; did you mean 'logits'? "
        "(its outputs: logits)",
        "stages.framework.ignore[0]: 'features' is neither an output of tiny.onnx (logits) nor of the PyTorch model "
        "(out)",
        "stages.layerwise.rename./relu: '/relu' is not a tensor of tiny.onnx",
        "stages.layerwise.ignore[0]: '/flat' is not a tensor of tiny.onnx or a candidate",
    ]
    assert all(p.startswith(f"{folder / 'suite.yaml'}:") for p in found)
