"""`run --shard I/N` and `merge`: shards split deterministically, and merged shards give exactly
the unsharded run's results (e2e metrics recomputed over the union of predictions)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import ROOT, run_cli
from tests.results.test_schema import validate_junit
from trtverify.config.loader import load_suite
from trtverify.runner import cases, make_plan
from trtverify.stages.base import Shard
from trtverify.util.errors import UsageError

SCHEMA = json.loads((ROOT / "trtverify" / "results" / "results.schema.json").read_text())
DETECTION = ROOT / "suites" / "shapes_detection.yaml"
FASHION = ROOT / "suites" / "fashion_mnist.yaml"


def _stage(results: dict, name: str) -> dict:
    return next(s for s in results["stages"] if s["name"] == name)


def _load(d: Path) -> dict:
    return json.loads((d / "results.json").read_text())


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "1", "a/b", "1/2/3", ""])
def test_bad_shard_specs_are_usage_errors(text: str):
    with pytest.raises(UsageError, match="--shard"):
        Shard.parse(text)
    assert Shard.parse(" 2 / 3 ") == Shard(index=2, count=3)


@pytest.mark.parametrize("total,batch,count", [(200, 16, 2), (2000, 250, 3), (5, 8, 4), (17, 1, 5), (0, 4, 2)])
def test_e2e_slices_cover_the_dataset_once_along_batch_boundaries(total: int, batch: int, count: int):
    slices = [Shard(index=i, count=count).positions(total, batch) for i in range(1, count + 1)]
    assert [i for s in slices for i in s] == list(range(total))
    # every slice starts on a batch boundary, so each batch holds the samples it holds unsharded
    assert all(s.start % batch == 0 for s in slices if s)


def test_one_plan_gives_whole_cases_round_robin_and_e2e_slices():
    loaded = load_suite(FASHION)
    assert cases(loaded) == [
        ("framework", None, None),
        ("layerwise", "fp16", None),
        ("layerwise", "int8", None),
        ("buildlog", None, None),
    ]

    def work(shard: Shard | None) -> dict:
        return {p.name: (p.work, p.elsewhere) for p in make_plan(loaded, (), shard)}

    one, two = work(Shard(index=1, count=2)), work(Shard(index=2, count=2))
    # case k runs in shard (k mod N) + 1: framework and layerwise/int8 in shard 1, layerwise/fp16 and buildlog in 2
    assert one["framework"][0] is not None and two["framework"] == (None, "runs in shard 1/2")
    assert one["layerwise"][0].candidates == ("int8",) and two["layerwise"][0].candidates == ("fp16",)
    assert one["buildlog"] == (None, "runs in shard 2/2") and two["buildlog"][0] is not None
    assert one["e2e"][0].data == Shard(index=1, count=2) and two["e2e"][0].data == Shard(index=2, count=2)
    whole = work(None)  # unsharded: every stage, everything
    assert all(w.candidates is None and w.data is None for w, _ in whole.values())
    assert all(w is not None for w, _ in work(Shard(index=1, count=1)).values())


@pytest.fixture(scope="module")
def detection_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("shards")
    for args, out in (((), "full"), (("--shard", "1/2"), "s1"), (("--shard", "2/2"), "s2")):
        r = run_cli("run", str(DETECTION), "--out", str(base / out), *args)
        assert r.code == 0, r.out + r.err
    r = run_cli(
        "merge",
        str(base / "s2"),
        str(base / "s1"),
        "--out",
        str(base / "merged"),
        "--junit",
        str(base / "merged" / "junit.xml"),
    )
    assert r.code == 0, r.out + r.err
    assert "merged from 2 shards" in r.out
    return base


def test_two_detection_shards_merge_to_exactly_the_unsharded_metrics(detection_runs: Path):
    full, merged = _load(detection_runs / "full"), _load(detection_runs / "merged")
    s1, s2 = _load(detection_runs / "s1"), _load(detection_runs / "s2")
    f, m = _stage(full, "e2e"), _stage(merged, "e2e")
    # each shard saw half the images, and its own mAP differs from the whole set's
    assert _stage(s1, "e2e")["samples"] + _stage(s2, "e2e")["samples"] == f["samples"] == m["samples"] == 200
    assert _stage(s1, "e2e")["reference"]["map"] != f["reference"]["map"]
    # the merge recomputes COCO over the union of detections: every number equal, not averaged
    assert m["reference"] == f["reference"]
    for a, b in zip(f["candidates"], m["candidates"], strict=True):
        assert a["name"] == b["name"] and a["metrics"] == b["metrics"] and a["deltas"] == b["deltas"]
        assert a["per_class"] == b["per_class"] and a["worst"] == b["worst"]
    assert [(c["name"], c["value"], c["passed"]) for c in f["checks"]] == [
        (c["name"], c["value"], c["passed"]) for c in m["checks"]
    ]
    # the tensor stages ran as whole cases in one shard each and come back unchanged
    for name in ("framework", "layerwise"):
        assert [c["name"] for c in _stage(merged, name)["checks"]] == [c["name"] for c in _stage(full, name)["checks"]]
    fl, ml = _stage(full, "layerwise"), _stage(merged, "layerwise")
    assert [c["name"] for c in ml["candidates"]] == ["fp16", "int8"]
    assert [c["rows"] for c in ml["candidates"]] == [c["rows"] for c in fl["candidates"]]
    assert merged["passed"] and merged["exit_code"] == 0 and merged["merged"]["shards"] == 2


def test_shard_and_merged_results_validate_and_report(detection_runs: Path):
    for d in ("s1", "s2", "merged"):
        jsonschema.validate(_load(detection_runs / d), SCHEMA)
        assert (detection_runs / d / "report.html").stat().st_size > 1000
    assert "shard 2 of 2: part of a run" in (detection_runs / "s2" / "report.html").read_text()
    assert "merged from 2 shards" in (detection_runs / "merged" / "report.html").read_text()
    s2 = _load(detection_runs / "s2")
    assert s2["shard"] == {"index": 2, "count": 2}
    fw = _stage(s2, "framework")
    assert fw["status"] == "skipped" and fw["sharded_away"] and fw["notes"] == ["runs in shard 1/2"]
    assert s2["passed"]  # a stage another shard runs does not fail this one
    root = validate_junit(detection_runs / "merged" / "junit.xml")
    assert int(root.get("tests")) == sum(len(s["checks"]) for s in _load(detection_runs / "merged")["stages"])


def test_merge_refuses_incomplete_or_mixed_shards(detection_runs: Path, tmp_path: Path):
    r = run_cli("merge", str(detection_runs / "s1"), "--out", str(tmp_path / "m"))
    assert r.code == 2 and "shard(s) 2/2 missing" in r.err
    r = run_cli("merge", str(detection_runs / "s1"), str(detection_runs / "s1"), "--out", str(tmp_path / "m"))
    assert r.code == 2 and "given twice" in r.err
    r = run_cli("merge", str(detection_runs / "full"), "--out", str(tmp_path / "m"))
    assert r.code == 2 and "not a shard" in r.err
    # a shard's accumulator state file lost: named, not a traceback
    broken = tmp_path / "s2"
    shutil.copytree(detection_runs / "s2", broken)
    (broken / "shard" / "e2e-1.npz").unlink()
    r = run_cli("merge", str(detection_runs / "s1"), str(broken), "--out", str(tmp_path / "m"))
    assert r.code == 2 and "e2e-1.npz: missing" in r.err
    # a shard of another suite file
    other = tmp_path / "other"
    shutil.copytree(detection_runs / "s2", other)
    data = _load(other)
    data["suite"]["sha256"] = "0" * 64
    (other / "results.json").write_text(json.dumps(data))
    r = run_cli("merge", str(detection_runs / "s1"), str(other), "--out", str(tmp_path / "m"))
    assert r.code == 2 and "different suite file" in r.err


def test_classification_in_three_shards_merges_exactly_and_keeps_the_gate(tmp_path: Path):
    shutil.copytree(ROOT / "suites", tmp_path / "suites")
    shutil.copytree(ROOT / "demo" / "fashion_mnist", tmp_path / "demo" / "fashion_mnist")
    suite = tmp_path / "suites" / "fashion_mnist.yaml"
    # a gate tighter than the INT8 drop: the merged run must fail it like the unsharded one
    suite.write_text(
        suite.read_text().replace(
            "- {metric: accuracy, max_drop: 0.01, min: 0.85}", "- {metric: accuracy, max_drop: 0.0001, min: 0.85}"
        )
    )
    full = run_cli("run", str(suite), "--stage", "e2e", "--out", str(tmp_path / "full"), "-q")
    assert full.code == 1
    for i in (1, 2, 3):
        r = run_cli("run", str(suite), "--stage", "e2e", "--shard", f"{i}/3", "--out", str(tmp_path / f"s{i}"), "-q")
        assert r.code in (0, 1), r.err
    r = run_cli("merge", *(str(tmp_path / f"s{i}") for i in (1, 2, 3)), "--out", str(tmp_path / "m"))
    assert r.code == 1 and "FAIL int8: accuracy drop <= 0.0001" in r.out
    f, m = _stage(_load(tmp_path / "full"), "e2e"), _stage(_load(tmp_path / "m"), "e2e")
    assert m["reference"] == f["reference"] and [c["metrics"] for c in m["candidates"]] == [
        c["metrics"] for c in f["candidates"]
    ]
    assert [c["worst"] for c in m["candidates"]] == [c["worst"] for c in f["candidates"]]
    assert [(c["name"], c["passed"]) for c in m["checks"]] == [(c["name"], c["passed"]) for c in f["checks"]]


def test_an_e2e_batch_size_sweep_runs_and_merges_per_batch_size(tmp_path: Path):
    shutil.copytree(ROOT / "suites", tmp_path / "suites")
    shutil.copytree(ROOT / "demo" / "fashion_mnist", tmp_path / "demo" / "fashion_mnist")
    suite = tmp_path / "suites" / "fashion_mnist.yaml"
    suite.write_text(suite.read_text().replace("    batch_size: 250\n", "    batch_sizes: [1000, 250]\n"))
    junit = tmp_path / "j.xml"
    full = run_cli("run", str(suite), "--stage", "e2e", "--out", str(tmp_path / "full"), "--junit", str(junit))
    assert full.code == 0, full.out + full.err
    stages = _load(tmp_path / "full")["stages"]
    assert [(s["name"], s["shape"], s["status"]) for s in stages] == [
        ("e2e", "batch=1000", "passed"),
        ("e2e", "batch=250", "passed"),
    ]
    assert "[PASSED ] e2e at batch=250" in full.out
    xml = junit.read_text()
    assert 'name="fashion_mnist.e2e[batch=1000]"' in xml and 'name="fashion_mnist.e2e[batch=250]"' in xml
    for i in (1, 2):
        r = run_cli("run", str(suite), "--stage", "e2e", "--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}"), "-q")
        assert r.code == 0, r.err
    # every shard runs its slice at both batch sizes, into state files of their own
    assert sorted(p.name for p in (tmp_path / "s1").rglob("e2e-*.npz")) == sorted(
        f"e2e-b{b}-{k}.npz" for b in (1000, 250) for k in range(3)
    )
    r = run_cli("merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m"), "-q")
    assert r.code == 0, r.out + r.err
    merged = _load(tmp_path / "m")["stages"]
    assert [(s["shape"], s["samples"]) for s in merged] == [("batch=1000", 2000), ("batch=250", 2000)]
    for f, m in zip(stages, merged, strict=True):
        assert m["reference"] == f["reference"]
        assert [c["metrics"] for c in m["candidates"]] == [c["metrics"] for c in f["candidates"]]


def test_batch_size_and_batch_sizes_together_are_refused(tmp_path: Path):
    shutil.copytree(ROOT / "suites", tmp_path / "suites")
    shutil.copytree(ROOT / "demo" / "fashion_mnist", tmp_path / "demo" / "fashion_mnist")
    suite = tmp_path / "suites" / "fashion_mnist.yaml"
    suite.write_text(suite.read_text().replace("    batch_size: 250\n", "    batch_size: 250\n    batch_sizes: [8]\n"))
    r = run_cli("validate", str(suite))
    assert r.code == 2 and "give batch_size (one run) or batch_sizes (a sweep), not both" in r.err, r.err
    assert "fashion_mnist.yaml:" in r.err


def test_a_batch_size_a_fixed_batch_model_cannot_run_is_refused_with_its_line(tmp_path: Path):
    import onnx

    shutil.copytree(ROOT / "suites", tmp_path / "suites")
    shutil.copytree(ROOT / "demo" / "fashion_mnist", tmp_path / "demo" / "fashion_mnist")
    model_path = tmp_path / "demo" / "fashion_mnist" / "fashion_cnn_fp32.onnx"
    model = onnx.load(str(model_path))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 250  # an export with its batch fixed
    onnx.save(model, str(model_path))
    suite = tmp_path / "suites" / "fashion_mnist.yaml"
    suite.write_text(suite.read_text().replace("    batch_size: 250\n", "    batch_sizes: [250, 1000]\n"))
    r = run_cli("validate", str(suite))
    assert r.code == 2, r.out + r.err
    assert "stages.e2e.batch_sizes[1]" in r.err and "has a fixed batch of 250" in r.err, r.err
    assert "batch_sizes[0]" not in r.err


def test_batch_sizes_outside_the_tensorrt_profiles_of_the_candidates_e2e_runs_are_refused(tmp_path: Path):
    shutil.copytree(ROOT / "suites", tmp_path / "suites")
    shutil.copytree(ROOT / "demo" / "fashion_mnist", tmp_path / "demo" / "fashion_mnist")
    suite = tmp_path / "suites" / "fashion_mnist.yaml"
    text = suite.read_text().replace("    batch_size: 250\n", "    batch_sizes: [8, 64]\n")
    # the INT8 candidate on TensorRT (validate needs no TensorRT), with a profile up to batch 32
    text = text.replace(
        "    int8: ../demo/fashion_mnist/fashion_cnn_int8_qdq.onnx\n",
        "    int8: {path: ../demo/fashion_mnist/fashion_cnn_int8_qdq.onnx, backend: tensorrt}\n",
    ).replace(
        "  torch: {device: cpu}\n",
        "  torch: {device: cpu}\n  tensorrt:\n    profiles:\n"
        "      - {input: {min: [1, 1, 28, 28], opt: [8, 1, 28, 28], max: [32, 1, 28, 28]}}\n",
    )
    suite.write_text(text)
    r = run_cli("validate", str(suite))
    assert r.code == 2, r.out + r.err
    assert "stages.e2e.batch_sizes[1]" in r.err and "outside every optimisation profile of backends.tensorrt" in r.err
    assert "batch_sizes[0]" not in r.err
