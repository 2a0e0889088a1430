"""The TensorRT 11 workflow on ModelOpt's own output (issue 27): the candidates in demo/modelopt/ were made by
nvidia-modelopt 0.47.0 on a CPU (demo/modelopt/make_candidates.py, its defaults); the FP32 model is the FP16-repair
demo's, whose BatchNorm variance (1e8) FP16 cannot hold. Real ONNX Runtime, real files; the test that runs ModelOpt
itself is marked `modelopt` and skips, with the install line, where it is absent."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.conftest import ROOT, run_cli
from trtverify.lint.linter import node_precisions, precision_label, precision_parts

MO = ROOT / "demo" / "modelopt"
REF = ROOT / "demo" / "fp16_repair" / "fashion_bn_fp32.onnx"
CNN = ROOT / "demo" / "fashion_mnist" / "fashion_cnn_fp32.onnx"
BN = "/features/post_bn/BatchNormalization"


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 real test images (not the 64 ModelOpt calibrated on), keyed by the models' input name."""
    images = np.load(ROOT / "demo" / "fashion_mnist" / "data" / "test_subset.npz", allow_pickle=False)["images"]
    path = tmp_path_factory.mktemp("rows") / "rows.npz"
    np.savez(path, input=images[1000:1016].astype(np.float32) / np.float32(255.0))
    return path


@pytest.mark.parametrize(
    "name, label",
    [
        ("fashion_bn_int8.onnx", "int8+fp16"),
        ("fashion_bn_fp8.onnx", "fp8+fp16"),
        ("fashion_bn_autocast_fp16.onnx", "fp16"),
        ("fashion_bn_autocast_bf16.onnx", "bf16"),
        ("fashion_cnn_int4.onnx", "int4"),
    ],
)
def test_each_candidate_reads_as_what_it_computes(name: str, label: str):
    """INT8 with its FP16 rest was 'int8', INT4 weight-only blocks 'int8' with INT8's defaults."""
    assert precision_label(precision_parts(MO / name)) == label


def test_the_node_precisions_are_read_from_types_and_qdq():
    int8 = node_precisions(MO / "fashion_bn_int8.onnx")
    assert int8[BN] == "FP16" and int8["/features/block1/conv/Conv"] == "INT8"
    autocast = node_precisions(MO / "fashion_bn_autocast_fp16.onnx")
    assert autocast[BN] == "FP32" and Counter(autocast.values())["FP16"] > 10  # AutoCast kept it: init_max
    int4 = node_precisions(MO / "fashion_cnn_int4.onnx")
    assert {k for k, v in int4.items() if v == "INT4"} == {"/classifier/fc1/Gemm", "/classifier/fc2/Gemm"}


@pytest.mark.parametrize("precision", ["int8", "fp8"])
def test_repair_keeps_the_culprit_in_modelopts_graph_and_the_pass_holds(tmp_path: Path, rows: Path, precision: str):
    """ModelOpt's INT8/FP8 with its FP16 rest collapses (the variance clamped in FP16): repair ended with `keep: []`
    (it only knew how to strip Q/DQ) and refused fp8. Now it keeps the BatchNorm, FP32 constants and all, passes the
    precision's defaults, and verifies the pass on rows the search did not use."""
    out = tmp_path / "r"
    r = run_cli("repair", str(REF), "--precision", precision, "--inputs", str(rows),
                "--candidate", str(MO / f"fashion_bn_{precision}.onnx"), "--out", str(out))  # fmt: skip
    assert r.code == 0, r.out + r.err
    rec = json.loads((out / f"repair-{precision}" / "repair.json").read_text())
    assert rec["keep"] == [BN] and rec["passed"] and rec["candidate_precision"] == f"{precision}+fp16"
    assert rec["rows"] == {"search": 12, "holdout": 4} and rec["verified"]["passed"]
    assert not rec["before"]["passed"] and rec["target"][0] == "rel_l2 <= 0.25 on every output"
    assert "[W:onnxruntime" not in r.err and "[E:onnxruntime" not in r.err  # ONNX Runtime kept quiet
    repaired = Path(rec["repaired_model"])
    assert node_precisions(repaired)[BN] == "FP32"
    # the repaired model passes the precision's layerwise defaults, and its lint names nothing at the kept node
    lw = run_cli("layerwise", str(REF), str(repaired), "--inputs", str(rows), "--fail-on-lint", "high",
                 "--out", str(tmp_path / "lw"))  # fmt: skip
    assert lw.code == 0, lw.out + lw.err
    cand = json.loads((tmp_path / "lw" / "results.json").read_text())["stages"][0]["candidates"][0]
    assert cand["precision"] == f"{precision}+fp16" and not [f for f in cand["lint"] if f["node"] == BN]
    # the suite it wrote says how to run the repaired model as a strongly typed TensorRT candidate: valid as written
    trt = _with_tensorrt_block(out / "suite.yaml")
    assert trt["backends"] == {"tensorrt": {"strongly_typed": True}}
    assert trt["models"]["candidates"]["repaired_trt"] == {"path": str(repaired.resolve()), "backend": "tensorrt"}
    (tmp_path / "trt.yaml").write_text(yaml.safe_dump(trt))
    assert run_cli("validate", str(tmp_path / "trt.yaml"), block=("tensorrt", "tensorrt_rtx")).code == 0


def _with_tensorrt_block(path: Path) -> dict:
    """The suite `repair` wrote, with its commented TensorRT block uncommented."""
    head, _, tail = path.read_text().partition("\n# The repaired ONNX")
    block = yaml.safe_load("\n".join(ln[4:] for ln in tail.splitlines() if ln.startswith("#   ")))
    suite = yaml.safe_load(head)
    suite["models"]["candidates"].update(block["models"]["candidates"])
    suite["backends"] = block["backends"]
    suite["stages"].update(block["stages"])
    return suite


def test_the_broken_candidates_are_diagnosed_and_autocasts_pass(tmp_path: Path, rows: Path):
    r = run_cli("layerwise", str(REF), *(str(MO / f"fashion_bn_{n}.onnx") for n in ("int8", "autocast_fp16")),
                "--inputs", str(rows), "--out", str(tmp_path / "o"))  # fmt: skip
    assert r.code == 1, r.out + r.err
    cands = {c["name"]: c for c in json.loads((tmp_path / "o" / "results.json").read_text())["stages"][0]["candidates"]}
    int8 = cands["fashion_bn_int8"]
    assert int8["root_causes"][0]["node"] == BN and int8["precision_mix"] == {"FP16": 12, "INT8": 4}
    assert any(f["kind"] == "constant_saturated" and f["node"] == BN for f in int8["lint"])
    autocast = cands["fashion_bn_autocast_fp16"]
    assert autocast["passed"] and not [f for f in autocast["lint"] if f["severity"] == "high"]
    assert "[W:onnxruntime" not in r.err


def test_bf16_is_compared_tensor_by_tensor_on_a_cpu(tmp_path: Path, rows: Path):
    """ONNX Runtime's CPU provider has no BF16 Conv: AutoCast's BF16 output was exit 1. Emulated (FP32 compute,
    every BF16 tensor rounded to BF16) it is compared like any candidate, and says so."""
    r = run_cli("layerwise", str(REF), str(MO / "fashion_bn_autocast_bf16.onnx"), "--inputs", str(rows),
                "--out", str(tmp_path / "o"))  # fmt: skip
    assert r.code == 0, r.out + r.err
    cand = json.loads((tmp_path / "o" / "results.json").read_text())["stages"][0]["candidates"][0]
    compared = [row for row in cand["rows"] if row.get("metrics")]
    assert len(compared) == 16 and cand["precision"] == "bf16" and "emulated as a GPU computes it" in cand["emulation"]
    conv = next(row for row in compared if row["node"] == "/features/block1/conv/Conv")
    # BF16 rounding (8 bits of mantissa) is visible and bounded: more than FP16's, far below a broken model's
    assert 1e-3 < conv["metrics"]["rel_l2"] < 0.02


def test_an_fp32_candidate_is_refused_by_repair(tmp_path: Path):
    r = run_cli("repair", str(REF), "--precision", "int8", "--candidate", str(REF), "--out", str(tmp_path / "o"))
    assert r.code == 2 and "nothing was lowered" in r.err


@pytest.mark.modelopt
def test_modelopt_itself_makes_what_the_demo_holds(tmp_path: Path, rows: Path):
    """ModelOpt run here, as the demo's script runs it (INT8, its defaults, the CPU), on a private copy of the FP32
    model (its quantizer rewrites its input): the output reads int8+fp16 and repairs to the BatchNorm."""
    pytest.importorskip("modelopt.onnx.quantization", reason="pip install -e '.[modelopt]' (nvidia-modelopt)")
    shutil.copy(REF, tmp_path / "ref.onnx")
    images = np.load(ROOT / "demo" / "fashion_mnist" / "data" / "test_subset.npz", allow_pickle=False)["images"]
    np.savez(tmp_path / "calib.npz", input=images[:64].astype(np.float32) / np.float32(255.0))
    cmd = [sys.executable, "-m", "modelopt.onnx.quantization", "--onnx_path", str(tmp_path / "ref.onnx"),
           "--output_path", str(tmp_path / "int8.onnx"), "--quantize_mode", "int8",
           "--calibration_data_path", str(tmp_path / "calib.npz"), "--calibration_eps", "cpu"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert precision_parts(tmp_path / "int8.onnx") == ["int8", "fp16"]
    r = run_cli("repair", str(REF), "--precision", "int8", "--inputs", str(rows),
                "--candidate", str(tmp_path / "int8.onnx"), "--out", str(tmp_path / "r"))  # fmt: skip
    assert r.code == 0, r.out + r.err
    assert json.loads((tmp_path / "r" / "repair-int8" / "repair.json").read_text())["keep"] == [BN]


@pytest.mark.modelopt
def test_convert_and_repair_call_modelopt(tmp_path: Path, rows: Path):
    """The [modelopt] extra: `convert --tool modelopt` runs AutoCast (it keeps the BatchNorm FP32 itself), and
    `repair --tool modelopt` has ModelOpt make the INT8 candidate, then repairs it."""
    pytest.importorskip("modelopt.onnx.quantization", reason="pip install -e '.[modelopt]' (nvidia-modelopt)")
    r = run_cli("convert", str(REF), "--precision", "fp16", "--tool", "modelopt", "-o", str(tmp_path / "ac.onnx"))
    assert r.code == 0, r.err
    assert node_precisions(tmp_path / "ac.onnx")[BN] == "FP32"
    r = run_cli("repair", str(REF), "--precision", "int8", "--tool", "modelopt", "--inputs", str(rows),
                "--out", str(tmp_path / "r"))  # fmt: skip
    assert r.code == 0, r.out + r.err
    rec = json.loads((tmp_path / "r" / "repair-int8" / "repair.json").read_text())
    assert rec["keep"] == [BN] and rec["candidate_precision"] == "int8+fp16"


def test_without_modelopt_the_tool_is_a_missing_dependency(tmp_path: Path):
    r = run_cli("convert", str(REF), "--precision", "fp16", "--tool", "modelopt", "-o", str(tmp_path / "x.onnx"),
                block=("modelopt",))  # fmt: skip
    assert r.code == 3 and "trtverify[modelopt]" in r.err


def test_the_report_shows_each_candidates_precision_mix(tmp_path: Path, rows: Path):
    """results.json's `precision_mix`, as the engine audit shows an engine's, in the HTML report."""
    r = run_cli("layerwise", str(REF), str(MO / "fashion_bn_int8.onnx"), str(MO / "fashion_bn_autocast_bf16.onnx"),
                "--inputs", str(rows), "--out", str(tmp_path / "o"), "-q")  # fmt: skip
    assert r.code == 1, r.out + r.err
    html = (tmp_path / "o" / "report.html").read_text()
    assert "Computes in <strong>int8+fp16</strong>: compute nodes FP16 12, INT8 4" in html
    assert "Computes in <strong>bf16</strong>: compute nodes BF16 15, FP32 1" in html and "emulated as a GPU" in html
