"""trtexec's debug tensors read back (trtverify.toolout.debugtensors), from files written here with numpy in the
layouts of TensorRT's samples/common/debugTensorWriter.cpp (TensorRT 10.12+): `writeNumpyFile` (npy 1.0 header built
as that function builds it, not by np.save), `processDebugTensor` (`NNNN_` prefix counted across enqueues, raw
bytes), `writeSummary` / `processTensorSummary` (tensor_summary.json, its whitespace and its quoted non-finite
values), `genFilenameSafeString` (samples/common/common.h). trtexec cannot run here (no GPU): its files are made."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from trtverify.data.rawinputs import read_raw_inputs
from trtverify.graph.onnxinfo import TensorMeta
from trtverify.toolout.captures import read_capture
from trtverify.toolout.debugtensors import safe_name, stats_of
from trtverify.toolout.layermap import onnx_names, read_layer_map
from trtverify.util.errors import UsageError

DESCR = {"float32": "<f4", "float16": "<f2", "int8": "<i1", "int32": "<i4", "int64": "<i8", "uint8": "|u1",
         "bool": "|b1"}  # fmt: skip
TRT_TYPE = {"float32": "FLOAT", "float16": "HALF", "int8": "INT8", "int32": "INT32", "int64": "INT64"}


def write_npy(path: Path, arr: np.ndarray, descr: str | None = None) -> None:
    """An npy file as debugTensorWriter.cpp `writeNumpyFile` writes it: magic, version 1.0, the header text
    "{'descr': ..., 'fortran_order': False, 'shape': (d, d, ), }" padded with spaces to 16 bytes and '\\n', the data."""
    header = f"{{'descr': '{descr or DESCR[str(arr.dtype)]}', 'fortran_order': False, 'shape': ("
    header += "".join(f"{d}, " for d in arr.shape) + "), }"
    pad = 16 - ((10 + len(header) + 1) % 16)
    text = (header + " " * pad + "\n").encode("latin-1")
    data = np.ascontiguousarray(arr).tobytes()
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + data)


def _num(v: float) -> str:
    """A float as `valueToStr` writes it: C++ ostream (6 significant digits); non-finite ones quoted."""
    if not math.isfinite(v):
        return '"' + ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")) + '"'
    return f"{v:g}"


def summary_text(entries: list[tuple[str, np.ndarray, str, dict[str, str]]]) -> str:
    """tensor_summary.json as `writeSummaryHeader`, `writeSummary` and `writeSummaryFooter` write it, statistics by
    `processTensorSummary` (min/max skip NaN, avg = sum / volume, elements: first 5, ', ...', last 5)."""
    head = (
        '{\n  "metadata": {\n    "title": "Tensor Summary Report",\n    "time_generated": '
        '"2026-11-28T11:00:00+0000",\n    "engine_name": "",\n    "command_line": "trtexec --onnx=m.onnx '
        '--markUnfusedTensorsAsDebugTensors --saveAllDebugTensors=summary"\n  },\n  "tensors": [\n'
    )
    parts = []
    for name, arr, ttype, files in entries:
        lo, hi, avg, first, last = stats_of(arr)
        elements = ", ".join(f"{v:g}" for v in first) + (", ..." if arr.size > 10 else "")
        elements += "".join(f", {v:g}" for v in last)
        text = (f'  {{\n    "name": "{name}",\n    "shape": [{", ".join(map(str, arr.shape))}],\n    "type": "{ttype}",'
                f'\n    "statistics": {{\n        "min": {_num(lo)},\n        "max": {_num(hi)},\n        "avg": '
                f'{_num(avg)},\n        "elements": "{elements}"\n    }}')  # fmt: skip
        if files:
            text += ',\n    "files": {\n' + ",\n".join(f'      "{k}": "{v}"' for k, v in files.items()) + "\n    }"
        parts.append(text + "\n  }")
    return head + ",\n".join(parts) + "\n  ]\n}\n"


def refused(path: Path, *words: str, known: tuple[str, ...] = ()) -> str:
    with pytest.raises(UsageError) as exc:
        cap = read_capture(path, known=known)
        for it in cap.iterations:
            for get in it.values():
                get()
    msg = str(exc.value)
    for w in words:
        assert w in msg, msg
    return msg


def test_safe_name_is_trtexecs():
    assert safe_name("/features/block2/conv/Conv_output_0") == "_features_block2_conv_Conv_output_0"
    assert safe_name("(Unnamed Layer* 3) [Convolution]_output") == "_Unnamed_Layer__3___Convolution__output"
    assert safe_name("a.b-c,d") == "a.b-c,d"
    long = "x" * 100 + "/" + "y" * 100
    assert safe_name(long) == "x" * 73 + "..." + "y" * 73 and len(safe_name(long)) == 149


def test_numpy_folder_names_enqueues_and_converted_types(tmp_path: Path):
    a = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    b = np.linspace(-1, 1, 10, dtype=np.float32).reshape(1, 10)
    # enqueue 1: 0000, 0001; enqueue 2 (trtexec's next run): 0002, 0003 with other values
    write_npy(tmp_path / "0000__features_conv_Conv_output_0.npy", a)
    write_npy(tmp_path / "0001_logits_to_float.npy", b)  # a BF16 tensor, converted to float by writeNumpy
    write_npy(tmp_path / "0002__features_conv_Conv_output_0.npy", a + 1)
    write_npy(tmp_path / "0003_logits_to_float.npy", b + 1)
    (tmp_path / "0000__features_conv_Conv_output_0.str").write_text("[]")  # format string: not read
    cap = read_capture(tmp_path, known=("/features/conv/Conv_output_0", "logits"))
    assert cap.kind == "trtexec-debug" and cap.names() == ["/features/conv/Conv_output_0", "logits"]
    assert np.array_equal(cap.iterations[0]["/features/conv/Conv_output_0"](), a)  # the first enqueue's
    assert np.array_equal(cap.iterations[0]["logits"](), b)
    assert "2 enqueues written, the first read" in cap.describe()
    # without the model's names, the file's name is the tensor's
    assert "_features_conv_Conv_output_0" in read_capture(tmp_path).names()


def test_raw_files_take_shape_and_type_from_the_summary(tmp_path: Path):
    h = (np.arange(12, dtype=np.float16) / 7).reshape(3, 4)
    i = np.array([[3, -1, 7]], dtype=np.int32)
    (tmp_path / "0000_half.raw").write_bytes(h.tobytes())
    (tmp_path / "0001_ids.raw").write_bytes(i.tobytes())
    (tmp_path / "mine.bin").write_bytes(i.tobytes())  # --saveDebugTensors=ids2:mine.bin: the bytes alone
    text = summary_text([("half", h, "HALF", {"raw": "0000_half.raw"}), ("ids", i, "INT32", {"raw": "0001_ids.raw"}),
                         ("ids2", i, "INT32", {"assigned": "mine.bin"})])  # fmt: skip
    (tmp_path / "tensor_summary.json").write_text(text)
    for where in (tmp_path, tmp_path / "tensor_summary.json"):  # the folder, or its summary
        cap = read_capture(where)
        got = {n: g() for n, g in cap.iterations[0].items()}
        assert got["half"].dtype == np.float16 and np.array_equal(got["half"], h)
        assert np.array_equal(got["ids"], i) and np.array_equal(got["ids2"], i) and cap.statistics == [{}]


def test_summary_only_tensors_are_statistics(tmp_path: Path):
    x = np.array([[1.5, np.nan, -2.0, 4.0, 0.25, 8.0, 9.0, 1.0, 2.0, 3.0, 4.0, 5.0]], dtype=np.float32)
    y = np.array([np.inf, 1.0], dtype=np.float32)
    (tmp_path / "tensor_summary.json").write_text(summary_text([("x", x, "FLOAT", {}), ("y", y, "HALF", {})]))
    cap = read_capture(tmp_path / "tensor_summary.json")
    assert cap.names() == [] and cap.stat_names() == ["x", "y"]
    sx, sy = cap.statistics[0]["x"], cap.statistics[0]["y"]
    assert (sx.min, sx.max, sx.shape, sx.type) == (-2.0, 9.0, (1, 12), "FLOAT") and math.isnan(sx.avg)  # NaN: avg
    assert sx.first[0] == 1.5 and math.isnan(sx.first[1]) and sx.first[2:] == (-2.0, 4.0, 0.25)
    assert sx.last == (1.0, 2.0, 3.0, 4.0, 5.0)
    assert sy.max == math.inf and sy.avg == math.inf and sy.first == (math.inf, 1.0) and sy.last == ()


def test_malformed_debug_tensors_are_refused_naming_the_file(tmp_path: Path):
    a = np.ones((2, 3), np.float32)
    # a truncated npy (trtexec killed while writing)
    d = tmp_path / "trunc"
    d.mkdir()
    write_npy(d / "0000_a.npy", a)
    (d / "0000_a.npy").write_bytes((d / "0000_a.npy").read_bytes()[:-5])
    refused(d, "0000_a.npy")
    # raw files without a summary: no shape, no type
    d = tmp_path / "rawonly"
    d.mkdir()
    (d / "0000_a.raw").write_bytes(a.tobytes())
    refused(d, "0000_a.raw", "raw,summary")
    # a raw file of the wrong size
    d = tmp_path / "size"
    d.mkdir()
    (d / "0000_a.raw").write_bytes(a.tobytes()[:-4])
    (d / "tensor_summary.json").write_text(summary_text([("a", a, "FLOAT", {"raw": "0000_a.raw"})]))
    refused(d, "0000_a.raw", "20 bytes", "FLOAT [2, 3] takes 24")
    # a summary cut short (trtexec stopped before writeSummaryFooter), malformed entries, a missing file
    (d / "tensor_summary.json").write_text(summary_text([("a", a, "FLOAT", {"raw": "0000_a.raw"})])[:-8])
    refused(d, "tensor_summary.json", "not valid JSON")
    (d / "0000_a.raw").unlink()
    good = json.loads(summary_text([("a", a, "FLOAT", {"numpy": "0000_a.npy"})]))
    for change, words in (
        (lambda t: t.pop("shape"), ("'shape'",)),
        (lambda t: t["statistics"].update(min="big"), ("'big' is not a number",)),
        (lambda t: t["statistics"].pop("avg"), ("without min, max and avg",)),
        (lambda t: None, ("0000_a.npy", "is missing")),
    ):
        doc = json.loads(json.dumps(good))
        change(doc["tensors"][0])
        (d / "tensor_summary.json").write_text(json.dumps(doc))
        refused(d / "tensor_summary.json", "tensor_summary.json", *words)
    # a numpy file whose shape is not the summary's
    write_npy(d / "0000_a.npy", np.ones((3, 2), np.float32))
    (d / "tensor_summary.json").write_text(json.dumps(good))
    refused(d, "0000_a.npy", "[3, 2]", "[2, 3]")


def test_layer_information_names_tensorrt_tensors_by_onnx_ones():
    """The real `--exportLayerInfo` (detailed) of a torchvision ResNet-50 (tests/data/engine_exports, TensorRT 8):
    `Reformatted Output Tensor 0 to MaxPool_2` is written by layer MaxPool_2, so it holds MaxPool_2's output; the
    fused `Conv_0 + Relu_1` writes onnx::MaxPool_125, already the ONNX name of Relu_1's output."""
    lmap = read_layer_map(ROOT / "tests" / "data" / "engine_exports" / "fp32" / "resnet.onnx.engine.graph.json")
    nodes = [("Conv_0", ["input.4"]), ("Relu_1", ["onnx::MaxPool_125"]), ("MaxPool_2", ["input.8"])]
    tensors = {"input.1", "input.4", "onnx::MaxPool_125", "input.8"}
    names = ["onnx::MaxPool_125", "Reformatted Output Tensor 0 to MaxPool_2", "Conv_0 + Relu_1", "nowhere"]
    mapped, unmapped = onnx_names(names, lmap, nodes, tensors)
    # the layer's name maps too, but Relu_1's output is captured under its own name already: not mapped twice
    assert mapped == {"Reformatted Output Tensor 0 to MaxPool_2": "input.8"}
    assert unmapped == ["Conv_0 + Relu_1", "nowhere"]


def test_malformed_layer_information_is_refused(tmp_path: Path):
    bad = tmp_path / "layer_info.json"
    bad.write_text('{"Layers": [')
    with pytest.raises(UsageError, match="layer_info.json: not a trtexec --exportLayerInfo JSON"):
        read_layer_map(bad)
    bad.write_text(json.dumps({"Layers": ["Conv_0 + Relu_1", "MaxPool_2"]}))  # a names-only export
    with pytest.raises(UsageError, match="--profilingVerbosity=detailed"):
        read_layer_map(bad)


def test_trtexec_raw_input_files_read_with_the_models_inputs(tmp_path: Path):
    x = np.random.default_rng(0).random((2, 3, 4), dtype=np.float32)
    ids = np.array([[5, 6, 7]], dtype=np.int64)
    (tmp_path / "x.bin").write_bytes(x.astype("<f4").tobytes())
    (tmp_path / "ids.bin").write_bytes(ids.astype("<i8").tobytes())
    model = [TensorMeta("x", "float32", ("batch", 3, 4)), TensorMeta("input_ids", "int64", (1, 3))]
    feed = read_raw_inputs(f"'x':{tmp_path / 'x.bin'},input_ids:{tmp_path / 'ids.bin'}", model)
    assert np.array_equal(feed["x"], x) and np.array_equal(feed["input_ids"], ids)  # batch 2 from the size
    (tmp_path / "short.bin").write_bytes(ids.astype("<i8").tobytes()[:-8])
    with pytest.raises(UsageError, match=r"short.bin: 16 bytes, but input 'input_ids' \(1x3 int64\) takes 24"):
        read_raw_inputs(f"'x':{tmp_path / 'x.bin'},input_ids:{tmp_path / 'short.bin'}", model)
    with pytest.raises(UsageError, match="no file for input"):
        read_raw_inputs(f"x:{tmp_path / 'x.bin'}", model)
    with pytest.raises(UsageError, match="nope.bin: no such file"):
        read_raw_inputs(f"x:{tmp_path / 'x.bin'},input_ids:{tmp_path / 'nope.bin'}", model)
