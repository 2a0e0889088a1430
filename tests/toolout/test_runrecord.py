"""The run record (run.json) the kit's runner script leaves beside its .npy folders: read with the folder, shown in the
capture's description, and every malformed record refused with a UsageError naming the file. Records are written here
as trtverify/data/kitfiles/run_engine.py writes them (tests/stages/layerwise/test_layerwise_runner.py runs the script
itself)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trtverify.toolout.captures import read_capture
from trtverify.toolout.runrecord import read_run
from trtverify.util.errors import UsageError

RECORD = {
    "trtverify_runner": 1, "tensorrt": "10.8.0.43", "engine": None, "engine_sha256": "0" * 64,
    "built_from": "/jetson/kit/../model.onnx", "build": {"marked": 16, "precision_flags": ["fp16"],
    "strongly_typed": False}, "kit_digest": "ab" * 32, "feeds": 1, "tensors": 17, "skipped": {}, "notes": [],
    "gpu": "Orin", "compute_capability": "8.7", "cuda_runtime": "11.4", "cuda_driver": "11.4",
}  # fmt: skip


def folder(tmp_path: Path, record: object) -> Path:
    (tmp_path / "0").mkdir(parents=True)
    np.save(tmp_path / "0" / "logits.npy", np.zeros((1, 10), np.float32))
    (tmp_path / "run.json").write_text(record if isinstance(record, str) else json.dumps(record))
    return tmp_path


def test_the_record_is_read_with_its_folder_and_described(tmp_path: Path):
    cap = read_capture(folder(tmp_path, RECORD))
    assert cap.run is not None and cap.run.kit_digest == "ab" * 32
    assert "TensorRT 10.8.0.43 on Orin (sm 8.7), built there from model.onnx with --mark-all --fp16" in cap.describe()
    engine = {**RECORD, "built_from": None, "build": None, "engine": "/x/deployed.plan", "skipped": {"t": "FP8"}}
    described = read_run(folder(tmp_path / "e", engine)).describe()  # type: ignore[union-attr]
    assert described == "TensorRT 10.8.0.43 on Orin (sm 8.7), engine deployed.plan; 1 output not saved there"
    assert read_run(tmp_path / "nothing") is None


@pytest.mark.parametrize(
    ("record", "words"),
    [
        ("{not json", "not a readable run record"),
        ({**RECORD, "trtverify_runner": 2}, "expected 'trtverify_runner': 1"),
        ([RECORD], "expected 'trtverify_runner': 1"),
        ({k: v for k, v in RECORD.items() if k != "gpu"}, "missing or malformed gpu"),
        ({**RECORD, "feeds": "1"}, "missing or malformed feeds"),
        ({**RECORD, "feeds": 0}, "missing or malformed feeds"),
        ({**RECORD, "kit_digest": "abc"}, "is not a sha256 digest"),
        ({**RECORD, "feeds": 2}, "records 2 feeds, but"),
    ],
)
def test_malformed_records_are_refused_naming_the_file(tmp_path: Path, record: object, words: str):
    with pytest.raises(UsageError) as exc:
        read_capture(folder(tmp_path, record))
    assert words in str(exc.value) and str(tmp_path / "run.json") in str(exc.value)
