"""Message families added for issue 29, each described by its format (snippets written here in the tools' formats,
not copied from the corpus logs): several performance summaries, tactic-selection time, DLA switches for any
reason, a calibration cache's extreme scales, Polygraphy comparisons without a verdict, reduce's minimal model."""

from __future__ import annotations

from trtverify.buildlog.parser import parse


def _by_kind(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in parse(text).findings:
        out.setdefault(f.kind, []).append(f)
    return out


def _summary(prefix: str, qps: float, mean: float) -> str:
    return (
        f"{prefix}Throughput: {qps} qps\n"
        f"{prefix}Latency: min = {mean - 0.1} ms, max = {mean + 0.5} ms, mean = {mean} ms, median = {mean} ms, "
        f"percentile(99%) = {mean + 0.4} ms\n"
        f"{prefix}GPU Compute Time: min = {mean - 0.2} ms, max = {mean + 0.4} ms, mean = {mean - 0.1} ms, "
        f"median = {mean - 0.1} ms, percentile(99%) = {mean + 0.3} ms\n"
    )


def test_two_performance_summaries_are_two_findings_in_order():
    text = (
        "&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # trtexec --onnx=a.onnx\n"
        + _summary("[11/01/2023-10:00:00] [I] ", 812.5, 1.2)
        + "&&&& RUNNING TensorRT.trtexec [TensorRT v100300] # trtexec --onnx=a.onnx\n"
        + _summary("[11/01/2024-10:00:00] [I] ", 990.0, 1.0)
    )
    found = _by_kind(text)["performance_summary"]
    assert [f.lines[0] for f in found] == [2, 6]
    assert [f.detail["throughput_qps"] for f in found] == [812.5, 990.0]
    assert [f.detail["stats"]["latency"]["mean"] for f in found] == [1.2, 1.0]
    assert found[0].message.startswith("performance summary 1 of 2")


def test_one_summary_stays_one_finding():
    (f,) = _by_kind("[I] === Performance summary ===\n" + _summary("[I] ", 100.0, 2.0))["performance_summary"]
    assert f.lines == (1,) and f.detail["throughput_qps"] == 100.0


def test_tactic_selection_time_beside_the_build_time():
    text = (
        "[10/10/2023-12:00:00] [V] [TRT] Formats and tactics selection completed in 512.25 seconds.\n"
        "[10/10/2023-12:00:01] [I] [TRT] Engine generation completed in 640.5 seconds.\n"
    )
    found = _by_kind(text)
    assert found["tactic_selection_time"][0].detail == {"seconds": 512.25}
    assert found["build_time"][0].detail == {"seconds": 640.5}


def test_a_dla_switch_to_gpu_for_any_stated_reason():
    text = (
        "WARNING: [TRT]: DLA supports only 8 subgraphs per DLA core. Switching to GPU for layer conv_13\n"
        "WARNING: [TRT]: Layer norm_2 exceeds DLA's buffer limit. Switching to GPU for layer norm_2\n"
    )
    (f,) = _by_kind(text)["dla_fallback"]
    assert f.count == 2 and f.layers == ("conv_13", "norm_2") and f.severity == "medium"
    assert "8 subgraphs per DLA core" in f.message


def test_a_calibration_caches_extreme_scales_are_named():
    text = "TRT-8601-EntropyCalibration2\ninput: 3c010a14\nconv1: 3d4ccccd\nrelu9: 42c80000\nfc: 33d6bf95\n"
    (f,) = _by_kind(text)["calibration_cache_contents"]
    assert f.detail["tensors"] == 4
    assert f.detail["largest"][0] == ["relu9", 100.0]
    assert f.detail["smallest"][0][0] == "fc" and f.detail["smallest"][0][1] < 1e-6
    assert "relu9" in f.message and "fc" in f.message and set(f.layers) == {"relu9", "fc"}
    assert parse(text).unknown_lines == 0  # every line of the cache feeds the finding


def test_a_comparison_without_its_verdict_reports_its_numbers():
    text = (
        "[I]     Comparing Output: 'probs' (dtype=float32, shape=(1, 10)) with 'probs' (dtype=float32, shape=(1, 10))\n"
        "[I]         Tolerance: [abs=1e-05, rel=1e-05] | Checking elemwise error\n"
        "[I]         Error Metrics: probs\n"
        "[I]             Minimum Required Tolerance: elemwise error | [abs=0.25] OR [rel=3.5]\n"
        "[I]             Absolute Difference | Stats: mean=0.01, std-dev=0.02, var=0.0004, median=0.005, "
        "min=0 at (0, 0), max=0.25 at (0, 3), avg-magnitude=0.01, p90=0.02, p95=0.05, p99=0.2\n"
    )
    found = _by_kind(text)
    assert "polygraphy_compare_failed" not in found and "polygraphy_compare_passed" not in found
    (f,) = found["polygraphy_compare_no_verdict"]
    assert f.layers == ("probs",) and f.severity == "info"
    assert f.detail["verdict"] == "not in the log" and f.detail["required"] == {"atol": 0.25, "rtol": 3.5}
    assert f.detail["abs_diff"]["p99"] == 0.2


def test_reduce_names_the_nodes_of_the_minimal_failing_model():
    text = (
        "[I] RUNNING | Command: polygraphy debug reduce model.onnx -o reduced.onnx --check polygraphy run ...\n"
        "[I] Minimum Bad Model:\n"
        "[I]     Name: onnx_graphsurgeon_graph | ONNX Opset: 17\n"
        "[I]     ---- 2 Node(s) ----\n"
        "[I]     Node 0    | node_linear [Op: Gemm]\n"
        "[I]     Node 1    |  [Op: Softmax]\n"
        "[I] Finished 8 iteration(s) | Passed: 5/8 | Pass Rate: 62.5%\n"
    )
    (f,) = _by_kind(text)["polygraphy_debug_summary"]
    assert f.layers == ("node_linear", "node 1")
    assert f.detail["result"]["minimum_bad_model"]["node_list"] == [["node_linear", "Gemm"], ["node 1", "Softmax"]]
    assert "node_linear (Gemm)" in f.message
