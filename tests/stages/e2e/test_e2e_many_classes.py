"""Stage e2e with 1000 classes (issue 36, item 6): results.json stays small, the per-class data goes to a side
file that results.json names, the report still shows the worst classes, and re-rendering and sharded runs work.

A 1000-class classifier (Flatten + Gemm, made with onnx.helper) on 128 PNG images in an ImageNet-style folder
(`val/<class>/<image>`, 1000 class folders): 7 of 8 labels are the reference's own predictions, so the
reference is sound; two candidates are the same model with noise of two sizes on its weights, so predictions
flip. Every number is checked against ONNX Runtime and scikit-learn run here, independently of trtverify.
Before this change, this run's results.json was 54 MB (3 million lines)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from tests.conftest import ROOT, run_cli

SCHEMA = json.loads((ROOT / "trtverify" / "results" / "results.schema.json").read_text())
C, N, BATCH = 1000, 128, 32
NAMES = [f"n{i:04d}" for i in range(C)]


def _model(path: Path, w: np.ndarray) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Flatten", ["x"], ["f"]), helper.make_node("Gemm", ["f", "w", "b"], ["logits"], transB=1)],
        "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", C])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(C, np.float32), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _predict(path: Path, x: np.ndarray) -> np.ndarray:
    """The model's predicted classes, batch by batch as the stage runs it."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {"x": x[i : i + BATCH]})[0].argmax(1) for i in range(0, len(x), BATCH)])


SUITE = f"""\
name: many_classes
models:
  reference: ref.onnx
  candidates: {{noisy: noisy.onnx, slight: slight.onnx}}
inputs:
  samples: 1
  generate:
    x: {{shape: [1, 3, 8, 8], range: [0.0, 1.0]}}
stages:
  e2e:
    task: classification
    dataset: {{folder: val}}
    preprocess: {{scale: 0.00392156862745098, layout: NCHW}}
    batch_size: {BATCH}
    gates:
      - {{metric: accuracy, max_drop: 0.5}}
"""


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from PIL import Image

    root = tmp_path_factory.mktemp("many")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((C, 192)).astype(np.float32)
    _model(root / "ref.onnx", w)
    _model(root / "noisy.onnx", (w + 0.3 * rng.standard_normal(w.shape)).astype(np.float32))
    _model(root / "slight.onnx", (w + 0.05 * rng.standard_normal(w.shape)).astype(np.float32))
    images = rng.integers(0, 256, (N, 8, 8, 3), dtype=np.uint8)
    x = np.ascontiguousarray((images.astype(np.float32) * np.float32(1 / 255)).transpose(0, 3, 1, 2))
    labels = np.where(np.arange(N) % 8 == 0, rng.integers(0, C, N), _predict(root / "ref.onnx", x))
    for name in NAMES:
        (root / "val" / name).mkdir(parents=True)
    for i, (image, label) in enumerate(zip(images, labels)):
        Image.fromarray(image).save(root / "val" / NAMES[label] / f"{i:03d}.png")
    (root / "suite.yaml").write_text(SUITE)
    (root / "sweep.yaml").write_text(SUITE.replace(f"batch_size: {BATCH}", f"batch_sizes: [{BATCH}, {2 * BATCH}]"))
    runs = [("suite", "full", ()), ("suite", "s1", ("--shard", "1/2")), ("suite", "s2", ("--shard", "2/2"))]
    for suite, out, args in [*runs, ("sweep", "sweep", ())]:
        r = run_cli("run", str(root / f"{suite}.yaml"), "--out", str(root / out), "-q", *args)
        assert r.code == 0, r.out + r.err
    r = run_cli("merge", str(root / "s2"), str(root / "s1"), "--out", str(root / "merged"), "-q")
    assert r.code == 0, r.out + r.err
    # the folder's images in dataset order (class folder by class folder, file names sorted), as the stage reads
    order = sorted(range(N), key=lambda i: (labels[i], i))
    preds = {m: _predict(root / f"{m}.onnx", x[order]) for m in ("ref", "noisy", "slight")}
    return {"root": root, "labels": labels[order], "preds": preds}


def _e2e(folder: Path) -> dict:
    return next(s for s in json.loads((folder / "results.json").read_text())["stages"] if s["name"] == "e2e")


def test_results_json_stays_small_and_names_the_class_file(case: dict):
    from sklearn.metrics import f1_score

    from trtverify.stages.e2e.classdata import ClassData, read_class_data

    full = case["root"] / "full"
    size = (full / "results.json").stat().st_size
    assert size < 2 * 2**20, f"results.json is {size:,} bytes"
    stage = _e2e(full)
    jsonschema.validate(json.loads((full / "results.json").read_text()), SCHEMA)
    ref = stage["class_data"]
    assert (
        ref["path"] == "e2e-classes.npz" and ref["classes"] == C and ref["models"] == ["reference", "noisy", "slight"]
    )
    assert ref["arrays"]["confusion"] == [3, C, C] and ref["arrays"]["f1"] == [3, C]
    # the matrices and per-class rows are not inline; the scalars are
    for metrics in [stage["reference"], *(c["metrics"] for c in stage["candidates"])]:
        assert "confusion" not in metrics and "per_class" not in metrics and metrics["samples"] == N
    arrays = read_class_data(full / "results.json", ClassData(**ref))  # checks the sha256 and the shapes
    with np.load(full / ref["path"], allow_pickle=False) as plain:  # a plain .npz, no pickled objects
        assert sorted(plain.files) == sorted(ref["arrays"])
    labels = case["labels"]
    assert list(arrays["name"]) == NAMES and list(arrays["class"]) == list(range(C))
    assert list(arrays["support"][0]) == np.bincount(labels, minlength=C).tolist()
    f1 = {}
    for k, m in enumerate(("ref", "noisy", "slight")):
        pred = case["preds"][m]
        want = np.bincount(labels * C + pred, minlength=C * C).reshape(C, C)
        assert np.array_equal(arrays["confusion"][k], want), m
        f1[m] = f1_score(labels, pred, labels=range(C), average=None, zero_division=0)
        assert arrays["f1"][k] == pytest.approx(f1[m], abs=1e-12)
    assert stage["reference"]["accuracy"] == pytest.approx(float(np.mean(case["preds"]["ref"] == labels)))
    for cand in stage["candidates"]:
        # inline: the 20 classes whose F1 dropped most, largest drop first, and the confusions that grew most
        delta = f1[cand["name"]] - f1["ref"]
        dropped = sorted((d, i) for i, d in enumerate(delta) if d < 0)[:20]
        assert dropped, "the candidate must lose some classes for this test to mean anything"
        assert [(r["class"], r["delta_f1"]) for r in cand["per_class"]] == [
            (i, pytest.approx(d, abs=1e-12)) for d, i in dropped
        ]
        k = ref["models"].index(cand["name"])
        grown = arrays["confusion"][k] - arrays["confusion"][0]
        np.fill_diagonal(grown, 0)
        cells = sorted(((-grown[t, p], t, p) for t, p in zip(*np.nonzero(grown > 0))))[:20]
        assert [(p["label"], p["predicted"]) for p in cand["confused"]] == [(t, p) for _, t, p in cells]
        assert all(p["candidate"] - p["reference"] == -g for (g, _, _), p in zip(cells, cand["confused"]))


def _section(html: str, cand: str) -> str:
    """The text of a candidate's per-class section of the report."""
    start = html.index(f"<details><summary>{cand}:")
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html[start : html.index("</details>", start)]))


def test_the_report_shows_the_worst_classes_and_renders_again_from_results_json_alone(case: dict, tmp_path: Path):
    full = case["root"] / "full"
    stage = _e2e(full)
    html = (full / "report.html").read_text()
    # alone: a copy of results.json without the class file beside it renders the same
    shutil.copy(full / "results.json", tmp_path / "results.json")
    r = run_cli("report", str(tmp_path / "results.json"))
    assert r.code == 0, r.out + r.err
    again = (tmp_path / "report.html").read_text()
    for cand in stage["candidates"]:
        text = _section(html, cand["name"])
        assert f"the {len(cand['per_class'])} classes of {C} that dropped most" in text
        assert "e2e-classes.npz" in text
        rows = [f"{r['class']} {r['name']} " for r in cand["per_class"]]
        at = [text.index(row) for row in rows]
        assert at == sorted(at), "largest drop first"
        pair = cand["confused"][0]
        assert f"{pair['label']} {pair['label_name']} {pair['predicted']} {pair['predicted_name']} " in text
        assert _section(again, cand["name"]) == text
    assert len(html) < 400_000  # the per-class table listed all 1000 classes per candidate


def test_sharded_runs_merge_to_the_unsharded_class_file_exactly(case: dict):
    root = case["root"]
    full, merged = _e2e(root / "full"), _e2e(root / "merged")
    for shard in ("s1", "s2"):  # each shard names its own class file, over its own samples
        part = _e2e(root / shard)
        assert (root / shard / part["class_data"]["path"]).is_file() and part["samples"] == N // 2
    assert merged["samples"] == N and merged["class_data"] == full["class_data"]
    assert (root / "merged" / "e2e-classes.npz").read_bytes() == (root / "full" / "e2e-classes.npz").read_bytes()
    assert merged["reference"] == full["reference"]
    for a, b in zip(full["candidates"], merged["candidates"], strict=True):
        assert a == b


def test_each_batch_size_of_a_sweep_has_its_own_class_file(case: dict):
    from trtverify.results.io import load_results
    from trtverify.stages.e2e.classdata import read_class_data

    results = case["root"] / "sweep" / "results.json"
    stages = [s for s in load_results(results).stages if s.name == "e2e"]
    assert [(s.shape, s.class_data.path) for s in stages] == [
        (f"batch={BATCH}", f"e2e-b{BATCH}-classes.npz"),
        (f"batch={2 * BATCH}", f"e2e-b{2 * BATCH}-classes.npz"),
    ]
    for s in stages:
        assert read_class_data(results, s.class_data)["confusion"].shape == (3, C, C)


def test_a_class_file_that_is_missing_changed_or_outside_the_folder_is_refused(case: dict, tmp_path: Path):
    from trtverify.results.io import load_results
    from trtverify.stages.e2e.classdata import ClassData, read_class_data
    from trtverify.util.errors import UsageError

    full = case["root"] / "full"
    record = ClassData(**_e2e(full)["class_data"])
    shutil.copy(full / "results.json", tmp_path / "results.json")
    with pytest.raises(UsageError, match="e2e-classes.npz: missing"):
        read_class_data(tmp_path / "results.json", record)
    shutil.copy(case["root"] / "s1" / "e2e-classes.npz", tmp_path / "e2e-classes.npz")  # another run's
    with pytest.raises(UsageError, match="not the file .* names"):
        read_class_data(tmp_path / "results.json", record)
    data = json.loads((full / "results.json").read_text())
    next(s for s in data["stages"] if s["name"] == "e2e")["class_data"]["path"] = "../elsewhere.npz"
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(UsageError, match="class_data.path"):
        load_results(tmp_path / "results.json")
