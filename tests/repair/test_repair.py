"""Precision repair on planted precision faults, models made here with torch and real tools: the keep-list holds
the planted node (or lies in the planted subgraph), is small, and the repaired model passes, is valid ONNX and
runs in ONNX Runtime. Also the FP16 rewrite of our own and the INT8 keep rewrite, and the commands."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from tests.conftest import ROOT, run_cli
from trtverify.config.checks import Check
from trtverify.convert.fp16 import node_labels, to_fp16
from trtverify.convert.int8 import keep_fp32, quantize
from trtverify.repair.search import search

torch = pytest.importorskip("torch")
from tests.stages.layerwise.test_layerwise_real_tools import BNNet, ConvReluNet, LayerNormNet, export  # noqa: E402

CHECKS = [Check(metric="rel_l2", max=0.01), Check(metric="cosine", min=0.999)]


def valid(model: onnx.ModelProto) -> None:
    onnx.checker.check_model(model, full_check=True)
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def feeds(shape: tuple[int, ...], n: int, scale: float = 1.0, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": (rng.standard_normal(shape) * scale).astype(np.float32)} for _ in range(n)]


def test_fp16_batchnorm_variance_beyond_65504(tmp_path: Path):
    torch.manual_seed(0)
    export(BNNet(), (1, 3, 16, 16), tmp_path / "ref.onnx")
    result = search(tmp_path / "ref.onnx", "fp16", feeds((2, 3, 16, 16), 3), CHECKS)
    assert not result.before.passed  # FP16 collapses: the variance is clipped to 65504
    assert result.passed and result.keep == ["/bn/BatchNormalization"], result.keep
    assert "constant_saturated: bn.running_var" in result.seeds["/bn/BatchNormalization"]
    assert len(result.steps) <= 4
    valid(result.model)
    # the kept node reads the reference's FP32 variance, never a round trip through FP16
    var = next(t for t in result.model.graph.initializer if t.name == "bn.running_var")
    assert var.data_type == onnx.TensorProto.FLOAT and numpy_helper.to_array(var)[3] == np.float32(1e8)
    # and no input of the kept node comes through a cast (constants shared through Identity included)
    bn = next(n for n in result.model.graph.node if n.name == "/bn/BatchNormalization")
    casts = {o for n in result.model.graph.node if n.op_type == "Cast" for o in n.output}
    assert not set(bn.input[1:]) & casts


def test_fp16_overflow_in_a_decomposed_layernorm(tmp_path: Path):
    torch.manual_seed(0)
    export(LayerNormNet(), (2, 32), tmp_path / "ref.onnx", opset=13)
    result = search(tmp_path / "ref.onnx", "fp16", feeds((4, 32), 3, scale=300), CHECKS)
    assert not result.before.passed and result.before.nonfinite[0] == "/ln/Pow_output_0"
    assert result.passed and "/ln/Pow" in result.keep and len(result.keep) <= 3, result.keep
    assert all(n.startswith("/ln/") for n in result.keep)  # inside the planted subgraph
    valid(result.model)
    # the keep-list is 1-minimal: dropping any member fails (the search verified each)
    for node in result.keep:
        trial = tuple(n for n in result.keep if n != node)
        assert any(ev.keep == trial and not ev.passed for ev in result.steps)


def test_int8_layer_with_a_destroyed_scale(tmp_path: Path):
    torch.manual_seed(0)
    export(ConvReluNet(), (1, 3, 32, 32), tmp_path / "ref.onnx")
    calib = feeds((1, 3, 32, 32), 16, seed=1)
    quantize(tmp_path / "ref.onnx", tmp_path / "int8.onnx", calib)
    model = onnx.load(str(tmp_path / "int8.onnx"))
    conv = next(n for n in model.graph.node if n.name == "/c2/Conv")
    dq = next(n for n in model.graph.node if n.output[0] == conv.input[1])
    scale = next(i for i in model.graph.initializer if i.name == dq.input[1])
    scale.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scale) * np.float32(8), scale.name))
    onnx.save(model, str(tmp_path / "bad.onnx"))
    checks = [Check(metric="rel_l2", max=0.05), Check(metric="cosine", min=0.999)]
    result = search(tmp_path / "ref.onnx", "int8", feeds((2, 3, 32, 32), 4), checks, candidate=tmp_path / "bad.onnx")
    assert not result.before.passed
    assert result.passed and result.keep == ["/c2/Conv"], result.keep
    valid(result.model)
    # the kept Conv reads the reference's FP32 weight and no Q/DQ
    kept = next(n for n in result.model.graph.node if n.name == "/c2/Conv")
    producers = {o: n.op_type for n in result.model.graph.node for o in n.output}
    assert not any(producers.get(i) == "DequantizeLinear" for i in kept.input)


def test_int8_activation_with_an_outlier_channel(tmp_path: Path):
    """One channel of /c1/Conv's output sits near 300 (the next Conv scales it back): per-tensor INT8 of that
    activation crushes every other channel to a few steps."""
    torch.manual_seed(0)
    net = ConvReluNet()
    with torch.no_grad():
        net.c1.bias[5] = 300.0
        net.c2.weight[:, 5] /= 300.0
    export(net, (1, 3, 32, 32), tmp_path / "ref.onnx")
    checks = [Check(metric="rel_l2", max=0.05), Check(metric="cosine", min=0.999)]
    samples = feeds((2, 3, 32, 32), 4)
    result = search(tmp_path / "ref.onnx", "int8", samples, checks, calibration=feeds((1, 3, 32, 32), 16, seed=1))
    assert not result.before.passed
    assert result.passed and 1 <= len(result.keep) <= 3, result.keep
    # the planted subgraph: the reader of the outlier activation (Q/DQ sits on Conv inputs only, as TensorRT wants)
    assert result.keep == ["/c2/Conv"]
    valid(result.model)


def test_fp16_rewrite_keeps_names_casts_only_at_island_boundaries(tmp_path: Path):
    torch.manual_seed(0)
    export(LayerNormNet(), (2, 32), tmp_path / "ref.onnx", opset=13)
    ref = onnx.load(str(tmp_path / "ref.onnx"))
    chain = ["/ln/Pow", "/ln/ReduceMean_1", "/ln/Add"]  # three consecutive nodes kept
    model = to_fp16(ref, chain)
    valid(model)
    casts = [n for n in model.graph.node if n.op_type == "Cast"]
    # into the island (Pow's input), out of it (Add's output), graph input and output: no cast inside the chain
    assert sorted(c.name for c in casts) == sorted(
        [
            "/ln/Sub_output_0__cast_to_fp32",
            "/ln/Add_output_0__cast_to_fp16",
            "x__cast_to_fp16",
            "y__cast_to_fp32",
        ]
    )
    ref_tensors = {o for n in ref.graph.node for o in n.output}
    assert ref_tensors - {"y"} <= {o for n in model.graph.node for o in n.output}  # names kept
    # unnamed nodes: addressed by their label in the FP32 model
    for n in ref.graph.node:
        n.name = ""
    labels = node_labels(ref)
    valid(to_fp16(ref, labels[:2]))
    with pytest.raises(ValueError, match="does not have"):
        to_fp16(ref, ["nope"])


def test_keep_fp32_on_a_quantized_model_drops_only_the_kept_nodes_qdq(tmp_path: Path):
    torch.manual_seed(0)
    export(ConvReluNet(), (1, 3, 32, 32), tmp_path / "ref.onnx")
    quantize(tmp_path / "ref.onnx", tmp_path / "int8.onnx", feeds((1, 3, 32, 32), 8))
    q, ref = onnx.load(str(tmp_path / "int8.onnx")), onnx.load(str(tmp_path / "ref.onnx"))
    kept = keep_fp32(q, ref, ["/c2/Conv"])
    valid(kept)
    dq = sum(n.op_type == "DequantizeLinear" for n in q.graph.node)
    # its activation pair and its weight's DequantizeLinear go (biases stay float: TensorRT rejects int32 bias DQ)
    assert sum(n.op_type == "DequantizeLinear" for n in kept.graph.node) == dq - 2
    assert not any(n.op_type == "Relu" and n.input[0].endswith("_DequantizeLinear_Output") for n in q.graph.node)


def test_repair_command_exit_codes_and_files(tmp_path: Path):
    torch.manual_seed(0)
    export(BNNet(), (1, 3, 16, 16), tmp_path / "ref.onnx")
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(0).standard_normal((3, 3, 16, 16)).astype(np.float32))
    args = ["repair", str(tmp_path / "ref.onnx"), "--precision", "fp16", "--inputs", str(tmp_path / "in.npz")]
    r = run_cli(*args, "--out", str(tmp_path / "ok"))
    assert r.code == 0, r.out + r.err
    assert "keep in FP32: /bn/BatchNormalization" in r.out
    assert "--layerPrecisions=/bn/BatchNormalization:fp32 --precisionConstraints=obey" in r.out
    rec = json.loads((tmp_path / "ok" / "repair-fp16" / "repair.json").read_text())
    assert rec["passed"] and rec["keep"] == ["/bn/BatchNormalization"] and rec["evaluations"] >= 2
    assert rec["exports"]["onnxruntime_float16_node_block_list"] == ["/bn/BatchNormalization"]
    assert 0 < rec["cost"]["params_share"] < 0.2 and set(rec["cost"]["latency_ms"]) == {"reference", "before", "after"}
    valid(onnx.load(rec["repaired_model"]))
    # runnable again from the suite it wrote
    again = run_cli("run", str(tmp_path / "ok" / "suite.yaml"), "--out", str(tmp_path / "again"))
    assert again.code == 0, again.out + again.err
    # one evaluation cannot find it: exit 1, the best (unrepaired) reported
    r = run_cli(*args, "--max-evaluations", "1", "--out", str(tmp_path / "no"))
    assert r.code == 1 and "FAIL" in r.out
    r = run_cli(*args, "--candidate", str(tmp_path / "ref.onnx"), "--out", str(tmp_path / "bad"))
    assert r.code == 2 and "--candidate" in r.err


def test_convert_command(tmp_path: Path):
    torch.manual_seed(0)
    export(BNNet(), (1, 3, 16, 16), tmp_path / "ref.onnx")
    out = tmp_path / "fp16.onnx"
    r = run_cli(
        "convert", str(tmp_path / "ref.onnx"), "--precision", "fp16", "--keep", "/bn/BatchNormalization", "-o", str(out)
    )
    assert r.code == 0, r.err
    valid(onnx.load(str(out)))
    r = run_cli("convert", str(tmp_path / "ref.onnx"), "--precision", "int8", "-o", str(tmp_path / "q.onnx"))
    assert r.code == 2 and "--calibration" in r.err
    r = run_cli("convert", str(tmp_path / "ref.onnx"), "--precision", "fp16", "--keep", "nope", "-o", str(out))
    assert r.code == 2 and "nope" in r.err


def test_the_fp16_repair_demo_finds_the_batchnorm_and_the_committed_repair_matches(tmp_path: Path):
    """suites/fp16_repair.yaml (make demo): the search keeps exactly the post-activation BatchNorm, and the
    committed repaired model is what trtverify's FP16 rewrite makes with that node kept."""
    root = Path(__file__).resolve().parents[2]
    demo = root / "demo" / "fp16_repair"
    r = run_cli("run", str(root / "suites" / "fp16_repair.yaml"), "--stage", "repair", "--out", str(tmp_path))
    assert r.code == 0, r.out + r.err
    stage = json.loads((tmp_path / "results.json").read_text())["stages"][0]
    assert stage["keep"] == ["/features/post_bn/BatchNormalization"] and not stage["before"]["passed"]
    # before/after curve: the BatchNorm's output jumps above 1 before, stays near FP16 rounding after
    bn = next(p for p in stage["curve"] if p["node"] == "/features/post_bn/BatchNormalization")
    assert bn["kept"] and bn["before"] > 1 and bn["after"] < 1e-2
    report = (tmp_path / "report.html").read_text()
    chart = report.split('<svg class="repair-chart"', 1)[1].split("</svg>", 1)[0]
    assert (
        chart.count("<circle") == 2 * len(stage["curve"])
        and "kept in FP32: /features/post_bn/BatchNormalization" in chart
    )
    made = to_fp16(onnx.load(str(demo / "fashion_bn_fp32.onnx")), stage["keep"])
    committed = onnx.load(str(demo / "fashion_bn_fp16_repaired.onnx"))
    assert [n.op_type for n in made.graph.node] == [n.op_type for n in committed.graph.node]
    feed = {"input": np.random.default_rng(0).random((4, 1, 28, 28)).astype(np.float32)}
    ours = ort.InferenceSession(made.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    theirs = ort.InferenceSession(committed.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_array_equal(ours, theirs)


RECIPE_SUITE = """\
name: recipes
reference_dir: refs
models:
  reference: ref.onnx
  candidates:
    fp16: {{from: reference, precision: fp16}}
    fp16_kept: {{from: reference, precision: fp16, keep: [/bn/BatchNormalization]}}
    int8: {{from: reference, precision: int8, calibration: {{samples: 3}}}}
inputs:
  file: in.npz
stages:
  layerwise: {{{extra}}}
"""


def test_candidate_recipes_are_made_cached_and_run_like_any_candidate(tmp_path: Path):
    torch.manual_seed(0)
    export(BNNet(), (1, 3, 16, 16), tmp_path / "ref.onnx")
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(0).standard_normal((3, 3, 16, 16)).astype(np.float32))
    (tmp_path / "suite.yaml").write_text(RECIPE_SUITE.format(extra=""))
    r = run_cli("run", str(tmp_path / "suite.yaml"), "--out", str(tmp_path / "o"))
    assert r.code == 1, r.out + r.err  # the plain FP16 recipe collapses
    stage = json.loads((tmp_path / "o" / "results.json").read_text())["stages"][0]
    cands = {c["name"]: c for c in stage["candidates"]}
    assert cands["fp16"]["root_causes"][0]["node"] == "/bn/BatchNormalization" and not cands["fp16"]["passed"]
    assert cands["fp16_kept"]["passed"] and cands["fp16_kept"]["precision"] == "fp16"
    # INT8 ran (the BN's 1e4-scaled channel is an outlier activation per-tensor INT8 cannot hold: it fails)
    assert cands["int8"]["precision"] == "int8" and len(cands["int8"]["rows"]) == 7
    assert not [f for f in cands["int8"]["lint"] if f["kind"] == "qdq_nonzero_zero_point"]  # symmetric by default
    made = sorted((tmp_path / "o" / "candidates").glob("*.onnx"))
    assert [p.name.split("-")[0] for p in made] == ["fp16", "fp16_kept", "int8"]
    for p in made:
        valid(onnx.load(str(p)))
    stamps = {p: p.stat().st_mtime_ns for p in made}
    r = run_cli("run", str(tmp_path / "suite.yaml"), "--out", str(tmp_path / "o"))
    assert {p: p.stat().st_mtime_ns for p in sorted((tmp_path / "o" / "candidates").glob("*.onnx"))} == stamps
    bad = {
        "path: ref.onnx, from: reference, precision: fp16": "not both",
        "from: reference": "needs precision: fp16 or int8",
        "from: reference, precision: fp16, calibration: {samples: 2}": "INT8 recipe options",
        "path: ref.onnx, keep: [x]": "recipe options",
    }
    for spec, message in bad.items():
        text = RECIPE_SUITE.format(extra="").replace("{from: reference, precision: fp16}", "{" + spec + "}", 1)
        (tmp_path / "bad.yaml").write_text(text)
        r = run_cli("validate", str(tmp_path / "bad.yaml"))
        assert r.code == 2 and message in r.err, (spec, r.err)
    text = RECIPE_SUITE.format(extra="").replace("keep: [/bn/BatchNormalization]", "keep: [/nope]")
    (tmp_path / "bad.yaml").write_text(text)
    r = run_cli("run", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "b"))
    assert r.code == 2 and "models.candidates.fp16_kept" in r.err and "/nope" in r.err


def test_repair_against_the_e2e_gates(tmp_path: Path):
    """target: e2e: each evaluation runs the suite's e2e task (2,000 Fashion-MNIST images) and its gates."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "suites" / "fp16_repair.yaml").read_text().replace("../", f"{root}/")
    text = text.replace("    precision: fp16 ", "    target: e2e\n    precision: fp16 ")
    (tmp_path / "s.yaml").write_text(text)
    r = run_cli("run", str(tmp_path / "s.yaml"), "--stage", "repair", "--out", str(tmp_path / "o"))
    assert r.code == 0, r.out + r.err
    stage = json.loads((tmp_path / "o" / "results.json").read_text())["stages"][0]
    assert stage["keep"] == ["/features/post_bn/BatchNormalization"]
    assert stage["before"]["failed"][0].startswith("repaired: accuracy drop <= 0.005 (0.56")
    gates = [c for c in stage["checks"] if c["metric"].endswith("_drop")]
    assert {c["metric"] for c in gates} == {"accuracy_drop", "macro_f1_drop"} and all(c["passed"] for c in gates)
    (tmp_path / "bad.yaml").write_text(text.split("  e2e:\n")[0])  # no e2e stage to take the gates from
    bad = run_cli("validate", str(tmp_path / "bad.yaml"))
    assert bad.code == 2 and "target: e2e uses the e2e stage's gates" in bad.err


def test_cost_counts_weights_held_in_constant_nodes():
    """PP-OCRv4's recognizer (a PaddlePaddle export) holds its weights in Constant nodes, not initializers: a
    48-node keep-list was printed as '0.0 % of parameters'. The same model either way costs the same."""
    from onnx import helper

    from trtverify.repair.record import cost

    ref = ROOT / "demo" / "fashion_mnist" / "fashion_cnn_fp32.onnx"
    model = onnx.load(str(ref))
    as_constants = onnx.ModelProto()
    as_constants.CopyFrom(model)
    g = as_constants.graph
    nodes = [helper.make_node("Constant", [], [t.name], name=f"{t.name}_const", value=t) for t in g.initializer]
    del g.initializer[:]
    for i, n in enumerate(nodes):
        g.node.insert(i, n)
    feed = {"input": np.zeros((1, 1, 28, 28), np.float32)}
    keep = ["/features/block1/conv/Conv", "/classifier/fc1/Gemm"]
    a, b = cost(model, keep, feed), cost(as_constants, keep, feed)
    assert a.params_share > 0.3 and b.params_share == pytest.approx(a.params_share)


def test_where_nothing_passes_the_closest_keep_list_is_reported():
    """Every evaluation of PP-OCRv4's recognizer failed the same checks, and the ranking then preferred the fewest
    kept nodes: the empty keep-list (rel_l2 0.043) was reported as the best over one that reached 0.013."""
    from trtverify.repair.evaluate import Evaluation
    from trtverify.repair.search import _rank

    def ev(keep: tuple[str, ...], rel: float) -> Evaluation:
        return Evaluation(keep, False, {"y": {"rel_l2": rel}}, [f"y: rel_l2 <= 0.01 ({rel})"], [])

    steps = [ev((), 0.043), ev(("a",), 0.03), ev(("a", "b"), 0.013), ev(("a", "b", "c"), 0.02)]
    assert min(steps, key=_rank).keep == ("a", "b")
    passing = Evaluation(("a", "b", "c", "d"), True, {"y": {"rel_l2": 0.009}}, [], [])
    assert min([*steps, passing], key=_rank) is passing


def test_a_bf16_repair_says_why_its_latency_is_not_timed_on_a_cpu(tmp_path: Path):
    """ONNX Runtime's CPU provider has no BF16 Conv: the latency session raised NotImplemented and the repair
    ended in exit 4 after its search had passed. The lowered and repaired models are not timed, and the notes
    say why; the FP32 reference is."""
    out = tmp_path / "r"
    bf16 = ROOT / "demo" / "modelopt" / "fashion_bn_autocast_bf16.onnx"
    r = run_cli("repair", str(ROOT / "demo" / "fp16_repair" / "fashion_bn_fp32.onnx"), "--precision", "bf16",
                "--candidate", str(bf16), "--out", str(out))  # fmt: skip
    assert r.code == 0, r.out + r.err
    cost = json.loads((out / "repair-bf16" / "repair.json").read_text())["cost"]
    assert set(cost["latency_ms"]) == {"reference"} and set(cost["not_measured"]) == {"before", "after"}
    assert "no BF16 kernels" in cost["not_measured"]["after"] and "load_errors" not in cost
    assert "note: latency of the repaired model not timed: ONNX Runtime's CPUExecutionProvider has no BF16" in r.out


def test_the_modelopt_quantization_line_says_it_keeps_every_node_of_the_kept_types():
    """ModelOpt's quantizer keeps nodes out of its FP16 rest by op type only: a 2-node keep-list of Conv and Add
    becomes --op_types_to_exclude_fp16 Add Conv, every Add and Conv of the model. The export says how many."""
    from trtverify.repair.record import exports
    from trtverify.report.repairtext import _exports

    types = {f"conv{i}": "Conv" for i in range(5)} | {f"add{i}": "Add" for i in range(3)} | {"relu": "Relu"}
    out = exports(["conv1", "add2"], Path("r.onnx"), "int8", types)
    assert out["modelopt_quantization"] == "--nodes_to_exclude conv1 add2 --op_types_to_exclude_fp16 Add Conv"
    assert (
        "every Add, Conv node in FP32: 8 nodes, 6 more than the 2 of the keep-list"
        in (out["modelopt_quantization_scope"])
    )
    lines = _exports(out)
    i = next(i for i, line in enumerate(lines) if "ModelOpt quantization:" in line)
    assert "6 more than the 2 of the keep-list" in lines[i + 1]
    assert "modelopt_quantization_scope" not in exports([], Path("r.onnx"), "int8", types)
