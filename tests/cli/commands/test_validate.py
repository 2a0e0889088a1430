"""`trtverify validate`: every problem of a suite in one run (schema, cross-field and against its models), 'did
you mean' for misspelt tensor and input names, and folders of suites as `run` takes them. The model is a Hugging
Face BERT exported by torch.onnx.export with its defaults (tests/data/bert/make_bert.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import DATA, main_in_process

SUITE = """\
name: NAME
models:
  reference: bert.onnx
  candidates:
    same: bert.onnx
inputs:
  generate:
    INPUT: {shape: [1, 8], dtype: int64, range: [0, 99]}
    attention_mask: {shape: [1, 8], dtype: int64, range: [0, 1]}
stages:
  layerwise:
    samples: 1
    CHECKS: [{metric: rel_l2, max: 0.01}]
    tensors:
      TENSOR: {checks: [{metric: rel_l2, max: 0.01}]}
"""


def _suite(folder: Path, name: str, *, checks: str = "checks", input: str = "input_ids", tensor: str = "") -> Path:
    tensor = tensor or "last_hidden_state"
    text = SUITE.replace("NAME", name).replace("CHECKS", checks).replace("INPUT", input).replace("TENSOR", tensor)
    path = folder / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    shutil.copy(DATA / "bert" / "bert_tiny.onnx", tmp_path / "bert.onnx")
    return tmp_path


def test_three_mistakes_are_reported_in_one_run_with_did_you_mean(folder, capsys, monkeypatch):
    path = _suite(folder, "three", checks="chekcs", input="input_id", tensor="last_hiden_state")
    r = main_in_process(["validate", str(path)], capsys, monkeypatch)
    assert r.code == 2, r.err
    lines = r.err.splitlines()
    assert any(f"{path}:13: stages.layerwise.chekcs: unknown key 'chekcs'; did you mean 'checks'?" in x for x in lines)
    assert any(
        f"{path}:8: inputs.generate.input_id: 'input_id' is not an input of bert.onnx; did you mean 'input_ids'?" in x
        for x in lines
    )
    assert any(
        f"{path}:15: stages.layerwise.tensors.last_hiden_state: 'last_hiden_state' is not a tensor of bert.onnx; "
        "did you mean 'last_hidden_state'?" in x
        for x in lines
    )


def test_a_schema_problem_that_leaves_nothing_valid_is_still_reported(folder, capsys, monkeypatch):
    path = folder / "bad.yaml"
    path.write_text("name: bad\nmodels: {}\n", encoding="utf-8")
    r = main_in_process(["validate", str(path)], capsys, monkeypatch)
    assert r.code == 2 and f"{path}:2: models.reference: required key is missing" in r.err, r.err


def test_a_folder_of_suites_is_validated_as_run_takes_it(folder, capsys, monkeypatch):
    suites = folder / "suites"
    suites.mkdir()
    for name in ("good", "other"):
        shutil.move(_suite(folder, name), suites / f"{name}.yaml")
    for name in ("good", "other"):  # the suites name bert.onnx beside them
        (suites / f"{name}.yaml").write_text((suites / f"{name}.yaml").read_text().replace("bert.onnx", "../bert.onnx"))
    r = main_in_process(["validate", str(suites)], capsys, monkeypatch)
    assert r.code == 0, r.err
    assert f"ok: {suites / 'good.yaml'}" in r.out and f"ok: {suites / 'other.yaml'}" in r.out
    (suites / "other.yaml").write_text((suites / "other.yaml").read_text().replace("input_ids", "input_idz"))
    r = main_in_process(["validate", str(suites)], capsys, monkeypatch)
    assert r.code == 2 and f"ok: {suites / 'good.yaml'}" in r.out
    assert "did you mean 'input_ids'?" in r.err and "1 of 2 suite files have problems" in r.err
    empty = folder / "empty"
    empty.mkdir()
    r = main_in_process(["validate", str(empty)], capsys, monkeypatch)
    assert r.code == 2 and "no suite files (*.yaml, *.yml) in this folder" in r.err
