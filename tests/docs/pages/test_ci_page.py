"""docs/ci.md matches the code: its workflows and manifests are valid YAML (the Kubernetes ones with the fields a
batch/v1 Job requires), its Slurm scripts pass `bash -n`, every trtverify command line in them uses a subcommand
and options that exist, and the command lines of the sharded examples run here on CPU, on two small suites, under
each engine's own variables, and merge (issue 40). The CI systems and clusters themselves cannot run here."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from trtverify.cli.main import cli
from trtverify.stages.base import Shard

DOC = ROOT / "docs" / "ci.md"
TEXT = DOC.read_text()
YAML_BLOCKS = re.findall(r"```yaml\n(.*?)```", TEXT, flags=re.S)
BASH_BLOCKS = re.findall(r"```bash\n(.*?)```", TEXT, flags=re.S)
SH_BLOCKS = re.findall(r"```sh\n(.*?)```", TEXT, flags=re.S)


def _commands(node: object) -> list[str]:
    if isinstance(node, str):
        return [line.strip() for line in node.splitlines() if line.strip().startswith("trtverify ")]
    if isinstance(node, list):
        return [c for item in node for c in _commands(item)]
    if isinstance(node, dict):
        return [c for v in node.values() for c in _commands(v)]
    return []


def _bash_commands(block: str) -> list[str]:
    out = [line.strip() for line in block.splitlines() if line.strip().startswith("trtverify ")]
    return out + re.findall(r'--wrap "(trtverify [^"]*)"', block)


def _documents() -> list[list[object]]:
    return [[d for d in yaml.safe_load_all(b) if d is not None] for b in YAML_BLOCKS]


def _jobs() -> list[dict]:
    return [d for docs in _documents() for d in docs if isinstance(d, dict) and d.get("kind") == "Job"]


def test_every_block_parses_and_its_commands_exist():
    assert len(YAML_BLOCKS) == 6  # GitHub and GitLab, single job and sharded; the Kubernetes shards and merge
    commands = [c for docs in _documents() for d in docs for c in _commands(d)]
    commands += [c for b in BASH_BLOCKS for c in _bash_commands(b)]
    commands += [c.split("#")[0].strip() for b in SH_BLOCKS if "suites/" in b for c in _commands(b)]
    assert {c.split()[1] for c in commands} == {"run", "merge"}
    for command in commands:
        command = command.split(" || ")[0]
        for token, value in (("${{ matrix.shard }}", "2"), ("${{ strategy.job-total }}", "4")):
            command = command.replace(token, value)
        command = command.replace("${CI_NODE_INDEX}", "2").replace("${CI_NODE_TOTAL}", "4")
        args = shlex.split(command)[1:]
        sub = cli.commands[args[0]]
        known = {o for p in sub.params for o in p.opts}
        used = [a for a in args[1:] if a.startswith("-")]
        assert used and set(used) <= known, (command, set(used) - known)
        if "--shard" in args and args[args.index("--shard") + 1] != "auto":
            assert Shard.parse(args[args.index("--shard") + 1]).count in (2, 4)
        if args[0] == "run":
            assert "--out" in args


def test_the_kubernetes_manifests_have_what_a_job_requires():
    jobs = _jobs()
    assert len(jobs) == 2
    indexed = next(j for j in jobs if j["spec"].get("completionMode") == "Indexed")
    for job in jobs:
        assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job" and job["metadata"]["name"]
        pod = job["spec"]["template"]["spec"]
        assert pod["restartPolicy"] in ("Never", "OnFailure")  # a Job refuses Always
        assert pod["containers"] and all(c["name"] and c["image"] for c in pod["containers"])
        mounts = {m["name"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]}
        assert mounts <= set(claims) and set(claims.values()) == {"trtverify-shards"}
    spec = indexed["spec"]
    assert isinstance(spec["completions"], int) and 1 <= spec["parallelism"] <= spec["completions"]
    shard = indexed["spec"]["template"]["spec"]["containers"][0]
    assert shard["resources"]["limits"]["nvidia.com/gpu"] == 1
    env = {e["name"]: e["value"] for e in shard["env"]}
    assert int(env["TRTVERIFY_SHARDS"]) == spec["completions"]  # the count --shard auto reads
    pvc = next(d for docs in _documents() for d in docs if d.get("kind") == "PersistentVolumeClaim")
    assert pvc["metadata"]["name"] == "trtverify-shards" and "ReadWriteMany" in pvc["spec"]["accessModes"]


def test_the_slurm_scripts_pass_bash_n_and_ask_for_an_array_of_one_gpu_each(tmp_path: Path):
    assert len(BASH_BLOCKS) == 2
    script, submit = BASH_BLOCKS
    for i, block in enumerate(BASH_BLOCKS):
        (tmp_path / f"{i}.sh").write_text(block)
        r = subprocess.run(["bash", "-n", str(tmp_path / f"{i}.sh")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    assert re.search(r"^#SBATCH --array=0-3$", script, flags=re.M) and "#SBATCH --gres=gpu:1" in script
    assert "--dependency=afterany:$JOBID" in submit and "--parsable" in submit


# --- the sharded examples' command lines, run --------------------------------------------------------------------

SHARDS = 2  # run here with 2 shards (the docs show 4): the same lines, the engine's variables for 2
TINY = "name: {name}\nreference_dir: ../refs\nmodels: {{reference: ../tiny.onnx, candidates: {{a: ../tiny.onnx, b: ../tiny.onnx}}}}\ninputs: {{generate: {{input: {{shape: [1, 1, 8, 8]}}}}}}\nstages: {{layerwise: {{}}}}\n"  # noqa: E501


def _engine_env(engine: str, i: int) -> dict[str, str]:
    """The variables the engine sets for shard i (from 1) of SHARDS."""
    return {
        "gitlab": {"CI_NODE_INDEX": str(i), "CI_NODE_TOTAL": str(SHARDS)},
        "kubernetes": {"JOB_COMPLETION_INDEX": str(i - 1), "TRTVERIFY_SHARDS": str(SHARDS)},
        "slurm": {
            "SLURM_ARRAY_TASK_ID": str(i - 1),
            "SLURM_ARRAY_TASK_MIN": "0",
            "SLURM_ARRAY_TASK_MAX": str(SHARDS - 1),
            "SLURM_ARRAY_TASK_COUNT": str(SHARDS),
        },
        "github": {},
    }[engine]


def _examples() -> dict[str, tuple[list[str], list[str]]]:
    """Each sharded example's (shard command lines, merge command lines), as the docs write them."""
    docs = _documents()
    github = next(c for d in docs for c in [_commands(d[0])] if "${{ matrix.shard }}" in " ".join(c))
    gitlab = next(c for d in docs for c in [_commands(d[0])] if "--shard auto" in " ".join(c))
    kube = [c for j in _jobs() for c in _commands(j["spec"]["template"]["spec"]["containers"][0]["args"])]
    slurm = [c for b in BASH_BLOCKS for c in _bash_commands(b)]
    out = {}
    for engine, lines in (("github", github), ("gitlab", gitlab), ("kubernetes", kube), ("slurm", slurm)):
        out[engine] = ([c for c in lines if "--shard" in c], [c for c in lines if c.startswith("trtverify merge")])
        assert len(out[engine][0]) == 1 and len(out[engine][1]) == 1, (engine, lines)
    return out


EXAMPLES = _examples()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("ci")
    shutil.copy(ROOT / "tests" / "data" / "tiny" / "tiny.onnx", base)
    (base / "suites").mkdir()
    for name in ("model_a", "model_b"):
        (base / "suites" / f"{name}.yaml").write_text(TINY.format(name=name))
    return base


def _bash(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("CI_NODE", "JOB_COMPLETION", "SLURM_"))}
    full.update(env)
    full["PATH"] = os.path.dirname(sys.executable) + os.pathsep + full["PATH"]
    full["PYTHONPATH"] = str(ROOT) + os.pathsep + full.get("PYTHONPATH", "")
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=full, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("engine", list(EXAMPLES))
def test_the_sharded_example_runs_under_its_engine_and_merges(engine: str, workspace: Path):
    (shard_line,), (merge_line,) = EXAMPLES[engine]
    cwd = workspace / engine
    shutil.copytree(workspace / "suites", cwd / "suites")
    shutil.copy(workspace / "tiny.onnx", cwd)
    # the manifests' absolute /shards is the pods' shared volume: here a folder of the workspace
    shard_line, merge_line = (x.replace(" /shards/", f" {cwd}/shards/") for x in (shard_line, merge_line))
    for i in range(1, SHARDS + 1):
        line = shard_line.replace("${{ matrix.shard }}", str(i)).replace("${{ strategy.job-total }}", str(SHARDS))
        r = _bash(line, cwd, _engine_env(engine, i))
        assert r.returncode == 0, (line, r.stdout, r.stderr)
        if "--shard auto" in line:
            assert f"--shard auto: shard {i}/{SHARDS} from" in r.stderr
    if engine == "github":  # download-artifact puts shard N's folder at shards/shard-N
        for i in range(1, SHARDS + 1):
            (cwd / "shards" / str(i)).rename(cwd / "shards" / f"shard-{i}")
    r = _bash(merge_line, cwd, {})
    assert r.returncode == 0, (merge_line, r.stdout, r.stderr)
    gate = next(p for p in cwd.rglob("gate") if p.is_dir())
    index = json.loads((gate / "index.json").read_text())
    assert index["merged"] == SHARDS and [s["verdict"] for s in index["suites"]] == ["passed", "passed"]
    assert (gate / "junit.xml").is_file() and (gate / "model_a" / "report.html").is_file()


def test_the_many_suites_lines_run(workspace: Path):
    block = next(b for b in SH_BLOCKS if "trtverify run suites/ --out reports/gate" in b)
    cwd = workspace / "many"
    shutil.copytree(workspace / "suites", cwd / "suites")
    shutil.copy(workspace / "tiny.onnx", cwd)
    for line in _commands(block):
        r = _bash(line, cwd, {})
        assert r.returncode == 0, (line, r.stdout, r.stderr)
    assert json.loads((cwd / "reports" / "gate" / "index.json").read_text())["merged"] == SHARDS
