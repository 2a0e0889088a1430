import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import TINY
from trtverify.data.reference import ReferenceStore, hash_samples
from trtverify.util.fsutil import atomic_write, atomic_write_json

INPUTS = [{"input": np.arange(6, dtype=np.float32).reshape(2, 3)}, {"input": np.ones((2, 3), np.float32)}]
OUTPUTS = [
    {"logits": np.full((2, 4), 0.5, np.float32), "weird/name:0": np.zeros(2)},
    {"logits": np.ones((2, 4), np.float32), "weird/name:0": np.ones(2)},
]


def test_roundtrip(tmp_path: Path):
    store = ReferenceStore(tmp_path, "suite")
    dep = {"inputs": hash_samples(INPUTS), "weights:m.pt": "abc"}
    assert store.lookup("pytorch", dep).state == "missing"
    store.save("pytorch", dep, INPUTS, OUTPUTS, {"torch": "2.13.0"})
    got = store.lookup("pytorch", dep)
    assert got.state == "valid"
    for a, b in zip(got.outputs, OUTPUTS):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    manifest = json.loads((tmp_path / "suite" / "pytorch" / "manifest.json").read_text())
    assert manifest["versions"] == {"torch": "2.13.0"} and manifest["samples"] == 2


def test_stale_names_what_changed(tmp_path: Path):
    store = ReferenceStore(tmp_path, "suite")
    store.save("pytorch", {"inputs": "h1", "weights:m.pt": "w1"}, INPUTS, OUTPUTS, {})
    got = store.lookup("pytorch", {"inputs": "h1", "weights:m.pt": "w2"})
    assert got.state == "stale" and got.outputs is None
    assert any("weights:m.pt changed" in r for r in got.reasons)


def test_input_hash_sensitive_to_values_dtype_and_order():
    h = hash_samples(INPUTS)
    assert h == hash_samples([{k: v.copy() for k, v in s.items()} for s in INPUTS])
    assert h != hash_samples(INPUTS[::-1])
    assert h != hash_samples([{"input": INPUTS[0]["input"].astype(np.float64)}, INPUTS[1]])


def test_half_written_update_is_detected_not_used(tmp_path: Path):
    store = ReferenceStore(tmp_path, "suite")
    dep = {"inputs": "h"}
    store.save("pytorch", dep, INPUTS, OUTPUTS, {})
    # an update that crashed after rewriting outputs.npz but before the manifest
    folder = tmp_path / "suite" / "pytorch"
    np.savez(folder / "outputs.npz", a0=np.zeros(1))
    assert store.lookup("pytorch", dep).state == "corrupt"


def test_atomic_write_keeps_old_file_when_writer_crashes(tmp_path: Path):
    target = tmp_path / "results.json"
    atomic_write_json(target, {"v": 1})

    def boom(fh):
        fh.write(b'{"v": 2, "partial')
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(target, boom)
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temp file left behind


def test_pickled_arrays_are_refused(tmp_path: Path):
    store = ReferenceStore(tmp_path, "suite")
    dep = {"inputs": "h"}
    store.save("pytorch", dep, INPUTS, OUTPUTS, {})
    folder = tmp_path / "suite" / "pytorch"
    # replace outputs with an object array (needs pickle) and fix the manifest hash so only pickle stands in the way
    np.savez(
        folder / "outputs.npz", a0=np.array([{"x": 1}], dtype=object), a1=np.zeros(2), a2=np.zeros(1), a3=np.zeros(1)
    )
    import hashlib

    m = json.loads((folder / "manifest.json").read_text())
    m["files"]["outputs.npz"] = hashlib.sha256((folder / "outputs.npz").read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(m))
    assert store.lookup("pytorch", dep).state == "corrupt"


def test_the_default_reference_store_is_next_to_the_suite_not_in_the_current_folder(tmp_path: Path):
    """reference_dir's default was documented as 'reference_outputs next to the suite' but was left relative to
    the folder a run started from (pydantic does not validate defaults): a suite run from elsewhere wrote its
    reference outputs there."""
    from trtverify.config.loader import load_suite

    folder = tmp_path / "suite"
    folder.mkdir()
    shutil.copy(TINY / "tiny.onnx", folder / "tiny.onnx")
    (folder / "s.yaml").write_text(
        "name: t\nmodels:\n  reference: tiny.onnx\n  candidates: {c: tiny.onnx}\n"
        "inputs: {generate: {input: {shape: [1, 1, 8, 8]}}}\nstages: {layerwise: {}}\n"
    )
    assert load_suite(folder / "s.yaml").suite.reference_dir == folder / "reference_outputs"
