import json
from pathlib import Path

from tests.conftest import ROOT, run_cli


def test_missing_suite_file_is_exit_2():
    r = run_cli("run", "no/such/suite.yaml")
    assert r.code == 2 and "no/such/suite.yaml: file not found" in r.err and "Traceback" not in r.err


def test_unknown_option_is_exit_2():
    r = run_cli("run", "--frobnicate")
    assert r.code == 2 and "No such option" in r.err


def test_validate_reports_each_file(tmp_path: Path):
    bad = ROOT / "tests" / "data" / "bad_suites" / "unknown_metric.yaml"
    r = run_cli("validate", str(ROOT / "suites" / "fashion_mnist.yaml"), str(bad))
    assert r.code == 2 and "ok: " in r.out and "unknown metric 'cosin'" in r.err


def test_report_rerenders_from_results(tmp_path: Path, tiny_suite: Path):
    out = tmp_path / "o"
    assert run_cli("run", str(tiny_suite), "--out", str(out), "-q").code == 0
    (out / "report.html").unlink()
    r = run_cli("report", str(out / "results.json"), "--out", str(tmp_path / "again.html"))
    assert r.code == 0 and "PASSED" in (tmp_path / "again.html").read_text()
    (tmp_path / "broken.json").write_text("{not json")
    r = run_cli("report", str(tmp_path / "broken.json"))
    assert r.code == 2 and "not valid JSON" in r.err


def test_quiet_prints_only_the_verdict(tmp_path: Path, tiny_suite: Path):
    r = run_cli("run", str(tiny_suite), "--out", str(tmp_path / "o"), "-q")
    assert r.out.strip() == "PASSED: suite 'tiny' (exit 0)"
    assert json.loads((tmp_path / "o" / "results.json").read_text())["passed"] is True


DEMO = ROOT / "demo" / "fashion_mnist"


def test_layerwise_command_without_a_suite(tmp_path: Path):
    import numpy as np

    np.savez(tmp_path / "in.npz", input=np.random.default_rng(0).uniform(0, 1, (3, 1, 28, 28)).astype(np.float32))
    out = tmp_path / "o"
    r = run_cli(
        "layerwise",
        str(DEMO / "fashion_cnn_fp32.onnx"),
        str(DEMO / "fashion_cnn_fp16.onnx"),
        "--inputs",
        str(tmp_path / "in.npz"),
        "--out",
        str(out),
    )
    assert r.code == 0, r.out + r.err
    assert "fashion_cnn_fp16 (fp16, checks: default for fp16): 15 tensors compared; no divergence" in r.out
    res = json.loads((out / "results.json").read_text())
    stage = res["stages"][0]
    assert stage["name"] == "layerwise" and stage["samples"] == 3 and len(stage["candidates"][0]["rows"]) == 15
    # the written suite reruns the same comparison
    r2 = run_cli("run", str(out / "suite.yaml"), "--out", str(tmp_path / "again"))
    assert r2.code == 0 and "15 tensors compared" in r2.out


def test_layerwise_command_generated_inputs_and_checks(tmp_path: Path):
    r = run_cli(
        "layerwise",
        str(DEMO / "fashion_cnn_fp32.onnx"),
        str(DEMO / "fashion_cnn_int8_qdq.onnx"),
        "--dim",
        "batch=4",
        "--check",
        "cosine>=0.99999",
        "--out",
        str(tmp_path / "o"),
    )
    assert r.code == 1 and "first divergence /features/block1/conv/Conv_output_0" in r.out
    r = run_cli(
        "layerwise",
        str(DEMO / "fashion_cnn_fp32.onnx"),
        str(DEMO / "fashion_cnn_fp16.onnx"),
        "--check",
        "cosine=1",
        "--out",
        str(tmp_path / "p"),
    )
    assert r.code == 2 and "expected METRIC<=VALUE" in r.err
    r = run_cli("layerwise", str(DEMO / "fashion_cnn_fp32.onnx"), "--out", str(tmp_path / "q"))
    assert r.code == 2 and "give a CANDIDATE" in r.err
    r = run_cli(
        "layerwise",
        str(DEMO / "fashion_cnn_fp32.onnx"),
        str(DEMO / "fashion_cnn_fp16.onnx"),
        "--dim",
        "batch=zero",
        "--out",
        str(tmp_path / "r"),
    )
    assert r.code == 2 and "--dim 'batch=zero'" in r.err


def test_layerwise_command_with_tensorrt_where_it_is_missing(tmp_path: Path):
    """No TensorRT on this machine: the suite is written and valid, the stage fails with exit 3 and the fix."""
    out = tmp_path / "o"
    r = run_cli(
        "layerwise",
        str(DEMO / "fashion_cnn_fp32.onnx"),
        "--backend",
        "tensorrt",
        "--precision",
        "fp16",
        "--out",
        str(out),
        block=("tensorrt", "polygraphy"),
    )
    assert r.code == 3, r.out + r.err
    assert "pip install" in r.out
    import yaml

    suite = yaml.safe_load((out / "suite.yaml").read_text())
    assert suite["backends"] == {"tensorrt": {"precisions": ["fp16"]}}
    assert suite["models"]["candidates"]["fashion_cnn_fp32"]["backend"] == "tensorrt"
    assert run_cli("validate", str(out / "suite.yaml")).code == 0


def test_a_model_under_test_that_cannot_be_loaded_fails_the_run(tmp_path: Path, tiny_dir: Path):
    """Exit 1 (the model under test is broken), while a path that does not exist is a suite error (exit 2)."""
    (tiny_dir / "broken.onnx").write_bytes(b"\x08\x07 not a protobuf model")
    text = (
        "name: t\nmodels:\n  reference: tiny.onnx\n  candidates: {cand: CAND}\n"
        "inputs: {generate: {input: {shape: [1, 1, 8, 8]}}}\nstages: {layerwise: {}}\n"
    )
    suite = tiny_dir / "s.yaml"
    suite.write_text(text.replace("CAND", "broken.onnx"))
    r = run_cli("run", str(suite), "--out", str(tmp_path / "o"))
    assert r.code == 1 and "ONNX Runtime cannot load" in r.out and "Traceback" not in r.out + r.err
    stage = json.loads((tmp_path / "o" / "results.json").read_text())["stages"][0]
    assert stage["status"] == "error" and stage["error"]["exit_code"] == 1
    suite.write_text(text.replace("CAND", "missing.onnx"))
    r = run_cli("run", str(suite), "--out", str(tmp_path / "p"))
    assert r.code == 2 and "s.yaml:4: models.candidates.cand.path: file not found" in r.err
    assert not (tmp_path / "p").exists()


def test_a_suite_file_with_a_nul_byte_is_a_located_usage_error(tmp_path: Path):
    (tmp_path / "s.yaml").write_bytes(b"name: x\nmodels:\n  reference: a\x00.onnx\n")
    r = run_cli("validate", str(tmp_path / "s.yaml"))
    assert r.code == 2 and "s.yaml:3: control character U+0000 at column 15" in r.err and "Traceback" not in r.err
