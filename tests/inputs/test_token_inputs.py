"""Inputs of a model with int64 token ids (tests/data/bert: Hugging Face BertModel exported by torch.onnx.export
with its defaults): a wrong dtype, inputs disagreeing on the dimension they share, --dim beside --inputs. Each
is a usage error (exit 2) that names what is wrong, found before any model runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import DATA, main_in_process

BERT = DATA / "bert" / "bert_tiny.onnx"


def trtverify(*argv: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    r = main_in_process(list(argv), capsys, monkeypatch)
    return r.code, r.err


@pytest.fixture
def bert(tmp_path: Path) -> Path:
    shutil.copy(BERT, tmp_path / "bert.onnx")
    return tmp_path / "bert.onnx"


def _ids(rows: int, seq: int, dtype: type = np.int64) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 100, size=(rows, seq)).astype(dtype)


def test_float_token_ids_are_a_usage_error_naming_the_input_and_both_dtypes(bert, tmp_path, capsys, monkeypatch):
    path = tmp_path / "float_ids.npz"
    np.savez(path, input_ids=_ids(2, 8, np.float32), attention_mask=np.ones((2, 8), np.int64))
    code, err = trtverify("layerwise", str(bert), str(bert), "--inputs", str(path), "--out", str(tmp_path / "o"),
                          "-q", capsys=capsys, monkeypatch=monkeypatch)  # fmt: skip
    assert code == 2, err
    assert "input 'input_ids': float32 given, the model takes int64" in err
    assert str(path) in err  # the file that holds it
    assert not (tmp_path / "o" / "results.json").exists()  # nothing ran


def test_inputs_disagreeing_on_a_shared_dimension_name_both(bert, tmp_path, capsys, monkeypatch):
    path = tmp_path / "mismatch.npz"
    np.savez(path, input_ids=_ids(2, 8), attention_mask=np.ones((2, 16), np.int64))
    code, err = trtverify("layerwise", str(bert), str(bert), "--inputs", str(path), "--out", str(tmp_path / "o"),
                          "-q", capsys=capsys, monkeypatch=monkeypatch)  # fmt: skip
    assert code == 2, err
    assert "input 'input_ids' has seq=8" in err and "input 'attention_mask' has seq=16" in err


def test_dim_beside_inputs_is_refused_not_ignored(bert, tmp_path, capsys, monkeypatch):
    path = tmp_path / "good.npz"
    np.savez(path, input_ids=_ids(2, 8), attention_mask=np.ones((2, 8), np.int64))
    code, err = trtverify("layerwise", str(bert), str(bert), "--inputs", str(path), "--dim", "seq=8,32",
                          "--out", str(tmp_path / "o"), "-q", capsys=capsys, monkeypatch=monkeypatch)  # fmt: skip
    assert code == 2, err
    assert "--dim seq=8,32 with --inputs" in err and "fix their own" in err


def test_matching_token_inputs_run(bert, tmp_path, capsys, monkeypatch):
    """The same model and file layout, right: the checks above refuse only what is wrong."""
    path = tmp_path / "good.npz"
    np.savez(path, input_ids=_ids(2, 8), attention_mask=np.ones((2, 8), np.int64))
    code, err = trtverify("layerwise", str(bert), str(bert), "--inputs", str(path), "--out", str(tmp_path / "o"),
                          "-q", capsys=capsys, monkeypatch=monkeypatch)  # fmt: skip
    assert code == 0, err
    assert (tmp_path / "o" / "results.json").is_file()


def test_generated_inputs_disagreeing_on_a_shared_dimension_are_found_by_validate(bert, tmp_path, capsys, monkeypatch):
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: t\nmodels: {reference: bert.onnx, candidates: {same: bert.onnx}}\n"
        "inputs:\n  generate:\n"
        "    input_ids: {shape: [1, 8], dtype: int64, range: [0, 99]}\n"
        "    attention_mask: {shape: [1, 16], dtype: int64, range: [0, 1]}\n"
        "stages: {layerwise: {}}\n",
        encoding="utf-8",
    )
    code, err = trtverify("validate", str(suite), capsys=capsys, monkeypatch=monkeypatch)
    assert code == 2 and f"{suite}:4: inputs.generate: input 'input_ids' has seq=8" in err, err
    suite.write_text(suite.read_text().replace("[1, 16]", "[1, 8]"), encoding="utf-8")
    assert trtverify("validate", str(suite), capsys=capsys, monkeypatch=monkeypatch)[0] == 0
