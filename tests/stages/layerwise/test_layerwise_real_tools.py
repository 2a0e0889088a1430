"""Layerwise diagnosis on what real tools make, with their defaults: ONNX Runtime's `quantize_static`,
`onnxruntime.transformers.float16`, `torch.onnx.export`. Every model is made here, from torch, by the tool.

The rewrites these tools make (a Relu folded into the Q/DQ pair after a Conv, saturated BatchNormalization
statistics, a decomposed LayerNorm overflowing FP16) once made the stage blame the wrong layer or say nothing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.conftest import as_json, run_cli, write_suite
from trtverify.cli.run import run_and_record
from trtverify.config.loader import load_suite
from trtverify.report.html import write_report

torch = pytest.importorskip("torch")


def export(model: torch.nn.Module, shape: tuple[int, ...], path: Path, opset: int = 17, **kw) -> None:
    model.eval()
    torch.onnx.export(
        model,
        torch.randn(*shape),
        str(path),
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "n"}},
        opset_version=opset,
        dynamo=False,
        **kw,
    )


def quantize(src: Path, dst: Path, calib: np.ndarray, **kw) -> None:
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([{"x": calib[i : i + 1]} for i in range(len(calib))])

        def get_next(self):
            return next(self.it, None)

    logging.getLogger().setLevel(logging.ERROR)  # "Please consider pre-processing before quantization"
    quantize_static(str(src), str(dst), Reader(), **kw)


def to_fp16(src: Path, dst: Path) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(str(src)), keep_io_types=True), str(dst))


class ConvReluNet(torch.nn.Module):
    """Conv+ReLU blocks with a residual add: what ResNet-style models look like to a quantizer."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 16, 3, padding=1, stride=2)
        self.c3 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = torch.relu(self.c2(x))
        y = torch.relu(self.c3(x)) + x
        return self.fc(y.mean((2, 3)))


def run_stage(folder: Path, reference: str, candidates: dict[str, str], extra: str = "") -> tuple[dict, str]:
    cands = "".join(f"    {k}: {v}\n" for k, v in candidates.items())
    text = (
        f"name: real\nreference_dir: refs\nmodels:\n  reference: {reference}\n  candidates:\n{cands}"
        f"inputs:\n  file: inputs.npz\nstages:\n  layerwise:\n{extra or '    samples: 4'}\n"
    )
    loaded = load_suite(write_suite(folder, text))
    results = run_and_record(loaded, folder / "out")
    report = write_report(results, folder / "out" / "report.html").read_text(encoding="utf-8")
    return as_json(results)["stages"][0], report


@pytest.fixture
def cnn(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    export(ConvReluNet(), (1, 3, 32, 32), tmp_path / "ref.onnx")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "inputs.npz", x=rng.standard_normal((4, 3, 32, 32)).astype(np.float32))
    return tmp_path


def test_default_quantize_static_blames_no_relu(cnn: Path):
    """quantize_static's defaults (QDQ, asymmetric uint8 activations) drop each Relu after a Conv: the Conv
    writes the Relu's output name and the clamp happens in the Q/DQ pair after it."""
    rng = np.random.default_rng(1)
    quantize(cnn / "ref.onnx", cnn / "int8.onnx", rng.standard_normal((16, 3, 32, 32)).astype(np.float32))
    model = onnx.load(str(cnn / "int8.onnx"))
    assert not any(n.op_type == "Relu" for n in model.graph.node)  # the rewrite this test is about happened
    stage, report = run_stage(cnn, "ref.onnx", {"int8": "int8.onnx"})
    cand = stage["candidates"][0]
    relus = [r for r in cand["rows"] if r["op_type"] == "Relu"]
    assert len(relus) == 3
    for r in relus:
        # compared with the DequantizeLinear output, the value the candidate computes for the Relu's tensor
        assert r["candidate_tensor"] == r["tensor"] + "_DequantizeLinear_Output"
        assert r["pairing"]["how"] == "folded" and r["pairing"]["candidate_op_type"] == "Conv"
        assert 0.002 < r["metrics"]["rel_l2"] < 0.05 and r["passed"]
    assert not any(rc["op_type"] == "Relu" for rc in cand["root_causes"])
    assert cand["root_causes"][0]["op_type"] in ("Conv", "Gemm")
    # the Conv outputs inside the fold: the candidate's Conv writes each, unclamped, under its Relu's name; names
    # cannot pair them, structure does (same Conv on paired inputs, weights equal up to INT8)
    convs = {r["tensor"]: r for r in cand["rows"] if r["tensor"] in {f"/c{i}/Conv_output_0" for i in (1, 2, 3)}}
    assert len(convs) == 3 and not cand["unmatched"]["reference_only"]
    for r in convs.values():
        assert r["pairing"]["how"] == "structure" and r["candidate_tensor"] in {x["tensor"] for x in relus}
        assert 0.002 < r["metrics"]["rel_l2"] < 0.05 and r["passed"]
    # INT8 defaults apply and nothing is wrong with the numbers
    assert cand["precision"] == "int8" and cand["checks_source"] == "default for int8"
    assert cand["first_divergence"] is None and stage["status"] == "passed"
    # ... but TensorRT refuses asymmetric Q/DQ: the lint says so in the report's verdict header
    kinds = {f["kind"] for f in cand["lint"] if f["severity"] == "high"}
    assert "qdq_nonzero_zero_point" in kinds
    header = report.split('<ul class="causes lint-verdict"', 1)[1].split("</ul>", 1)[0]
    assert "qdq_nonzero_zero_point" in header and "(TensorRT)" in header


def test_lint_in_the_terminal_verdict_and_as_a_gate(cnn: Path):
    rng = np.random.default_rng(1)
    quantize(cnn / "ref.onnx", cnn / "int8.onnx", rng.standard_normal((16, 3, 32, 32)).astype(np.float32))
    out = cnn / "lw"
    r = run_cli(
        "layerwise",
        str(cnn / "ref.onnx"),
        str(cnn / "int8.onnx"),
        "--inputs",
        str(cnn / "inputs.npz"),
        "--out",
        str(out),
    )
    assert r.code == 0, r.out + r.err
    lint = [line for line in r.out.splitlines() if line.startswith("lint int8:")]
    assert lint and "qdq_nonzero_zero_point (TensorRT) x" in lint[0] and "first at " in lint[0]
    assert r.out.index(lint[0]) < r.out.index("PASSED: suite")  # just above the verdict line
    r = run_cli(
        "layerwise", str(cnn / "ref.onnx"), str(cnn / "int8.onnx"), "--inputs", str(cnn / "inputs.npz"),
        "--out", str(out), "--fail-on-lint", "high",
    )  # fmt: skip
    assert r.code == 1, r.out + r.err
    assert "FAIL int8: lint qdq_nonzero_zero_point (high; TensorRT is why)" in r.out
    stage = json.loads((out / "results.json").read_text())["stages"][0]
    gate = [c for c in stage["checks"] if c["metric"] == "lint_findings"]
    assert len(gate) == 1 and gate[0]["value"] >= 7 and not gate[0]["passed"]
    from trtverify.report.junit import write_junit
    from trtverify.results.io import load_results

    write_junit(load_results(out / "results.json"), out / "junit.xml")
    junit = (out / "junit.xml").read_text()
    assert "lint qdq_nonzero_zero_point" in junit and "<failure" in junit
    bad = run_cli(
        "layerwise", str(cnn / "ref.onnx"), str(cnn / "int8.onnx"), "--out", str(out), "--fail-on-lint", "hihg"
    )
    assert bad.code == 2 and "hihg" in bad.err and "high" in bad.err


def test_symmetric_per_channel_int8_passes_at_the_defaults_and_a_planted_fault_fails(cnn: Path):
    """TensorRT-compatible INT8 (symmetric activations and weights, per-channel weights) of a typical CNN."""
    from onnxruntime.quantization import QuantFormat, QuantType

    rng = np.random.default_rng(1)
    sym = {"ActivationSymmetric": True, "WeightSymmetric": True}
    quantize(
        cnn / "ref.onnx", cnn / "int8.onnx", rng.standard_normal((16, 3, 32, 32)).astype(np.float32),
        quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
        per_channel=True, extra_options=sym,
    )  # fmt: skip
    stage, _ = run_stage(cnn, "ref.onnx", {"int8": "int8.onnx"})
    cand = stage["candidates"][0]
    assert stage["status"] == "passed" and cand["checks_source"] == "default for int8", stage["checks"]
    assert not [f for f in cand["lint"] if f["severity"] == "high"]
    # plant: the weight scale of /c2/Conv x1.5 (a wrong scale, as a broken calibration or export makes)
    model = onnx.load(str(cnn / "int8.onnx"))
    conv = next(n for n in model.graph.node if n.name == "/c2/Conv")
    dq = next(n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == conv.input[1])
    init = next(i for i in model.graph.initializer if i.name == dq.input[1])
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(1.5), init.name))
    onnx.save(model, str(cnn / "planted.onnx"))
    stage, _ = run_stage(cnn, "ref.onnx", {"planted": "planted.onnx"})
    cand = stage["candidates"][0]
    assert stage["status"] == "failed"
    assert cand["root_causes"][0]["node"] == "/c2/Conv", cand["root_causes"][:2]
    assert cand["first_divergence"]["node"] == "/c2/Conv"


class BNNet(torch.nn.Module):
    """A BatchNormalization after a ReLU (torch does not fold it into the Conv), with one channel's running
    variance at 1e8, as real exports of rarely active channels have."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 4)
        with torch.no_grad():
            self.bn.running_var[3] = 1e8
            self.bn.weight[3] = 1e4
            self.bn.running_mean[3] = 5.0

    def forward(self, x):
        x = self.bn(torch.relu(self.c1(x)))
        return self.fc(torch.relu(self.c2(x)).mean((2, 3)))


def test_saturated_batchnorm_variance_is_named_by_the_lint(tmp_path: Path):
    torch.manual_seed(0)
    export(BNNet(), (1, 3, 16, 16), tmp_path / "ref.onnx")
    to_fp16(tmp_path / "ref.onnx", tmp_path / "fp16.onnx")
    np.savez(tmp_path / "inputs.npz", x=np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32))
    stage, report = run_stage(tmp_path, "ref.onnx", {"fp16": "fp16.onnx"})
    cand = stage["candidates"][0]
    bn = "/bn/BatchNormalization"
    assert cand["root_causes"][0]["node"] == bn and stage["status"] == "failed"
    found = [f for f in cand["lint"] if f["kind"] == "constant_saturated"]
    assert len(found) == 1 and found[0]["severity"] == "high"
    assert found[0]["node"] == bn and found[0]["tensor"] == "bn.running_var" and found[0]["count"] == 1
    assert found[0]["detail"]["reference_max"] == pytest.approx(1e8)
    assert "constant_saturated" in next(r for r in cand["rows"] if r["node"] == bn)["lint"]
    assert "constant_saturated" in report.split("</header>", 1)[0]


class LayerNormNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.ln = torch.nn.LayerNorm(64)
        self.fc2 = torch.nn.Linear(64, 8)

    def forward(self, x):
        return self.fc2(self.ln(self.fc1(x)))


def test_fp16_overflow_in_a_decomposed_layernorm_blames_the_pow(tmp_path: Path):
    """Opset 13 has no LayerNormalization: the export is ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div.
    Activations near 1000 make Pow overflow FP16 (1000^2 > 65504)."""
    torch.manual_seed(0)
    export(LayerNormNet(), (2, 32), tmp_path / "ref.onnx", opset=13)
    assert "Pow" in {n.op_type for n in onnx.load(str(tmp_path / "ref.onnx")).graph.node}
    to_fp16(tmp_path / "ref.onnx", tmp_path / "fp16.onnx")
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32) * 300
    np.savez(tmp_path / "inputs.npz", x=x)
    stage, _ = run_stage(tmp_path, "ref.onnx", {"fp16": "fp16.onnx"})
    cand = stage["candidates"][0]
    top = cand["root_causes"][0]
    assert top["op_type"] == "Pow" and top["nonfinite"] > 0 and top["rank"] == 1, cand["root_causes"][:3]
    assert cand["first_divergence"]["op_type"] == "Pow" and cand["first_divergence"]["nonfinite_mismatch"] > 0
    # the ReduceMean after it overflows only because its reference input does not fit FP16: ranked after
    after = [rc for rc in cand["root_causes"] if rc.get("inputs_nonfinite")]
    assert all(rc["rank"] > 1 for rc in after)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert not list(nans(results)), list(nans(results))[:5]


def nans(value: object, path: str = "") -> list[str]:
    """Where a NaN sits in parsed results.json (written as the string 'nan', or a float NaN)."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in nans(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in nans(v, f"{path}[{i}]")]
    if value == "nan" or (isinstance(value, float) and value != value):
        return [path]
    return []
