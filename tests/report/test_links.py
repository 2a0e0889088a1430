"""Matching build-log engine layers to layerwise rows (trtverify.report.links)."""

from __future__ import annotations

from trtverify.buildlog.layers import EngineLayer
from trtverify.report.links import Link, build_links, candidates_for_log, layer_id, layer_nodes, prefix_node, row_id
from trtverify.stages.buildlog import BuildlogResult, LogResult
from trtverify.stages.layerwise.models import LayerwiseCandidate, LayerwiseResult, Row

NODES = ["/features/block1/conv/Conv", "/features/block1/relu/Relu", "/a/Conv", "/a/Conv_1"]


def test_prefix_node_takes_the_longest_name_on_a_boundary():
    assert prefix_node("/features/block1/conv/Conv_myl0_1", NODES) == "/features/block1/conv/Conv"
    assert prefix_node("/a/Conv_1_myl0_3", NODES) == "/a/Conv_1"  # not its prefix /a/Conv
    assert prefix_node("/a/Conv", NODES) == "/a/Conv"
    assert prefix_node("/a/Conv + /a/Relu", NODES) == "/a/Conv"
    assert prefix_node("/a/Conv2_myl0_3", NODES) is None  # another node, not /a/Conv
    assert prefix_node("__myl_MulAddMoveRelu_myl0_2", NODES) is None
    assert prefix_node("anything", ["", "any"]) is None  # empty node names match nothing


def test_layer_nodes_are_its_onnx_nodes_plus_the_one_its_name_derives_from():
    fused = {
        "name": "__myl_MulAddMoveRelu_myl0_2",
        "onnx_nodes": ["/features/block1/conv/Conv", "q_QuantizeLinear", "/features/block1/relu/Relu"],
    }
    assert layer_nodes(fused["name"], fused["onnx_nodes"], NODES) == {
        "/features/block1/conv/Conv",
        "/features/block1/relu/Relu",
    }  # Q/DQ nodes are not rows
    assert layer_nodes("/a/Conv_1_myl0_3", [], NODES) == {"/a/Conv_1"}  # older logs: no onnx_nodes
    assert layer_nodes("Reformat_0", [], NODES) == set()


def test_a_log_belongs_to_the_candidates_named_in_its_file_name():
    cands = ["demo/fashion_cnn_fp16.onnx", "demo/fashion_cnn_int8_qdq.onnx"]
    assert candidates_for_log("logs/fashion_cnn_int8_qdq__mark_all.log", cands) == [1]
    assert candidates_for_log("/x/build.log", cands) == [0, 1]  # no hint: every candidate
    assert candidates_for_log("build.log", []) == []


def _row(topo: int, node: str, op: str = "Conv") -> Row:
    # only what the links read; model_construct skips the rest of a row's fields
    return Row.model_construct(topo_index=topo, node=node, op_type=op, tensor=f"{node}_output_0")


def _cand(name: str, model: str, rows: list[Row]) -> LayerwiseCandidate:
    return LayerwiseCandidate.model_construct(name=name, model=model, rows=rows)


def _log(log: str, layers: list[tuple[str, list[str]]]) -> LogResult:
    return LogResult.model_construct(
        log=log, layers=[EngineLayer.model_construct(name=n, onnx_nodes=nodes) for n, nodes in layers]
    )


def test_build_links_both_ways():
    stages = [
        LayerwiseResult(
            status="passed",
            candidates=[
                _cand("a", "m_a.onnx", [_row(0, "/c/Conv"), _row(1, "/c/Relu", "Relu")]),
                _cand("b", "m_b.onnx", [_row(0, "/c/Conv"), _row(3, "/c/Relu", "Relu")]),
            ],
        ),
        BuildlogResult(
            status="passed",
            logs=[
                _log("m_b.log", [("/c/Conv_myl0_1", []), ("fused_2", ["/c/Relu", "/c/Conv"]), ("Reformat", [])]),
                _log("other.log", [("/c/Relu", ["/c/Relu"])]),
            ],
        ),
    ]
    to_rows, to_layers = build_links(stages)
    # m_b.log belongs to candidate b only; rows in topological order
    assert to_rows[layer_id(0, 0)] == [Link(row_id(1, 0), "b #0 Conv")]
    assert to_rows[layer_id(0, 1)] == [Link(row_id(1, 0), "b #0 Conv"), Link(row_id(1, 3), "b #3 Relu")]
    assert layer_id(0, 2) not in to_rows
    # other.log names no candidate: it links to both
    assert to_rows[layer_id(1, 0)] == [Link(row_id(0, 1), "a #1 Relu"), Link(row_id(1, 3), "b #3 Relu")]
    assert to_layers[row_id(1, 0)] == [Link(layer_id(0, 0), "/c/Conv_myl0_1"), Link(layer_id(0, 1), "fused_2")]
    assert to_layers[row_id(0, 1)] == [Link(layer_id(1, 0), "/c/Relu")]
    assert row_id(0, 0) not in to_layers
    assert build_links(stages[:1]) == ({}, {}) and build_links(stages[1:]) == ({}, {})


def test_ids_never_carry_names():
    assert row_id(2, 17) == "lw-c2-t17" and layer_id(0, 5) == "bl-l0-5"
