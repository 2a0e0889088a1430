"""Nothing lost on Ctrl-C during a rerun (issue 45, item 7), with real processes and real signals on the faults
suite of tests/program/faults/test_faults.py (layerwise, then e2e whose preprocess hook sleeps): the finished run stays
until the
new one has a stage to replace it with, results.json and report.html always agree, a run stopped before anything
was written still leaves a results.json that says so, and `--stage` keeps the other stages' results."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import jsonschema
import pytest

from tests.program.faults.test_faults import SCHEMA, _start, _wait_for_stage, suite  # noqa: F401  (suite: a fixture)


def _results(out: Path) -> dict:
    res = json.loads((out / "results.json").read_text())
    jsonschema.validate(res, SCHEMA)
    return res


def _stages(res: dict) -> list[tuple[str, str, str | None]]:
    return [(s["name"], s["status"], s.get("kept_from")) for s in res["stages"]]


def _report(out: Path) -> str:
    return (out / "report.html").read_text()


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _stop_when(proc, ready, sig: int = signal.SIGINT, timeout: float = 60) -> str:
    """Send `sig` to the process started once `ready()` holds; its stderr, after it exits."""
    end = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == (143 if sig == signal.SIGTERM else 130), err
    assert "Traceback" not in err, err
    return err


@pytest.mark.slow
def test_a_rerun_stopped_at_any_moment_keeps_the_finished_run(suite: Path, tmp_path: Path):  # noqa: F811
    out = tmp_path / "o"
    proc = _start("run", str(suite), "--out", str(out))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    before = _results(out)
    assert before["complete"] and _stages(before) == [("layerwise", "passed", None), ("e2e", "passed", None)]

    # 1. stopped as soon as the worker process exists (reading the suite, importing, checking the models, taking
    # the lock): the signal waits there until the run can say what it leaves (today's bug: a traceback, nothing)
    proc = _start("run", str(suite), "--out", str(out), sleep=30)
    err = _stop_when(proc, lambda: bool(_children(proc.pid)))
    after = _results(out)
    stop = after.pop("interrupted")
    assert after == before  # the finished run, untouched
    assert stop["earlier_kept"] is True and stop["signal"] == "SIGINT" and stop["stages_done"] == 0
    assert stop["run_started"] >= before["started"]
    assert f"{out / 'results.json'} keeps the results of the earlier run (started {before['started']})" in err
    html = _report(out)  # rendered from that results.json
    assert "was stopped by SIGINT" in html and "these are the results of the earlier run, kept" in html
    assert "incomplete run" not in html and "PASSED" in html

    # 2. stopped mid-stage (e2e sleeps in its preprocess hook) once layerwise is done
    proc = _start("run", str(suite), "--out", str(out), sleep=30)
    first = _wait_for_stage(out, "layerwise", proc)
    while "interrupted" in first:  # the new run's results.json, not the one stopped in 1.
        time.sleep(0.02)
        first = _wait_for_stage(out, "layerwise", proc)
    assert first["stages"][1]["kept_from"] == before["started"]  # e2e, not run yet: the finished run's, kept
    # results.json and the report are written together after each stage: they agree while the run goes on
    assert first["started"] in _report(out) and "earlier run started" in _report(out)
    err = _stop_when(proc, lambda: True, signal.SIGTERM)
    after = _results(out)
    assert after["complete"] is False and after["exit_code"] is None
    assert _stages(after) == [("layerwise", "passed", None), ("e2e", "passed", before["started"])]
    e2e_before = next(s for s in before["stages"] if s["name"] == "e2e")
    e2e_after = next(s for s in after["stages"] if s["name"] == "e2e")
    assert {k: v for k, v in e2e_after.items() if k != "kept_from"} == e2e_before  # the earlier run's e2e, whole
    assert after["interrupted"]["signal"] == "SIGTERM" and after["interrupted"]["stages_done"] == 1
    assert after["interrupted"]["earlier_kept"] is False
    assert "not run: e2e (the earlier run's result kept)" in err
    html = _report(out)
    assert after["started"] in html and "stopped by SIGTERM" in html and "incomplete run" in html
    assert f"the result of the earlier run started {before['started']}, kept" in html


@pytest.mark.slow
def test_a_first_run_stopped_before_anything_was_written_leaves_a_results_json_that_says_so(
    suite: Path,  # noqa: F811
    tmp_path: Path,
):
    out = tmp_path / "o"
    proc = _start("run", str(suite), "--out", str(out), sleep=30)
    lock = out / ".trtverify.lock"
    _stop_when(proc, lambda: bool(_children(proc.pid)))  # the worker started: nothing written yet
    res = _results(out)
    assert res["complete"] is False and res["passed"] is False and res["exit_code"] is None
    assert _stages(res) == [("layerwise", "skipped", None), ("e2e", "skipped", None)]
    assert res["interrupted"]["earlier_kept"] is False and res["interrupted"]["stages_done"] == 0
    html = _report(out)
    assert "stopped by SIGINT" in html and "incomplete run" in html
    assert not lock.exists()


def test_stage_reruns_one_stage_and_keeps_the_others_results(tmp_path: Path):
    """`run --stage` into a folder with a finished run of the same suite: that stage replaced, the others kept and
    marked as the earlier run's; the verdict and the report are the whole suite's (in process: no signal here)."""
    import shutil

    from tests.conftest import TINY, as_json
    from trtverify.cli.run import run_and_record
    from trtverify.config.loader import load_suite
    from trtverify.runner import RunOptions

    shutil.copy(TINY / "tiny.onnx", tmp_path / "tiny.onnx")
    path = tmp_path / "suite.yaml"
    path.write_text(
        "name: kept\nmodels:\n  reference: tiny.onnx\n  candidates: {same: tiny.onnx}\ninputs:\n  samples: 1\n"
        "  generate:\n    input: {shape: [1, 1, 8, 8], range: [-1, 1]}\n"
        "stages:\n  layerwise: {}\n  buildlog: {logs: [build.log]}\n"
    )
    (tmp_path / "build.log").write_text("[I] [TRT] Loaded engine size: 1 MiB\n")
    out = tmp_path / "o"
    first = run_and_record(load_suite(path), out)
    assert [s.name for s in first.stages] == ["layerwise", "buildlog"] and first.complete
    os.utime(path)  # the same content: its results are kept
    again = run_and_record(load_suite(path), out, RunOptions(stages=("buildlog",)))
    assert [(s.name, s.kept_from) for s in again.stages] == [("layerwise", first.started), ("buildlog", None)]
    assert again.complete and again.exit_code == first.exit_code
    assert as_json(again.stages[0].model_copy(update={"kept_from": None})) == as_json(first.stages[0])
    on_disk = _results(out)
    assert on_disk["stages"][0]["kept_from"] == first.started and "kept_from" not in on_disk["stages"][1]
    assert f"the result of the earlier run started {first.started}, kept" in _report(out)
    path.write_text(path.read_text().replace("samples: 1", "samples: 2"))  # another suite: nothing kept
    edited = run_and_record(load_suite(path), out, RunOptions(stages=("buildlog",)))
    assert [(s.name, s.kept_from) for s in edited.stages] == [("buildlog", None)]


def test_a_ctrl_c_that_an_extension_import_turned_into_import_error_stops_the_run(tmp_path: Path, monkeypatch):
    """SIGINT while `import onnxruntime` initialises its pybind11 module raises ImportError('initialization
    failed') from the KeyboardInterrupt: the stage recorded it as an internal error (exit 4) and the run went on
    (measured: a signal 2.0 s into a run, once in six). The interrupted import cannot be timed in a test: the
    stage's loader raises what that import raises (the one fake here)."""
    import shutil

    from tests.conftest import TINY
    from trtverify import runner
    from trtverify.cli.run import run_and_record
    from trtverify.config.loader import load_suite

    shutil.copy(TINY / "tiny.onnx", tmp_path / "tiny.onnx")
    path = tmp_path / "suite.yaml"
    path.write_text(
        "name: ext\nmodels:\n  reference: tiny.onnx\n  candidates: {same: tiny.onnx}\ninputs:\n  samples: 1\n"
        "  generate:\n    input: {shape: [1, 1, 8, 8], range: [-1, 1]}\nstages:\n  layerwise: {}\n"
    )

    def interrupted_import(ctx):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise ImportError("initialization failed") from exc

    monkeypatch.setattr(runner.STAGES, "load", lambda name: interrupted_import)
    with pytest.raises(KeyboardInterrupt) as stopped:
        run_and_record(load_suite(path), tmp_path / "o")
    res = _results(tmp_path / "o")
    assert _stages(res) == [("layerwise", "skipped", None)] and res["interrupted"]["signal"] == "SIGINT"
    assert stopped.value.trtverify_stopped.lines()[0].endswith("(no stage finished; not run: layerwise)")
