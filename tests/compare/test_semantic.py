"""Semantic pairing on rewrites real tools make: ONNX Runtime's optimiser folding BatchNormalization into a
Conv, and a rewrite nothing explains (a tensor keeps its name but another op computes it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.conftest import as_json, write_suite
from trtverify.cli.run import run_and_record
from trtverify.compare.pairing import pair_names
from trtverify.compare.semantic import resolve
from trtverify.config.loader import load_suite
from trtverify.graph.onnxgraph import GraphIndex

torch = pytest.importorskip("torch")


@pytest.fixture
def conv_bn(tmp_path: Path) -> Path:
    """Conv -> BatchNormalization -> Relu -> Conv, exported without constant folding (so the BN stays), and the
    same model as ONNX Runtime's basic optimiser writes it (the BN folded into the Conv, which takes its name)."""
    import onnxruntime as ort

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.c2 = torch.nn.Conv2d(8, 4, 3)

        def forward(self, x):
            return self.c2(torch.relu(self.bn(self.c(x))))

    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-1, 1)
        net.bn.running_var.uniform_(0.5, 2)
    torch.onnx.export(
        net, torch.randn(1, 3, 16, 16), str(tmp_path / "ref.onnx"), input_names=["x"], output_names=["y"],
        do_constant_folding=False, dynamo=False,
    )  # fmt: skip
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(tmp_path / "folded.onnx")
    ort.InferenceSession(str(tmp_path / "ref.onnx"), so, providers=["CPUExecutionProvider"])
    np.savez(tmp_path / "inputs.npz", x=np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32))
    return tmp_path


def run(folder: Path, candidate: str) -> dict:
    text = (
        f"name: sem\nreference_dir: refs\nmodels:\n  reference: ref.onnx\n  candidates:\n    c: {candidate}\n"
        "inputs:\n  file: inputs.npz\nstages:\n  layerwise: {}\n"
    )
    results = run_and_record(load_suite(write_suite(folder, text)), folder / "out")
    return as_json(results)["stages"][0]


def test_batchnorm_folded_into_conv_by_onnxruntime(conv_bn: Path):
    folded = onnx.load(str(conv_bn / "folded.onnx"))
    assert [n.op_type for n in folded.graph.node] == ["Conv", "Relu", "Conv"]  # the optimiser folded the BN
    stage = run(conv_bn, "folded.onnx")
    cand = stage["candidates"][0]
    bn = next(r for r in cand["rows"] if r["op_type"] == "BatchNormalization")
    assert bn["pairing"]["how"] == "folded" and bn["pairing"]["candidate_node"] == "/c/Conv"
    assert "BatchNormalization '/bn/BatchNormalization' folded into Conv '/c/Conv'" in bn["pairing"]["why"]
    assert bn["metrics"]["rel_l2"] < 1e-5 and stage["status"] == "passed"
    assert cand["unmatched"]["reference_only_why"] == {"/c/Conv_output_0": "folded into the candidate's Conv '/c/Conv'"}
    # the work is the Conv's: a suspect is named by the candidate node, never the folded BN
    assert "/c/Conv" in {rc["node"] for rc in cand["root_causes"]}
    assert "/bn/BatchNormalization" not in {rc["node"] for rc in cand["root_causes"]}


def test_a_rewrite_nothing_explains_is_not_comparable(conv_bn: Path):
    """The Relu's output name, computed by a Sigmoid: never compared, and left out of every check."""
    model = onnx.load(str(conv_bn / "ref.onnx"))
    relu = next(n for n in model.graph.node if n.op_type == "Relu")
    relu.op_type = "Sigmoid"
    onnx.save(model, str(conv_bn / "rewritten.onnx"))
    stage = run(conv_bn, "rewritten.onnx")
    cand = stage["candidates"][0]
    row = next(r for r in cand["rows"] if r["tensor"] == relu.output[0])
    assert row["not_comparable"].startswith("rewritten: the candidate computes")
    assert "Sigmoid" in row["not_comparable"] and row["metrics"] == {} and row["passed"]
    assert relu.output[0] not in {rc["tensor"] for rc in cand["root_causes"]}
    # its consumer diverges, and that is the first divergence; the rewritten row is not
    assert cand["first_divergence"]["tensor"] == "y" and stage["status"] == "failed"


def test_an_engine_that_does_not_expose_the_dequantized_value_leaves_the_row_not_comparable(conv_bn: Path):
    """A TensorRT candidate is paired through the ONNX graph it is built from, but exposes only the tensors it
    marks: where the DequantizeLinear output after a folded Relu is not among them, the Relu's tensor name holds
    the unclamped Conv output, and is not compared. (Names as an engine would expose them: TensorRT cannot run
    here.)"""
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            x = np.load(conv_bn / "inputs.npz")["x"]
            self.it = iter([{"x": x[i : i + 1]} for i in range(len(x))])

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(conv_bn / "folded.onnx"), str(conv_bn / "int8.onnx"), Reader())
    ref = GraphIndex.from_model(onnx.load(str(conv_bn / "ref.onnx")))
    cand = GraphIndex.from_model(onnx.load(str(conv_bn / "int8.onnx")))
    relu = next(n.output[0] for n in ref.nodes if n.op_type == "Relu")
    assert cand.producers[relu].op_type == "Conv"  # the quantizer folded the Relu
    everything = cand.value_tensors()
    marked = [t for t in everything if cand.producers[t].op_type not in ("QuantizeLinear", "DequantizeLinear")]
    resolved = resolve(pair_names(ref.value_tensors(), marked), ref, cand)
    assert relu in resolved.rewritten and "is not exposed by the candidate" in resolved.rewritten[relu]
    assert relu not in dict(resolved.pairing.pairs)
    exposed = resolve(pair_names(ref.value_tensors(), everything), ref, cand)
    assert dict(exposed.pairing.pairs)[relu] == relu + "_DequantizeLinear_Output"


def test_resolve_without_a_candidate_graph_pairs_names_as_they_are(conv_bn: Path):
    """Without any graph, names pair as written (TensorRT names a fused layer's output after the last fused
    tensor)."""
    ref = GraphIndex.from_model(onnx.load(str(conv_bn / "ref.onnx")))
    names = ref.value_tensors()
    resolved = resolve(pair_names(names, names[1:]), ref, None)
    assert resolved.pairing.pairs == [(n, n) for n in names[1:]] and not resolved.rewritten
    assert all(m.how is None for m in resolved.matches.values())


def _recognizer_head(folder: Path, rewrite: str) -> None:
    """A recognizer-style head, MatMul -> Softmax(axis=2) on [N, T, C], as torch exports it (ref.onnx), and the
    candidate ModelOpt makes of it (issue 27): the Softmax rewritten as Flatten -> Softmax -> Reshape writing the
    same output name. `rewrite`: 'same' keeps the values, 'wrong' softmaxes over the wrong axis."""
    from onnx import TensorProto, helper, numpy_helper

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(6, 5)

        def forward(self, x):
            return torch.softmax(self.fc(x), dim=2)

    torch.manual_seed(0)
    torch.onnx.export(Head().eval(), torch.randn(1, 4, 6), str(folder / "ref.onnx"), input_names=["x"],
                      output_names=["prob"], dynamo=False)  # fmt: skip
    model = onnx.load(str(folder / "ref.onnx"))
    g = model.graph
    sm = next(n for n in g.node if n.op_type == "Softmax")
    logits = sm.input[0]
    g.node.remove(sm)
    shape = numpy_helper.from_array(np.array([1, 4, 5], dtype=np.int64), "rewrite_shape")
    g.initializer.append(shape)
    axis = 1 if rewrite == "same" else 0
    g.node.extend([
        helper.make_node("Flatten", [logits], ["flat"], name="rewrite_flatten", axis=2),
        helper.make_node("Softmax", ["flat"], ["flat_sm"], name="rewrite_softmax", axis=axis),
        helper.make_node("Reshape", ["flat_sm", "rewrite_shape"], ["prob"], name="rewrite_reshape"),
    ])  # fmt: skip
    del g.value_info[:]
    assert g.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    onnx.save(model, str(folder / f"{rewrite}.onnx"))
    np.savez(folder / "inputs.npz", x=np.random.default_rng(0).standard_normal((3, 4, 6)).astype(np.float32))


@pytest.mark.parametrize("rewrite", ["same", "wrong"])
def test_a_graph_output_is_compared_whatever_the_candidate_rewrote_inside(tmp_path: Path, rewrite: str):
    """The PP-OCRv4 recognizer's output `softmax_11.tmp_0` was marked 'not comparable: rewritten' and counted as
    passed, whatever its values: a graph output of the same name is always compared."""
    _recognizer_head(tmp_path, rewrite)
    stage = run(tmp_path, f"{rewrite}.onnx")
    cand = stage["candidates"][0]
    row = next(r for r in cand["rows"] if r["tensor"] == "prob")
    assert row.get("not_comparable") is None and row["pairing"]["how"] == "output"
    outputs = next(c for c in stage["checks"] if c["metric"] == "outputs_compared")
    assert outputs["passed"] and outputs["value"] == 1
    if rewrite == "same":
        assert row["metrics"]["rel_l2"] < 1e-6 and stage["status"] == "passed"
    else:
        assert row["metrics"]["rel_l2"] > 0.1 and not row["passed"] and stage["status"] == "failed"


def test_a_run_that_compared_no_output_fails(tmp_path: Path):
    """Every tensor but the output compared (here the output is ignored in the suite): the outputs are the
    contract, and a run that compared none of them fails, naming them."""
    _recognizer_head(tmp_path, "same")
    text = (
        "name: sem\nreference_dir: refs\nmodels:\n  reference: ref.onnx\n  candidates:\n    c: same.onnx\n"
        "inputs:\n  file: inputs.npz\nstages:\n  layerwise: {ignore: [prob]}\n"
    )
    stage = as_json(run_and_record(load_suite(write_suite(tmp_path, text)), tmp_path / "out"))["stages"][0]
    outputs = next(c for c in stage["checks"] if c["metric"] == "outputs_compared")
    assert not outputs["passed"] and outputs["detail"]["not_compared"] == ["prob"] and stage["status"] == "failed"
