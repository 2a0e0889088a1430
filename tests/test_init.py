"""`trtverify init MODEL.onnx`: the suite it writes is accepted by `validate` and executed by `run`
(real subprocesses, real models)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from tests.conftest import ROOT, TINY, run_cli

DEMO = ROOT / "demo" / "fashion_mnist"


def _stages(out: Path) -> dict[str, str]:
    res = json.loads((out / "results.json").read_text())
    assert res["complete"] is True
    return {s["name"]: s["status"] for s in res["stages"]}


def test_init_a_dynamic_batch_model_with_its_pytorch_source_then_validate_and_run(tmp_path: Path):
    for name in ("tiny.onnx", "tiny.pt", "tinymodel.py"):
        shutil.copy(TINY / name, tmp_path / name)
    r = run_cli("init", "tiny.onnx", "--pytorch", "tinymodel:build", "--weights", "tiny.pt", cwd=tmp_path)
    assert r.code == 0, r.err
    text = (tmp_path / "suite.yaml").read_text()
    assert "# dimension 0 ('batch') is dynamic in the model: 1 here" in text
    suite = yaml.safe_load(text)
    assert suite["inputs"]["generate"] == {"input": {"shape": [1, 1, 8, 8], "dtype": "float32", "range": [0, 1]}}
    assert suite["models"]["pytorch"] == {
        "factory": "tinymodel:build",
        "weights": "tiny.pt",
        "output_names": ["logits"],
    }
    assert list(suite["stages"]) == ["framework", "layerwise"]  # e2e and perf are commented-out examples
    assert "#   task: classification" in text and "# perf:" in text

    r = run_cli("validate", "suite.yaml", cwd=tmp_path, block=("torch", "tensorrt"))
    assert r.code == 0 and "ok: suite.yaml" in r.out, r.err
    r = run_cli("run", "suite.yaml", "--out", "o", cwd=tmp_path)
    assert r.code == 0, r.out + r.err
    # no candidate given: an FP16 recipe made from the reference gives layerwise something to compare
    assert _stages(tmp_path / "o") == {"framework": "passed", "layerwise": "passed"}


def test_init_the_demo_model_with_candidates_from_another_folder(tmp_path: Path):
    out = tmp_path / "suites" / "fashion.yaml"
    out.parent.mkdir()
    r = run_cli(
        "init",
        str(DEMO / "fashion_cnn_fp32.onnx"),
        "--candidate",
        str(DEMO / "fashion_cnn_fp16.onnx"),
        "--candidate",
        str(DEMO / "fashion_cnn_int8_qdq.onnx"),
        "-o",
        str(out),
    )
    assert r.code == 0, r.err
    suite = yaml.safe_load(out.read_text())
    assert suite["name"] == "fashion_cnn_fp32"
    cands = suite["models"]["candidates"]
    assert list(cands) == ["fashion_cnn_fp16", "fashion_cnn_int8_qdq"]
    assert (out.parent / cands["fashion_cnn_fp16"]).resolve() == DEMO / "fashion_cnn_fp16.onnx"  # relative to the suite
    assert list(suite["stages"]) == ["layerwise"]
    r = run_cli("validate", str(out))
    assert r.code == 0, r.err
    r = run_cli("run", str(out), "--out", str(tmp_path / "o"))
    assert r.code in (0, 1), r.out + r.err  # random inputs: INT8 may miss the default checks; it ran
    assert _stages(tmp_path / "o")["layerwise"] in ("passed", "failed")


def test_init_refuses_to_overwrite_without_force_and_bad_arguments(tmp_path: Path):
    shutil.copy(TINY / "tiny.onnx", tmp_path / "tiny.onnx")
    (tmp_path / "suite.yaml").write_text("mine\n")
    r = run_cli("init", "tiny.onnx", cwd=tmp_path)
    assert r.code == 2 and "suite.yaml exists; pass --force" in r.err
    assert (tmp_path / "suite.yaml").read_text() == "mine\n"
    r = run_cli("init", "tiny.onnx", "--force", cwd=tmp_path)
    assert r.code == 0 and "layerwise: {}" in (tmp_path / "suite.yaml").read_text()
    r = run_cli("init", "tiny.onnx", "--pytorch", "not a spec", "-o", "x.yaml", cwd=tmp_path)
    assert r.code == 2 and "--pytorch 'not a spec'" in r.err and not (tmp_path / "x.yaml").exists()
    (tmp_path / "bad.onnx").write_bytes(b"\x00garbage")
    r = run_cli("init", "bad.onnx", "-o", "y.yaml", cwd=tmp_path)
    assert r.code == 2 and "bad.onnx" in r.err and "Traceback" not in r.err
