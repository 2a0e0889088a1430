"""`trtverify run` of several suites (issue 40): every suite validated first, each run in a process of its own
(a crash is that suite's error), one index, one JUnit file, the most severe exit code; `--shard I/N` deals whole
cases of every suite and `merge` of the shards gives the unsharded results. Real demo suites and models; the
crashes are real (os.abort() in a user's hook, and the SIGKILL the out-of-memory killer sends, sent by the
hook to its suite's process)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.results.test_schema import validate_junit
from trtverify.config.loader import load_suite
from trtverify.config.registry import STAGES
from trtverify.results.index import SuiteRow, build_index, most_severe, suite_row
from trtverify.runner import deal, zoo_cases

sys.path.insert(0, str(ROOT / "bench"))
from same_results import differences  # noqa: E402

DEMO = ("fashion_mnist", "shapes_segmentation", "shape_sweep")  # shape_sweep fails on purpose (exit 1)
TIMING = {"started", "duration_s", "timings", "overhead_vs_inference", "merged", "model"}  # model: a path in OUT


def _strip(x: object) -> object:
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in TIMING}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The three demo suites in one folder (with the demo files they read), run whole and in three shards."""
    base = tmp_path_factory.mktemp("zoo")
    (base / "suites").mkdir()
    for name in DEMO:
        shutil.copy(ROOT / "suites" / f"{name}.yaml", base / "suites")
    shutil.copy(ROOT / "suites" / "suite.schema.json", base / "suites")  # not a suite file: not taken
    for d in ("fashion_mnist", "shapes_seg", "shape_sweep"):
        shutil.copytree(ROOT / "demo" / d, base / "demo" / d)
    shutil.copytree(ROOT / "reference_outputs", base / "reference_outputs")
    whole = run_cli("run", "suites", "--out", "whole", "--junit", "whole/junit.xml", "-j", "2", cwd=base)
    assert whole.code == 1, whole.out + whole.err
    (base / "whole.err").write_text(whole.err)
    for i in (1, 2, 3):
        r = run_cli("run", "suites", "--shard", f"{i}/3", "--out", f"s{i}", "-q", cwd=base)
        assert r.code in (0, 1), r.out + r.err
    r = run_cli("merge", "s3", "s1", "s2", "--out", "merged", "--junit", "merged/junit.xml", cwd=base)
    assert r.code == 1, r.out + r.err
    return base


def test_a_folder_of_suites_gives_one_index_one_junit_and_the_most_severe_exit(zoo: Path):
    index = _load(zoo / "whole" / "index.json")
    assert [s["name"] for s in index["suites"]] == ["fashion_mnist", "shape_sweep", "shapes_segmentation"]
    assert [s["verdict"] for s in index["suites"]] == ["passed", "failed", "passed"]
    assert index["exit_code"] == 1 and index["verdict"] == "failed"
    for s in index["suites"]:  # each suite's own folder, as a run of it alone writes
        folder = zoo / "whole" / s["folder"]
        assert _load(folder / "results.json")["suite"]["name"] == s["name"]
        assert (folder / "report.html").is_file()
    sweep = next(s for s in index["suites"] if s["name"] == "shape_sweep")
    failed = [st for st in sweep["stages"] if st["status"] == "failed"]
    assert failed and all(not st["worst_check"]["passed"] for st in failed)
    html = (zoo / "whole" / "index.html").read_text()
    assert 'href="shape_sweep/report.html"' in html and "<script" not in html and "http" not in html.split("</head>")[1]
    root = validate_junit(zoo / "whole" / "junit.xml")
    assert sorted(ts.get("name") for ts in root.iter("testsuite")) == sorted(DEMO)  # one test suite per suite
    sweep = next(ts for ts in root.iter("testsuite") if ts.get("name") == "shape_sweep")
    assert int(sweep.get("failures")) >= 1 and int(root.get("failures")) == int(sweep.get("failures"))
    assert {tc.get("classname").split("[")[0] for tc in sweep.iter("testcase")} >= {"shape_sweep.framework"}
    err = (zoo / "whole.err").read_text()
    assert err.count("started]") == 3 and err.count("done]") == 3 and "FAILED shape_sweep in" in err


def test_shards_of_three_suites_merge_to_the_unsharded_results(zoo: Path):
    for name in DEMO:
        whole = _load(zoo / "whole" / name / "results.json")
        merged = _load(zoo / "merged" / name / "results.json")
        assert merged["merged"]["shards"] == 3
        assert differences(_strip(whole), _strip(merged)) == []
    a, b = _load(zoo / "whole" / "index.json"), _load(zoo / "merged" / "index.json")
    assert [(s["name"], s["verdict"], s["exit_code"]) for s in a["suites"]] == [
        (s["name"], s["verdict"], s["exit_code"]) for s in b["suites"]
    ]
    assert b["merged"] == 3 and b["exit_code"] == 1
    validate_junit(zoo / "merged" / "junit.xml")


def test_the_shards_split_whole_cases_of_every_suite(zoo: Path):
    ran: dict[tuple[str, str, str | None], list[int]] = {}
    for i in (1, 2, 3):
        assert _load(zoo / f"s{i}" / "index.json")["shard"] == {"index": i, "count": 3}
        for name in DEMO:
            for st in _load(zoo / f"s{i}" / name / "results.json")["stages"]:
                if not st.get("sharded_away"):
                    ran.setdefault((name, st["name"], st.get("shape")), []).append(i)
                    assert "shard_slice" not in st  # e2e runs whole in one shard, not sliced
            assert (zoo / f"s{i}" / name / "run.log").is_file()  # each suite has a case in each of the 3 shards
    assert all(len(v) == 1 or k[1] == "layerwise" for k, v in ran.items())  # layerwise: one shard per candidate
    assert {i for v in ran.values() for i in v} == {1, 2, 3}


def test_the_deal_is_deterministic_and_balanced():
    suites = [load_suite(ROOT / "suites" / f"{n}.yaml") for n in (*DEMO, "shapes_detection", "plugins_detection")]
    owners = deal(suites, 4)
    assert owners == deal(suites, 4)
    weights = [0] * 4
    for s, own in zip(suites, owners):
        cases = zoo_cases(s)
        assert len(own) == len(cases)
        for case, o in zip(cases, own):
            weights[o - 1] += STAGES.get(case[0]).weight
    assert max(weights) - min(weights) <= max(e.weight for e in STAGES.entries())
    assert all(o == 1 for own in deal(suites, 1) for o in own)


def test_every_problem_of_every_suite_is_reported_before_anything_runs(tmp_path: Path):
    shutil.copy(ROOT / "tests" / "data" / "tiny" / "tiny.onnx", tmp_path)
    good = "name: {name}\nreference_dir: refs\nmodels: {{reference: tiny.onnx, candidates: {{c: tiny.onnx}}}}\n"
    good += "inputs: {{generate: {{input: {{shape: [1, 1, 8, 8]}}}}}}\nstages: {{layerwise: {{}}}}\n"
    (tmp_path / "a.yaml").write_text(good.format(name="same"))
    (tmp_path / "b.yaml").write_text(good.format(name="same"))
    (tmp_path / "c.yaml").write_text(good.format(name="c").replace("layerwise: {}", "layerwise: {sample: 3}"))
    (tmp_path / "d.yml").write_text(good.format(name="d").replace("tiny.onnx", "missing.onnx"))
    r = run_cli("run", str(tmp_path), "--out", str(tmp_path / "out"))
    assert r.code == 2, r.out + r.err
    assert f"{tmp_path / 'b.yaml'}: name: 'same' is also the name of {tmp_path / 'a.yaml'}" in r.err
    assert f"{tmp_path / 'c.yaml'}:5: stages.layerwise.sample:" in r.err
    assert f"{tmp_path / 'd.yml'}:3: models.reference:" in r.err
    assert "problems in 3 of 4 suite files; nothing was run" in r.err
    assert not (tmp_path / "out").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run_cli("run", str(tmp_path / "a.yaml"), str(tmp_path / "nope.yaml"), str(empty), str(tmp_path / "a.yaml"))
    assert r.code == 2
    assert f"{tmp_path / 'nope.yaml'}: no such suite file or folder" in r.err
    assert f"{empty}: no suite files (*.yaml, *.yml) in this folder" in r.err
    assert f"{tmp_path / 'a.yaml'}: given twice" in r.err


HOOKS = """\
import os
import signal

import numpy as np


def aborts():
    os.abort()


def killed():
    os.kill(os.getppid(), signal.SIGKILL)  # what the out-of-memory killer does to a suite's process
    yield {"input": np.zeros((1, 1, 8, 8), np.float32)}


def fine():
    for _ in range(2):
        yield {"input": np.zeros((1, 1, 8, 8), np.float32)}
"""


def test_a_suite_that_crashes_is_its_own_error_and_the_others_finish(tmp_path: Path):
    shutil.copy(ROOT / "tests" / "data" / "tiny" / "tiny.onnx", tmp_path)
    (tmp_path / "hooks.py").write_text(HOOKS)
    for hook in ("aborts", "killed", "fine"):
        (tmp_path / f"{hook}.yaml").write_text(
            f"name: {hook}\npython_path: [.]\nreference_dir: refs\n"
            "models: {reference: tiny.onnx, candidates: {same: tiny.onnx}}\n"
            f"inputs: {{hook: 'hooks:{hook}'}}\nstages: {{layerwise: {{}}}}\n"
        )
    out = tmp_path / "out"
    r = run_cli("run", str(tmp_path), "-j", "2", "--out", str(out), "--junit", str(out / "j.xml"))
    assert r.code == 4, r.out + r.err
    rows = {s["name"]: s for s in _load(out / "index.json")["suites"]}
    assert rows["fine"]["verdict"] == "passed" and rows["fine"]["stages"][0]["status"] == "passed"
    assert rows["aborts"]["exit_code"] == 4 and "SIGABRT" in rows["aborts"]["error"]
    assert rows["killed"]["exit_code"] == 4 and "died of SIGKILL" in rows["killed"]["error"]
    root = validate_junit(out / "j.xml")
    assert int(root.get("errors")) == 2 and int(root.get("failures")) == 0
    assert "ERROR  killed in" in r.err and "PASSED fine in" in r.err


def test_the_gate_takes_the_most_severe_code():
    assert most_severe([0, 1, 0]) == 1
    assert most_severe([1, 2]) == 2 and most_severe([2, 3]) == 3 and most_severe([3, 4, 1]) == 4
    assert most_severe([0, -9]) == 4 and most_severe([]) == 0

    def row(code: int) -> SuiteRow:
        return suite_row("s", Path("s.yaml"), "s", code, 0.0, None, None)

    assert build_index("v", [row(0), row(1)], 1.0).exit_code == 1
    stopped = build_index("v", [row(1), row(143), row(130)], 1.0)  # Ctrl-C or SIGTERM: the run's own code
    assert (stopped.verdict, stopped.exit_code) == ("interrupted", 143)


def test_one_suite_keeps_its_layout(tmp_path: Path):
    shutil.copy(ROOT / "tests" / "data" / "tiny" / "tiny.onnx", tmp_path)
    (tmp_path / "s.yaml").write_text(
        "name: one\nreference_dir: refs\nmodels: {reference: tiny.onnx, candidates: {same: tiny.onnx}}\n"
        "inputs: {generate: {input: {shape: [1, 1, 8, 8]}}}\nstages: {layerwise: {}}\n"
    )
    r = run_cli("run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"))
    assert r.code == 0, r.err
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["report.html", "results.json"]


def test_sigterm_stops_every_suite_and_the_index_says_so(tmp_path: Path):
    import os
    import signal
    import subprocess
    import time

    shutil.copy(ROOT / "tests" / "data" / "tiny" / "tiny.onnx", tmp_path)
    (tmp_path / "hooks.py").write_text(
        "import time\nimport numpy as np\n\n\ndef slow():\n    time.sleep(60)\n"
        "    yield {'input': np.zeros((1, 1, 8, 8), np.float32)}\n"
    )
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(
            f"name: {name}\npython_path: [.]\nreference_dir: refs\n"
            "models: {reference: tiny.onnx, candidates: {same: tiny.onnx}}\n"
            "inputs: {hook: 'hooks:slow'}\nstages: {layerwise: {}}\n"
        )
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import sys\nfrom trtverify.cli.main import main\nmain(sys.argv[1:])\n"
    p = subprocess.Popen(
        [sys.executable, "-c", code, "run", str(tmp_path), "-j", "2", "--out", str(out)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not all((out / n / "run.log").is_file() for n in ("a", "b")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2)  # the suites' processes are in their input hook
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert time.monotonic() - t0 < 30  # not the hooks' 60 s
    index = _load(out / "index.json")
    assert index["verdict"] == "interrupted" and index["exit_code"] == 143
    assert {s["verdict"] for s in index["suites"]} == {"interrupted"}


def test_suites_that_do_not_fit_in_memory_together_run_one_after_the_other(tmp_path: Path):
    shutil.copy(ROOT / "tests" / "data" / "tiny" / "tiny.onnx", tmp_path)
    for name, budget in (("a", 10**8), ("b", 10**8), ("c", 64), ("d", 64)):  # a, b: each needs more than free
        (tmp_path / f"{name}.yaml").write_text(
            f"name: {name}\nreference_dir: refs\nmodels: {{reference: tiny.onnx, candidates: {{same: tiny.onnx}}}}\n"
            "inputs: {generate: {input: {shape: [1, 1, 8, 8]}}}\n"
            f"stages: {{layerwise: {{memory_budget_mb: {budget}}}}}\n"
        )
    r = run_cli("run", str(tmp_path), "-j", "2", "--out", str(tmp_path / "out"))
    assert r.code == 0, r.err
    events = []
    for line in r.err.splitlines():
        if " started] " in line:
            events.append(("start", line.split("] ")[1].split()[0]))
        elif " done] " in line:
            events.append(("done", line.split("] ")[1].split()[1]))
    # c and d fit together; a and b need more than is free: each runs alone, when nothing else runs
    assert events[:2] == [("start", "c"), ("start", "d")] and {e[1] for e in events[2:4]} == {"c", "d"}
    assert events[4:] == [("start", "a"), ("done", "a"), ("start", "b"), ("done", "b")]


def test_the_worst_check_is_the_most_failed_else_the_closest_tolerance():
    from trtverify.compare.checks import limit_check
    from trtverify.results.index import worst_check

    count = limit_check("tensors compared", "layerwise", "tensors_compared", 12, 1, ">=")
    near = limit_check("accuracy >= 0.85", "e2e", "accuracy", 0.86, 0.85, ">=")
    far = limit_check("accuracy drop <= 0.01", "e2e", "accuracy_drop", 0.001, 0.01, "<=")
    exact = limit_check("graph outputs compared", "layerwise", "outputs_compared", 1, 1, ">=")
    assert worst_check([count, exact, far, near]) is near  # not the count sitting on its limit
    assert worst_check([exact, count]) is exact
    over = limit_check("rel_l2 <= 0.01", "layerwise", "rel_l2", 0.05, 0.01, "<=")
    over_more = limit_check("max_abs <= 0.1", "layerwise", "max_abs", 1.0, 0.1, "<=")
    assert worst_check([near, over, over_more]) is over_more and worst_check([]) is None


def test_a_suite_with_no_case_in_a_shard_is_written_without_a_process(tmp_path: Path):
    shutil.copy(ROOT / "tests" / "data" / "tiny" / "tiny.onnx", tmp_path)
    for name in ("a", "b"):  # one case each (layerwise, one candidate): one suite per shard
        (tmp_path / f"{name}.yaml").write_text(
            f"name: {name}\nreference_dir: refs\nmodels: {{reference: tiny.onnx, candidates: {{same: tiny.onnx}}}}\n"
            "inputs: {generate: {input: {shape: [1, 1, 8, 8]}}}\nstages: {layerwise: {}}\n"
        )
    for i in (1, 2):
        r = run_cli("run", str(tmp_path), "--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}"))
        assert r.code == 0, r.err
        assert r.err.count("every case runs in another shard") == 1
    for i in (1, 2):
        for name in ("a", "b"):
            stages = _load(tmp_path / f"s{i}" / name / "results.json")["stages"]
            idle = all(s.get("sharded_away") for s in stages)
            assert idle == (not (tmp_path / f"s{i}" / name / "run.log").exists())  # no process for an idle suite
    r = run_cli("merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m"))
    assert r.code == 0, r.err
    assert [s["verdict"] for s in _load(tmp_path / "m" / "index.json")["suites"]] == ["passed", "passed"]
