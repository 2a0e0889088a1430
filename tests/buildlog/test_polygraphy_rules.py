# ruff: noqa: E501 -- the synthetic logs keep Polygraphy's long lines whole (a split line would test the wrap joiner)
"""The Polygraphy rules (trtverify/buildlog/polygraphy.py) and the random-calibration warning.

Part 1 checks the dev logs of tests/data/logcorpus that hold Polygraphy output, with numbers read by eye from
each log (file name in each test). Part 2 runs synthetic logs that are NOT real output: they are written from
Polygraphy's message templates (polygraphy/comparator/compare.py and comparator.py, tools/debug/subtool/*.py
of NVIDIA/TensorRT, 0.2x to 0.5x), to cover the versions and layouts the corpus lacks. Part 3 is a fuzz case.
Only logs marked `dev` in tests/data/logcorpus/SPLIT.txt are read here.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trtverify.buildlog.lines import split_records
from trtverify.buildlog.parser import parse, parse_file
from trtverify.buildlog.polygraphy import RULES as COMPARE_RULES
from trtverify.buildlog.polygraphy import rule_polygraphy_compare
from trtverify.buildlog.polygraphy_debug import RULES as DEBUG_RULES
from trtverify.buildlog.polygraphy_debug import rule_polygraphy_debug

CORPUS = Path(__file__).resolve().parents[1] / "data" / "logcorpus"
DEV = sorted(
    line.split("\t", 1)[1].strip()
    for line in (CORPUS / "SPLIT.txt").read_text(encoding="utf-8").splitlines()
    if line.startswith("dev\t")
)


def _dev(name: str) -> Path:
    path = next(CORPUS / rel for rel in DEV if Path(rel).name.startswith(name))
    assert f"dev\t{path.parent.name}/{path.name}" in (CORPUS / "SPLIT.txt").read_text(encoding="utf-8")
    return path


def _findings(log: Any, prefix: str = "polygraphy_") -> dict[str, Any]:
    return {f.kind: f for f in log.findings if f.kind.startswith(prefix)}


# --- part 1: dev logs, numbers read from the log ----------------------------------------------------------


def test_001_pass_error_metrics() -> None:
    """a/001_polygraphy_compare_pass_errormetrics_nvtrt2895.log: c_out2 passes (line 7); output_1 starts on
    line 8 with no verdict."""
    got = _findings(parse_file(_dev("001_polygraphy_compare_pass")))
    assert set(got) == {"polygraphy_compare_passed"}
    f = got["polygraphy_compare_passed"]
    assert (f.severity, f.count, f.lines, f.layers) == ("info", 1, (7,), ("c_out2",))
    d = f.detail
    assert d["runners"] == ["trt-runner-N0-04/21/23-18:46:01", "onnxrt-runner-N0-04/21/23-18:46:01"]
    assert d["output"] == "c_out2"
    assert d["tolerance"] == {"rtol": 1e-05, "atol": 1e-05}
    assert d["required"] == {"atol": 8.9407e-06, "rtol": 0.0010494}
    assert d["check"] == "elemwise"
    assert d["abs_diff"]["mean"] == 1.5511e-06 and d["abs_diff"]["max"] == 8.9407e-06
    assert d["abs_diff"]["max_at"] == [0, 0, 5] and d["abs_diff"]["std"] == 1.384e-06
    assert d["rel_diff"]["max"] == 0.0010494 and d["rel_diff"]["max_at"] == [0, 0, 238]
    assert d["rel_diff"]["mean"] == 1.0028e-05 and d["rel_diff"]["avg_magnitude"] == 1.0028e-05
    assert d["runner_stats"]["trt-runner-N0-04/21/23-18:46:01"]["mean"] == -0.04129
    assert d["runner_stats"]["onnxrt-runner-N0-04/21/23-18:46:01"]["mean"] == -0.041289
    assert [(o["output"], o["status"], o["line"]) for o in d["outputs"]] == [
        ("c_out2", "PASS", 7),
        ("output_1", "unknown", 8),
    ]
    assert d["outputs"][1]["shape"] == [1, 400]


def test_002_fail_old_format() -> None:
    """a/002_polygraphy_compare_fail_oldformat_tensorrtdemos315.log: 016_convolutional FAILED on line 8 (no
    output name on the verdict line); 023_convolutional compared on line 9, no verdict."""
    got = _findings(parse_file(_dev("002_polygraphy_compare_fail")))
    assert set(got) == {"polygraphy_compare_failed", "polygraphy_compare_no_verdict"}
    cut = got["polygraphy_compare_no_verdict"]  # its numbers reported; the paste ends before its verdict
    assert (cut.severity, cut.lines, cut.layers) == ("info", (9,), ("023_convolutional",))
    assert cut.detail["verdict"] == "not in the log" and cut.detail["required"]["atol"] == 0.095589
    f = got["polygraphy_compare_failed"]
    assert (f.severity, f.count, f.lines, f.layers) == ("high", 1, (8,), ("016_convolutional",))
    d = f.detail
    assert d["runners"] == ["trt-runner-N0-04/10/21-21:37:09", "onnxrt-runner-N0-04/10/21-21:37:09"]
    assert d["shape"] == [1, 255, 13, 13] and d["dtype"] == "float32"
    assert d["tolerance"] == {"rtol": 1e-05, "atol": 1e-05}
    assert d["required"] == {"atol": 0.089517, "rtol": 5.9166}
    assert d["required_options"] == [
        {"atol": 0.089517},
        {"rtol": 1e-05, "atol": 0.089425},
        {"rtol": 5.9166, "atol": 1e-05},
    ]
    assert d["abs_diff"] == {"mean": 0.010562} and d["rel_diff"] == {"mean": 0.0033428}
    stats = d["runner_stats"]["trt-runner-N0-04/10/21-21:37:09"]
    assert (stats["mean"], stats["min"], stats["min_at"], stats["max"]) == (-6.5803, -15.992, [0, 174, 0, 0], 2.1582)
    assert d["runner_stats"]["onnxrt-runner-N0-04/10/21-21:37:09"]["max"] == 2.1647
    assert [(o["output"], o["status"]) for o in d["outputs"]] == [
        ("016_convolutional", "FAIL"),
        ("023_convolutional", "unknown"),
    ]
    assert d["outputs"][1]["required"] == {"atol": 0.095589, "rtol": 268.68}
    assert d["outputs"][1]["abs_diff"] == {"mean": 0.012998} and d["outputs"][1]["rel_diff"] == {"mean": 0.0078038}


def test_003_wrapped_summary_stands_for_its_output() -> None:
    """a/003_polygraphy_compare_summary_wrapped_nvtrt3893.log: `Accuracy Summary | ... | Passed: 0/1 iterations
    | Pass` / `Rate: 0.0%` wrapped over lines 1-2; image_embeddings compared from line 5 (no `[I]`), no verdict."""
    got = _findings(parse_file(_dev("003_polygraphy_compare_summary")))
    assert set(got) == {"polygraphy_compare_failed"}
    f = got["polygraphy_compare_failed"]
    assert (f.severity, f.count, f.lines, f.layers) == ("high", 1, (1,), ("image_embeddings",))
    assert f.message.endswith("Passed: 0/1 iterations | Pass Rate: 0.0%")
    d = f.detail
    assert d["runners"] == ["trt-runner-N0-05/25/24-11:45:48", "onnxrt-runner-N0-05/25/24-11:45:48"]
    assert d["iterations"] == {"passed": 0, "total": 1} and d["pass_rate"] == 0.0
    assert d["verdict_from"] == "accuracy_summary"
    (out,) = d["outputs"]
    assert (out["output"], out["status"], out["line"], out["shape"]) == (
        "image_embeddings",
        "unknown",
        5,
        [1, 256, 64, 64],
    )
    assert out["tolerance"] == {"atol": 1e-05, "rtol": 1e-05}
    stats = out["runner_stats"]["trt-runner-N0-05/25/24-11:45:48"]
    assert (stats["mean"], stats["min"], stats["min_at"], stats["max"]) == (
        -0.0042355,
        -0.46509,
        [0, 104, 60, 56],
        0.55225,
    )


def test_023_nan_relative_difference() -> None:
    """a/023_polygraphy_compare_fail_nan_reldiff_nvtrt2895.log: relative difference all nan (line 13), h_out1
    FAILED on line 15; c_out1 starts on line 16."""
    got = _findings(parse_file(_dev("023_polygraphy_compare_fail_nan")))
    assert set(got) == {"polygraphy_compare_failed"}
    f = got["polygraphy_compare_failed"]
    assert (f.severity, f.count, f.lines, f.layers) == ("high", 1, (15,), ("h_out1",))
    assert f.detail["rel_diff"]["mean"] == "nan" and f.detail["rel_diff"]["max"] == "nan"
    assert f.detail["rel_diff"]["min_at"] == [0, 0, 7]
    assert f.detail["tolerance"] == {"rtol": 1e-05, "atol": 1e-05}
    assert [(o["output"], o["status"]) for o in f.detail["outputs"]] == [("h_out1", "FAIL"), ("c_out1", "unknown")]


def test_026_and_028_comparison_without_verdict() -> None:
    """a/026 (Accuracy Comparison + Comparing Output 'output_4', cut) and a/028 (runs only, no comparison
    shown): no comparison or debug finding."""
    assert _findings(parse_file(_dev("026_polygraphy_compare_oldformat"))) == {}
    assert _findings(parse_file(_dev("028_polygraphy_build_time"))) == {}


def test_022_random_calibration_warning() -> None:
    """a/022_polygraphy_random_calibration_warning_nvtrt3020.log: the warning on line 2, continued on 3-4."""
    log = parse_file(_dev("022_polygraphy_random_calibration"))
    f = _findings(log, "random_calibration")["random_calibration_data"]
    assert (f.severity, f.count, f.lines, f.layers) == ("high", 1, (2,), ())
    assert f.message == "Int8 Calibration is using randomly generated input data."


def test_no_polygraphy_finding_on_other_dev_logs() -> None:
    for rel in DEV:
        if "polygraphy" not in rel:
            assert _findings(parse_file(CORPUS / rel)) == {}, rel


# --- part 2: synthetic logs written from Polygraphy's message templates (not real output) ------------------

R0, R1 = "trt-runner-N0-10/19/20-10:00:00", "onnxrt-runner-N0-10/19/20-10:00:00"

OLD_020 = f"""[I] Accuracy Comparison | {R0} vs. {R1}
[I]     Comparing Output: 'out0' (dtype=float32, shape=(1, 10)) with 'out0' (dtype=float32, shape=(1, 10))
[I]         PASSED | Difference is within tolerance (rtol=1e-05, atol=1e-05)
[I]     Comparing Output: 'out1' (dtype=float32, shape=(1, 4)) with 'out1' (dtype=float32, shape=(1, 4))
[I]         Required tolerances: [atol=0.5] OR [rtol=1e-05, atol=0.49] OR [rtol=2.5, atol=1e-05] | Mean Error: Absolute=0.1, Relative=0.02
            Runner: {R0:40} | Stats: mean=1, min=0 at (0, 1), max=2 at (0, 3)
            Runner: {R1:40} | Stats: mean=1.1, min=0 at (0, 1), max=2.5 at (0, 3)
[E]         FAILED | Difference exceeds tolerance (rtol=1e-05, atol=1e-05)
[E]     FAILED | Mismatched outputs: ['out1']
[E] Accuracy Summary | {R0} vs. {R1} | Passed: 0/1 iterations | Pass Rate: 0.0%
[E] FAILED | Command: polygraphy run model.onnx --trt --onnxrt
"""


def test_synthetic_polygraphy_020_format() -> None:
    got = _findings(parse(OLD_020))
    failed, passed = got["polygraphy_compare_failed"], got["polygraphy_compare_passed"]
    assert (failed.count, failed.lines, failed.layers) == (1, (8,), ("out1",))
    assert (passed.count, passed.lines, passed.layers) == (1, (3,), ("out0",))
    d = failed.detail
    assert d["runners"] == [R0, R1] and d["required"] == {"atol": 0.5, "rtol": 2.5}
    assert d["abs_diff"] == {"mean": 0.1} and d["rel_diff"] == {"mean": 0.02}
    assert d["iterations"] == {"passed": 0, "total": 1} and d["pass_rate"] == 0.0
    assert d["runner_stats"][R1]["max"] == 2.5
    assert [(o["output"], o["status"]) for o in d["outputs"]] == [("out0", "PASS"), ("out1", "FAIL")]
    assert passed.detail["outputs"] == d["outputs"]


STATS = (
    "mean=0.001, std-dev=0.01, var=0.0001, median=0.0009, min=-0.05 at (0, 7), max=0.2 at (0, 281), avg-magnitude=0.008"
)
DIFF = "mean=0.0003, std-dev=0.0004, var=1.6e-07, median=0.0002, min=0 at (0, 2), max=0.0042 at (0, 281), avg-magnitude=0.0003"
V30 = f"""[I] (10:00:01) Accuracy Comparison | {R0} vs. {R1}
[I] (10:00:01)     Comparing Output: 'output' (dtype=float32, shape=(1, 1000)) with 'output' (dtype=float32, shape=(1, 1000)) | Tolerance: [abs=0.001, rel=0.001] | Checking elemwise error
[I] (10:00:01)         {R0}: output | Stats: {STATS}
[I] (10:00:01)         {R1}: output | Stats: {STATS}
[I] (10:00:01)         Error Metrics: output
[I] (10:00:01)             Minimum Required Tolerance: elemwise error | [abs=0.0042] OR [rel=0.37] (requirements may be lower if both abs/rel tolerances are set)
[I] (10:00:01)             Absolute Difference | Stats: {DIFF}
[I] (10:00:01)             Relative Difference | Stats: {DIFF.replace("0.0042", "0.37")}
[E] (10:00:01)         FAILED | Difference exceeds tolerance (rel=0.001, abs=0.001)
[E] (10:00:01)     FAILED | Mismatched outputs: ['output']
[E] (10:00:01) Accuracy Summary | {R0} vs. {R1} | Passed: 0/1 iterations | Pass Rate: 0.0%
"""


def test_synthetic_polygraphy_030_format_with_timestamps() -> None:
    f = _findings(parse(V30))["polygraphy_compare_failed"]
    assert (f.count, f.lines, f.layers) == (1, (9,), ("output",))
    d = f.detail
    assert d["tolerance"] == {"atol": 0.001, "rtol": 0.001} and d["check"] == "elemwise"
    assert d["required"] == {"atol": 0.0042, "rtol": 0.37}
    assert d["abs_diff"]["max"] == 0.0042 and d["rel_diff"]["max"] == 0.37 and d["abs_diff"]["var"] == 1.6e-07
    assert d["pass_rate"] == 0.0 and d["runners"] == [R0, R1]


def _v05(p: str = "[I] ") -> str:
    """0.4x-0.5x: two iterations, output 'logits' passes in the first and fails in the second (quantile check,
    p90/p95/p99 stats); the `Output:` verdicts name the output."""
    e = "[E] " if p else ""
    q = ", p90=0.01, p95=0.02, p99=0.05"
    body = []
    for it, (verdict, pref) in enumerate([("PASSED", p), ("FAILED", e)]):
        body += [
            f"{p}    Iteration: {it}",
            f"{p}        Comparing Output: 'logits' (dtype=float16, shape=(2, 8)) with 'logits' (dtype=float32, shape=(2, 8))",
            f"{p}            Tolerance: [abs=0.01, rel=0.01] | Checking quantile error",
            f"{p}            {R0}: logits | Stats: {STATS}{q}",
            f"{p}            Error Metrics: logits",
            f"{p}                Minimum Required Tolerance: quantile error | [abs=0.05] OR [rel=0.8] (quantile=0.99)",
            f"{p}                Absolute Difference | Stats: {DIFF}{q}",
            f"{pref}            {verdict} | Output: 'logits' | Difference {'is within' if it == 0 else 'exceeds'}"
            " tolerance (rel=0.01, abs=0.01)",
        ]
    return "\n".join(
        [
            f"{p}Accuracy Comparison | {R0} vs. {R1}",
            *body,
            f"{e}Accuracy Summary | {R0} vs. {R1} | Passed: 1/2 iterations | Pass Rate: 50.0%",
        ]
    )


def test_synthetic_polygraphy_05_iterations_prefixed_and_bare() -> None:
    for text in (_v05(), _v05("")):
        got = _findings(parse(text))
        failed, passed = got["polygraphy_compare_failed"], got["polygraphy_compare_passed"]
        assert (failed.count, failed.lines, failed.layers) == (1, (17,), ("logits",))
        assert (passed.count, passed.lines, passed.layers) == (1, (9,), ("logits",))
        d = failed.detail
        assert d["iteration"] == 1 and passed.detail["iteration"] == 0
        assert d["required"] == {"atol": 0.05, "rtol": 0.8} and d["check"] == "quantile"
        assert d["abs_diff"]["p99"] == 0.05 and d["runner_stats"][R0]["p90"] == 0.01
        assert d["iterations"] == {"passed": 1, "total": 2} and d["pass_rate"] == 50.0
        assert d["dtype"] == "float16" and d["shape"] == [2, 8]
        assert [(o["output"], o["status"], o["iteration"]) for o in d["outputs"]] == [
            ("logits", "PASS", 0),
            ("logits", "FAIL", 1),
        ]


def test_synthetic_other_failure_reasons_and_non_verdicts() -> None:
    text = f"""[I] Accuracy Comparison | {R0} vs. {R1}
[I]     Comparing Output: 'a' (dtype=float32, shape=(4,)) with 'a' (dtype=float32, shape=(4,))
[E]         FAILED | Output: 'a' | L2 Norm (0.52) exceeds tolerance (0.1)
[I]     Comparing Output: 'b' (dtype=float32, shape=(4,)) with 'b' (dtype=float32, shape=(3,))
[E]         FAILED | Output: `b` | Will not compare outputs of different shapes.
[I] PASSED | Output: a is valid
[E] FAILED | Errors detected in output: b
[I] PASSED | Iteration 3 | Duration 1.5s
[I] PASSED | Command: polygraphy run model.onnx
"""
    got = _findings(parse(text), "polygraphy_compare")
    assert set(got) == {"polygraphy_compare_failed"}
    f = got["polygraphy_compare_failed"]
    assert (f.count, f.lines, f.layers) == (2, (3, 5), ("a", "b"))


def test_synthetic_prefix_variants_and_wraps() -> None:
    """`--log-format line-info`, another logger's date in front, torch shapes, a summary wrapped after `0/1`."""
    text = f"""[I] [polygraphy/comparator/compare.py:236] Comparing Output: 'x' (dtype=float32, shape=torch.Size([1, 3])) with 'x' (dtype=float32, shape=torch.Size([1, 3]))
2024-01-01 10:00:00,123 [E] FAILED | Output: 'x' | Difference exceeds tolerance (rel=1e-05, abs=1e-05)
> [E] Accuracy Summary | {R0} vs. {R1} | Passed: 0/1
iterations | Pass Rate: 0.0%
"""
    f = _findings(parse(text))["polygraphy_compare_failed"]
    assert (f.count, f.lines, f.layers) == (1, (2,), ("x",))
    assert f.detail["shape"] == [1, 3] and f.detail["pass_rate"] == 0.0 and f.detail["runners"] == [R0, R1]


def test_synthetic_all_passed_summary_without_verdict_lines() -> None:
    """Passing outputs log their verdict at info; a cut or filtered log may show only the summary."""
    text = f"""[I] Accuracy Comparison | {R0} vs. {R1}
[I]     Comparing Output: 'x' (dtype=float32, shape=(1,)) with 'x' (dtype=float32, shape=(1,))
[I]     Comparing Output: 'y' (dtype=float32, shape=(1,)) with 'y' (dtype=float32, shape=(1,))
[I] Accuracy Summary | {R0} vs. {R1} | Passed: 3/3 iterations | Pass Rate: 100.0%
"""
    got = _findings(parse(text))
    assert set(got) == {"polygraphy_compare_passed"}
    f = got["polygraphy_compare_passed"]
    assert (f.count, f.lines, f.layers) == (2, (4, 4), ("x", "y"))
    assert f.detail["pass_rate"] == 100.0


DEBUG_BUILD = """$ polygraphy debug build model.onnx --fp16 --save-tactics replay.json --artifacts-dir replays --artifacts replay.json --until=4 --check polygraphy run polygraphy_debug.engine --trt --load-outputs golden.json
[I] RUNNING | Iteration 1 | Approximately 3 iteration(s) remaining
[I] Running check command: polygraphy run polygraphy_debug.engine --trt --load-outputs golden.json
[I] Moving replay.json to replays/good/replay_iter1.json
[I] PASSED | Iteration 1 | Duration 12.1s
[I] RUNNING | Iteration 2 | Approximately 2 iteration(s) remaining
[I] Running check command: polygraphy run polygraphy_debug.engine --trt --load-outputs golden.json
[I] Moving replay.json to replays/bad/replay_iter2.json
[E] FAILED | Iteration 2 | Duration 11.9s
[I] RUNNING | Iteration 3 | Approximately 1 iteration(s) remaining
[I] PASSED | Iteration 3 | Duration 12.0s
[I] RUNNING | Iteration 4
[I] PASSED | Iteration 4 | Duration 12.4s
[I] Finished 4 iteration(s) | Passed: 3/4 | Pass Rate: 75.0%
"""


def test_synthetic_debug_build() -> None:
    f = _findings(parse(DEBUG_BUILD))["polygraphy_debug_summary"]
    assert (f.severity, f.count, f.lines) == ("medium", 1, (14,))
    d = f.detail
    assert (d["subtool"], d["iterations"], d["passed"], d["total"], d["pass_rate"]) == ("build", 4, 3, 4, 75.0)
    assert d["failed_iterations"] == [2]
    assert d["result"] == {"bad_artifacts": ["replays/bad/replay_iter2.json"]}
    cut = "\n".join(DEBUG_BUILD.split("\n")[:9])  # the log ends before the summary
    g = _findings(parse(cut))["polygraphy_debug_summary"]
    assert (g.severity, g.lines[0], g.detail["iterations"], g.detail["passed"], g.detail["pass_rate"]) == (
        "medium",
        2,
        2,
        1,
        50.0,
    )


DEBUG_PRECISION = """[I] Using float32 as higher precision
[I] RUNNING | Iteration 1 | Approximately 3 iteration(s) remaining
[I] Selecting first 8 layer(s) to run in higher precision
[V] Marking layer(s): {0, 1, 2, 3, 4, 5, 6, 7} to run in float32 precision
[I] PASSED | Iteration 1 | Duration 20.1s
[I] RUNNING | Iteration 2 | Approximately 2 iteration(s) remaining
[I] Selecting first 4 layer(s) to run in higher precision
[V] Marking layer(s): {0, 1, 2, 3} to run in float32 precision
[E] FAILED | Iteration 2 | Duration 19.7s
[I] RUNNING | Iteration 3 | Approximately 1 iteration(s) remaining
[I] Selecting first 6 layer(s) to run in higher precision
[V] Marking layer(s): {0, 1, 2, 4, 5} to run in float32 precision
[I] PASSED | Iteration 3 | Duration 20.0s
[I] RUNNING | Iteration 4
[I] Selecting first 5 layer(s) to run in higher precision
[V] Marking layer(s): {0, 1, 2, 4} to run in float32 precision
[E] FAILED | Iteration 4 | Duration 19.9s
[I] To achieve acceptable accuracy, try running the first 6 layer(s) in higher precision
[I] Finished 4 iteration(s) | Passed: 2/4 | Pass Rate: 50.0%
"""


def test_synthetic_debug_precision() -> None:
    f = _findings(parse(DEBUG_PRECISION))["polygraphy_debug_summary"]
    assert (f.severity, f.count, f.lines) == ("medium", 1, (19,))
    d = f.detail
    assert (d["subtool"], d["iterations"], d["passed"], d["total"], d["pass_rate"]) == ("precision", 4, 2, 4, 50.0)
    assert d["result"] == {
        "higher_precision": "float32",
        "direction": "first",
        "layers": 6,
        "marked_layers": [0, 1, 2, 4, 5],
    }
    assert d["failed_iterations"] == [2, 4]
    nothing = DEBUG_PRECISION.replace(
        "[I] To achieve acceptable accuracy, try running the first 6 layer(s) in higher precision",
        "[E] Could not find a configuration that satisfied accuracy requirements.",
    )
    g = _findings(parse(nothing))["polygraphy_debug_summary"]
    assert g.severity == "medium" and g.detail["result"]["configuration_found"] is False


DEBUG_REDUCE = """$ polygraphy debug reduce model.onnx -o reduced.onnx --mode=bisect --check polygraphy run polygraphy_debug.onnx --trt --onnxrt
[I] Reducing model outputs
[I] RUNNING | Iteration 1 | Approximately 2 iteration(s) remaining
[E] FAILED | Iteration 1 | Duration 2.1s
[I] RUNNING | Iteration 2 | Approximately 1 iteration(s) remaining
[I] PASSED | Iteration 2 | Duration 2.0s
[I] Finished 2 iteration(s) | Passed: 1/2 | Pass Rate: 50.0%
[I] Finished reducing model outputs
[I] Reducing model inputs
[I] RUNNING | Iteration 1 | Approximately 1 iteration(s) remaining
[E] FAILED | Iteration 1 | Duration 1.2s
[I] Finished 1 iteration(s) | Passed: 0/1 | Pass Rate: 0.0%
[I] Finished reducing model inputs
[I] Minimum Bad Model:
    Name: torch-jit-export | ONNX Opset: 13

    ---- 1 Graph Input(s) ----
    {x [dtype=float32, shape=(1, 64)]}

    ---- 1 Graph Output(s) ----
    {y [dtype=float32, shape=(1, 64)]}

    ---- 2 Initializer(s) ----

    ---- 3 Node(s) ----

"""


def test_synthetic_debug_reduce() -> None:
    f = _findings(parse(DEBUG_REDUCE))["polygraphy_debug_summary"]
    assert (f.severity, f.count, f.lines) == ("medium", 1, (7,))
    d = f.detail
    assert (d["subtool"], d["iterations"], d["passed"], d["total"]) == ("reduce", 3, 1, 3)
    assert abs(d["pass_rate"] - 100 / 3) < 1e-9 and len(d["loops"]) == 2
    assert d["result"]["reduced"] == ["outputs", "inputs"]
    assert d["result"]["minimum_bad_model"] == {
        "name": "torch-jit-export",
        "opset": 13,
        "inputs": 1,
        "outputs": 1,
        "initializers": 2,
        "nodes": 3,
    }


def test_synthetic_debug_all_pass_and_pass_rate_fraction() -> None:
    text = "[I] Finished 3 iteration(s) | Passed: 3/3 | Pass Rate: 100.0%\n"
    f = _findings(parse(text))["polygraphy_debug_summary"]
    assert f.severity == "info" and f.detail == {"iterations": 3, "passed": 3, "total": 3, "pass_rate": 100.0}
    g = _findings(parse("Debug Summary | Pass Rate: 2/8\n"))["polygraphy_debug_summary"]
    assert g.severity == "medium" and (g.detail["passed"], g.detail["total"], g.detail["pass_rate"]) == (2, 8, 25.0)


def test_synthetic_random_calibration_variants() -> None:
    for text in (
        "[W] Int8 Calibration is using randomly generated input data.\n"
        "    This could negatively impact accuracy if the inference-time input data is dissimilar to the randomly "
        "generated calibration data.\n    You may want to consider providing real data via the --data-loader-script option.\n",
        "[W] (10:00:00) Int8 Calibration is using randomly\ngenerated input data.\n",
        "Int8 Calibration is using randomly generated input data.\n"
        "This could negatively impact accuracy if the inference-time input data is dissimilar to the randomly "
        "generated calibration data.\n",
    ):
        f = _findings(parse(text), "random_calibration")["random_calibration_data"]
        assert (f.count, f.lines[0]) == (1, 1)


# --- part 3: the rules never raise ---------------------------------------------------------------------------

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
POLY = [(CORPUS / rel).read_text(encoding="utf-8", errors="replace") for rel in DEV if "polygraphy" in rel]
SYNTH = [OLD_020, V30, _v05(), DEBUG_BUILD, DEBUG_PRECISION, DEBUG_REDUCE]
PIECES = ["[I] ", "[E] ", "FAILED | ", "PASSED | Output: '", "Accuracy Summary | a vs. b | Passed: ", "Stats: mean=",
          "Comparing Output: '", "Iteration: ", "Finished 2 iteration(s) | Passed: ", "Pass Rate: ", "Minimum Bad Model:",
          "Required tolerances: [atol=", "nan", "1e-05", "/", "%", "'", " | ", "\n", "    "]  # fmt: skip


def test_findings_survive_json() -> None:
    """Details hold only JSON types (non-finite numbers as strings), so a dump reads back equal."""
    for text in POLY + SYNTH:
        log = parse(text)
        assert type(log).model_validate(json.loads(json.dumps(log.dump(), allow_nan=False))) == log


def _run(text: str) -> None:
    records = split_records(text)
    for rule in COMPARE_RULES + DEBUG_RULES:
        for hit in rule(records):
            assert hit.line >= 1 and hit.kind.startswith("polygraphy_")
    parse(text)


@FAST
@given(st.text())
def test_fuzz_random_text(text: str) -> None:
    _run(text)


@FAST
@given(st.lists(st.sampled_from(PIECES) | st.text(max_size=12), max_size=60))
def test_fuzz_polygraphy_words(parts: list[str]) -> None:
    _run("".join(parts))


@FAST
@given(st.integers(0, len(POLY + SYNTH) - 1), st.integers(0, 2**32 - 1))
def test_fuzz_lines_deleted_and_duplicated(i: int, seed: int) -> None:
    rng = random.Random(seed)
    out = []
    for line in (POLY + SYNTH)[i].split("\n"):
        r = rng.random()
        if r < 0.2:
            continue
        out.append(line)
        if r > 0.85:
            out.append(line)
    _run("\n".join(out))
    assert list(rule_polygraphy_compare(split_records(""))) == [] and list(rule_polygraphy_debug([])) == []
