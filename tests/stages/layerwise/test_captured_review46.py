"""What a new user hit trying the captured round trip (issue 46's review): a capture of another model compared
anyway, a capture moved out of its kit passing `validate`, a one-feed capture (trtexec, KServe) against a kit of
several feeds without a way out, a KServe capture said to be trtexec's, and an FP16 capture judged by FP32 checks
without a word.

The captures are written as the tools write them, from real ONNX Runtime outputs of the demo's models (made by
demo/fp16_repair/make_demo.py with torch.onnx.export): trtexec's `--exportOutput` JSON (`exportJSONOutput` in
TensorRT's samples/common/sampleInference.cpp), a KServe v2 response, a folder of `.npy` per feed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from tests.conftest import ROOT, main_in_process
from tests.stages.layerwise.test_layerwise_captured import POLYGRAPHY, polygraphy
from trtverify.config.loader import load_suite
from trtverify.data.inputs import build_samples
from trtverify.data.kit import polygraphy_inputs
from trtverify.toolout.captures import read_capture, read_feeds
from trtverify.toolout.kit import feed_digest
from trtverify.util.errors import UsageError

DEMO = ROOT / "demo" / "fp16_repair"


def _kit(tmp_path: Path, capsys, monkeypatch, *extra: str) -> Path:
    shutil.copy(DEMO / "fashion_bn_fp32.onnx", tmp_path / "ref.onnx")
    r = main_in_process(["capture", str(tmp_path / "ref.onnx"), "--out", str(tmp_path / "kit"), *extra],
                        capsys, monkeypatch)  # fmt: skip
    assert r.code == 0, r.err
    (tmp_path / "kit" / "captured").mkdir()
    return tmp_path / "kit"


def _outputs(model: Path, feed: dict[str, np.ndarray]) -> tuple[str, np.ndarray]:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = session.get_outputs()[0].name
    return name, session.run([name], feed)[0]


def _trtexec(kit: Path) -> Path:
    name, out = _outputs(kit.parent / "ref.onnx", read_feeds(kit / "inputs.json")[0])
    path = kit / "captured" / "trtexec.json"
    dims = "x".join(map(str, out.shape))
    path.write_text(json.dumps([{"name": name, "dimensions": dims, "values": out.ravel().tolist()}]))
    return path


def _kserve(kit: Path) -> Path:
    name, out = _outputs(kit.parent / "ref.onnx", read_feeds(kit / "inputs.json")[0])
    path = kit / "captured" / "kserve.json"
    outputs = [{"name": name, "shape": list(out.shape), "datatype": "FP32", "data": out.ravel().tolist()}]
    path.write_text(json.dumps({"model_name": "ref", "outputs": outputs}))
    return path


def _suite(tmp_path: Path, capture: Path, reference: Path) -> Path:
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"name: s\nmodels:\n  reference: {reference}\n  candidates:\n    target: {{captured: {capture}}}\n"
                     f"inputs: {{file: {tmp_path / 'kit' / 'inputs.npz'}}}\nstages:\n  layerwise: {{}}\n")  # fmt: skip
    return suite


def test_validate_refuses_a_capture_of_another_model_and_one_moved_out_of_its_kit(tmp_path, capsys, monkeypatch):
    kit = _kit(tmp_path, capsys, monkeypatch)
    capture = _trtexec(kit)
    assert main_in_process(["validate", str(_suite(tmp_path, capture, tmp_path / "ref.onnx"))], capsys,
                           monkeypatch).code == 0  # fmt: skip
    other = shutil.copy(DEMO / "fashion_bn_fp16_repaired.onnx", tmp_path / "other.onnx")  # same inputs, another model
    r = main_in_process(["validate", str(_suite(tmp_path, capture, Path(other)))], capsys, monkeypatch)
    assert r.code == 2
    assert "was made from ref.onnx" in r.err and "not from the reference other.onnx" in r.err, r.err
    moved = tmp_path / "elsewhere" / "trtexec.json"
    moved.parent.mkdir()
    shutil.move(capture, moved)
    r = main_in_process(["validate", str(_suite(tmp_path, moved, tmp_path / "ref.onnx"))], capsys, monkeypatch)
    assert r.code == 2 and f"{moved}: no capture kit (manifest.json)" in r.err, r.err


def test_one_feed_captures_say_what_to_do_and_which_tool(tmp_path, capsys, monkeypatch):
    (tmp_path / "three").mkdir()
    kit = _kit(tmp_path / "three", capsys, monkeypatch, "--samples", "3")
    r = main_in_process(["layerwise", str(tmp_path / "three" / "ref.onnx"), "--captured", str(_kserve(kit)), "--out",
                         str(tmp_path / "r3"), "-q"], capsys, monkeypatch)  # fmt: skip
    assert r.code == 0, r.out + r.err  # made from the kit's feed 0 (what its trtexec/*.bin holds): compared on it
    (stage,) = json.loads((tmp_path / "r3" / "results.json").read_text())["stages"]
    (cand,) = stage["candidates"]
    assert "one feed captured (kserve): compared on the kit's feed 0, its other feeds not compared" in cand["emulation"]
    assert cand["rows"] and all(row.get("passed", True) for row in cand["rows"])
    (tmp_path / "one").mkdir()
    kit = _kit(tmp_path / "one", capsys, monkeypatch)
    r = main_in_process(["layerwise", str(tmp_path / "one" / "ref.onnx"), "--captured", str(_kserve(kit)), "--out",
                         str(tmp_path / "r1"), "-q"], capsys, monkeypatch)  # fmt: skip
    assert r.code == 0, r.out + r.err
    (stage,) = json.loads((tmp_path / "r1" / "results.json").read_text())["stages"]
    (cand,) = stage["candidates"]
    assert cand["consistency"] == ["consistency feeds not checked: the capture holds the kit's 1 feed only (a KServe "
                                   "response answers one request)"]  # fmt: skip


@pytest.mark.skipif(not POLYGRAPHY.is_file(), reason="Polygraphy's CLI is not installed beside python")
def test_an_fp16_capture_under_fp32_checks_says_to_give_its_precision(tmp_path, capsys, monkeypatch):
    kit = _kit(tmp_path, capsys, monkeypatch)
    capture = kit / "captured" / "outputs.json"  # the FP16 model as `polygraphy run --onnxrt` computes it: FP16 tensors
    polygraphy(DEMO / "fashion_bn_fp16.onnx", kit, capture)
    main_in_process(["layerwise", str(tmp_path / "ref.onnx"), "--captured", str(capture),
                         "--out", str(tmp_path / "r"), "-q"], capsys, monkeypatch)  # fmt: skip
    (stage,) = json.loads((tmp_path / "r" / "results.json").read_text())["stages"]
    (cand,) = stage["candidates"]
    assert "15 of 16 tensors compared were captured as FP16, but the checks are FP32's" in cand["emulation"]
    assert "`precision: fp16`" in cand["emulation"]
    # with precision given, nothing to say
    suite = _suite(tmp_path, capture, tmp_path / "ref.onnx")
    suite.write_text(suite.read_text().replace("{captured:", "{precision: fp16, captured:"))
    main_in_process(["run", str(suite), "--out", str(tmp_path / "p"), "-q"], capsys, monkeypatch)
    (stage,) = json.loads((tmp_path / "p" / "results.json").read_text())["stages"]
    assert "FP32's" not in stage["candidates"][0]["emulation"]


def test_a_servers_error_response_is_refused_with_its_message(tmp_path):
    # what Triton answers an inference request it cannot serve (KServe v2 protocol: {"error": "<message>"})
    path = tmp_path / "response.json"
    path.write_text(json.dumps({"error": "Request for unknown model: 'ref' is not found"}))
    with pytest.raises(UsageError, match=r"the server's error response, not outputs: .*unknown model: 'ref' is not"):
        read_capture(path)


@pytest.mark.parametrize(
    ("model", "extra"),
    [
        # torchvision's SSDlite takes one [3, H, W] image: no batch axis (tests/data/torchvision/make_models.py)
        (ROOT / "tests" / "data" / "torchvision" / "ssdlite.onnx",
         ["--inputs", str(ROOT / "tests" / "data" / "torchvision" / "inputs.npz")]),
        # torch.onnx.export's default: the batch fixed at the exported 4 (tests/data/e2ecap/make_fixed_batch.py)
        (ROOT / "tests" / "data" / "e2ecap" / "fashion_cnn_b4.onnx", ["--samples", "2"]),
    ],
)  # fmt: skip
def test_the_kits_inputs_npz_reads_back_as_its_feeds_in_a_suite(model, extra, tmp_path, capsys, monkeypatch):
    # docs/captured.md's suites name `inputs: {file: kit/inputs.npz}` without batch_size: a model whose first axis
    # is fixed (3 channels, a batch of 4) was refused ("dimension 0 is 1 but the model fixes it to 3")
    r = main_in_process(["capture", str(model), *extra, "--out", str(tmp_path / "kit")], capsys, monkeypatch)
    assert r.code == 0, r.err
    manifest = json.loads((tmp_path / "kit" / "manifest.json").read_text())
    suite = tmp_path / "s.yaml"
    suite.write_text(f"name: s\nmodels: {{reference: {model}, candidates: {{c: {model}}}}}\n"
                     f"inputs: {{file: {tmp_path / 'kit' / 'inputs.npz'}}}\nstages: {{layerwise: {{}}}}\n")  # fmt: skip
    feeds = build_samples(load_suite(suite))
    assert len(feeds) == 2 and [feed_digest(f) for f in feeds] == manifest["sample_digests"]


def test_a_kit_holding_captures_is_not_written_over_with_other_feeds(tmp_path, capsys, monkeypatch):
    kit = _kit(tmp_path, capsys, monkeypatch)
    capture = _trtexec(kit)
    manifest = (kit / "manifest.json").read_bytes()
    r = main_in_process(["capture", str(tmp_path / "ref.onnx"), "--samples", "2", "--out", str(kit)], capsys,
                        monkeypatch)  # fmt: skip
    assert r.code == 2 and f"a kit whose captures ({capture}) were made from other feeds" in r.err, r.err
    assert (kit / "manifest.json").read_bytes() == manifest  # nothing written
    again = main_in_process(["capture", str(tmp_path / "ref.onnx"), "--out", str(kit)], capsys, monkeypatch)
    assert again.code == 0, again.err  # the same feeds again: the captures keep their kit


def test_picking_a_consistency_iteration_or_an_unmarked_alone_is_a_usage_error(tmp_path, capsys, monkeypatch):
    kit = _kit(tmp_path, capsys, monkeypatch)
    for i, feed in enumerate(read_feeds(kit / "inputs.json")):  # every iteration, as the runner script's folders
        (kit / "captured" / "npy" / str(i)).mkdir(parents=True)
        name, out = _outputs(kit.parent / "ref.onnx", feed)
        np.save(kit / "captured" / "npy" / str(i) / f"{name}.npy", out)
    npy = str(kit / "captured" / "npy")
    r = main_in_process(["layerwise", str(tmp_path / "ref.onnx"), "--captured", npy + "##2", "--out",
                         str(tmp_path / "r"), "-q"], capsys, monkeypatch)  # fmt: skip
    assert r.code == 2  # was an internal error (IndexError, exit 4)
    (stage,) = json.loads((tmp_path / "r" / "results.json").read_text())["stages"]
    assert "iteration 2 is a consistency feed of the kit (duplicated row)" in stage["error"]["message"]
    assert "the kit's feeds are iteration 0" in stage["error"]["message"]
    r = main_in_process(["layerwise", str(tmp_path / "ref.onnx"), "--captured-unmarked", npy, "--out",
                         str(tmp_path / "u")], capsys, monkeypatch)  # fmt: skip
    assert r.code == 2 and "--captured-unmarked given 1 time for 0 --captured" in r.err, r.err


def test_saved_inputs_with_consistency_feeds_as_inputs_say_how_many_feeds_to_take(tmp_path, capsys, monkeypatch):
    kit = _kit(tmp_path, capsys, monkeypatch)
    saved = tmp_path / "outputs.inputs.json"  # what `polygraphy run --save-inputs` writes from the kit's inputs.json
    polygraphy_inputs(read_feeds(kit / "inputs.json"), saved)
    args = ["capture", str(tmp_path / "ref.onnx"), "--inputs", str(saved), "--out", str(tmp_path / "k2")]
    r = main_in_process(args, capsys, monkeypatch)
    assert r.code == 2 and "feed 2 is the first of another, --samples 2 takes those before it" in r.err, r.err
    assert main_in_process([*args, "--samples", "1"], capsys, monkeypatch).code == 0


def test_the_captured_folder_of_json_files_names_them(tmp_path, capsys, monkeypatch):
    kit = _kit(tmp_path, capsys, monkeypatch)
    _trtexec(kit)
    _kserve(kit)
    with pytest.raises(
        UsageError, match=r"a folder without \.npy files .*; it holds kserve\.json, trtexec\.json: give"
    ):
        read_capture(kit / "captured")
