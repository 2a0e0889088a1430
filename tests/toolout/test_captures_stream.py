"""Captures too big to hold: the JSON readers (trtverify/toolout/captures.py over trtverify/toolout/jsonstream.py)
keep a file's structure and leave each long base64 text or number list in the file, decoding one tensor at a time.
On real Polygraphy files (its CLI's marked-all capture of the demo model, and files written by its own
RunResults.save), files laid out as trtexec and KServe write them (see tests/toolout/test_captures.py for the
sources), and files cut or damaged in the middle of a long value: each refused with a UsageError naming the file."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from trtverify.toolout import jsonstream
from trtverify.toolout.captures import read_capture
from trtverify.util.errors import UsageError

REF = ROOT / "demo" / "fp16_repair" / "fashion_bn_fp32.onnx"
POLYGRAPHY = Path(sys.executable).with_name("polygraphy")


def refused(path: Path, *words: str) -> str:
    with pytest.raises(UsageError) as exc:
        cap = read_capture(path)
        for it in cap.iterations:
            for get in it.values():
                get()
    msg = str(exc.value)
    assert str(path) in msg, msg
    for w in words:
        assert w in msg, msg
    return msg


def _run_results(arrays: dict[str, np.ndarray], out: Path, iterations: int = 1) -> Path:
    """A RunResults file written by Polygraphy's own save function (what `polygraphy run --save-outputs` calls)."""
    comparator = pytest.importorskip("polygraphy.comparator")
    results = comparator.RunResults()
    its = [comparator.IterationResult(dict(arrays), runner_name="trt-runner-N0") for _ in range(iterations)]
    results.append(("trt-runner-N0", its))
    results.save(str(out))
    return out


@pytest.fixture(scope="module")
def marked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real Polygraphy, every tensor of the demo model marked (its ONNX Runtime runner: the container its TensorRT
    runner writes too); its conv activations are longer than jsonstream.INLINE_MAX, so they stay in the file."""
    if not POLYGRAPHY.is_file():
        pytest.skip("Polygraphy's CLI is not installed beside python")
    out = tmp_path_factory.mktemp("pg") / "marked.json"
    p = subprocess.run([str(POLYGRAPHY), "run", str(REF), "--onnxrt", "--onnx-outputs", "mark", "all",
                        "--save-outputs", str(out)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr
    return out


def test_a_real_marked_all_capture_reads_as_polygraphy_reads_it(marked: Path, monkeypatch):
    """Every tensor equals what Polygraphy's own loader gives; the file read in chunks of 4099 bytes, so that every
    long value crosses chunk boundaries."""
    comparator = pytest.importorskip("polygraphy.comparator")
    monkeypatch.setattr(jsonstream, "CHUNK", 4099)
    theirs = comparator.RunResults.load(str(marked))
    (runner, iterations), = theirs.items()  # fmt: skip
    cap = read_capture(marked)
    assert cap.runner == runner and len(cap.iterations) == len(iterations) == 1
    want = {n: iterations[0][n] for n in iterations[0].keys()}
    assert cap.names() == list(want) and len(want) > 10
    spans = jsonstream.skeleton(marked)["lst"][0][1][0]["outputs"]
    assert sum(isinstance(v["values"]["array"], jsonstream.Span) for v in spans.values() if isinstance(v, dict)) > 5
    for name, arr in want.items():
        got = cap.iterations[0][name]()
        assert got.dtype == arr.dtype and cap.shapes[0][name] == arr.shape
        np.testing.assert_array_equal(got, arr)


def test_reading_holds_one_tensor_not_the_file(tmp_path: Path):
    """16 tensors of 1 MiB in a 22 MB file: reading it and decoding a tensor traces a fraction of the file (the
    whole-file reader held its text and its parsed strings, twice the file)."""
    rng = np.random.default_rng(0)
    path = _run_results({f"/layer{i}/Relu_output_0": rng.standard_normal((256, 1024), np.float32) for i in range(16)},
                        tmp_path / "big.json")  # fmt: skip
    size = path.stat().st_size
    tracemalloc.start()
    try:
        cap = read_capture(path)
        got = cap.iterations[0]["/layer7/Relu_output_0"]()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got.shape == (256, 1024) and size > 20e6
    assert peak < size / 3, f"{peak} bytes traced reading a {size}-byte file"


def _cut_inside(path: Path, needle: bytes, into: int, tmp_path: Path, name: str) -> Path:
    raw = path.read_bytes()
    at = raw.index(needle) + into
    out = tmp_path / name
    out.write_bytes(raw[:at])
    return out


def test_files_cut_or_damaged_in_the_middle_of_a_long_value(tmp_path: Path):
    arrays = {"a": np.arange(4096, dtype=np.float32).reshape(64, 64), "b": np.ones((64, 64), np.float16)}
    path = _run_results(arrays, tmp_path / "two.json", iterations=2)
    assert len(read_capture(path).iterations) == 2
    raw = path.read_bytes()
    refused(_cut_inside(path, b'"array": "', 3000, tmp_path, "cut_b64.json"), "not valid JSON", "truncated?",
            "Unterminated string")  # fmt: skip
    refused(_cut_inside(path, b'"b":', 0, tmp_path, "cut_between.json"), "not valid JSON", "truncated?")
    first = raw.index(b'"array": "') + 2000
    damaged = tmp_path / "damaged.json"
    damaged.write_bytes(raw[:first] + b"@" + raw[first + 1 :])
    refused(damaged, "iteration 0, tensor 'a'", "not base64")
    quote = tmp_path / "quote.json"
    quote.write_bytes(raw[:first] + b'"' + raw[first + 1 :])
    msg = refused(quote, "not valid JSON", "Expecting")
    assert "truncated" not in msg and "line " in msg
    short = tmp_path / "short.json"  # base64 that stops early but is still a string: a cut np.save payload
    end = raw.index(b'"', first)
    short.write_bytes(raw[: end - 400] + raw[end:])
    refused(short, "tensor 'a'", "is it truncated?")


def _trtexec(tmp_path: Path, values: str, dims: str = "1x4096") -> Path:
    path = tmp_path / "trtexec.json"
    path.write_text('[\n  { "name" : "logits"\n  , "dimensions" : "' + dims + '"\n  , "values" : [ ' + values
                    + ' ]\n  }\n]\n')  # fmt: skip
    return path


@pytest.mark.parametrize("chunk", [jsonstream.NUMBERS_CHUNK, 1000])
def test_long_trtexec_and_kserve_number_lists(tmp_path: Path, chunk: int, monkeypatch):
    monkeypatch.setattr(jsonstream, "NUMBERS_CHUNK", chunk)
    want = np.linspace(-3, 3, 4096)
    want[5], want[6], want[7] = np.nan, np.inf, -np.inf
    text = ", ".join("nan" if np.isnan(v) else "inf" if v == np.inf else "-inf" if v == -np.inf else repr(float(v))
                     for v in want)  # fmt: skip
    path = _trtexec(tmp_path, text)
    assert isinstance(jsonstream.skeleton(path)[0]["values"], jsonstream.Span)
    got = read_capture(path).iterations[0]["logits"]()
    np.testing.assert_array_equal(got, want.reshape(1, 4096))
    refused(_trtexec(tmp_path, text, "1x4097"), "4096 values for shape [1, 4097]")
    refused(_trtexec(tmp_path, text + ', "x"'), "'logits'", "not numbers")
    refused(_trtexec(tmp_path, text + ",", "1x4096"), "'logits'", "not numbers")
    refused(_trtexec(tmp_path, text.replace(", ", " ", 1)), "'logits'", "not numbers")
    refused(
        _cut_inside(_trtexec(tmp_path, text), b"nan, inf", 0, tmp_path, "cut.json"), "truncated?", "Unterminated list"
    )
    rng = np.random.default_rng(1)
    doc = {"outputs": [
        {"name": "logits", "shape": [2, 1000], "datatype": "FP32", "data": rng.standard_normal(2000).tolist()},
        {"name": "nested", "shape": [2, 1000], "datatype": "FP16", "data": rng.standard_normal((2, 1000)).tolist()},
        {"name": "index", "shape": [3000], "datatype": "INT64", "data": list(range(2**40, 2**40 + 3000))},
        {"name": "mask", "shape": [3000], "datatype": "BOOL", "data": [bool(i % 3) for i in range(3000)]},
    ]}  # fmt: skip
    kserve = tmp_path / "kserve.json"
    kserve.write_text(json.dumps(doc))
    assert all(isinstance(o["data"], jsonstream.Span) for o in jsonstream.skeleton(kserve)["outputs"])
    cap = read_capture(kserve)
    for o in doc["outputs"]:
        got = cap.iterations[0][o["name"]]()
        assert got.shape == tuple(o["shape"]) and got.dtype == np.dtype(cap_dtype(o["datatype"]))
        np.testing.assert_array_equal(got, np.asarray(o["data"], got.dtype).reshape(o["shape"]))
    doc["outputs"][1]["data"][1] = doc["outputs"][1]["data"][1][:-1]  # ragged
    kserve.write_text(json.dumps(doc))
    refused(kserve, "'nested'", "1999 values for shape [2, 1000]")


def cap_dtype(datatype: str) -> str:
    return {"FP32": "float32", "FP16": "float16", "INT64": "int64", "BOOL": "bool"}[datatype]


def test_json_nested_too_deep_or_left_open_is_refused(tmp_path: Path):
    """json's own parser recurses: a file of nested lists would end in a RecursionError, not a message."""
    path = tmp_path / "deep.json"
    for text, words in [
        ("[" * 2000 + "]" * 2000, ["nested deeper than 200"]),
        ('{"a": ' * 1000 + "1" + "}" * 1000, ["nested deeper than 200"]),
        ("[" + "1, " * 100000, ["truncated?", "Unterminated list"]),
        ('"' + "\\\\" * 5000, ["truncated?", "Unterminated string"]),
    ]:
        path.write_text(text)
        refused(path, "not valid JSON", *words)
