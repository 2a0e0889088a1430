"""Stage `e2e` on the real Fashion-MNIST demo: metrics, gates, per-class deltas, worst samples, drill-down."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, as_json, run_cli, write_suite

DEMO = ROOT / "demo" / "fashion_mnist"
SUITE = ROOT / "suites" / "fashion_mnist.yaml"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("e2e") / "out"
    r = run_cli("run", str(SUITE), "--stage", "e2e", "--out", str(out))
    assert r.code == 0, r.out + r.err
    return out, json.loads((out / "results.json").read_text())["stages"][0]


def test_demo_metrics_match_the_shipped_numbers(demo_run):
    _, stage = demo_run
    shipped = json.loads((DEMO / "metrics.json").read_text())["results"]
    assert stage["samples"] == 2000 and stage["task"] == "classification"
    assert stage["reference"]["accuracy"] == pytest.approx(shipped["ort_fp32"]["accuracy"], abs=1e-9)
    assert stage["reference"]["macro_f1"] == pytest.approx(shipped["ort_fp32"]["macro_f1"], abs=1e-4)
    by = {c["name"]: c for c in stage["candidates"]}
    assert by["int8"]["metrics"]["accuracy"] == pytest.approx(shipped["ort_int8_qdq"]["accuracy"], abs=1e-9)
    assert by["int8"]["deltas"]["accuracy"] == pytest.approx(
        by["int8"]["metrics"]["accuracy"] - stage["reference"]["accuracy"]
    )
    assert len(by["int8"]["per_class"]) == 10 and by["int8"]["per_class"][0]["name"] == "T-shirt/top"
    # worst samples: flipped predictions first, those the reference got right before the others
    worst = by["int8"]["worst"]
    assert worst and worst[0]["flipped"]
    flips = [w for w in worst if w["flipped"]]
    assert all(w["flipped"] for w in worst[: len(flips)])
    names = {c["name"] for c in stage["checks"]}
    assert {"fp16: macro_f1 drop <= 0.01", "int8: accuracy drop <= 0.01", "int8: accuracy >= 0.85"} <= names
    assert stage["timings"]["wall_s"] > 0 and stage["timings"]["reference.infer_s"] > 0


def test_gate_tighter_than_the_int8_drop_fails_and_names_the_metric(tmp_path: Path):
    shutil.copytree(ROOT / "suites", tmp_path / "suites")
    shutil.copytree(ROOT / "demo", tmp_path / "demo")
    suite = tmp_path / "suites" / "fashion_mnist.yaml"
    text = suite.read_text().replace(
        "- {metric: accuracy, max_drop: 0.01, min: 0.85}", "- {metric: accuracy, max_drop: 0.0001, min: 0.85}"
    )
    suite.write_text(text)
    r = run_cli("run", str(suite), "--stage", "e2e", "--out", str(tmp_path / "o"))
    assert r.code == 1, r.out + r.err
    assert "FAIL int8: accuracy drop <= 0.0001" in r.out
    # the gate names each candidate that misses it: FP16, emulated as a GPU rounds it, flips one image of 2,000
    # (natively on the CPU, none); that line names its own drop
    fails = [line for line in r.out.splitlines() if line.strip().startswith("FAIL ")]
    assert all("int8: accuracy" in line or "fp16: accuracy drop <= 0.0001: 5.000e-04" in line for line in fails)


def test_layerwise_on_the_worst_samples_of_the_e2e_run(demo_run, tmp_path: Path):
    out, stage = demo_run
    worst = {w["index"] for c in stage["candidates"] for w in c["worst"]}
    r = run_cli(
        "run",
        str(SUITE),
        "--stage",
        "layerwise",
        "--samples",
        "worst",
        "--from-results",
        str(out / "results.json"),
        "--out",
        str(tmp_path / "w"),
    )
    assert r.code in (0, 1), r.out + r.err
    assert f"the {len(worst)} worst samples" in r.err
    lw = json.loads((tmp_path / "w" / "results.json").read_text())["stages"][0]
    # every listed sample is fed, although the suite's layerwise stage says samples: 4 (issue 26: it cut them)
    assert len(worst) > 4 and lw["name"] == "layerwise" and lw["samples"] == len(worst)
    assert any(f"all {len(worst)} fed (samples: 4 applies" in n for n in lw["notes"])
    r = run_cli(
        "run",
        str(SUITE),
        "--stage",
        "layerwise",
        "--samples",
        "worst",
        "--from-results",
        str(tmp_path / "nothing.json"),
        "--out",
        str(tmp_path / "x"),
    )
    assert r.code == 2 and "run the e2e stage first" in r.err


def test_worst_samples_with_out_write_beside_the_e2e_results(demo_run, tmp_path: Path):
    """`--out DIR` without --from-results names the e2e run's folder: the drill-down reads DIR/results.json and
    writes DIR/worst/, never over the results it read (issue 36: it replaced them)."""
    out, _ = demo_run
    run = tmp_path / "run"
    shutil.copytree(out, run)
    before = (run / "results.json").read_bytes()
    r = run_cli("run", str(SUITE), "--stage", "layerwise", "--samples", "worst", "--out", str(run), "-q")
    assert r.code in (0, 1), r.out + r.err
    assert (run / "results.json").read_bytes() == before
    assert json.loads((run / "worst" / "results.json").read_text())["stages"][0]["name"] == "layerwise"


def _png_dataset(root: Path, n: int = 60) -> tuple[np.ndarray, np.ndarray]:
    from PIL import Image

    data = np.load(DEMO / "data" / "test_subset.npz", allow_pickle=False)
    idx = np.arange(0, 2000, 2000 // n)[:n]
    images, labels = data["images"][idx], data["labels"][idx]
    rows = ["file,label"]
    for k, (img, lab) in enumerate(zip(images, labels)):
        cls_dir = root / "tree" / f"c{lab}"
        cls_dir.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img[0]).save(cls_dir / f"{k:03d}.png")
        Image.fromarray(img[0]).save(root / f"{k:03d}.png")
        rows.append(f"{k:03d}.png,{lab}")
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    return images, labels


@pytest.mark.parametrize("source", ["folder", "csv"])
def test_image_files_give_the_same_metrics_as_the_arrays(tmp_path: Path, source: str):
    images, labels = _png_dataset(tmp_path)
    np.savez(tmp_path / "same.npz", images=images, labels=labels)
    base = (
        f"name: files\nmodels:\n  reference: {DEMO / 'fashion_cnn_fp32.onnx'}\n"
        f"  candidates: {{int8: {DEMO / 'fashion_cnn_int8_qdq.onnx'}}}\n"
        "inputs: {generate: {input: {shape: [1, 1, 28, 28]}}}\n"
        "stages:\n  e2e:\n    task: classification\n    preprocess: {grayscale: true}\n"
        "    gates: [{metric: accuracy, max_drop: 0.5}]\n    batch_size: 16\n"
    )
    dataset = {
        "folder": "    dataset: {folder: tree, class_names: [c0, c1, c2, c3, c4, c5, c6, c7, c8, c9]}\n",
        "csv": "    dataset: {csv: labels.csv}\n",
    }[source]
    r = run_cli("run", str(write_suite(tmp_path, base + dataset)), "--out", str(tmp_path / "o"))
    assert r.code == 0, r.out + r.err
    from_files = json.loads((tmp_path / "o" / "results.json").read_text())["stages"][0]
    r = run_cli(
        "run",
        str(write_suite(tmp_path, base + "    dataset: {npz: same.npz}\n", "arrays.yaml")),
        "--out",
        str(tmp_path / "a"),
    )
    from_arrays = json.loads((tmp_path / "a" / "results.json").read_text())["stages"][0]
    assert from_files["samples"] == from_arrays["samples"] == 60
    assert from_files["reference"]["accuracy"] == from_arrays["reference"]["accuracy"]
    assert from_files["candidates"][0]["metrics"]["macro_f1"] == from_arrays["candidates"][0]["metrics"]["macro_f1"]


def test_unknown_gate_metric_is_a_located_suite_error(tmp_path: Path):
    text = SUITE.read_text().replace("- {metric: macro_f1, max_drop: 0.01}", "- {metric: macro_f2, max_drop: 0.01}")
    shutil.copytree(ROOT / "demo", tmp_path / "demo")
    (tmp_path / "suites").mkdir()
    path = write_suite(tmp_path / "suites", text, "fashion_mnist.yaml")
    r = run_cli("validate", str(path))
    assert (
        r.code == 2
        and "stages.e2e.gates[0].metric: unknown classification metric 'macro_f2'; did you mean 'macro_f1'?" in r.err
    )


def test_chunked_run_equals_one_chunk_and_one_session_is_alive_at_a_time(
    demo_run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The models take turns over kept chunks of the data; a chunk of one batch must give the
    same metrics, and only one ONNX Runtime session (one intra-op pool) may exist at a time
    when the whole set fits in one chunk (real sessions, counted through the backend)."""
    from trtverify.backends.onnxruntime import OnnxRuntimeBackend
    from trtverify.cli.run import run_and_record
    from trtverify.config.loader import load_suite
    from trtverify.runner import RunOptions

    _, whole = demo_run
    assert whole["chunks"] == 1
    alive: set[int] = set()
    peak = [0]
    make, close = OnnxRuntimeBackend._make_session, OnnxRuntimeBackend.close

    def counting_make(self, model):  # type: ignore[no-untyped-def]
        session = make(self, model)
        alive.add(id(self))
        peak[0] = max(peak[0], len(alive))
        return session

    def counting_close(self):  # type: ignore[no-untyped-def]
        alive.discard(id(self))
        close(self)

    monkeypatch.setattr(OnnxRuntimeBackend, "_make_session", counting_make)
    monkeypatch.setattr(OnnxRuntimeBackend, "close", counting_close)
    loaded = load_suite(SUITE)
    run_and_record(loaded, tmp_path / "one", RunOptions(stages=("e2e",)))
    assert peak[0] == 1

    e2e = loaded.suite.stages.e2e
    small = loaded.suite.model_copy(
        update={"stages": loaded.suite.stages.model_copy(update={"e2e": e2e.model_copy(update={"chunk_mb": 0.5})})}
    )
    chunked = as_json(
        run_and_record(dataclasses.replace(loaded, suite=small), tmp_path / "chunked", RunOptions(stages=("e2e",)))
    )["stages"][0]
    per_batch = 250 * 28 * 28 * 4 / 2**20  # one float32 batch of the demo: 0.75 MB, over the 0.5 MB limit
    assert per_batch > 0.5 and chunked["chunks"] == 2000 // 250
    assert chunked["reference"] == whole["reference"]
    assert [c["metrics"] for c in chunked["candidates"]] == [c["metrics"] for c in whole["candidates"]]
    assert [c["worst"] for c in chunked["candidates"]] == [c["worst"] for c in whole["candidates"]]
