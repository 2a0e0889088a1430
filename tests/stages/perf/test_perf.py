"""Stage perf: latency measured with real ONNX Runtime (and real PyTorch), the stability rule, speed-ups, the
baseline with its environment fingerprint, and the TensorRT side read from real trtexec exports (A100 builds)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import DATA, ROOT, run_cli, write_suite
from trtverify.graph.onnxinfo import TensorMeta
from trtverify.perf import baseline
from trtverify.perf.measure import Budget, measure, window_cv
from trtverify.stages.perf import batch_feed

FASHION = ROOT / "demo" / "fashion_mnist"
EXPORTS = DATA / "engine_exports"
FAST = "    warmup: 2\n    window: 5\n    min_runs: 10\n    budget_s: 0.3\n"


def _suite(tmp_path: Path, perf: str, candidates: str = "", pytorch: bool = False) -> Path:
    torch = (
        f"  pytorch: {{factory: 'fmnist_model:build', weights: {FASHION / 'fashion_cnn.pt'}, output_names: [logits]}}\n"
        if pytorch
        else ""
    )
    text = (
        f"name: perf_t\npython_path: [{FASHION}]\nreference_dir: refs\n"
        f"models:\n  reference: {FASHION / 'fashion_cnn_fp32.onnx'}\n{torch}"
        f"  candidates: {{fp16: {FASHION / 'fashion_cnn_fp16.onnx'}{candidates}}}\n"
        "inputs: {generate: {input: {shape: [4, 1, 28, 28]}}, samples: 2}\n"
        "backends: {onnxruntime: {intra_op_num_threads: 1}}\n"
        f"stages:\n  perf:\n{FAST}{perf}"
    )
    return write_suite(tmp_path, text)


def _stage(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())["stages"][0]


class Clock:
    """A clock whose calls advance by the durations given: the stability rule tested on known latencies
    (the one fake here; the real timer is tested through ONNX Runtime below)."""

    def __init__(self, durations: list[float]):
        self.durations, self.t, self.calls = durations, 0.0, 0

    def __call__(self) -> float:
        self.calls += 1
        if self.calls % 2 == 0:  # the second read of a run: that run's duration
            self.t += self.durations[(self.calls // 2 - 1) % len(self.durations)]
        return self.t


def test_stability_rule_stops_when_window_medians_agree():
    stats = measure(lambda: None, budget=Budget(warmup=0, window=10, min_runs=30, min_time_s=0), clock=Clock([0.002]))
    assert stats.stopped_by == "stable" and stats.stable and stats.runs == 30
    assert stats.median_ms == pytest.approx(2.0) and stats.throughput == pytest.approx(500.0)
    # stability is judged only after min_time_s of timed work: 0.2 s of 2 ms runs is 100 runs
    stats = measure(lambda: None, budget=Budget(warmup=0, window=10, min_runs=30, min_time_s=0.2), clock=Clock([0.002]))
    assert stats.stopped_by == "stable" and stats.runs == 100


def test_stability_rule_keeps_going_while_windows_drift():
    # each window 1 ms slower than the last: never stable; the budget (0.5 s of timed work) ends it
    drift = [0.001 * (1 + i // 10) for i in range(2000)]
    stats = measure(lambda: None, budget=Budget(warmup=0, window=10, min_runs=10, budget_s=0.5), clock=Clock(drift))
    assert stats.stopped_by == "budget" and not stats.stable
    assert stats.window_cv is not None and stats.window_cv > 0.05
    assert window_cv([1.0, 1.0], 3) is None


def test_batch_feed_cycles_rows_and_refuses_a_fixed_batch():
    samples = [{"x": np.full((2, 3), i, np.float32)} for i in range(2)]
    feed = batch_feed(samples, [TensorMeta("x", "float32", ("N", 3))], 5)
    assert feed["x"].shape == (5, 3) and feed["x"][:, 0].tolist() == [0, 0, 1, 1, 0]
    with pytest.raises(Exception, match="fixes its first dimension to 2.*batch_sizes: \\[2\\]"):
        batch_feed(samples, [TensorMeta("x", "float32", (2, 3))], 4)


def test_onnxruntime_rows_speedups_and_pytorch(tmp_path: Path):
    pytest.importorskip("torch")
    suite = _suite(tmp_path, "    batch_sizes: [1, 8]\n", ", int8: " + str(FASHION / "fashion_cnn_int8_qdq.onnx"), True)
    r = run_cli("run", str(suite), "--out", str(tmp_path / "o"))
    assert r.code == 0, r.out + r.err
    rows = {(x["model"], x["batch"]): x for x in _stage(tmp_path / "o")["rows"]}
    assert set(rows) == {(m, b) for m in ("reference", "fp16", "int8", "pytorch") for b in (1, 8)}
    for (model, batch), x in rows.items():
        s = x["stats"]
        assert x["source"] == "measured" and s["runs"] >= 10 and s["batch"] == batch
        assert s["min_ms"] <= s["median_ms"] <= s["p99_ms"] <= s["max_ms"]
        assert x["throughput"] == pytest.approx(batch * 1000 / s["mean_ms"])
        if model in ("fp16", "int8"):
            assert x["speedup"] == pytest.approx(rows[("reference", batch)]["median_ms"] / x["median_ms"])
            assert x["speedup_vs"] == "reference"
        if model != "pytorch":
            assert x["speedup_vs_pytorch"] == pytest.approx(rows[("pytorch", batch)]["median_ms"] / x["median_ms"])
    assert rows[("reference", 1)]["backend"] == "onnxruntime" and rows[("pytorch", 1)]["backend"] == "torch"


def test_min_speedup_fails_with_the_candidate_named(tmp_path: Path):
    r = run_cli("run", str(_suite(tmp_path, "    min_speedup: {fp16: 50}\n")), "--out", str(tmp_path / "o"))
    assert r.code == 1, r.out + r.err
    check = next(c for c in _stage(tmp_path / "o")["checks"] if c["metric"] == "speedup")
    assert not check["passed"] and check["candidate"] == "fp16" and check["threshold"] == 50
    assert "fp16 batch 4: speed-up over reference >= 50" in r.out


def test_baseline_update_compare_regression_and_other_environment(tmp_path: Path):
    suite = _suite(tmp_path, "    max_regression: 0.5\n")
    r = run_cli("run", str(suite), "--out", str(tmp_path / "a"))
    assert r.code == 0 and "no performance baseline" in r.out + r.err
    assert {x["baseline"]["state"] for x in _stage(tmp_path / "a")["rows"]} == {"missing"}
    r = run_cli("run", str(suite), "--out", str(tmp_path / "b"), "--update-baseline")
    assert r.code == 0, r.out + r.err
    path = tmp_path / "refs" / "perf_t" / "perf" / "baseline.json"
    stored = json.loads(path.read_text())
    assert stored["format"] == 1 and set(stored["rows"]) == {"reference:reference:onnxruntime@b4",
                                                             "candidate:fp16:onnxruntime@b4"}  # fmt: skip
    assert stored["rows"]["reference:reference:onnxruntime@b4"]["fingerprint"] == baseline.local_fingerprint()

    # the same machine: comparable; a baseline 100x faster than now is a regression that fails (the reference's
    # baseline made 100x slower, so a loaded machine cannot make it a regression too: 16 workers once did)
    stored["rows"]["candidate:fp16:onnxruntime@b4"]["median_ms"] /= 100
    stored["rows"]["reference:reference:onnxruntime@b4"]["median_ms"] *= 100
    path.write_text(json.dumps(stored))
    r = run_cli("run", str(suite), "--out", str(tmp_path / "c"))
    assert r.code == 1, r.out + r.err
    rows = {x["model"]: x for x in _stage(tmp_path / "c")["rows"]}
    assert rows["fp16"]["baseline"]["state"] == "comparable" and rows["fp16"]["baseline"]["change"] > 10
    failed = [c for c in _stage(tmp_path / "c")["checks"] if not c["passed"]]
    assert [(c["metric"], c["candidate"]) for c in failed] == [("regression", "fp16")]

    # measured on another CPU: not comparable, reported, never a failure; a row the file lacks is said, ungated
    stored["rows"]["candidate:fp16:onnxruntime@b4"]["fingerprint"]["cpu"] = "Some Other CPU"
    del stored["rows"]["reference:reference:onnxruntime@b4"]
    path.write_text(json.dumps(stored))
    r = run_cli("run", str(suite), "--out", str(tmp_path / "d"))
    assert r.code == 0, r.out + r.err
    rows = {x["model"]: x for x in _stage(tmp_path / "d")["rows"]}
    fp16 = rows["fp16"]
    assert fp16["baseline"]["state"] == "not_comparable" and "cpu 'Some Other CPU'" in fp16["baseline"]["why"]
    assert rows["reference"]["baseline"]["state"] == "missing"
    assert "1 row measured here with no entry in" in " ".join(r.out.split()), r.out

    path.write_text("{not json")
    r = run_cli("run", str(suite), "--out", str(tmp_path / "e"))
    assert r.code == 2 and "baseline.json: unreadable baseline" in r.out + r.err


ENGINES = f"""\
    engines:
      fp16: {{files: [{EXPORTS / "fp16"}]}}
      qat: {{files: [{EXPORTS / "qat"}], vs: fp16, min_speedup: 1.0}}
      qat_residual: {{files: [{EXPORTS / "qat-residual"}], vs: qat, min_speedup: 1.2}}
"""


def test_engines_from_real_trtexec_exports(tmp_path: Path):
    """The facts of the shared exports' README come out of the stage: the plain QAT engine is slower than FP16
    (its reformats and unfused residual adds say why) and Q/DQ on the residual adds makes it faster."""
    r = run_cli("run", str(_suite(tmp_path, ENGINES + "    fail_on: [qdq_unfused]\n")), "--out", str(tmp_path / "o"))
    assert r.code == 1, r.out + r.err
    stage = _stage(tmp_path / "o")
    rows = {x["model"]: x for x in stage["rows"] if x["role"] == "engine"}
    assert rows["fp16"]["median_ms"] == pytest.approx(0.862183) and rows["qat"]["median_ms"] == pytest.approx(0.882568)
    assert rows["qat"]["batch"] == 32 and rows["qat"]["throughput"] == pytest.approx(1130.01 * 32)
    assert rows["qat"]["speedup"] == pytest.approx(0.862183 / 0.882568)
    assert rows["qat_residual"]["speedup"] == pytest.approx(0.882568 / 0.545776)
    assert rows["qat"]["fingerprint"]["gpu"] == "NVIDIA A100 80GB PCIe"
    assert rows["fp16"].get("speedup") is None  # no vs: nothing to compare; a CPU reference is another machine
    failed = {(c["metric"], c["candidate"]) for c in stage["checks"] if not c["passed"]}
    assert failed == {("speedup", "qat"), ("qdq_unfused_findings", "qat"), ("qdq_unfused_findings", "qat_residual")}
    engines = {e["name"]: e for e in stage["engines"]}
    qat = engines["qat"]
    assert qat["audit"]["layers"] == 37 and qat["audit"]["reformat_layers"] == 12
    said = [f["message"] for f in qat["diff"]["findings"]]
    assert said[0] == "B is slower than A: 1.096 ms vs 1.017 ms (+7.8%)"
    assert "reformat layers 2 -> 12 (0.088 ms -> 0.279 ms)" in said
    kinds = {f["kind"]: f["message"] for f in qat["diff"]["findings"]}
    assert (
        kinds["qdq_unfused"] == "0 layers in A, 9 in B"
        and kinds["residual_add_high_precision"] == "0 layers in A, 8 in B"
    )
    assert engines["qat_residual"]["diff"]["findings"][0]["message"].startswith("B is faster than A: 0.731 ms vs 1.096")


def test_suite_errors_name_the_key(tmp_path: Path):
    bad = ENGINES.replace("vs: fp16", "vs: fp61")
    r = run_cli("validate", str(_suite(tmp_path, bad)))
    assert r.code == 2 and "engines.qat.vs: engine" in r.err and "fp61" in r.err
    r = run_cli("validate", str(_suite(tmp_path, "    fail_on: [qdq_unfsued]\n")))
    assert r.code == 2 and "unknown engine finding severity or kind 'qdq_unfsued'" in r.err
    r = run_cli("validate", str(_suite(tmp_path, f"    engines: {{x: {{files: [{tmp_path / 'nope'}]}}}}\n")))
    assert r.code == 2 and "file or folder not found" in r.err


def test_tensorrt_candidate_from_its_files_or_through_polygraphy(tmp_path: Path):
    """A TensorRT candidate named in `engines` gets its numbers from trtexec's files (TensorRT need not be
    installed); without files it is measured through the backend's Polygraphy runner, which needs TensorRT
    (not installable here: exit 3 naming what to install)."""
    trt = f", qat: {{path: {FASHION / 'fashion_cnn_int8_qdq.onnx'}, backend: tensorrt}}"
    files = f"    engines:\n      qat: {{files: [{EXPORTS / 'qat'}]}}\n"
    r = run_cli("run", str(_suite(tmp_path, files, trt)), "--out", str(tmp_path / "a"), block=("tensorrt",))
    assert r.code == 0, r.out + r.err
    rows = {x["model"]: x for x in _stage(tmp_path / "a")["rows"]}
    assert rows["qat"]["source"] == "trtexec" and rows["qat"]["median_ms"] == pytest.approx(0.882568)
    r = run_cli("run", str(_suite(tmp_path, "", trt)), "--out", str(tmp_path / "b"), block=("tensorrt",))
    assert r.code == 3 and "tensorrt" in (r.out + r.err).lower(), r.out + r.err


def test_reference_dir_moves_the_baseline_too(tmp_path: Path):
    """Issue 26: `--update-baseline --reference-dir DIR` wrote the suite's reference_dir (a tracked file)."""
    suite = _suite(tmp_path, "")
    r = run_cli("run", str(suite), "--out", str(tmp_path / "o"), "--update-baseline", "--reference-dir", "w/refs",
                cwd=tmp_path)  # fmt: skip
    assert r.code == 0, r.out + r.err
    assert (tmp_path / "w" / "refs" / "perf_t" / "perf" / "baseline.json").is_file()
    assert not (tmp_path / "refs" / "perf_t" / "perf").exists()
    r = run_cli("run", str(suite), "--out", str(tmp_path / "p"), "--reference-dir", "w/refs", cwd=tmp_path)
    assert {x["baseline"]["state"] for x in _stage(tmp_path / "p")["rows"]} == {"comparable"}, r.out + r.err


def test_the_demo_stores_no_latency_measured_on_this_projects_machines():
    """Issue 45: the demo's committed ONNX Runtime latencies (0.085 ms on an 'AMD EPYC, 2 cores' VM) failed
    `make demo` on another host of the same fingerprint taking 0.22 ms at idle. The demo's baseline holds the
    trtexec rows only (read from files, the same on every machine); what runs here has no stored latency."""
    stored = json.loads((ROOT / "reference_outputs" / "perf_demo" / "perf" / "baseline.json").read_text())
    assert sorted(stored["rows"]) == [f"engine:{e}:tensorrt@b32" for e in ("fp16", "fp32", "qat", "qat_residual")]
    assert {r["fingerprint"]["gpu"] for r in stored["rows"].values()} == {"NVIDIA A100 80GB PCIe"}
