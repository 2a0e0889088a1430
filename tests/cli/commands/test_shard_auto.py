"""`--shard auto` (issue 40): the shard from each engine's own variables, as the engine sets them (GitLab CI
`parallel`, Kubernetes Indexed Jobs, Slurm job arrays, Buildkite and CircleCI parallelism); none found, an
incomplete set or two engines that disagree are usage errors naming what was read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from trtverify.cli.shardenv import shard_from_env
from trtverify.util.errors import UsageError

# each engine's variables for the third of four shards, as the engine itself sets them
THIRD_OF_FOUR = {
    "GitLab": {"CI_NODE_INDEX": "3", "CI_NODE_TOTAL": "4"},  # counts from 1
    "Kubernetes": {"JOB_COMPLETION_INDEX": "2", "TRTVERIFY_SHARDS": "4"},  # from 0; the count is ours to give
    "Slurm": {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "5", "SLURM_ARRAY_TASK_COUNT": "4"},  # --array=5-8
    "Slurm step": {
        "SLURM_ARRAY_TASK_ID": "4",
        "SLURM_ARRAY_TASK_MIN": "0",
        "SLURM_ARRAY_TASK_STEP": "2",
        "SLURM_ARRAY_TASK_COUNT": "4",
    },  # --array=0-6:2
    "Buildkite": {"BUILDKITE_PARALLEL_JOB": "2", "BUILDKITE_PARALLEL_JOB_COUNT": "4"},
    "CircleCI": {"CIRCLE_NODE_INDEX": "2", "CIRCLE_NODE_TOTAL": "4"},
}


@pytest.mark.parametrize("engine", list(THIRD_OF_FOUR))
def test_each_engine_gives_the_third_of_four(engine: str):
    index, count, source = shard_from_env(THIRD_OF_FOUR[engine])
    assert (index, count) == (3, 4)
    assert all(f"{k}={v}" in source for k, v in THIRD_OF_FOUR[engine].items())


def test_the_first_and_last_shards_of_every_engine():
    firsts = [
        {"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "2"},
        {"JOB_COMPLETION_INDEX": "0", "TRTVERIFY_SHARDS": "2"},
        {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "2"},
        {"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "2"},
        {"CIRCLE_NODE_INDEX": "0", "CIRCLE_NODE_TOTAL": "2"},
    ]
    for env in firsts:
        assert shard_from_env(env)[:2] == (1, 2)
        last = {k: str(int(v) + 1) if k.endswith(("INDEX", "_JOB", "TASK_ID")) else v for k, v in env.items()}
        assert shard_from_env(last)[:2] == (2, 2)
        beyond = {k: str(int(v) + 2) if k.endswith(("INDEX", "_JOB", "TASK_ID")) else v for k, v in env.items()}
        with pytest.raises(UsageError, match="outside 1..2"):
            shard_from_env(beyond)


def test_no_engine_names_every_variable_read():
    with pytest.raises(UsageError) as exc:
        shard_from_env({"GITHUB_ACTIONS": "true", "PATH": "/usr/bin"})
    for var in (
        "CI_NODE_INDEX",
        "JOB_COMPLETION_INDEX",
        "TRTVERIFY_SHARDS",
        "SLURM_ARRAY_TASK_ID",
        "CIRCLE_NODE_INDEX",
    ):
        assert var in str(exc.value)
    assert "matrix.shard" in str(exc.value)


def test_two_engines_that_disagree_are_refused_and_named():
    env = {**THIRD_OF_FOUR["GitLab"], "CIRCLE_NODE_INDEX": "0", "CIRCLE_NODE_TOTAL": "4"}
    with pytest.raises(UsageError, match=r"CI_NODE_INDEX=3.*CIRCLE_NODE_INDEX=0"):
        shard_from_env(env)
    agree = {**THIRD_OF_FOUR["GitLab"], **THIRD_OF_FOUR["CircleCI"]}
    assert shard_from_env(agree)[:2] == (3, 4)


def test_an_incomplete_engine_says_what_is_missing():
    with pytest.raises(UsageError, match="JOB_COMPLETION_INDEX is set but TRTVERIFY_SHARDS is not"):
        shard_from_env({"JOB_COMPLETION_INDEX": "1"})
    with pytest.raises(UsageError, match="SLURM_ARRAY_TASK_MIN is not"):
        shard_from_env({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2"})
    with pytest.raises(UsageError, match="not a whole number"):
        shard_from_env({"CI_NODE_INDEX": "x", "CI_NODE_TOTAL": "2"})


def test_run_shard_auto_under_kubernetes_and_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    shutil.copy(ROOT / "tests" / "data" / "tiny" / "tiny.onnx", tmp_path)
    (tmp_path / "s.yaml").write_text(
        "name: one\nreference_dir: refs\nmodels: {reference: tiny.onnx, candidates: {a: tiny.onnx, b: tiny.onnx}}\n"
        "inputs: {generate: {input: {shape: [1, 1, 8, 8]}}}\nstages: {layerwise: {}}\n"
    )
    for var in ("CI_NODE_INDEX", "SLURM_ARRAY_TASK_ID", "BUILDKITE_PARALLEL_JOB", "CIRCLE_NODE_INDEX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    r = run_cli("run", str(tmp_path / "s.yaml"), "--shard", "auto", "--out", str(tmp_path / "o"))
    assert r.code == 2 and "--shard auto: no shard index in the environment" in r.err
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "1")
    monkeypatch.setenv("TRTVERIFY_SHARDS", "2")
    r = run_cli("run", str(tmp_path / "s.yaml"), "--shard", "auto", "--out", str(tmp_path / "o"))
    assert r.code == 0, r.err
    assert "shard 2/2 from Kubernetes Indexed Job (JOB_COMPLETION_INDEX=1, TRTVERIFY_SHARDS=2)" in r.err
    import json

    assert json.loads((tmp_path / "o" / "results.json").read_text())["shard"] == {"index": 2, "count": 2}
