"""Shape sweeps (inputs.shapes, `--dim NAME=V1,V2`): the framework and layerwise stages run once per shape set, each
result carries its set, and the verdict names the sets that failed. Real torch.onnx.export models, real ONNX Runtime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import TINY_SUITE, run_cli, write_suite


class ViewOne(torch.nn.Module):  # the batch traced into the Reshape: right at batch 1 only
    def forward(self, x):
        return torch.relu(x).view(1, -1)


class ViewBatch(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x).view(x.size(0), -1)


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    paths = []
    for model, name in ((ViewBatch(), "good"), (ViewOne(), "baked")):
        path = tmp_path / f"{name}.onnx"
        torch.onnx.export(
            model, (torch.randn(1, 3, 4),), str(path), input_names=["x"], output_names=["y"],
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=17, dynamo=False,
        )  # fmt: skip
        paths.append(path)
    return paths[0], paths[1]


def _results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_baked_batch_passes_at_the_traced_size_and_fails_at_another(pair, tmp_path):
    good, baked = pair
    out = tmp_path / "o"
    r = run_cli("layerwise", str(good), str(baked), "--dim", "batch=1,2", "--out", str(out))
    assert r.code == 1, r.out + r.err
    stages = _results(out)["stages"]
    assert [(s["name"], s["shape"], s["status"]) for s in stages] == [
        ("layerwise", "x=1x3x4", "passed"),
        ("layerwise", "x=2x3x4", "failed"),
    ]
    assert "FAILED: suite 'layerwise-good'; failed at x=2x3x4 (of 2 shapes) (exit 1)" in r.out
    top = stages[1]["candidates"][0]["root_causes"][0]
    assert top["op_type"] == "Reshape" and "shape mismatch" in top["shape_mismatch"]
    assert "shape mismatch: reference [2, 12] vs candidate [1, 24]" in r.out
    lint = {f["kind"] for f in stages[0]["candidates"][0]["lint"]}
    assert "shape_baked" in lint  # the lint says it from the graph alone, at the size where the run passes
    html = (out / "report.html").read_text()
    assert 'id="stage-layerwise-x_1x3x4"' in html and 'id="stage-layerwise-x_2x3x4"' in html


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_correct_dynamic_model_passes_every_swept_shape(pair, tmp_path):
    good, _ = pair
    out = tmp_path / "o"
    r = run_cli("layerwise", str(good), str(good), "--dim", "batch=1,3,8", "--out", str(out))
    assert r.code == 0, r.out + r.err
    assert [s["shape"] for s in _results(out)["stages"]] == ["x=1x3x4", "x=3x3x4", "x=8x3x4"]
    assert "PASSED: suite 'layerwise-good' (exit 0)" in r.out


def test_the_framework_stage_runs_per_shape_set(tiny_dir: Path, tmp_path: Path):
    text = TINY_SUITE.format(samples=2).replace(
        "    input: {shape: [2, 1, 8, 8], range: [-1, 1]}\n",
        "    input: {shape: [2, 1, 8, 8], range: [-1, 1]}\n  shapes:\n    - {input: [1, 1, 8, 8]}\n"
        "    - {input: [5, 1, 8, 8]}\n",
    )
    suite = write_suite(tiny_dir, text)
    out = tmp_path / "o"
    r = run_cli("run", str(suite), "--out", str(out))
    assert r.code == 0, r.out + r.err
    stages = _results(out)["stages"]
    assert [(s["name"], s["shape"], s["status"]) for s in stages] == [
        ("framework", "input=1x1x8x8", "passed"),
        ("framework", "input=5x1x8x8", "passed"),
    ]
    assert "[PASSED ] framework at input=5x1x8x8" in r.out


@pytest.mark.parametrize(
    "shapes,message",
    [
        ("[{other: [1, 1, 8, 8]}]", "'other' is not a generated input (input)"),
        ("[{input: [1, 8, 8]}]", "3 dimensions, but generate.input.shape has 4"),
        ("[]", "give at least one shape set"),
        ("[{input: [1, 1, 8, 8]}, {input: [1, 1, 8, 8]}]", "shapes[1] repeats shapes[0]"),
    ],
)
def test_a_bad_sweep_is_a_suite_error_with_its_line(tiny_dir: Path, shapes: str, message: str):
    text = TINY_SUITE.format(samples=2).replace(
        "    input: {shape: [2, 1, 8, 8], range: [-1, 1]}\n",
        f"    input: {{shape: [2, 1, 8, 8], range: [-1, 1]}}\n  shapes: {shapes}\n",
    )
    suite = write_suite(tiny_dir, text)
    r = run_cli("validate", str(suite))
    assert r.code == 2, r.out + r.err
    assert message in r.err and "suite.yaml:" in r.err


@pytest.mark.parametrize(
    "dim,message",
    [
        ("seq=1,2", "has no dynamic dimension of that name (its dynamic dimensions: batch)"),
        ("batch=1,x", "expected NAME=VALUE or NAME=V1,V2,..."),
    ],
)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_bad_dim_is_refused(pair, tmp_path, dim, message):
    good, _ = pair
    r = run_cli("layerwise", str(good), str(good), "--dim", dim, "--out", str(tmp_path / "o"))
    assert r.code == 2 and message in r.err, r.err


def _swept_tiny(tiny_dir: Path, shapes: str, extra: str = "") -> Path:
    text = TINY_SUITE.format(samples=2).replace(
        "    input: {shape: [2, 1, 8, 8], range: [-1, 1]}\n",
        f"    input: {{shape: [2, 1, 8, 8], range: [-1, 1]}}\n  shapes: {shapes}\n",
    )
    return write_suite(tiny_dir, text + extra)


def test_a_swept_shape_outside_every_tensorrt_profile_is_a_suite_error(tiny_dir: Path):
    profiles = (
        "backends:\n  tensorrt:\n    profiles:\n"
        "      - {input: {min: [1, 1, 8, 8], opt: [2, 1, 8, 8], max: [4, 1, 8, 8]}}\n"
    )
    suite = _swept_tiny(tiny_dir, "[{input: [1, 1, 8, 8]}, {input: [8, 1, 8, 8]}]", profiles)
    r = run_cli("validate", str(suite))
    assert r.code == 2, r.out + r.err
    assert "suite.yaml:11: inputs.shapes[1]" in r.err
    assert "outside every optimisation profile of backends.tensorrt.profiles" in r.err
    assert "inputs.shapes[0]" not in r.err


def test_a_swept_shape_must_fit_the_models_fixed_dimensions(tiny_dir: Path):
    r = run_cli("validate", str(_swept_tiny(tiny_dir, "[{input: [1, 3, 8, 8]}]")))
    assert r.code == 2 and "does not fit tiny.onnx's input input" in r.err, r.err


def test_the_tensorrt_backends_get_one_profile_covering_the_sweep(tiny_dir: Path):
    from trtverify.config.loader import load_suite
    from trtverify.runner import with_sweep_profile

    loaded = load_suite(_swept_tiny(tiny_dir, "[{input: [4, 1, 8, 8]}, {input: [1, 1, 8, 8]}, {input: [16, 1, 8, 8]}]"))
    swept = with_sweep_profile(loaded, loaded.suite.inputs.shapes)
    for options in (swept.suite.backends.tensorrt, swept.suite.backends.tensorrt_rtx):
        (profile,) = options.profiles
        r = profile["input"]
        assert (r.min, r.opt, r.max) == ([1, 1, 8, 8], [4, 1, 8, 8], [16, 1, 8, 8])


def _swept_with_candidates(tiny_dir: Path) -> Path:
    import shutil

    shutil.copy(tiny_dir / "tiny.onnx", tiny_dir / "same.onnx")
    extra = "  layerwise:\n    checks:\n      - {metric: rel_l2, max: 1.0e-4}\n"
    text = (
        TINY_SUITE.format(samples=2)
        .replace(
            "  reference: tiny.onnx\n", "  reference: tiny.onnx\n  candidates:\n    a: same.onnx\n    b: same.onnx\n"
        )
        .replace(
            "    input: {shape: [2, 1, 8, 8], range: [-1, 1]}\n",
            "    input: {shape: [2, 1, 8, 8], range: [-1, 1]}\n"
            "  shapes: [{input: [1, 1, 8, 8]}, {input: [3, 1, 8, 8]}]\n",
        )
    )
    return write_suite(tiny_dir, text + extra)


def _comparable(stages: list[dict]) -> list[tuple]:
    return [
        (s["name"], s["shape"], s["status"], [(c["name"], c["value"], c["passed"]) for c in s["checks"]])
        for s in stages
    ]


def test_shards_split_a_sweep_by_shape_set_and_merge_back_to_the_unsharded_run(tiny_dir: Path, tmp_path: Path):
    from trtverify.config.loader import load_suite
    from trtverify.runner import cases

    suite = _swept_with_candidates(tiny_dir)
    assert cases(load_suite(suite)) == [
        ("framework", None, "input=1x1x8x8"),
        ("framework", None, "input=3x1x8x8"),
        ("layerwise", "a", "input=1x1x8x8"),
        ("layerwise", "a", "input=3x1x8x8"),
        ("layerwise", "b", "input=1x1x8x8"),
        ("layerwise", "b", "input=3x1x8x8"),
    ]
    full = run_cli("run", str(suite), "--out", str(tmp_path / "full"), "-q")
    assert full.code == 0, full.out + full.err
    for i in (1, 2):
        r = run_cli("run", str(suite), "--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}"), "-q")
        assert r.code == 0, r.out + r.err
    one = _results(tmp_path / "s1")["stages"]
    # round robin over the six cases: shard 1 runs framework at 1x1x8x8, a at 1x1x8x8 and b at 1x1x8x8
    assert [(s["name"], s["shape"], s.get("sharded_away", False)) for s in one] == [
        ("framework", "input=1x1x8x8", False),
        ("framework", "input=3x1x8x8", True),
        ("layerwise", "input=1x1x8x8", False),
        ("layerwise", "input=3x1x8x8", True),
    ]
    assert [c["name"] for c in one[2]["candidates"]] == ["a", "b"]
    r = run_cli("merge", str(tmp_path / "s2"), str(tmp_path / "s1"), "--out", str(tmp_path / "m"), "-q")
    assert r.code == 0, r.out + r.err
    merged, whole = _results(tmp_path / "m"), _results(tmp_path / "full")
    assert _comparable(merged["stages"]) == _comparable(whole["stages"])
    names = [[c["name"] for c in s.get("candidates") or []] for s in merged["stages"]]
    assert names == [[], [], ["a", "b"], ["a", "b"]]


def test_chosen_samples_in_a_sharded_sweep_give_each_case_one_owner(tiny_dir: Path):
    from trtverify.config.loader import load_suite
    from trtverify.runner import _unswept, make_plan
    from trtverify.stages.base import Shard

    loaded = load_suite(_swept_with_candidates(tiny_dir))
    ran: dict[str, list[str | None]] = {}
    for i in (1, 2):
        for plan in _unswept(make_plan(loaded, (), Shard(index=i, count=2))):
            assert plan.shape_set is None
            if plan.work is not None:
                ran.setdefault(plan.name, []).extend(plan.work.candidates or [None])
    # the first shape set's owner runs each case: framework once, each candidate once, over both shards
    assert ran == {"framework": [None], "layerwise": ["a", "b"]}


def test_an_interrupt_lists_the_shapes_still_to_run(tiny_dir: Path, tmp_path: Path):
    from trtverify.config.loader import load_suite
    from trtverify.runner import run_suite

    seen = []

    def sink(done, pending):
        seen.append(([(s.name, s.shape) for s in done], list(pending)))
        if done:
            raise KeyboardInterrupt  # as Ctrl-C after the first stage

    with pytest.raises(KeyboardInterrupt):
        run_suite(load_suite(_swept_with_candidates(tiny_dir)), tmp_path / "o", sink)
    assert seen == [
        (
            [("framework", "input=1x1x8x8")],
            [("framework", "input=3x1x8x8"), ("layerwise", "input=1x1x8x8"), ("layerwise", "input=3x1x8x8")],
        )
    ]


def test_a_sweep_with_chosen_samples_runs_each_stage_once_on_them(tiny_dir: Path, tmp_path: Path):
    import numpy as np

    from trtverify.cli.run import run_and_record
    from trtverify.config.loader import load_suite
    from trtverify.runner import RunOptions

    loaded = load_suite(_swept_with_candidates(tiny_dir))
    feeds = [{"input": np.zeros((2, 1, 8, 8), np.float32)}]
    results = run_and_record(loaded, tmp_path / "o", RunOptions(samples_override=feeds, chosen_by="a test"))
    assert [(s.name, s.shape) for s in results.stages] == [("framework", None), ("layerwise", None)]
    assert [c.name for c in results.stages[1].candidates] == ["a", "b"]


def test_only_the_swept_stages_get_the_profile_made_from_the_sweep(tiny_dir: Path):
    from trtverify.config.loader import load_suite
    from trtverify.runner import StagePlan, _for_plan, preflight
    from trtverify.stages.base import StageWork

    loaded = load_suite(_swept_tiny(tiny_dir, "[{input: [1, 1, 8, 8]}, {input: [16, 1, 8, 8]}]"))
    inputs = preflight(loaded)
    swept, _ = _for_plan(StagePlan("layerwise", StageWork(), shape_set={"input": [16, 1, 8, 8]}), loaded, [], inputs)
    (profile,) = swept.suite.backends.tensorrt.profiles
    assert (profile["input"].min, profile["input"].max) == ([1, 1, 8, 8], [16, 1, 8, 8])
    # e2e reads its own data at its own batch: a profile from the sweep's shapes would not fit it
    other, _ = _for_plan(StagePlan("e2e", StageWork(), batch=64), loaded, [], inputs)
    assert not other.suite.backends.tensorrt.profiles
