"""The dataflow graph a layerwise candidate carries for the report (`stages/layerwise/nodegraph.py`): its nodes and
edges are the reference ONNX's, each node's own error is the one isolation measured, and the marks (kept in FP32,
plugin, index output) say what the candidate's graph does."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import ROOT
from tests.stages.layerwise.test_layerwise import CNN_INPUTS, DEMO, plant, run_layerwise, suite_text, to_fp16
from trtverify.graph.onnxgraph import GraphIndex
from trtverify.stages.layerwise.nodegraph import build

FAULT = "/features/block3/conv/Conv"
KEPT = "/classifier/fc2/Gemm"


def test_fp16_cnn_graph_has_the_onnx_edges_the_isolated_errors_and_the_kept_node(tmp_path: Path):
    shutil.copy(DEMO / "fashion_cnn_fp32.onnx", tmp_path / "ref.onnx")
    plant(tmp_path / "ref.onnx", tmp_path / "cand.onnx", FAULT)
    to_fp16(tmp_path / "cand.onnx", tmp_path / "cand.onnx", node_block_list=[KEPT])  # as a user keeps a node
    checks = "    checks: [{metric: rel_l2, max: 0.01}, {metric: cosine, min: 0.999}]\n"
    cand = run_layerwise(tmp_path, suite_text("ref.onnx", {"cand": "cand.onnx"}, CNN_INPUTS, checks))["candidates"][0]
    g = cand["graph"]
    ref = onnx.load(str(tmp_path / "ref.onnx"))
    index = GraphIndex.from_model(ref)
    # every node computing values, in topological order; each is named by its rows
    assert g["topo"] == sorted({index.producers[t].index for t in index.value_tensors()})
    names = {row["topo_index"]: row["node"] for row in cand["rows"]}
    assert "unnamed" not in g and [names[t] for t in g["topo"]] == [index.label(t) for t in g["topo"]]
    # the edges are the ONNX graph's, between those nodes
    pos = {names[t]: i for i, t in enumerate(g["topo"])}
    edges = set(zip(g["edge_from"], g["edge_to"]))
    expected = {
        (pos[index.producers[i].node], pos[index.label(k)])
        for k in g["topo"]
        for i in index.nodes[k].input
        if i in index.producers and index.producers[i].node in pos
    }
    assert edges == expected and (pos[FAULT], pos["/features/block3/relu/Relu"]) in edges
    # each node's own error: isolate's, to 3 digits; the planted 5 % is the largest
    top = cand["root_causes"][0]
    assert top["node"] == FAULT and g["local"][pos[FAULT]] == float(f"{top['score']:.3g}")
    assert 0.04 < g["local"][pos[FAULT]] < 0.06 and max(g["local"]) == g["local"][pos[FAULT]]
    # what the candidate computes each node in, and the node the user kept in FP32
    kinds = dict(zip(g["precisions"], range(len(g["precisions"]))))
    assert g["precision"][pos[FAULT]] == kinds["FP16"] and g["precision"][pos[KEPT]] == kinds["FP32"]
    assert g["marks"] == {"kept_fp32": [pos[KEPT]]}


def _index_model(path: Path) -> None:
    """x -> MatMul -> Relu -> TopK (values and indices) and ArgMax: two index outputs, one value output."""
    w = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="/fc/MatMul"),
        helper.make_node("Relu", ["h"], ["r"], name="/act/Relu"),
        helper.make_node("TopK", ["r", "k"], ["vals", "idx"], name="/top/TopK", axis=1),
        helper.make_node("ArgMax", ["r"], ["am"], name="/pick/ArgMax", axis=1, keepdims=0),
    ]
    outputs = [("vals", TensorProto.FLOAT, [4, 3]), ("idx", TensorProto.INT64, [4, 3]), ("am", TensorProto.INT64, [4])]
    graph = helper.make_graph(
        nodes,
        "index",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info(*o) for o in outputs],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array([3], np.int64), "k")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_a_node_of_index_outputs_only_is_marked_index(tmp_path: Path):
    _index_model(tmp_path / "ref.onnx")
    to_fp16(tmp_path / "ref.onnx", tmp_path / "cand.onnx")
    inputs = "  samples: 2\n  generate:\n    x: {shape: [4, 16], range: [-1, 1]}\n"
    g = run_layerwise(tmp_path, suite_text("ref.onnx", {"fp16": "cand.onnx"}, inputs))["candidates"][0]["graph"]
    assert g["topo"] == [0, 1, 2, 3] and list(zip(g["edge_from"], g["edge_to"])) == [(0, 1), (1, 2), (1, 3)]
    # ArgMax's output is indices alone; TopK's values are an error to colour, its indices are not
    assert g["marks"]["index"] == [3]
    # the FP16 converter leaves TopK and ArgMax in FP32: kept, beside the FP16 MatMul and Relu
    assert (
        g["marks"]["kept_fp32"] == [2, 3]
        and [g["precisions"][k] for k in g["precision"]] == ["FP16"] * 2 + ["FP32"] * 2
    )


def test_plugin_nodes_of_the_plugin_demo_are_marked():
    model = onnx.load(str(ROOT / "demo" / "plugins" / "shapes_plugin_nms.onnx"), load_external_data=False)
    index = GraphIndex.from_model(model)
    g = build(index, [], [], None)
    plugins = [index.nodes[g.topo[p]].op_type for p in g.marks["plugin"]]
    assert plugins == ["ShapesBoxDecode", "EfficientNMS_TRT"]
    # nothing compared: every node is named here, nothing measured, no precision without a candidate graph
    assert len(g.unnamed) == len(g.topo) and set(g.local) == {None} and not g.precision and not g.precisions
