"""`trtverify reduce` and `layerwise --reduce` (issue 49, item 1): from a layerwise divergence to a bug-report bundle.
Real ONNX Runtime on the demos' real files: the FP16 repair demo (onnxruntime.transformers.float16 clamps a BatchNorm
variance of 1e8 to 65504) and ModelOpt 0.47's INT8 of the same model (demo/modelopt, its FP16 rest clamps it too);
the bundle's own layerwise run fails, and the real Polygraphy (its ONNX Runtime runner, CPU) fails the candidate's
subgraph against the reference's outputs and passes the reference's."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.conftest import ROOT, main_in_process

DEMO = ROOT / "demo" / "fp16_repair"
REF, FP16 = DEMO / "fashion_bn_fp32.onnx", DEMO / "fashion_bn_fp16.onnx"
BN = "/features/post_bn/BatchNormalization"
BN_OUT = f"{BN}_output_0"


def _images(path: Path, rows: int = 4) -> Path:
    images = np.load(ROOT / "demo" / "fashion_mnist" / "data" / "test_subset.npz", allow_pickle=False)["images"]
    np.savez(path, input=images[:rows].astype(np.float32) / np.float32(255.0))
    return path


@pytest.fixture(scope="module")
def fp16_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    """`layerwise --reduce` on the FP16 repair demo (4 test images), once for the tests below: (exit code, OUT)."""
    from trtverify.cli.main import cli

    tmp = tmp_path_factory.mktemp("fp16")
    argv = ["layerwise", str(REF), str(FP16), "--inputs", str(_images(tmp / "x.npz")), "--out", str(tmp / "lw"),
            "--reduce", "-q"]  # fmt: skip
    try:
        cli.main(args=argv, prog_name="trtverify", standalone_mode=False)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, tmp / "lw"


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    return lambda *argv: main_in_process([str(a) for a in argv], capsys, monkeypatch)


def test_fp16_demo_reduces_to_the_batchnorm_and_the_bundle_fails_on_its_own(fp16_run, run, tmp_path: Path) -> None:
    code, out = fp16_run
    assert code == 1  # the layerwise run fails: the bundle is written beside it
    bundle = out / "reduce-fashion_bn_fp16"
    s = json.loads((bundle / "reduce.json").read_text())
    assert s["target"] == BN_OUT and s["root_node"] == BN
    # at most a tenth of the model's nodes: the BatchNormalization alone (its Identity of a weight is the weight)
    assert s["reference_nodes"] == {"subgraph": 1, "model": 17}
    ref = onnx.load(bundle / "reference.onnx")
    cand = onnx.load(bundle / "candidate.onnx")
    onnx.checker.check_model(ref)
    onnx.checker.check_model(cand)
    assert [n.op_type for n in ref.graph.node] == ["BatchNormalization"]
    assert [n.op_type for n in cand.graph.node] == ["Cast", "BatchNormalization", "Cast"]  # FP32 in and out
    assert s["candidate_nodes"]["adapters"] == 2
    # the weights are in the subgraph: the candidate's variance clamped to FP16's largest value, the reference's not
    var = {t.name: onnx.numpy_helper.to_array(t) for t in cand.graph.initializer}["features.post_bn.running_var"]
    assert var.dtype == np.float16 and var.max() == np.float16(65504)
    ref_var = {t.name: onnx.numpy_helper.to_array(t) for t in ref.graph.initializer}["features.post_bn.running_var"]
    assert ref_var.max() == np.float32(1e8)
    # fails the same way as in the whole model: same tensor, over FP16's tolerance, about the same error
    assert s["failed"] == ["rel_l2 <= 0.1", "cosine >= 0.999"]
    assert s["metrics"]["rel_l2"] == pytest.approx(s["whole_model_metrics"]["rel_l2"], rel=0.05)
    # inputs and reference outputs in every tool's format, one feed
    feed = np.load(bundle / "inputs.npz", allow_pickle=False)
    assert list(feed) == ["/features/block2/relu/Relu_output_0"] and feed[list(feed)[0]].shape == (1, 32, 14, 14)
    assert len(json.loads((bundle / "inputs.json").read_text())) == 1
    raw = bundle / "trtexec" / "%2Ffeatures%2Fblock2%2Frelu%2FRelu_output_0.bin"
    assert raw.stat().st_size == 32 * 14 * 14 * 4
    assert (bundle / "trtexec" / "ref" / "%2Ffeatures%2Fpost_bn%2FBatchNormalization_output_0.bin").is_file()
    commands = (bundle / "COMMANDS.sh").read_text()
    assert "--loadInputs=" in commands and "--loadRefOutputs=" in commands and "--accuracyThreshold=" in commands
    report = (bundle / "REPORT.md").read_text()
    assert BN in report and "FP16" in report and "onnxruntime" in report and "polygraphy run" in report
    assert json.loads((bundle / "versions.json").read_text())["libraries"]["onnx"] == onnx.__version__

    # on its own, in trtverify layerwise: the bundle's subgraphs and inputs fail, at the same tensor
    again = run("layerwise", bundle / "reference.onnx", bundle / "candidate.onnx", "--inputs", bundle / "inputs.npz",
                "--out", tmp_path / "again")  # fmt: skip
    assert again.code == 1, again.out
    first = json.loads((tmp_path / "again" / "results.json").read_text())["stages"][0]["candidates"][0]
    assert first["first_divergence"]["tensor"] == BN_OUT
    assert first["root_causes"][0]["node"] == BN


def test_polygraphy_runs_the_bundles_commands(fp16_run) -> None:
    """The real Polygraphy (its ONNX Runtime runner, CPU) on the bundle's command lines as written: the candidate's
    subgraph fails the comparison with the reference's outputs, the reference's passes against them."""
    bundle = fp16_run[1] / "reduce-fashion_bn_fp16"
    commands = (bundle / "COMMANDS.sh").read_text()
    if shutil.which("polygraphy", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("polygraphy is not installed: its commands are not run")
    lines = [ln for ln in commands.splitlines() if ln.startswith("polygraphy run") and "--onnxrt" in ln]
    assert len(lines) == 2 and lines[0].startswith("polygraphy run candidate.onnx")
    procs = [  # side by side: each is mostly Polygraphy's imports
        subprocess.Popen([str(Path(sys.executable).parent / "polygraphy"), *shlex.split(line)[1:]], cwd=bundle,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in lines
    ]  # fmt: skip
    codes = [(p.wait(timeout=120), "FAILED" in p.communicate()[0]) for p in procs]
    assert codes == [(1, True), (0, False)], codes


def test_modelopt_int8_suite_keeps_qdq_and_its_scales(run, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    res = run("reduce", ROOT / "suites" / "modelopt_repair.yaml", "--candidate", "int8", "--out", out)
    assert res.code == 0, res.out + res.err
    s = json.loads((out / "reduce.json").read_text())
    assert s["target"] == BN_OUT and s["reference_nodes"]["subgraph"] * 10 <= s["reference_nodes"]["model"]
    cand = onnx.load(out / "candidate.onnx")
    ops = [n.op_type for n in cand.graph.node]
    assert ops == ["Cast", "QuantizeLinear", "DequantizeLinear", "BatchNormalization", "Cast"], ops
    source = {
        t.name: onnx.numpy_helper.to_array(t)
        for t in onnx.load(ROOT / "demo/modelopt/fashion_bn_int8.onnx").graph.initializer
    }
    kept = {t.name: onnx.numpy_helper.to_array(t) for t in cand.graph.initializer}
    q = next(n for n in cand.graph.node if n.op_type == "QuantizeLinear")
    assert np.array_equal(kept[q.input[1]], source[q.input[1]]) and kept[q.input[1]].dtype == np.float16
    again = run("layerwise", out / "reference.onnx", out / "candidate.onnx", "--inputs", out / "inputs.npz",
                "--out", tmp_path / "again")  # fmt: skip
    assert again.code == 1, again.out
    assert "int8" in again.out  # read from the subgraph's Q/DQ: INT8's defaults, as in the whole model


def test_external_data_stays_external(run, tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    for src in (REF, FP16):
        onnx.save(onnx.load(src), models / src.name, save_as_external_data=True, location=f"{src.stem}.weights",
                  size_threshold=0)  # fmt: skip
    out = tmp_path / "lw"
    res = run("layerwise", models / REF.name, models / FP16.name, "--inputs", _images(tmp_path / "x.npz", 2),
              "--out", out, "--reduce")  # fmt: skip
    assert res.code == 1, res.out
    bundle = out / "reduce-fashion_bn_fp16"
    for name in ("reference.onnx", "candidate.onnx"):
        assert (bundle / f"{name}.data").is_file()
        light = onnx.load(bundle / name, load_external_data=False)
        assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in light.graph.initializer if t.dims)
    var = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(bundle / "candidate.onnx").graph.initializer}
    assert var["features.post_bn.running_var"].max() == np.float16(65504)
    again = run("layerwise", bundle / "reference.onnx", bundle / "candidate.onnx", "--inputs", bundle / "inputs.npz",
                "--out", tmp_path / "again")  # fmt: skip
    assert again.code == 1


def _chain(folder: Path, n: int = 20) -> tuple[Path, Path, Path]:
    """x times 1.0003, n times: FP16 holds 1.0003 as 1.0, so each step loses 3e-4 of the value, and the error only
    grows past the check over the whole chain (the FP16 is onnxruntime.transformers.float16's, keep_io_types)."""
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.transformers.float16 import convert_float_to_float16

    nodes, inits, prev = [], [], "x"
    for k in range(n):
        inits.append(numpy_helper.from_array(np.array([1.0003], dtype=np.float32), f"c{k}"))
        out = "y" if k == n - 1 else f"h{k}"
        nodes.append(helper.make_node("Mul", [prev, f"c{k}"], [out], name=f"mul{k}"))
        prev = out
    io = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 256]) for name in ("x", "y")]
    model = helper.make_model(helper.make_graph(nodes, "chain", io[:1], io[1:], inits),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)  # fmt: skip
    onnx.save(model, folder / "chain.onnx")
    onnx.save(convert_float_to_float16(model, keep_io_types=True), folder / "chain_fp16.onnx")
    np.savez(folder / "x.npz", x=np.random.default_rng(0).uniform(0.5, 1.0, (1, 256)).astype(np.float32))
    return folder / "chain.onnx", folder / "chain_fp16.onnx", folder / "x.npz"


def test_refuses_where_the_error_only_accumulates(run, tmp_path: Path) -> None:
    ref, cand, x = _chain(tmp_path)
    out = tmp_path / "lw"
    # the output's rel_l2 is 0.00599, the tensor before it 0.00569: only the output fails
    res = run("layerwise", ref, cand, "--inputs", x, "--check", "rel_l2<=0.0059", "--out", out, "-q")
    assert res.code == 1
    refused = run("reduce", out / "results.json")
    assert refused.code == 1, refused.out
    assert (
        "REFUSED reduce chain_fp16: 'y' fails only when the graph runs from its inputs (20 of 20 nodes" in refused.out
    )
    assert "accumulates" in refused.out and not (out / "reduce-chain_fp16").exists()


def test_bad_inputs_are_usage_errors(run, tmp_path: Path) -> None:
    passed = tmp_path / "passed"
    assert run("layerwise", REF, DEMO / "fashion_bn_fp16_repaired.onnx", "--inputs", _images(tmp_path / "x.npz", 1),
               "--out", passed, "-q").code == 0  # fmt: skip
    res = run("reduce", passed)
    assert res.code == 2 and "0 candidates diverged (none): give --candidate" in res.err, res.err
    res = run("reduce", passed / "results.json", "--candidate", "nope")
    assert res.code == 2 and "no layerwise candidate 'nope'" in res.err
    (tmp_path / "other.json").write_text("[1, 2]")
    res = run("reduce", tmp_path / "other.json")
    assert res.code == 2 and "not a trtverify results.json" in res.err


@pytest.mark.slow
def test_torchvision_ssdlite_int8_made_by_quantize_static_defaults(run, tmp_path: Path) -> None:
    """A model made by users' tools, not shaped: torchvision's SSDlite export and ONNX Runtime's quantize_static with
    its defaults (tests/reduce/data/make_int8.py). Its first divergence is a backbone Conv far from the root cause;
    the cut runs from the image to it, a fifteenth of the model, and fails on its own."""
    tv = ROOT / "tests" / "data" / "torchvision"
    out = tmp_path / "lw"
    res = run("layerwise", tv / "ssdlite.onnx", Path(__file__).parent / "data" / "ssdlite_int8.onnx",
              "--inputs", tv / "inputs.npz", "--out", out, "--reduce", "-q")  # fmt: skip
    assert res.code == 1, res.out + res.err
    bundle = out / "reduce-ssdlite_int8"
    s = json.loads((bundle / "reduce.json").read_text())
    results = json.loads((out / "results.json").read_text())["stages"][0]["candidates"][0]
    assert s["target"] == results["first_divergence"]["tensor"]
    assert s["reference_nodes"]["model"] == 1442 and s["reference_nodes"]["subgraph"] * 10 <= 1442, s
    assert s["failed"] and s["metrics"]["cosine"] < 0.97
    cand = onnx.load(bundle / "candidate.onnx")
    assert sum(n.op_type == "QuantizeLinear" for n in cand.graph.node) > 10  # its Q/DQ kept
    again = run("layerwise", bundle / "reference.onnx", bundle / "candidate.onnx", "--inputs", bundle / "inputs.npz",
                "--out", tmp_path / "again", "-q")  # fmt: skip
    assert again.code == 1, again.out


def test_a_plugin_node_is_cut_and_run_by_its_reference(run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin demo's FP16 candidate with its own plugin's `stride` attribute changed (4 -> 5: every box 25 % off):
    the plugin is root cause and first divergence; both cuts hold it, each run by the demo's numpy reference."""
    plugins = ROOT / "demo" / "plugins"
    model = onnx.load(plugins / "shapes_plugin_nms_fp16.onnx")
    decode = next(n for n in model.graph.node if n.op_type == "ShapesBoxDecode")
    next(a for a in decode.attribute if a.name == "stride").i = 5
    onnx.save(model, tmp_path / "stride5.onnx")
    monkeypatch.chdir(plugins)  # where the hook `shapes_plugins:decode` imports from
    out = tmp_path / "lw"
    res = run("layerwise", plugins / "shapes_plugin_nms.onnx", tmp_path / "stride5.onnx",
              "--plugin", "ShapesBoxDecode=shapes_plugins:decode", "--out", out, "--reduce", "-q")  # fmt: skip
    assert res.code == 1, res.out + res.err
    bundle = out / "reduce-stride5"
    s = json.loads((bundle / "reduce.json").read_text())
    assert s["target"] == "/ShapesBoxDecode_output_0" and s["reference_nodes"]["subgraph"] == 1
    assert s["metrics"]["rel_l2"] == pytest.approx(0.25, abs=0.01)
    assert [n.op_type for n in onnx.load(bundle / "reference.onnx").graph.node] == ["ShapesBoxDecode"]
    assert "plugin node (ShapesBoxDecode '/ShapesBoxDecode')" in (bundle / "COMMANDS.sh").read_text()


def test_bf16_candidate_is_cut_with_its_casts(run, tmp_path: Path) -> None:
    """ModelOpt AutoCast's BF16 of the demo (correct: it passes BF16's defaults) under a check tighter than its
    rounding: the first Conv fails, cut with the candidate's own BF16 input cast; emulated as a GPU rounds BF16."""
    out = tmp_path / "lw"
    res = run("layerwise", REF, ROOT / "demo" / "modelopt" / "fashion_bn_autocast_bf16.onnx", "--inputs",
              _images(tmp_path / "x.npz", 2), "--check", "rel_l2<=0.003", "--out", out, "--reduce", "-q")  # fmt: skip
    assert res.code == 1, res.out + res.err
    bundle = out / "reduce-fashion_bn_autocast_bf16"
    s = json.loads((bundle / "reduce.json").read_text())
    assert s["target"] == "/features/block1/conv/Conv_output_0" and s["failed"] == ["rel_l2 <= 0.003"]
    cand = onnx.load(bundle / "candidate.onnx")
    casts = [a.i for n in cand.graph.node if n.op_type == "Cast" for a in n.attribute if a.name == "to"]
    assert casts == [onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT]  # in: the model's own cast; out: the cut's
    assert "computes in BF16" in (bundle / "COMMANDS.sh").read_text()
    again = run("layerwise", bundle / "reference.onnx", bundle / "candidate.onnx", "--inputs", bundle / "inputs.npz",
                "--check", "rel_l2<=0.003", "--out", tmp_path / "again", "-q")  # fmt: skip
    assert again.code == 1
