"""Captured candidates end to end: `trtverify capture` writes a kit, REAL Polygraphy (the venv's CLI) runs from it and
saves its RunResults JSON, `trtverify layerwise --captured` compares it.

Polygraphy runs its ONNX Runtime runner here (no TensorRT on this machine); its TensorRT runner writes the same
RunResults container (polygraphy/comparator/struct.py), so the file read is the file a Jetson would send back.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.conftest import ROOT, main_in_process
from trtverify.data.kit import polygraphy_inputs
from trtverify.toolout.captures import read_capture, read_feeds

REF = ROOT / "demo" / "fp16_repair" / "fashion_bn_fp32.onnx"
PLANTED = "/features/block2/conv/Conv_output_0"  # the tensor an FP16-style overflow is planted in
POLYGRAPHY = Path(sys.executable).with_name("polygraphy")
pytestmark = pytest.mark.skipif(not POLYGRAPHY.is_file(), reason="Polygraphy's CLI is not installed beside python")


def polygraphy(model: Path, kit: Path, out: Path) -> None:
    cmd = [str(POLYGRAPHY), "run", str(model), "--onnxrt", "--load-inputs", str(kit / "inputs.json"),
           "--onnx-outputs", "mark", "all", "--save-outputs", str(out)]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def plant_overflow(src: Path, dst: Path) -> None:
    """The reference with the Conv that computes PLANTED scaled by 1e5 (weights and bias): its values leave FP16's
    range (> 65504), as an FP16 overflow at one layer makes them; the graph's structure and names are kept, so the
    capture and the emulated candidate are the same graph."""
    model = onnx.load(src)
    (conv,) = [n for n in model.graph.node if PLANTED in n.output]
    inits = {i.name: i for i in model.graph.initializer}
    for name in conv.input[1:]:
        scaled = numpy_helper.from_array(numpy_helper.to_array(inits[name]) * np.float32(1e5), name)
        inits[name].CopyFrom(scaled)
    onnx.checker.check_model(model)
    onnx.save(model, dst)


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("kit")
    mp = pytest.MonkeyPatch()
    try:
        r = main_in_process(["capture", str(REF), "--out", str(folder)], _Cap(), mp)
    finally:
        mp.undo()
    assert r.code == 0, r.err
    return folder


class _Cap:  # a capsys stand-in for the module-scoped fixture (its output is not looked at)
    def readouterr(self):  # noqa: ANN201
        return type("C", (), {"out": "", "err": ""})()


def layerwise(args: list[str], out: Path, capsys, monkeypatch) -> tuple[int, dict, str]:
    r = main_in_process(["layerwise", str(REF), *args, "--out", str(out), "-q"], capsys, monkeypatch)
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").is_file() else {}
    return r.code, results, r.out + r.err


def candidate(results: dict) -> dict:
    (stage,) = [s for s in results["stages"] if s["name"] == "layerwise"]
    (cand,) = stage["candidates"]
    return cand


def test_kit_files(kit: Path):
    manifest = json.loads((kit / "manifest.json").read_text())
    assert manifest["inputs"] == [{"name": "input", "shape": [1, 1, 28, 28], "dtype": "float32"}]
    raw = np.fromfile(kit / "trtexec" / "input.bin", dtype="<f4").reshape(1, 1, 28, 28)
    assert np.array_equal(raw, np.load(kit / "inputs.npz")["input"][:1])
    readme = (kit / "README.md").read_text()
    assert "--trt-outputs mark all" in readme and "--loadInputs='input':trtexec/input.bin" in readme
    assert "--exportOutput=" in readme


@pytest.mark.parametrize(
    ("model", "extra"),
    [(REF, []), (ROOT / "tests" / "data" / "tiny" / "tiny.onnx", ["--dim", "batch=2"])],
    ids=["fixed", "dynamic-batch-2"],
)
def test_the_kits_polygraphy_command_runs_with_the_onnx_runtime_runner(model, extra, tmp_path, capsys, monkeypatch):
    """The README's marked-all Polygraphy line, run as written in the kit's folder but with the ONNX Runtime runner in
    place of TensorRT's (--onnxrt, --onnx-outputs): the rest of the line is what the target runs; then compared. A
    dynamic model's feed of batch 2 (--input-shapes, the kit's rows read back two per feed) too."""
    shutil.copy(model, tmp_path / model.name)
    kit = tmp_path / "kit"
    assert main_in_process(["capture", str(model), *extra, "--out", str(kit)], capsys, monkeypatch).code == 0
    lines = [ln.strip() for ln in (kit / "README.md").read_text().splitlines() if ln.strip().startswith("polygraphy")]
    profile = "--trt-opt-shapes 'input:[2,1,8,8]' --trt-max-shapes 'input:[4,1,8,8]'"  # the repeated batch's 4 rows
    assert len(lines) == 2 and (profile in lines[0]) == bool(extra)
    (kit / "captured").mkdir()
    for line in lines[:1]:
        cpu = line.replace(" --trt ", " --onnxrt ").replace("--trt-outputs", "--onnx-outputs")
        args = shlex.split(cpu)
        p = subprocess.run([str(POLYGRAPHY), *args[1:]], cwd=kit, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, cpu + "\n" + p.stdout + p.stderr
    r = main_in_process(["layerwise", str(model), "--captured", str(kit / "captured" / "outputs.json"), "--out",
                         str(tmp_path / "a"), "-q"], capsys, monkeypatch)  # fmt: skip
    assert r.code == 0, r.out + r.err
    c = candidate(json.loads((tmp_path / "a" / "results.json").read_text()))
    assert c["first_divergence"] is None and len(c["rows"]) >= 3
    # the inputs Polygraphy saved beside the capture are checked against the kit's: other inputs are refused
    saved = kit / "captured" / "outputs.inputs.json"
    fed = read_feeds(saved)
    polygraphy_inputs([{n: a + 1 for n, a in f.items()} for f in fed], saved)
    r = main_in_process(["layerwise", str(model), "--captured", str(kit / "captured" / "outputs.json"), "--out",
                         str(tmp_path / "b"), "-q"], capsys, monkeypatch)  # fmt: skip
    assert r.code == 2
    why = json.loads((tmp_path / "b" / "results.json").read_text())["stages"][0]["error"]["message"]
    assert "made from other inputs than its kit's" in why and str(saved) in why and why.count("digest") == 2, why


def test_captured_reference_passes_and_planted_overflow_is_found(kit: Path, tmp_path: Path, capsys, monkeypatch):
    cap = kit / "captured"
    cap.mkdir(exist_ok=True)
    polygraphy(REF, kit, cap / "fp32.json")
    code, results, text = layerwise(["--captured", str(cap / "fp32.json")], tmp_path / "a", capsys, monkeypatch)
    assert code == 0, text
    c = candidate(results)
    assert c["backend"] == "captured" and c["first_divergence"] is None and c["root_cause_method"] == "amplification"
    assert "isolation re-runs the candidate: skipped" in c["emulation"]
    assert c["paired"]["compared"] >= 10 if "compared" in c["paired"] else True

    planted = tmp_path / "planted.onnx"
    plant_overflow(REF, planted)
    polygraphy(planted, kit, cap / "planted.json")
    code, results, text = layerwise(["--captured", str(cap / "planted.json")], tmp_path / "b", capsys, monkeypatch)
    assert code == 1, text
    got = candidate(results)
    overflowed = read_capture(cap / "planted.json").iterations[0][PLANTED]()
    assert np.abs(overflowed).max() > 65504  # beyond FP16's range
    assert got["first_divergence"]["tensor"] == PLANTED
    assert got["root_causes"][0]["tensor"] == PLANTED
    # the same graph as an emulated ONNX candidate, on the kit's inputs: the same verdict
    code, results, text = layerwise([str(planted), "--inputs", str(kit / "inputs.npz")], tmp_path / "c", capsys,
                                    monkeypatch)  # fmt: skip
    assert code == 1, text
    emulated = candidate(results)
    assert emulated["first_divergence"]["tensor"] == got["first_divergence"]["tensor"]
    assert emulated["root_causes"][0]["tensor"] == got["root_causes"][0]["tensor"]

    # tensors the capture lacks are counted as not captured, not compared
    outputs_only = kit / "captured" / "logits_only"
    outputs_only.mkdir()
    np.save(outputs_only / "logits.npy", read_capture(cap / "fp32.json").iterations[0]["logits"]())
    code, results, text = layerwise(["--captured", str(outputs_only)], tmp_path / "d", capsys, monkeypatch)
    c = candidate(results)
    assert [r["tensor"] for r in c["rows"]] == ["logits"]
    assert PLANTED in c["unmatched"]["reference_only"]
    assert c["unmatched"]["reference_only_reason"].startswith("not captured")


def test_capture_of_other_inputs_is_refused_naming_both(kit: Path, tmp_path: Path, capsys, monkeypatch):
    cap = kit / "captured"
    cap.mkdir(exist_ok=True)
    if not (cap / "fp32.json").is_file():
        polygraphy(REF, kit, cap / "fp32.json")
    other = tmp_path / "other.npz"
    np.savez(other, input=np.load(kit / "inputs.npz")["input"] + 1)
    code, results, text = layerwise(["--captured", str(cap / "fp32.json"), "--inputs", str(other)], tmp_path / "e",
                                    capsys, monkeypatch)  # fmt: skip
    assert code == 2, text
    why = results["stages"][0]["error"]["message"]
    assert "fp32.json" in why and "manifest.json" in why, why
    kit_digest = json.loads((kit / "manifest.json").read_text())["digest"]
    assert kit_digest[:12] in why and why.count("digest") == 2, why  # both digests named

    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(cap / "fp32.json", lone / "fp32.json")  # no kit beside it
    code, _, text = layerwise(["--captured", str(lone / "fp32.json")], tmp_path / "f", capsys, monkeypatch)
    assert code == 2 and "no capture kit" in text and "fp32.json" in text


def test_a_suite_names_a_capture_as_a_candidate_of_layerwise_not_perf(kit: Path, tmp_path: Path, capsys, monkeypatch):
    cap = kit / "captured"
    cap.mkdir(exist_ok=True)
    if not (cap / "fp32.json").is_file():
        polygraphy(REF, kit, cap / "fp32.json")
    suite = tmp_path / "suite.yaml"
    body = (f"name: cap\nmodels:\n  reference: {REF}\n  candidates:\n    jetson: {{captured: {cap / 'fp32.json'}}}\n"
            f"inputs: {{file: {kit / 'inputs.npz'}}}\nstages:\n  layerwise: {{confirm_top: 1}}\n")  # fmt: skip
    suite.write_text(body)
    r = main_in_process(["run", str(suite), "--out", str(tmp_path / "out"), "-q"], capsys, monkeypatch)
    assert r.code == 0, r.out + r.err
    c = candidate(json.loads((tmp_path / "out" / "results.json").read_text()))
    assert c["name"] == "jetson" and c["backend"] == "captured"
    (why,) = c["not_isolated"].values()  # confirming re-runs the candidate: said, not done
    assert "captured on another machine" in why
    suite.write_text(body + "  perf: {}\n")
    r = main_in_process(["validate", str(suite)], capsys, monkeypatch)
    assert r.code == 2 and "jetson: captured on another machine, compared by stages layerwise and e2e only" in (
        r.out + r.err
    )
    suite.write_text(body.replace("jetson: {captured:", "jetson: {backend: onnxruntime, captured:"))
    r = main_in_process(["validate", str(suite)], capsys, monkeypatch)
    assert r.code == 2 and "backend: captured goes with captured: FILE" in r.out + r.err


def test_trtexec_and_kserve_captures_are_candidates_side_by_side(kit: Path, tmp_path: Path, capsys, monkeypatch):
    """Outputs-only captures as trtexec --exportOutput and a KServe v2 response write them (layouts as in
    tests/toolout/test_captures.py), values from a real Polygraphy run; --captured repeated: one candidate each."""
    cap = kit / "captured"
    cap.mkdir(exist_ok=True)
    if not (cap / "fp32.json").is_file():
        polygraphy(REF, kit, cap / "fp32.json")
    logits = read_capture(cap / "fp32.json").iterations[0]["logits"]()
    values = ", ".join(repr(float(v)) for v in logits.ravel())
    text = f'[\n  {{ "name" : "logits"\n  , "dimensions" : "1x10"\n  , "values" : [ {values} ]\n  }}\n]\n'
    (cap / "trtexec.json").write_text(text)
    (cap / "kserve.json").write_text(json.dumps({"model_name": "fashion", "outputs": [
        {"name": "logits", "shape": [1, 10], "datatype": "FP32", "data": logits.ravel().tolist()}]}))  # fmt: skip
    code, results, text = layerwise(["--captured", str(cap / "trtexec.json"), str(cap / "kserve.json")],
                                    tmp_path / "a", capsys, monkeypatch)  # fmt: skip
    assert code == 0, text
    (stage,) = results["stages"]
    assert [c["name"] for c in stage["candidates"]] == ["captured_trtexec", "captured_kserve"]
    for c in stage["candidates"]:
        assert [r["tensor"] for r in c["rows"]] == ["logits"] and c["rows"][0]["passed"]
        assert "trtexec" in c["emulation"] or "kserve" in c["emulation"]


def test_one_iteration_of_a_capture_is_selectable(kit: Path, tmp_path: Path, capsys, monkeypatch):
    """A kit of two feeds (the module kit's feed A, then B) and a capture whose two iterations both hold A's tensors
    (a real Polygraphy iteration, repeated): iteration 0 alone passes on feed A, the whole capture and iteration 1
    fail on feed B, an iteration the file lacks is refused."""
    cap = kit / "captured"
    cap.mkdir(exist_ok=True)
    if not (cap / "fp32.json").is_file():
        polygraphy(REF, kit, cap / "fp32.json")
    a = np.load(kit / "inputs.npz")["input"]
    np.savez(tmp_path / "ab.npz", input=np.concatenate([a, a[:, :, ::-1]]))
    two = tmp_path / "two"
    assert main_in_process(["capture", str(REF), "--inputs", str(tmp_path / "ab.npz"), "--out", str(two)], capsys,
                           monkeypatch).code == 0  # fmt: skip
    doc = json.loads((cap / "fp32.json").read_text())
    doc["lst"][0][1] = doc["lst"][0][1][:1] * 2  # feed A twice (the kit's consistency feeds left out)
    (two / "twice.json").write_text(json.dumps(doc))
    code, results, text = layerwise(["--captured", f"{two / 'twice.json'}##0"], tmp_path / "a", capsys, monkeypatch)
    assert code == 0, text
    c = candidate(results)
    assert "iteration 0 only" in c["emulation"] and {r["samples"] for r in c["rows"]} == {1}
    for spec, where in ((str(two / "twice.json"), "b"), (f"{two / 'twice.json'}##1", "c")):
        code, results, text = layerwise(["--captured", spec], tmp_path / where, capsys, monkeypatch)
        assert code == 1, text
        assert candidate(results)["first_divergence"] is not None
    code, results, text = layerwise(["--captured", f"{two / 'twice.json'}##2"], tmp_path / "d", capsys, monkeypatch)
    assert code == 2 and "no iteration 2" in results["stages"][0]["error"]["message"]
