"""Faults during a run, with real processes and real signals: SIGINT, SIGTERM and SIGKILL mid-run,
a rerun into a killed run's folder, two runs into one folder, an --out that cannot be written, a full
disk mid-write; and determinism (the same suite twice gives the same results.json apart from timings).

The suite here runs layerwise (fast) and then e2e, whose preprocess hook sleeps SLEEP seconds per
image (an environment variable), so a signal lands while e2e runs, after layerwise is recorded."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from tests.conftest import ROOT, TINY, run_cli

SCHEMA = json.loads((ROOT / "trtverify" / "results" / "results.schema.json").read_text())

SUITE = """\
name: faults
python_path: [.]
models:
  reference: tiny.onnx
  candidates: {same: tiny.onnx}
inputs:
  samples: 2
  generate:
    input: {shape: [1, 1, 8, 8], range: [-1, 1]}
stages:
  layerwise: {}
  e2e:
    task: classification
    dataset: {npz: data.npz}
    preprocess: {hook: "slowprep:prep"}
    gates: [{metric: accuracy, max_drop: 0.5}]
    batch_size: 1
    workers: 0
"""

SLOWPREP = """\
import os, time
import numpy as np

def prep(image):
    time.sleep(float(os.environ.get("SLEEP", "0")))
    return (image.astype(np.float32) / 255.0).reshape(1, 8, 8)
"""


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    shutil.copy(TINY / "tiny.onnx", tmp_path / "tiny.onnx")
    (tmp_path / "slowprep.py").write_text(SLOWPREP)
    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "data.npz",
        images=rng.integers(0, 255, (12, 8, 8, 1), dtype=np.uint8),
        labels=rng.integers(0, 5, 12),
    )
    path = tmp_path / "suite.yaml"
    path.write_text(SUITE)
    return path


def _start(*args: str, sleep: float = 0.0, prelude: str = "") -> subprocess.Popen[str]:
    code = "import sys\n" + prelude + "from trtverify.cli.main import main\nmain(sys.argv[1:])\n"
    env = dict(os.environ, SLEEP=str(sleep), PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )


def _default_sigint() -> None:
    """The child takes SIGINT as a terminal's Ctrl-C would deliver it. A shell runs a background job (`make test
    &`, nohup) with SIGINT ignored, children inherit that, and Python then installs no KeyboardInterrupt handler:
    the run would rightly ignore the signal, and these tests would wait for nothing (how a CI run hung here)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for_stage(out: Path, stage: str, proc: subprocess.Popen[str], timeout: float = 120) -> dict:
    """The results.json the run wrote once `stage` was recorded (the run goes on with the next one)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        try:
            res = json.loads((out / "results.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            res = None
        if res and any(s["name"] == stage and s["status"] != "skipped" for s in res["stages"]):
            return res
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"{stage} was not recorded in {timeout} s")


def _statuses(res: dict) -> dict[str, str]:
    return {s["name"]: s["status"] for s in res["stages"]}


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_mid_run_stops_with_what_ran_marked_incomplete(suite: Path, tmp_path: Path, sig: int, code: int):
    out = tmp_path / "o"
    proc = _start("run", str(suite), "--out", str(out), sleep=30)
    _wait_for_stage(out, "layerwise", proc)
    proc.send_signal(sig)
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=60)
    # data readers sleep in the hook and cannot be interrupted: the exit waits for them EXIT_GRACE_S at most (it
    # did not come within 60 s on a busy machine)
    assert time.monotonic() - t0 < 20, err
    assert proc.returncode == code, err
    assert ("terminated" if sig == signal.SIGTERM else "interrupted") in err and "Traceback" not in err
    # it said only `interrupted`: now what was kept, and how to go on (issue 36)
    assert f"{out / 'results.json'} keeps what ran, marked incomplete (done: layerwise passed; not run: e2e)" in err
    assert f"trtverify run {suite} --stage e2e --out {out}-rest" in err and "run the same command again" in err
    res = json.loads((out / "results.json").read_text())
    assert res["complete"] is False and res["exit_code"] is None and res["passed"] is False
    assert _statuses(res) == {"layerwise": "passed", "e2e": "skipped"}
    assert not (out / ".trtverify.lock").exists()  # released on the way out


@pytest.mark.slow
def test_a_signal_before_the_first_stage_ends_still_leaves_an_incomplete_results_json(suite: Path, tmp_path: Path):
    out = tmp_path / "o"
    proc = _start("run", str(suite), "--out", str(out), "--stage", "e2e", sleep=30)
    time.sleep(0.5)
    while proc.poll() is None and not (out / ".trtverify.lock").exists():  # the run has begun
        time.sleep(0.1)
    time.sleep(3)  # imports, preflight; then e2e sleeps in its preprocess hook
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert "(no stage finished; not run: e2e)" in err and "--stage" not in err.split("terminated")[-1], err
    res = json.loads((out / "results.json").read_text())
    assert res["complete"] is False and _statuses(res) == {"e2e": "skipped"}


def _worker(out: Path, proc: subprocess.Popen[str]) -> int:
    """The pid of the process doing the run's work (cli/supervise.py): the one holding the run lock."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            text = (out / ".trtverify.lock").read_text().strip()
        except FileNotFoundError:
            text = ""
        if text.isdigit():
            assert int(text) != proc.pid  # the work runs in a child of the process started
            return int(text)
        time.sleep(0.05)
    raise AssertionError("no run lock")


def _gone(pid: int, timeout: float = 30) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
def test_sigkill_leaves_a_valid_results_json_and_a_rerun_into_that_folder_works(suite: Path, tmp_path: Path):
    """SIGKILL to the process started (a CI timeout): its worker gets SIGTERM (PR_SET_PDEATHSIG) and stops as it
    does on SIGTERM; results.json is whole and the lock released."""
    out = tmp_path / "o"
    proc = _start("run", str(suite), "--out", str(out), sleep=30)
    _wait_for_stage(out, "layerwise", proc)
    worker = _worker(out, proc)
    proc.kill()
    proc.communicate(timeout=60)
    assert _gone(worker), "the worker outlived its parent"
    res = json.loads((out / "results.json").read_text())  # whole: written atomically after layerwise
    jsonschema.validate(res, SCHEMA)
    assert res["complete"] is False and _statuses(res) == {"layerwise": "passed", "e2e": "skipped"}
    assert not (out / ".trtverify.lock").exists()
    assert not list(out.glob(".*.tmp"))

    # a lock left by a process that is gone (a machine that lost power) is taken over
    (out / ".trtverify.lock").write_text(f"{worker}\n")
    rerun = _start("run", str(suite), "--out", str(out))
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    res = json.loads((out / "results.json").read_text())
    assert res["complete"] is True and _statuses(res) == {"layerwise": "passed", "e2e": "passed"}
    assert not (out / ".trtverify.lock").exists()


@pytest.mark.slow
def test_the_worker_killed_by_the_out_of_memory_killer_is_its_stage_s_error(suite: Path, tmp_path: Path):
    """SIGKILL to the worker alone, as the kernel's OOM killer sends it: the stage it was in is recorded as crashed,
    the stages before it are kept, and the run ends complete."""
    out = tmp_path / "o"
    proc = _start("run", str(suite), "--out", str(out), sleep=2)
    _wait_for_stage(out, "layerwise", proc)
    os.kill(_worker(out, proc), signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 4, err
    assert "died of SIGKILL (killed, most often by the kernel's out-of-memory killer)" in err
    res = json.loads((out / "results.json").read_text())
    assert res["complete"] is True and _statuses(res) == {"layerwise": "passed", "e2e": "error"}
    e2e = res["stages"][1]
    assert e2e["error"]["kind"] == "crash" and "SIGKILL" in e2e["error"]["message"]
    assert not (out / ".trtverify.lock").exists()


@pytest.mark.slow
def test_a_second_run_into_the_same_folder_is_refused_while_the_first_runs(suite: Path, tmp_path: Path):
    out = tmp_path / "o"
    first = _start("run", str(suite), "--out", str(out), sleep=0.5)
    _wait_for_stage(out, "layerwise", first)
    second = _start("run", str(suite), "--out", str(out))
    _, err = second.communicate(timeout=120)
    assert second.returncode == 2, err
    assert f"--out {out}: another trtverify run (pid {_worker(out, first)}) is writing there" in err
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err  # the first run was not disturbed
    res = json.loads((out / "results.json").read_text())
    assert res["complete"] is True and _statuses(res) == {"layerwise": "passed", "e2e": "passed"}


def test_an_out_that_cannot_be_written_is_exit_2_before_any_work(suite: Path, tmp_path: Path):
    (tmp_path / "afile").write_text("x")
    # tests run as root, where a read-only folder does not stop writes: a path below a regular file,
    # and one in /proc (where nothing can be created), stand for an unwritable folder
    for out in (tmp_path / "afile" / "o", Path("/proc/trtverify-test/o")):
        r = run_cli("run", str(suite), "--out", str(out))
        assert r.code == 2, r.err
        assert f"--out {out}: cannot write there" in r.err and "Traceback" not in r.err
        assert "suite 'faults'" not in r.err  # refused before the run began
    r = run_cli("merge", str(tmp_path), "--out", str(tmp_path / "afile" / "m"))
    assert r.code == 2


FULL_DISK = """\
import errno, os
import trtverify.util.fsutil as fsutil

def _full(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

fsutil.os.fsync = _full
"""


def test_a_full_disk_mid_write_is_a_clear_error_and_keeps_the_previous_results(suite: Path, tmp_path: Path):
    """A disk cannot be filled here: the fsync of every write is made to fail with ENOSPC, as a
    full disk makes it fail (in a subprocess of its own, so nothing else is touched)."""
    out = tmp_path / "o"
    r = run_cli("run", str(suite), "--out", str(out), "--stage", "layerwise")
    assert r.code == 0, r.err
    before = (out / "results.json").read_bytes()
    report = (out / "report.html").read_bytes()
    proc = _start("run", str(suite), "--out", str(out), prelude=FULL_DISK)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err
    # the report is written first, then results.json (results/record.py Recorder._write): the first write fails
    assert f"error: cannot write {out / 'report.html'}: No space left on device" in err
    assert "the previous file is unchanged" in err and "Traceback" not in err
    assert (out / "results.json").read_bytes() == before and (out / "report.html").read_bytes() == report
    assert not list(out.glob(".*.tmp")) and not (out / ".trtverify.lock").exists()


def _without_timings(value: object) -> object:
    if isinstance(value, dict):
        return {
            k: _without_timings(v)
            for k, v in value.items()
            if k not in ("started", "environment", "overhead_vs_inference") and not k.endswith(("_s", "_ms"))
        }
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def test_the_same_suite_twice_gives_the_same_results_apart_from_timings(suite: Path, tmp_path: Path):
    runs = []
    for out in (tmp_path / "a", tmp_path / "b"):
        r = run_cli("run", str(suite), "--out", str(out))
        assert r.code == 0, r.err
        runs.append(json.loads((out / "results.json").read_text()))
    a, b = (_without_timings(r) for r in runs)
    assert a == b  # timings (keys *_s, *_ms, started, overhead_vs_inference) differ, nothing else
    assert runs[0]["stages"][1]["candidates"] and a["stages"][0]["checks"]  # there is something compared
    assert _statuses(runs[0]) == {"layerwise": "passed", "e2e": "passed"}


@pytest.mark.slow
def test_a_signal_ends_the_run_even_where_unwinding_waits_for_a_stuck_reader(suite: Path, tmp_path: Path):
    """Readers in threads (workers: 2) sleep 300 s in the hook: unwinding after SIGINT waits for them (a thread
    join), so the exception never reaches main(). The watchdog armed by the signal itself ends the process, the
    lock released, within its grace (8 s), with what ran already in results.json."""
    suite.write_text(suite.read_text().replace("workers: 0", "workers: 2"))
    out = tmp_path / "o"
    proc = _start("run", str(suite), "--out", str(out), sleep=300)
    _wait_for_stage(out, "layerwise", proc)
    time.sleep(1.0)  # e2e has started and its readers are asleep in the hook
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 20
    assert proc.returncode == 130
    res = json.loads((out / "results.json").read_text())
    assert res["complete"] is False and res["passed"] is False
    assert _statuses(res)["layerwise"] == "passed"
    assert not (out / ".trtverify.lock").exists()
