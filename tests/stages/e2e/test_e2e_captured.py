"""Stage e2e on captured outputs, end to end: `trtverify capture REF --suite S` writes the validation batches, REAL
Polygraphy (the venv's CLI, the kit README's command) runs the FP16 candidate over them and saves its RunResults
JSON, and `trtverify run` scores a `captured:` candidate with the task's own postprocess and metrics.

Polygraphy runs its ONNX Runtime runner here (no TensorRT on this machine); its TensorRT runner writes the same
RunResults container (polygraphy/comparator/struct.py), so the file read is the file a Jetson would send back. The
validation sets are the demos' own, cut to a few rows with `dataset.limit` to keep this fast.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, main_in_process
from trtverify.data.kit import polygraphy_inputs
from trtverify.toolout.captures import read_feeds
from trtverify.toolout.kit import feed_digest, feeds_digest

SHAPES = ROOT / "demo" / "shapes"
FMNIST = ROOT / "demo" / "fashion_mnist"
FIXED = ROOT / "tests" / "data" / "e2ecap" / "fashion_cnn_b4.onnx"  # torch.onnx.export defaults: batch fixed at 4
POLYGRAPHY = Path(sys.executable).with_name("polygraphy")
pytestmark = pytest.mark.skipif(not POLYGRAPHY.is_file(), reason="Polygraphy's CLI is not installed beside python")


def detection_suite(folder: Path, capture: str, batch_size: int = 3, limit: int = 7, more: str = "") -> Path:
    """The shapes demo's e2e stage (suites/shapes_detection.yaml) on its first `limit` validation images, with the
    FP16 candidate run here and `cap`, the same candidate captured elsewhere."""
    suite = folder / "suite.yaml"
    suite.write_text(f"""name: shapes_captured
python_path: [{SHAPES}]
backends:  # ONNX Runtime as Polygraphy's runner runs it (trtverify's default emulates a GPU's FP16 roundings)
  onnxruntime: {{graph_optimization_level: all, fp16_on_cpu: native}}
models:
  reference: {SHAPES / "shapes_fp32.onnx"}
  candidates:
    fp16: {SHAPES / "shapes_fp16.onnx"}
    cap: {{captured: {capture}, path: {SHAPES / "shapes_fp16.onnx"}}}
inputs:
  generate:
    images: {{shape: [1, 3, 128, 128], range: [0.0, 1.0], seed: 0}}
stages:
  e2e:
    task: detection
    dataset: {{coco: {SHAPES / "val" / "instances.json"}, limit: {limit}}}
    preprocess: {{scale: 0.00392156862745098, layout: NCHW}}
    postprocess: {{hook: "shapes_decode:decode"}}
    batch_size: {batch_size}
    gates:
      - {{metric: map, max_drop: 0.01}}
      - {{metric: f1, max_drop: 0.02}}
{more}""")
    return suite


def polygraphy(args: list[str], cwd: Path) -> None:
    p = subprocess.run([str(POLYGRAPHY), *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, " ".join(args) + "\n" + p.stdout + p.stderr


class _Cap:  # a capsys stand-in for the module-scoped fixture (its output is not looked at)
    def readouterr(self):  # noqa: ANN201
        return type("C", (), {"out": "", "err": ""})()


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kit (in a folder beside a copy of the reference, as the README's ../MODEL expects) and its capture by the
    README's Polygraphy line, run on the FP16 candidate with the ONNX Runtime runner."""
    top = tmp_path_factory.mktemp("e2ecap")
    shutil.copy(SHAPES / "shapes_fp32.onnx", top / "shapes_fp32.onnx")
    suite = detection_suite(top, "kit/e2e/captured/outputs.json")
    mp = pytest.MonkeyPatch()
    try:
        args = ["capture", str(top / "shapes_fp32.onnx"), "--suite", str(suite), "--out", str(top / "kit")]
        r = main_in_process(args, _Cap(), mp)
    finally:
        mp.undo()
    assert r.code == 0, r.err
    kit = top / "kit"
    readme = (kit / "README.md").read_text()
    (line,) = [ln.strip() for ln in readme.splitlines() if ln.strip().startswith("polygraphy run") and "e2e/" in ln]
    cpu = line.replace(" --trt ", " --onnxrt ").replace("../shapes_fp32.onnx", str(SHAPES / "shapes_fp16.onnx"))
    (kit / "e2e" / "captured").mkdir(parents=True)
    polygraphy([*shlex.split(cpu)[1:], "--save-inputs", "e2e/captured/outputs.inputs.json"], kit)
    return kit


def e2e(suite: Path, out: Path, capsys, monkeypatch) -> tuple[int, dict, str]:
    r = main_in_process(["run", str(suite), "--out", str(out), "-q"], capsys, monkeypatch)
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").is_file() else {}
    (stage,) = results.get("stages", [{}])
    return r.code, stage, r.out + r.err


def test_kit_holds_the_validation_batches(kit: Path):
    manifest = json.loads((kit / "manifest.json").read_text())
    sec = manifest["e2e"]
    assert [b["rows"] for b in sec["batches"]] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [i for b in sec["batches"] for i in b["ids"]] == [1, 2, 3, 4, 5, 6, 7]  # the COCO image ids
    assert sec["batch_size"] == 3 and "last one short (1 row)" in sec["batching"]
    fed = read_feeds(kit / "e2e" / "inputs.json")  # what Polygraphy loaded, and saved back as it fed it
    assert [feed_digest(f) for f in fed] == [b["digest"] for b in sec["batches"]]
    saved = read_feeds(kit / "e2e" / "captured" / "outputs.inputs.json")
    assert feeds_digest([feed_digest(f) for f in saved]) == sec["digest"]
    rows = np.load(kit / "e2e" / "inputs.npz", allow_pickle=False)["images"]
    assert rows.shape == (7, 3, 128, 128) and np.array_equal(rows, np.concatenate([f["images"] for f in fed]))
    raw = np.fromfile(kit / "e2e" / "trtexec" / "images.2.bin", dtype="<f4").reshape(1, 3, 128, 128)
    assert np.array_equal(raw, fed[2]["images"])
    script = (kit / "e2e" / "trtexec.sh").read_text()
    assert "\"--loadInputs='images':e2e/trtexec/images.2.bin\" \"--shapes='images':1x3x128x128\"" in script
    # the layerwise part of the kit is still there, its digest untouched
    assert manifest["digest"] == feeds_digest(manifest["sample_digests"])


def test_captured_metrics_equal_the_run_candidates_and_a_planted_fault_fails(kit: Path, tmp_path: Path, capsys,
                                                                              monkeypatch):  # fmt: skip
    suite = detection_suite(tmp_path, str(kit / "e2e" / "captured" / "outputs.json"))
    code, stage, text = e2e(suite, tmp_path / "a", capsys, monkeypatch)
    assert code == 0, text
    got = {c["name"]: c["metrics"] for c in stage["candidates"]}
    assert stage["samples"] == 7 and stage["reference"]["map"] > 0.5
    # where the captured candidate's outputs come from, said in the stage's notes (the report and the console)
    assert [n for n in stage["notes"] if n.startswith("cap: captured elsewhere: ")] and not [
        n for n in stage["notes"] if n.startswith("fp16: ")
    ]
    scalars = {k: v for k, v in got["fp16"].items() if isinstance(v, float)}
    assert len(scalars) > 10  # map, ap50, ap75, ..., f1: the same arithmetic (ONNX Runtime, same settings)
    assert {k: got["cap"][k] for k in scalars} == pytest.approx(scalars, abs=1e-9)
    # a fault planted in the captured file, written back through Polygraphy's own RunResults: the boxes' sizes of
    # the first batch halved, as a broken layer would make them
    from polygraphy.comparator import RunResults

    results = RunResults.load(str(kit / "e2e" / "captured" / "outputs.json"))
    _, iterations = results[0]
    iterations[0]["wh"] = iterations[0]["wh"] * np.float32(0.5)
    planted = kit / "e2e" / "captured" / "planted.json"
    results.save(str(planted))
    shutil.copy(kit / "e2e" / "captured" / "outputs.inputs.json", kit / "e2e" / "captured" / "planted.inputs.json")
    code, stage, text = e2e(detection_suite(tmp_path, str(planted)), tmp_path / "b", capsys, monkeypatch)
    assert code == 1, text
    cap = next(c for c in stage["candidates"] if c["name"] == "cap")
    assert cap["metrics"]["map"] < got["fp16"]["map"] - 0.05 and not cap["passed"]
    failed = [c["name"] for c in stage["checks"] if not c["passed"]]
    assert failed and all(n.startswith("cap: ") for n in failed), failed


def test_captures_that_are_not_the_kits_batches_are_refused(kit: Path, tmp_path: Path, capsys, monkeypatch):
    cap = kit / "e2e" / "captured"

    def refused(suite: Path, where: str, *words: str) -> None:
        code, stage, text = e2e(suite, tmp_path / where, capsys, monkeypatch)
        assert code == 2, text
        why = stage["error"]["message"]
        assert all(w in why for w in words), why

    # another number of iterations: one batch dropped from the file
    doc = json.loads((cap / "outputs.json").read_text())
    doc["lst"][0][1] = doc["lst"][0][1][:2]
    (cap / "short.json").write_text(json.dumps(doc))
    refused(detection_suite(tmp_path, str(cap / "short.json")), "a", "short.json", "2 iterations", "3 batches")
    # made from other inputs (saved beside it by --save-inputs)
    shutil.copy(cap / "outputs.json", cap / "other.json")
    polygraphy_inputs([{n: a + 1 for n, a in f.items()} for f in read_feeds(cap / "outputs.inputs.json")],
                      cap / "other.inputs.json")  # fmt: skip
    refused(detection_suite(tmp_path, str(cap / "other.json")), "b", "other.json", "other inputs", "digest")
    # a batch's output short of a row (written back through Polygraphy's own RunResults)
    from polygraphy.comparator import RunResults

    results = RunResults.load(str(cap / "outputs.json"))
    results[0][1][1]["heatmap"] = results[0][1][1]["heatmap"][:2]
    results.save(str(cap / "rows.json"))
    refused(detection_suite(tmp_path, str(cap / "rows.json")), "g", "rows.json", "iteration 1", "'heatmap'",
            "[2, 3, 32, 32]", "3 rows")  # fmt: skip
    # the validation capture named in stage layerwise too: refused there, saying which stage it is for
    r = main_in_process(["run", str(detection_suite(tmp_path, str(cap / "outputs.json"), more="  layerwise: {}\n")),
                         "--out", str(tmp_path / "h"), "-q"], capsys, monkeypatch)  # fmt: skip
    assert r.code == 2, r.out + r.err
    stages = {st["name"]: st for st in json.loads((tmp_path / "h" / "results.json").read_text())["stages"]}
    assert stages["e2e"]["status"] == "passed"
    assert "list it in stages.e2e.candidates only" in stages["layerwise"]["error"]["message"]
    # the suite batches otherwise than the kit; its dataset holds other rows
    good = str(cap / "outputs.json")
    refused(detection_suite(tmp_path, good, batch_size=2), "c", "batch_size is 2", "set batch_size: 3")
    refused(detection_suite(tmp_path, good, limit=6), "d", "7 rows", "6 samples")
    # a kit without validation batches
    plain = tmp_path / "plain"
    assert main_in_process(["capture", str(SHAPES / "shapes_fp32.onnx"), "--out", str(plain)], capsys,
                           monkeypatch).code == 0  # fmt: skip
    (plain / "e2e" / "captured").mkdir(parents=True)
    shutil.copy(cap / "outputs.json", plain / "e2e" / "captured" / "outputs.json")
    refused(detection_suite(tmp_path, str(plain / "e2e" / "captured" / "outputs.json")), "e", "no validation batches",
            "--suite")  # fmt: skip
    # the batches' digests edited in the manifest
    doc = json.loads((kit / "manifest.json").read_text())
    doc["e2e"]["batches"][1]["digest"] = hashlib.sha256(b"x").hexdigest()
    edited = tmp_path / "edited"
    shutil.copytree(kit, edited)
    (edited / "manifest.json").write_text(json.dumps(doc))
    refused(detection_suite(tmp_path, str(edited / "e2e" / "captured" / "outputs.json")), "f", "e2e digest",
            "manifest.json")  # fmt: skip


def test_a_fixed_batch_model_gets_its_last_batch_padded(tmp_path: Path, capsys, monkeypatch):
    """The Fashion-MNIST CNN exported with torch.onnx.export's defaults at batch 4 (tests/data/e2ecap): 10 rows are 3
    batches of 4, the last padded with 2 copies of its last row; the padded rows' outputs are dropped when read, so
    the captured candidate scores as the reference (the same weights, batch axis dynamic), which runs the short last
    batch itself (ONNX Runtime refuses it for the fixed-batch model: the kit's padding is what makes it run)."""
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"""name: fmnist_captured
models:
  reference: {FMNIST / "fashion_cnn_fp32.onnx"}
  candidates:
    cap: {{captured: kit/e2e/captured/outputs.json, path: {FIXED}}}
inputs:
  generate:
    input: {{shape: [4, 1, 28, 28], range: [0.0, 1.0], seed: 0}}
stages:
  e2e:
    task: classification
    dataset: {{npz: {FMNIST / "data" / "test_subset.npz"}, limit: 10}}
    preprocess: {{scale: 0.00392156862745098, layout: NCHW}}
    batch_size: 4
    gates:
      - {{metric: accuracy, max_drop: 0.01}}
""")
    r = main_in_process(["capture", str(FIXED), "--suite", str(suite), "--out", str(tmp_path / "kit")], capsys,
                        monkeypatch)  # fmt: skip
    assert r.code == 0, r.out + r.err
    sec = json.loads((tmp_path / "kit" / "manifest.json").read_text())["e2e"]
    assert [b["pad"] for b in sec["batches"]] == [0, 0, 2] and "padded with 2 copies" in sec["batching"]
    polygraphy(["run", str(FIXED), "--onnxrt", "--load-inputs", "e2e/inputs.json", "--save-outputs",
                "e2e/captured/outputs.json"], tmp_path / "kit")  # fmt: skip
    code, stage, text = e2e(suite, tmp_path / "out", capsys, monkeypatch)
    assert code == 0, text
    got = {c["name"]: c["metrics"] for c in stage["candidates"]}
    assert stage["samples"] == 10 and got["cap"] == stage["reference"]  # the same weights, exported at batch 4
    # one row's logits swapped to another class in the captured file: accuracy drops by that row, the gate fails
    from polygraphy.comparator import RunResults

    path = str(tmp_path / "kit" / "e2e" / "captured" / "outputs.json")
    results = RunResults.load(path)
    first = results[0][1][0]
    first["logits"] = np.concatenate([np.roll(first["logits"][:1], 1, axis=1), first["logits"][1:]])
    results.save(path)
    code, stage, text = e2e(suite, tmp_path / "out2", capsys, monkeypatch)
    assert code == 1, text
    cap = next(c for c in stage["candidates"] if c["name"] == "cap")
    assert cap["metrics"]["accuracy"] == pytest.approx(got["cap"]["accuracy"] - 0.1) and not cap["passed"]


def test_trtexec_files_per_batch_are_a_capture(kit: Path, tmp_path: Path, capsys, monkeypatch):
    """What e2e/trtexec.sh writes: one trtexec --exportOutput JSON per batch in a folder (0.json, 1.json, ...; the
    layout of TensorRT's samples/common/sampleInference.cpp exportJSONOutput, as in tests/toolout/test_captures.py),
    values from the real Polygraphy capture: the same metrics as that capture; a missing batch file is refused."""
    from polygraphy.comparator import RunResults

    folder = kit / "e2e" / "captured" / "trtexec"
    folder.mkdir(parents=True, exist_ok=True)
    for k, it in enumerate(RunResults.load(str(kit / "e2e" / "captured" / "outputs.json"))[0][1]):
        parts = []
        for name in ("heatmap", "wh", "offset"):
            arr = np.asarray(it[name])
            values = ", ".join(repr(float(v)) for v in arr.ravel())
            dims = "x".join(map(str, arr.shape))
            parts.append(f'{{ "name" : "{name}"\n  , "dimensions" : "{dims}"\n  , "values" : [ {values} ]\n  }}')
        (folder / f"{k}.json").write_text("[\n  " + "\n, ".join(parts) + "\n]\n")
    code, stage, text = e2e(detection_suite(tmp_path, str(kit / "e2e" / "captured" / "outputs.json")), tmp_path / "a",
                            capsys, monkeypatch)  # fmt: skip
    assert code == 0, text
    code, stage2, text = e2e(detection_suite(tmp_path, str(folder)), tmp_path / "b", capsys, monkeypatch)
    assert code == 0, text
    pick = {c["name"]: c["metrics"] for c in stage["candidates"]}["cap"]
    got = {c["name"]: c["metrics"] for c in stage2["candidates"]}["cap"]
    scalars = {k: v for k, v in pick.items() if isinstance(v, float)}
    assert len(scalars) > 10 and {k: got[k] for k in scalars} == pytest.approx(scalars, abs=1e-9)
    (folder / "1.json").unlink()
    code, stage, text = e2e(detection_suite(tmp_path, str(folder)), tmp_path / "c", capsys, monkeypatch)
    assert code == 2 and "without gaps" in stage["error"]["message"], text
