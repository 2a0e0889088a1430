"""The readers of captured tensors (trtverify/toolout/captures.py) on files written by the real tool where it runs here
(Polygraphy's RunResults, through its ONNX Runtime runner: the container its TensorRT runner writes too) and per the
documented layouts where it does not (trtexec, Triton/KServe), and every malformed file we could think of: each is a
UsageError (exit 2) that names the file, never a traceback."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, main_in_process
from trtverify.toolout.captures import escape_name, read_capture, split_selector, unescape_name
from trtverify.util.errors import UsageError

REF = ROOT / "demo" / "fp16_repair" / "fashion_bn_fp32.onnx"
POLYGRAPHY = Path(sys.executable).with_name("polygraphy")


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A RunResults JSON written by real Polygraphy (outputs only: logits)."""
    if not POLYGRAPHY.is_file():
        pytest.skip("Polygraphy's CLI is not installed beside python")
    out = tmp_path_factory.mktemp("pg") / "out.json"
    p = subprocess.run([str(POLYGRAPHY), "run", str(REF), "--onnxrt", "--save-outputs", str(out)], capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr
    return out


def refused(path: Path, *words: str, runner: str | None = None) -> str:
    with pytest.raises(UsageError) as exc:
        read_capture(path, runner)
    msg = str(exc.value)
    assert str(path) in msg, msg
    for w in words:
        assert w in msg, msg
    return msg


def _b64(arr: np.ndarray, pickle: bool = False) -> str:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=pickle)
    return base64.b64encode(buf.getvalue()).decode()


def test_real_polygraphy_file_lists_its_runner_and_iterations(real: Path):
    cap = read_capture(real)
    assert cap.kind == "polygraphy" and cap.runner.startswith("onnxrt-runner") and len(cap.iterations) == 1
    assert cap.runners == [(cap.runner, 1)]
    logits = cap.iterations[0]["logits"]()
    assert logits.shape == (1, 10) and logits.dtype == np.float32


def test_several_runners_are_listed_and_one_is_picked(real: Path, tmp_path: Path):
    doc = json.loads(real.read_text())
    second = json.loads(json.dumps(doc["lst"][0]))
    second[0] = "trt-runner-N0"
    second[1] = [second[1][0], second[1][0]]  # two iterations
    doc["lst"].append(second)
    two = tmp_path / "two.json"
    two.write_text(json.dumps(doc))
    msg = refused(two, "2 runners", "#1 trt-runner-N0 (2 iterations)", "FILE#INDEX")
    assert "#0 onnxrt-runner" in msg
    assert len(read_capture(two, "1").iterations) == 2
    assert read_capture(two, "trt-runner-N0").runner == "trt-runner-N0"
    refused(two, "no runner 'gpu'", runner="gpu")
    assert split_selector(f"{two}#trt-runner-N0") == (two, "trt-runner-N0", None)
    assert split_selector(f"{two}#1#0") == (two, "1", 0) and split_selector(f"{two}##2") == (two, None, 2)
    assert split_selector(str(two)) == (two, None, None)
    with pytest.raises(UsageError, match="is a number"):
        split_selector(f"{two}#1#x")


def _edit(real: Path, tmp_path: Path, name: str, change) -> Path:  # noqa: ANN001
    doc = json.loads(real.read_text())
    change(doc)
    out = tmp_path / name
    out.write_text(json.dumps(doc))
    return out


def _logits(doc: dict) -> dict:
    return doc["lst"][0][1][0]["outputs"]["logits"]["values"]


@pytest.mark.parametrize(
    ("name", "change", "words"),
    [
        ("no_lst.json", lambda d: d.pop("lst"), ["without runners"]),
        ("empty_lst.json", lambda d: d.update(lst=[]), ["without runners"]),
        ("bad_entry.json", lambda d: d["lst"].__setitem__(0, "x"), ["lst[0]", "runner name"]),
        ("no_outputs.json", lambda d: d["lst"][0][1][0].pop("outputs"), ["no 'outputs'"]),
        ("not_iteration.json", lambda d: d["lst"][0][1].__setitem__(0, {"a": 1}), ["not an IterationResult"]),
        ("no_values.json", lambda d: d["lst"][0][1][0]["outputs"]["logits"].pop("values"), ["without 'values'"]),
        ("bad_b64.json", lambda d: _logits(d).update(array="@@not base64@@"), ["'logits'", "not base64"]),
        ("not_npy.json", lambda d: _logits(d).update(array=base64.b64encode(b"hello").decode()), ["not an np.save"]),
        ("cut_npy.json", lambda d: _logits(d).update(array=_b64(np.ones((4, 4), np.float32))[:-40]),
         ["is it truncated?"]),
        ("object.json", lambda d: _logits(d).update(array=_b64(np.array([{"a": 1}], dtype=object), True)),
         ["object array"]),
        ("strings.json", lambda d: _logits(d).update(array=_b64(np.array(["a", "b"]))), ["not a number tensor"]),
        ("no_array.json", lambda d: _logits(d).pop("array"), ["no base64"]),
    ],
)  # fmt: skip
def test_malformed_polygraphy_files_are_refused(real: Path, tmp_path: Path, name, change, words):  # noqa: ANN001
    refused(_edit(real, tmp_path, name, change), *words)


def test_truncated_empty_and_foreign_files_are_refused(real: Path, tmp_path: Path):
    cut = tmp_path / "cut.json"
    cut.write_text(real.read_text()[: len(real.read_text()) // 2])
    refused(cut, "not valid JSON", "truncated?")
    empty = tmp_path / "empty.json"
    empty.write_text("")
    refused(empty, "not valid JSON")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": [1, 2]}))
    refused(other, "not a capture trtverify reads")
    feeds = tmp_path / "feeds.json"
    feeds.write_text(json.dumps([{"input": {"array": _b64(np.ones(3, np.float32)), "polygraphy_class": "ndarray"}}]))
    refused(feeds, "inputs file", "--save-outputs")
    refused(tmp_path / "missing.json", "no such file")
    npy = tmp_path / "npy"
    npy.mkdir()
    np.save(npy / "x.npy", np.ones(3, np.float32))
    refused(npy, "#0 picks a runner", runner="0")


def test_trtexec_export_output_as_trtexec_writes_it(tmp_path: Path):
    """The layout of TensorRT's samples/common/sampleInference.cpp exportJSONOutput: `[`, then per output
    `{ "name" : "N"` / `, "dimensions" : "1x2x3"` (operator<< of Dims: sizes joined by 'x') / `, "values" : [ v, v ]`
    / `}`, the entries after the first prefixed with ', '; non-finite values printed by C++ streams as nan / inf."""
    text = (
        '[\n  { "name" : "logits"\n  , "dimensions" : "1x4"\n  , "values" : [ 0.5, -1, nan, -inf ]\n  }\n'
        ', { "name" : "/features/block1/conv/Conv_output_0"'
        '\n  , "dimensions" : "2x1"\n  , "values" : [ 3, 4 ]\n  }\n]\n'
    )
    path = tmp_path / "trtexec.json"
    path.write_text(text)
    cap = read_capture(path)
    assert cap.kind == "trtexec" and cap.names() == ["logits", "/features/block1/conv/Conv_output_0"]
    got = cap.iterations[0]["logits"]()
    assert got.shape == (1, 4) and got[0, 0] == 0.5 and np.isnan(got[0, 2]) and got[0, 3] == -np.inf
    bad = tmp_path / "bad_dims.json"
    bad.write_text(text.replace('"1x4"', '"1x5"'))
    refused(bad, "'logits'", "4 values for shape [1, 5]")
    weird = tmp_path / "weird_dims.json"
    weird.write_text(text.replace('"1x4"', '"1,4"'))
    refused(weird, "dimensions '1,4'")
    noname = tmp_path / "noname.json"
    noname.write_text(json.dumps([{"values": [1], "dimensions": "1"}]))
    refused(noname, "[0]", "'name'")
    words = tmp_path / "words.json"
    words.write_text(json.dumps([{"name": "a", "dimensions": "1", "values": ["x"]}]))
    refused(words, "not numbers")


def test_kserve_v2_response(tmp_path: Path):
    """The Open Inference Protocol's (KServe v2, Triton's HTTP API) response: `outputs`, each `{name, shape, datatype,
    data}` with the data in row-major order (https://kserve.github.io/website/docs/concepts/architecture/data-plane/
    v2-protocol, "Inference Response JSON Object")."""
    doc = {
        "model_name": "fashion", "model_version": "1", "id": "42",
        "outputs": [
            {"name": "logits", "shape": [1, 3], "datatype": "FP16", "data": [1.0, 2.5, -3.0]},
            {"name": "index", "shape": [1], "datatype": "INT64", "data": [2]},
        ],
    }  # fmt: skip
    path = tmp_path / "kserve.json"
    path.write_text(json.dumps(doc))
    cap = read_capture(path)
    assert cap.kind == "kserve"
    got = cap.iterations[0]["logits"]()
    assert got.dtype == np.float16 and got.tolist() == [[1.0, 2.5, -3.0]]
    assert cap.iterations[0]["index"]().dtype == np.int64
    for change, words in [
        (lambda d: d["outputs"][0].update(shape=[2, 3]), ["3 values for shape [2, 3]"]),
        (lambda d: d["outputs"][0].update(datatype="BYTES"), ["datatype 'BYTES'"]),
        (lambda d: d["outputs"][0].pop("data"), ["outputs[0]", "missing data"]),
        (lambda d: d["outputs"][0].update(data=None, parameters={"binary_data_size": 12}) or d["outputs"][0].pop(
            "data"), ["binary tensor data"]),
        (lambda d: d.update(outputs=[]), ["non-empty list"]),
        (lambda d: d["outputs"].append(dict(d["outputs"][1])), ["'index' appears twice"]),
    ]:  # fmt: skip
        broken = json.loads(json.dumps(doc))
        change(broken)
        path.write_text(json.dumps(broken))
        refused(path, *words)


def test_npy_folder_names_and_iterations(tmp_path: Path):
    name = "/features/block1/conv/Conv_output_0:0%"
    assert unescape_name(escape_name(name)) == name and "/" not in escape_name(name)
    one = tmp_path / "one"
    one.mkdir()
    np.save(one / f"{escape_name(name)}.npy", np.arange(6, dtype=np.float32).reshape(2, 3))
    (one / "notes.txt").write_text("not a tensor")
    cap = read_capture(one)
    assert cap.names() == [name] and cap.iterations[0][name]().shape == (2, 3)
    many = tmp_path / "many"
    for i in range(2):
        (many / str(i)).mkdir(parents=True)
        np.save(many / str(i) / "logits.npy", np.full(3, i, np.float32))
    cap = read_capture(many)
    assert len(cap.iterations) == 2 and cap.iterations[1]["logits"]()[0] == 1
    (many / "3").mkdir()
    refused(many, "without gaps")
    bad = tmp_path / "bad"
    bad.mkdir()
    np.save(bad / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    refused(bad, "obj.npy", "object array")
    cut = tmp_path / "cut"
    cut.mkdir()
    np.save(cut / "t.npy", np.ones((64, 64), np.float32))
    raw = (cut / "t.npy").read_bytes()
    (cut / "t.npy").write_bytes(raw[: len(raw) // 2])
    refused(cut, "t.npy", "not a readable .npy")
    empty = tmp_path / "empty"
    empty.mkdir()
    refused(empty, "without .npy files")


def test_a_malformed_capture_and_other_models_tensors_exit_2_through_the_cli(tmp_path: Path, capsys, monkeypatch):
    kit = tmp_path / "kit"
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, x=np.ones((2, 3), np.float32))
    r = main_in_process(["capture", str(REF), "--inputs", str(wrong), "--out", str(kit)], capsys, monkeypatch)
    assert r.code == 2 and str(wrong) in r.err and "not inputs of the model: x" in r.err
    assert not (kit / "manifest.json").exists()
    assert main_in_process(["capture", str(REF), "--out", str(kit)], capsys, monkeypatch).code == 0
    cut = kit / "cut.json"
    cut.write_text('{"lst": [["runner", [{"outputs": ')
    r = main_in_process(["layerwise", str(REF), "--captured", str(cut), "--out", str(tmp_path / "a")], capsys,
                        monkeypatch)  # fmt: skip
    assert r.code == 2
    why = json.loads((tmp_path / "a" / "results.json").read_text())["stages"][0]["error"]["message"]
    assert str(cut) in why and "not valid JSON" in why
    foreign = kit / "foreign"
    foreign.mkdir()
    np.save(foreign / "some_other_tensor.npy", np.ones((1, 10), np.float32))
    r = main_in_process(["layerwise", str(REF), "--captured", str(foreign), "--out", str(tmp_path / "b")], capsys,
                        monkeypatch)  # fmt: skip
    assert r.code == 2
    why = json.loads((tmp_path / "b" / "results.json").read_text())["stages"][0]["error"]["message"]
    assert str(foreign) in why and "none of its 1 tensor" in why and "captured from another model" in why
    wrong = kit / "wrong_shape"
    wrong.mkdir()
    np.save(wrong / "logits.npy", np.ones((2, 5), np.float32))
    r = main_in_process(["layerwise", str(REF), "--captured", str(wrong), "--out", str(tmp_path / "w")], capsys,
                        monkeypatch)  # fmt: skip
    assert r.code == 2
    why = json.loads((tmp_path / "w" / "results.json").read_text())["stages"][0]["error"]["message"]
    assert str(wrong) in why and "output 'logits' has shape [2, 5]" in why and "declares ['batch', 10]" in why, why
    manifest = kit / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["sample_digests"][0] = "0" * 64
    manifest.write_text(json.dumps(doc))
    r = main_in_process(["layerwise", str(REF), "--captured", str(foreign), "--out", str(tmp_path / "c")], capsys,
                        monkeypatch)  # fmt: skip
    assert r.code == 2 and "manifest.json" in r.err and "was edited" in r.err
