"""Captured candidates against themselves and each other (docs/captured.md#captures-against-each-other-and-consistency).

The kit of tiny.onnx (torch.onnx.export defaults, a dynamic batch) holds its consistency feeds; REAL Polygraphy (its
ONNX Runtime runner; its TensorRT runner writes the same RunResults container, polygraphy/comparator/struct.py) runs
the kit's README command once, marked-all. Captures that must fail are that real capture written back as `.npy`
folders with one thing changed (a duplicated row, an iteration, marking): what a faulty engine would have written.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, main_in_process
from trtverify.compare.checks import CheckResult
from trtverify.data.kit import write_kit
from trtverify.report.capturetext import pair_text
from trtverify.report.text import fail_line
from trtverify.stages.layerwise.capmodels import CapturePair
from trtverify.toolout.captures import escape_name, read_capture
from trtverify.toolout.kit import read_kit

MODEL = ROOT / "tests" / "data" / "tiny" / "tiny.onnx"
POLYGRAPHY = Path(sys.executable).with_name("polygraphy")
pytestmark = pytest.mark.skipif(not POLYGRAPHY.is_file(), reason="Polygraphy's CLI is not installed beside python")


class _Cap:  # a capsys stand-in for the module-scoped fixture (its output is not looked at)
    def readouterr(self):  # noqa: ANN201
        return type("C", (), {"out": "", "err": ""})()


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kit of tiny.onnx at batch 2 and its marked-all capture, made by the README's command with --onnxrt."""
    root = tmp_path_factory.mktemp("consistency")
    shutil.copy(MODEL, root / MODEL.name)
    folder = root / "kit"
    mp = pytest.MonkeyPatch()
    try:
        r = main_in_process(["capture", str(root / MODEL.name), "--dim", "batch=2", "--out", str(folder)], _Cap(), mp)
    finally:
        mp.undo()
    assert r.code == 0, r.err
    (line,) = [ln.strip() for ln in (folder / "README.md").read_text().splitlines() if "mark all" in ln]
    cpu = line.replace(" --trt ", " --onnxrt ").replace("--trt-outputs", "--onnx-outputs")
    (folder / "captured").mkdir()
    p = subprocess.run([str(POLYGRAPHY), *shlex.split(cpu)[1:]], cwd=folder, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert p.returncode == 0, cpu + "\n" + p.stdout + p.stderr
    return folder


def as_npy(kit: Path, name: str, change=None, only: list[str] | None = None) -> Path:  # noqa: ANN001
    """The real capture written as a folder of .npy per iteration; `change(iteration, tensor, array)` edits it;
    `only`: keep these tensors."""
    cap = read_capture(kit / "captured" / "outputs.json")
    out = kit / "captured" / name
    shutil.rmtree(out, ignore_errors=True)
    for i, tensors in enumerate(cap.iterations):
        (out / str(i)).mkdir(parents=True)
        for n, get in tensors.items():
            if only is not None and n not in only:
                continue
            arr = np.array(get())
            if change is not None:
                arr = change(i, n, arr)
            np.save(out / str(i) / f"{escape_name(n)}.npy", arr)
    return out


def run(kit: Path, args: list[str], out: Path, capsys, monkeypatch) -> tuple[int, dict]:  # noqa: ANN001
    r = main_in_process(["layerwise", str(kit.parent / MODEL.name), *args, "--out", str(out), "-q"], capsys,
                        monkeypatch)  # fmt: skip
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").is_file() else {}
    return r.code, results


def checks(results: dict, word: str) -> list[dict]:
    (stage,) = [s for s in results["stages"] if s["name"] == "layerwise"]
    return [c for c in stage["checks"] if word in c["name"]]


def test_kit_writes_the_consistency_feeds(kit: Path, tmp_path: Path):
    kitinfo = read_kit(kit / "manifest.json")
    assert [c["role"] for c in kitinfo.consistency] == ["repeat", "duplicated_row", "repeated_batch"]
    assert [c["iteration"] for c in kitinfo.consistency] == [1, 2, 3]
    feeds = json.loads((kit / "inputs.json").read_text())
    assert len(feeds) == 4  # the kit's feed, then the three consistency feeds: one capture command runs them all
    readme = (kit / "README.md").read_text()
    assert "--trt-max-shapes 'input:[4,1,8,8]'" in readme  # the repeated batch's 4 rows fit the engine's profile
    assert "trtexec runs one feed" in readme
    cap = read_capture(kit / "captured" / "outputs.json")
    assert len(cap.iterations) == 4 and cap.shapes[3]["logits"] == (4, 5)
    # a model whose batch is fixed at 1: no duplicated row, no repeated batch, and why
    feed = {"input": np.zeros((1, 1, 8, 8), np.float32)}
    manifest = write_kit(tmp_path / "k", MODEL, [feed], {"input": 4}, False, {"input": (1, 1, 8, 8)}, [(1, 5)])
    assert [c["role"] for c in manifest["consistency"]["feeds"]] == ["repeat"]
    assert "fixed at 1" in manifest["consistency"]["not_possible"]["duplicated_row"]
    assert "fixed at 1" in manifest["consistency"]["not_possible"]["repeated_batch"]
    # a fixed batch of 3: the repeated batch has the model's 3 rows, the duplicated row is row 1 of feed 0
    feed = {"input": np.arange(3 * 64, dtype=np.float32).reshape(3, 1, 8, 8)}
    manifest = write_kit(tmp_path / "k3", MODEL, [feed], {"input": 4}, False, {"input": (3, 1, 8, 8)}, [(3, 5)])
    got = {c["role"]: c for c in manifest["consistency"]["feeds"]}
    assert got["repeated_batch"]["rows"] == 3 and got["duplicated_row"]["duplicated_rows"] == [0, 1]


def test_the_real_capture_passes_every_consistency_check(kit: Path, tmp_path: Path, capsys, monkeypatch):
    code, results = run(kit, ["--captured", str(kit / "captured" / "outputs.json")], tmp_path / "r", capsys,
                        monkeypatch)  # fmt: skip
    assert code == 0
    got = {c["name"].split(": ", 1)[1]: c for c in checks(results, "captured_outputs: ")}
    det, dup, rep = (got["repeated iterations identical (determinism)"], got["duplicated rows of one batch identical"],
                     got["repeated batch rows equal the single row"])  # fmt: skip
    assert det["passed"] and det["value"] == 0 and det["detail"]["tensors"] >= 5
    assert dup["passed"] and dup["value"] == 0 and dup["tensor"] == "logits"
    assert rep["passed"] and rep["value"] <= 5e-3 and rep["threshold"] == 5e-3 and rep["detail"]["rows"] == 4


def test_a_batch_whose_duplicated_rows_differ_fails(kit: Path, tmp_path: Path, capsys, monkeypatch):
    """The engine gives row 1 of the duplicated-row batch other values from the first Relu on (as a kernel that
    reads a wrong row would), and iteration 1 (feed 0 again) other values in the last tensor: both fail."""
    relu = next(n for n in read_capture(kit / "captured" / "outputs.json").names() if "Relu" in n or "relu" in n)

    def faulty(i: int, n: str, a: np.ndarray) -> np.ndarray:
        if i == 2 and (n == relu or n == "logits"):
            a[1] += 0.5
        if i == 1 and n == "logits":
            a = a + np.float32(1e-6) * np.abs(a).max()
        return a

    code, results = run(kit, ["--captured", str(as_npy(kit, "faulty", faulty))], tmp_path / "r", capsys, monkeypatch)
    assert code == 1
    (dup,) = checks(results, "duplicated rows")
    assert not dup["passed"] and dup["value"] == pytest.approx(0.5, rel=1e-3)
    assert dup["detail"]["first_tensor_rows_differ"] == relu
    (det,) = checks(results, "determinism")
    assert not det["passed"] and det["tensor"] == "logits" and det["detail"]["differing"] == 1
    (rep,) = checks(results, "repeated batch")
    assert rep["passed"]  # what was not changed still passes


def test_a_repeated_batch_beyond_the_tolerance_fails(kit: Path, tmp_path: Path, capsys, monkeypatch):
    def faulty(i: int, n: str, a: np.ndarray) -> np.ndarray:
        if i == 3 and n == "logits":
            a[2] *= np.float32(1.01)  # rel_l2 0.01: twice the FP32 tolerance
        return a

    code, results = run(kit, ["--captured", str(as_npy(kit, "batchdep", faulty))], tmp_path / "r", capsys,
                        monkeypatch)  # fmt: skip
    assert code == 1
    (rep,) = checks(results, "repeated batch")
    assert not rep["passed"] and rep["value"] == pytest.approx(0.01, rel=1e-3) and rep["detail"]["worst_row"] == 2


def test_marking_that_changed_the_outputs_fails_and_says_which_capture_to_trust(kit, tmp_path, capsys, monkeypatch):
    plain = as_npy(kit, "outputs_only", only=["logits"])  # the outputs of the same engine without marking
    marked = kit / "captured" / "outputs.json"
    code, results = run(kit, ["--captured", str(marked), "--captured-unmarked", str(plain)], tmp_path / "a", capsys,
                        monkeypatch)  # fmt: skip
    assert code == 0
    (ok,) = checks(results, "marking every tensor")
    assert ok["passed"] and "describes the engine deployed" in ok["detail"]["message"]
    assert ok["detail"]["outputs_only_vs_reference_rel_l2"]["logits"] < 1e-6
    # marking changed the engine: its outputs are another engine's than the outputs-only capture's
    other = as_npy(kit, "marked_other", lambda i, n, a: a * np.float32(1.05) if n == "logits" else a)
    code, results = run(kit, ["--captured", str(other), "--captured-unmarked", str(plain)], tmp_path / "b", capsys,
                        monkeypatch)  # fmt: skip
    assert code == 1
    (bad,) = checks(results, "marking every tensor")
    assert not bad["passed"] and bad["value"] == pytest.approx(0.05, rel=1e-3)
    assert f"trust the outputs-only capture {plain}" in bad["detail"]["message"]
    assert "describes another engine" in bad["detail"]["message"]
    line = fail_line(CheckResult.model_validate(bad))  # the terminal's line says it too
    assert line.startswith("FAIL captured_marked_other: marking every tensor") and "trust the outputs-only" in line
    # an outputs-only capture made from another kit (other feeds) is refused, naming both
    kit2 = tmp_path / "kit2"
    assert main_in_process(["capture", str(kit.parent / MODEL.name), "--dim", "batch=2", "--seed", "1", "--out",
                            str(kit2)], capsys, monkeypatch).code == 0  # fmt: skip
    elsewhere = shutil.copytree(plain, kit2 / "captured" / "outputs_only")
    code, results = run(kit, ["--captured", str(marked), "--captured-unmarked", str(elsewhere)], tmp_path / "d",
                        capsys, monkeypatch)  # fmt: skip
    assert code == 2
    why = results["stages"][0]["error"]["message"]
    assert "made from another kit" in why and str(elsewhere) in why and str(marked) in why, why
    # an unmarked capture without its marked one is a usage error
    r = main_in_process(["layerwise", str(kit.parent / MODEL.name), "--captured-unmarked", str(plain), "--out",
                         str(tmp_path / "c"), "-q"], capsys, monkeypatch)  # fmt: skip
    assert r.code == 2 and "--captured-unmarked given 1 time for 0 --captured" in r.out + r.err


def test_captures_against_each_other_name_the_first_tensor_where_they_part(kit, tmp_path, capsys, monkeypatch):
    """Three captures: the real one, the same numbers as .npy (identical), and one whose engine differs from the
    first Relu on (a planted error at one tensor, carried by what follows)."""
    cap = read_capture(kit / "captured" / "outputs.json")
    order = [n for n in cap.names() if "Relu" in n or "relu" in n]
    planted = order[0]

    def later(i: int, n: str, a: np.ndarray) -> np.ndarray:
        return a * np.float32(1.3) if n == planted or n == "logits" else a

    same, other = as_npy(kit, "same"), as_npy(kit, "other", later)
    args = ["--captured", str(kit / "captured" / "outputs.json"), "--captured", str(same), "--captured", str(other)]
    code, results = run(kit, args, tmp_path / "r", capsys, monkeypatch)
    assert code == 1  # the planted capture fails against the reference
    (stage,) = results["stages"]
    pairs = {(p["a"], p["b"]): p for p in stage["capture_pairs"]}
    assert len(pairs) == 3
    first = pairs[("captured_outputs", "captured_same")]
    assert first["identical"] and first["first_difference"] is None and first["feeds"] == 3
    for b in ("captured_outputs", "captured_same"):
        p = pairs[(b, "captured_other")]
        assert not p["identical"] and p["first_difference"]["tensor"] == planted
        assert p["first_parting"]["tensor"] == planted and p["first_parting"]["metrics"]["rel_l2"] == pytest.approx(
            0.3, rel=1e-3
        )
        assert "rel_l2 <= 0.01" in p["first_parting"]["failed"]
    text = pair_text(CapturePair.model_validate(pairs[("captured_outputs", "captured_other")]))
    assert f"first differ at {planted}, part at {planted} (rel_l2 0.3" in text
    assert pair_text(CapturePair.model_validate(first)).endswith("identical, bit for bit")
    html = (tmp_path / "r" / "report.html").read_text()
    assert "Captures against each other" in html and planted in html


def test_users_models_bert_passes_and_ssd_says_why_it_has_no_batch_checks(tmp_path: Path, capsys, monkeypatch):
    """Models made as users make them: Hugging Face BERT (two inputs, dynamic batch and sequence; its capture is ONNX
    Runtime's outputs on every feed of the kit's inputs.json, written as a .npy folder, as a target without Polygraphy
    would) passes every consistency check; torchvision's SSD takes one image without a batch axis: the kit says so."""
    import onnxruntime as ort

    from trtverify.toolout.captures import read_feeds

    bert = ROOT / "tests" / "data" / "bert" / "bert_tiny.onnx"
    shutil.copy(bert, tmp_path / bert.name)
    kit = tmp_path / "kit"
    args = ["capture", str(tmp_path / bert.name), "--dim", "batch=1", "--dim", "seq=8", "--out", str(kit)]
    assert main_in_process(args, capsys, monkeypatch).code == 0
    session = ort.InferenceSession(str(bert), providers=["CPUExecutionProvider"])
    for i, feed in enumerate(read_feeds(kit / "inputs.json")):
        (kit / "captured" / "npy" / str(i)).mkdir(parents=True)
        (out,) = session.run(["last_hidden_state"], feed)
        np.save(kit / "captured" / "npy" / str(i) / "last_hidden_state.npy", out)
    r = main_in_process(["layerwise", str(tmp_path / bert.name), "--captured", str(kit / "captured" / "npy"), "--out",
                         str(tmp_path / "r"), "-q"], capsys, monkeypatch)  # fmt: skip
    assert r.code == 0, r.out + r.err
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    got = {c["name"].split(": ", 1)[1]: c for c in checks(results, "captured_npy: ")}
    assert got["duplicated rows of one batch identical"]["passed"]
    assert got["duplicated rows of one batch identical"]["detail"]["rows"] == [0, 1]
    rep = got["repeated batch rows equal the single row"]
    assert rep["passed"] and rep["detail"]["rows"] == 4 and rep["value"] <= 5e-3  # ONNX Runtime's CPU: 0 measured
    # a capture of feed 0 alone (trtexec runs one feed): compared, its consistency not checked, and said so
    one = shutil.copytree(kit / "captured" / "npy" / "0", kit / "captured" / "feed0")
    r = main_in_process(["layerwise", str(tmp_path / bert.name), "--captured", str(one), "--out", str(tmp_path / "o"),
                         "-q"], capsys, monkeypatch)  # fmt: skip
    assert r.code == 0, r.out + r.err
    (stage,) = json.loads((tmp_path / "o" / "results.json").read_text())["stages"]
    (cand,) = stage["candidates"]
    assert cand["consistency"] == ["consistency feeds not checked: the capture holds the kit's 1 feed only (made "
                                   "without the consistency feeds of the kit's inputs.json)"]  # fmt: skip
    assert not checks(json.loads((tmp_path / "o" / "results.json").read_text()), "determinism")
    ssd = ROOT / "tests" / "data" / "detector" / "ssd_tiny.onnx"
    assert main_in_process(["capture", str(ssd), "--out", str(tmp_path / "ssd")], capsys, monkeypatch).code == 0
    manifest = json.loads((tmp_path / "ssd" / "manifest.json").read_text())
    assert [c["role"] for c in manifest["consistency"]["feeds"]] == ["repeat"]
    why = "input 'images' has a fixed first axis of 3 that the graph outputs do not share: not a batch axis"
    assert manifest["consistency"]["not_possible"] == {"duplicated_row": why, "repeated_batch": why}
    assert f"no repeated batch feed: {why}" in (tmp_path / "ssd" / "README.md").read_text()
