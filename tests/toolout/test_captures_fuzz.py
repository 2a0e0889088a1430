"""Every reader of captured tensors, fed damaged copies of well-formed files: each copy either reads (then every
tensor decodes to an array) or is refused with a UsageError naming the file, never another exception (a traceback
for the user). The well-formed files: a RunResults written by Polygraphy's own save function, a trtexec
`--exportOutput` JSON and a KServe v2 response in the layouts tests/toolout/test_captures.py cites, a `.npy` folder.
The damage is seeded and varied: cuts at many offsets, a byte replaced, a span deleted, a span repeated."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from trtverify.toolout.captures import read_capture
from trtverify.util.errors import UsageError

CASES = 60  # damaged copies per format


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"/conv/Conv_output_0": rng.standard_normal((1, 4, 8, 8)).astype(np.float32),
            "logits": rng.standard_normal((1, 10)).astype(np.float32)}  # fmt: skip


def _polygraphy(folder: Path) -> Path:
    comparator = pytest.importorskip("polygraphy.comparator")
    results = comparator.RunResults()
    results.append(("trt-runner-N0", [comparator.IterationResult(_arrays(), runner_name="trt-runner-N0")]))
    out = folder / "polygraphy.json"
    results.save(str(out))
    return out


def _trtexec(folder: Path) -> Path:
    doc = [{"name": n, "dimensions": "x".join(map(str, a.shape)), "values": a.ravel().tolist()}
           for n, a in _arrays().items()]  # fmt: skip
    out = folder / "trtexec.json"
    out.write_text(json.dumps(doc, indent=1))
    return out


def _kserve(folder: Path) -> Path:
    doc = {"model_name": "m", "outputs": [{"name": n, "shape": list(a.shape), "datatype": "FP32",
                                           "data": a.ravel().tolist()} for n, a in _arrays().items()]}  # fmt: skip
    out = folder / "kserve.json"
    out.write_text(json.dumps(doc))
    return out


def _damaged(data: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(1, len(data))
    kind = rng.choice(("cut", "byte", "delete", "repeat"))
    if kind == "cut":
        return data[:at]
    if kind == "byte":
        return data[:at] + bytes([rng.choice(b'{}[]",:0123456789eE.-+ \nxZ=/\\\x00\xff')]) + data[at + 1 :]
    span = rng.randrange(1, 64)
    if kind == "delete":
        return data[:at] + data[at + span :]
    return data[:at] + data[at - span : at] + data[at:]


def _read_all(path: Path) -> None:
    cap = read_capture(path)
    for it in cap.iterations:
        for get in it.values():
            assert isinstance(get(), np.ndarray)


@pytest.mark.parametrize("make", [_polygraphy, _trtexec, _kserve], ids=["polygraphy", "trtexec", "kserve"])
def test_damaged_json_captures_read_or_are_refused_naming_the_file(make, tmp_path):
    good = make(tmp_path)
    _read_all(good)  # the well-formed file reads
    data = good.read_bytes()
    rng = random.Random(46)
    refused = 0
    for i in range(CASES):
        bad = tmp_path / f"bad{i}{good.suffix}"
        bad.write_bytes(_damaged(data, rng))
        try:
            _read_all(bad)
        except UsageError as e:
            assert str(bad) in str(e), str(e)
            refused += 1
    assert refused >= CASES // 3, f"only {refused} of {CASES} damaged copies refused"  # damage mostly shows


def test_damaged_npy_folder_reads_or_is_refused_naming_the_file(tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    for name, arr in _arrays().items():
        np.save(good / f"{name.replace('/', '%2F')}.npy", arr)
    _read_all(good)
    rng = random.Random(46)
    refused = 0
    for i in range(CASES):
        bad = tmp_path / f"bad{i}"
        shutil.copytree(good, bad)
        victim = sorted(bad.glob("*.npy"))[i % 2]
        victim.write_bytes(_damaged(victim.read_bytes(), rng))
        try:
            _read_all(bad)
        except UsageError as e:
            assert str(bad) in str(e), str(e)
            refused += 1
    assert refused >= CASES // 3, f"only {refused} of {CASES} damaged copies refused"
