"""A TensorRT calibration cache given to a suite (backends.tensorrt.calibration_cache) judged against the reference's
activations (issue 38, item 4): the range report of the cache's scales, on CPU, with no TensorRT.

TensorRT cannot run here, so the test writes the cache itself, in TensorRT <= 10's text format (the header
`TRT-8601-EntropyCalibration2`, then `tensor: <hex of the float32 scale>`, as in the real cache
tests/data/logcorpus/b/023_ultralytics_calibration_cache_entropy2_ultralytics14121.log), from scales it knows: each
tensor's largest |x| over the evaluation rows / 127, computed with ONNX Runtime; one tensor's scale 100x too small.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.stages.layerwise.test_layerwise_ranges import (
    _cnn,  # the same three-Conv ReLU CNN the range report is tested on
)
from trtverify.toolout import calibcache
from trtverify.util.errors import UsageError

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "data" / "logcorpus" / "b" / "023_ultralytics_calibration_cache_entropy2_ultralytics14121.log"


# the ONNX model itself as the candidate (TensorRT cannot run here); the cache as a TensorRT <= 10 INT8 build takes it
SUITE = (
    "name: cache\nmodels:\n  reference: cnn.onnx\n  candidates:\n    same: {path: cnn.onnx}\n"
    "inputs:\n  file: eval.npz\n"
    "backends:\n  tensorrt:\n    precisions: [int8]\n    calibration_cache: calib.cache\nstages:\n  layerwise: {}\n"
)


def _hex(scale: float) -> str:
    return struct.pack(">f", scale).hex()


def _max_abs(model: Path, rows: np.ndarray) -> dict[str, float]:
    """Every tensor's largest |x| over `rows`, the model's input included (ONNX Runtime, every node output exposed)."""
    import onnx
    import onnxruntime as ort

    m = onnx.load(str(model))
    names = [o for n in m.graph.node for o in n.output if o not in {g.name for g in m.graph.output}]
    m.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    out: dict[str, float] = {"x": float(np.abs(rows).max())}
    for i in range(len(rows)):
        for name, v in zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": rows[i : i + 1]})):
            out[name] = max(out.get(name, 0.0), float(np.abs(v).max()))
    return out


def test_a_caches_range_100x_too_small_is_named(tmp_path: Path) -> None:
    ref = _cnn(tmp_path / "cnn.onnx")
    rows = np.random.default_rng(1).random((4, 3, 16, 16), dtype=np.float32)
    np.savez(tmp_path / "eval.npz", x=rows)
    tops = _max_abs(ref, rows)
    bad = "/1/Relu_output_0"  # the first ReLU's output: its range 100x too small
    assert bad in tops
    lines = ["TRT-8601-EntropyCalibration2"]
    for name, top in tops.items():
        lines.append(f"{name}: {_hex(top / 127 * 1.01 / (100 if name == bad else 1))}")
    lines.append("(Unnamed Layer* 9) [Constant]_output: 3c010a14")  # TensorRT's own tensor: no ONNX name
    (tmp_path / "calib.cache").write_text("\n".join(lines) + "\n")
    (tmp_path / "suite.yaml").write_text(SUITE)
    r = run_cli("run", str(tmp_path / "suite.yaml"), "--out", str(tmp_path / "o"))
    assert r.code == 0, r.out + r.err
    stage = json.loads((tmp_path / "o" / "results.json").read_text())["stages"][0]
    cc = stage["calibration_cache"]
    assert cc["header"] == "TRT-8601-EntropyCalibration2" and cc["tensorrt_version"] == "8.6.1"
    assert cc["entries"] == len(tops) + 1 and cc["matched"] == len(tops)
    assert cc["unmatched"] == 1 and cc["unmatched_examples"] == ["(Unnamed Layer* 9) [Constant]_output"]
    worst = cc["rows"][0]
    assert worst["tensor"] == bad and worst["cache_line"] == 1 + list(tops).index(bad) + 1
    assert worst["clipped_fraction"] > 0.2 and worst["reference_max_abs"] > 50 * worst["limit"]
    assert all(row["clipped_fraction"] == 0 for row in cc["rows"][1:])  # the right scales clip nothing
    assert {row["tensor"] for row in cc["rows"]} == set(tops)  # the input x included
    assert f"clip the reference's values (worst {bad}, line {worst['cache_line']}" in r.out
    assert "1 named like no reference tensor" in r.out
    assert "Calibration cache" in (tmp_path / "o" / "report.html").read_text()


def test_a_malformed_cache_is_a_suite_error_with_file_and_line(tmp_path: Path) -> None:
    _cnn(tmp_path / "cnn.onnx")
    np.savez(tmp_path / "eval.npz", x=np.zeros((2, 3, 16, 16), np.float32))
    (tmp_path / "calib.cache").write_text("TRT-8601-EntropyCalibration2\nx: 3c010a14\n/0/Conv_output_0 3d49a388\n")
    (tmp_path / "suite.yaml").write_text(SUITE)
    r = run_cli("run", str(tmp_path / "suite.yaml"), "--out", str(tmp_path / "o"))
    assert r.code == 2, r.out + r.err
    assert f"{tmp_path / 'calib.cache'}:3: '/0/Conv_output_0 3d49a388' is not 'tensor name: scale'" in r.err
    assert "backends.tensorrt.calibration_cache" in r.err


def test_the_real_cache_reads_and_bad_lines_are_named(tmp_path: Path) -> None:
    cache = calibcache.read(REAL)  # TensorRT 8.6.1's IInt8EntropyCalibrator2 cache (provenance: its README)
    assert cache.calibrator == "EntropyCalibration2" and cache.version == "8.6.1" and len(cache.entries) == 51
    assert cache.entries["images"].scale == pytest.approx(struct.unpack(">f", bytes.fromhex("3b66eddc"))[0])
    assert cache.entries["images"].limit == pytest.approx(cache.entries["images"].scale * 127)
    assert cache.entries["171"].line == 6
    for text, line, what in [
        ("TRT-8601-EntropyCalibration2\na: 3c010a14\na: 3c010a14\n", 3, "'a' again (first on line 2)"),
        ("a: 7fc00000\n", 1, "is nan"),
        ("a: 3c010a14\nb: zz\n", 2, "is not 'tensor name: scale'"),
        ("TRT-8601-EntropyCalibration2\n\n", None, "no tensor scales"),
    ]:
        with pytest.raises(UsageError) as exc:
            calibcache.parse(text, Path("c.cache"))
        assert (f"c.cache:{line}: " if line else "c.cache: ") in str(exc.value) and what in str(exc.value)
    # TensorRT writes the bits with std::hex: leading zeros may be missing; names may hold ':'
    short = calibcache.parse("input:0: 0\nconv: 3c010a14\n", Path("c.cache"))
    assert short.entries["input:0"].scale == 0.0 and short.header is None


def test_layerwise_command_takes_a_cache_without_a_candidate(tmp_path: Path) -> None:
    ref = _cnn(tmp_path / "cnn.onnx")
    rows = np.random.default_rng(1).random((2, 3, 16, 16), dtype=np.float32)
    np.savez(tmp_path / "eval.npz", x=rows)
    tops = _max_abs(ref, rows)
    bad = "/3/Relu_output_0"
    lines = ["TRT-100300-EntropyCalibration2"]
    lines += [f"{n}: {_hex(t / 127 * 1.01 / (100 if n == bad else 1))}" for n, t in tops.items()]
    (tmp_path / "c.cache").write_text("\n".join(lines) + "\n")
    out = tmp_path / "o"
    r = run_cli("layerwise", str(ref), "--inputs", str(tmp_path / "eval.npz"), "--calibration-cache",
                str(tmp_path / "c.cache"), "--out", str(out))  # fmt: skip
    assert r.code == 0, r.out + r.err
    cc = json.loads((out / "results.json").read_text())["stages"][0]["calibration_cache"]
    assert cc["tensorrt_version"] == "10.3.0" and cc["rows"][0]["tensor"] == bad and cc["unmatched"] == 0
    assert "calibration_cache:" in (out / "suite.yaml").read_text()  # rerunnable with `trtverify run`
    r = run_cli("layerwise", str(ref), "--backend", "tensorrt", "--precision", "fp16", "--calibration-cache",
                str(tmp_path / "c.cache"), "--out", str(tmp_path / "o2"))  # fmt: skip
    assert r.code == 2 and "give --precision int8" in r.err
