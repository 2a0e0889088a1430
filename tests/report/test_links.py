"""Matching build-log engine layers to layerwise rows (trtverify.report.links)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.report.conftest import load, typed
from trtverify.buildlog.layers import EngineLayer
from trtverify.report.links import (
    Link,
    build_links,
    candidates_for_log,
    engine_candidates,
    engine_layer_id,
    layer_id,
    layer_nodes,
    perf_links,
    prefix_node,
    row_id,
)
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


# ---------------------------------------------------------------- perf engine layers


def test_an_engine_belongs_to_the_candidate_of_its_name_else_of_its_files():
    models, names = ["demo/fashion_cnn_fp16.onnx", "demo/fashion_cnn_int8_qdq.onnx"], ["fp16", "int8"]
    assert engine_candidates("int8", ["/e/whatever"], models, names) == [1]
    assert engine_candidates("b", ["/e/fashion_cnn_fp16.engine"], models, names) == [0]
    assert engine_candidates("b", ["/e/x/fashion_cnn_int8_qdq.graph.json"], models, names) == [1]
    assert engine_candidates("b", ["/e/resnet"], models, names) == [0, 1]  # no hint: every candidate
    assert engine_layer_id(1, 4) == "pf-e1-l4"


def _linked(linked_run: Path) -> tuple[dict, list[str], int, int]:
    results = load(linked_run)
    names = [s["name"] for s in results["stages"]]
    cands = [c["name"] for c in results["stages"][names.index("layerwise")]["candidates"]]
    return results, names, cands.index("fp16"), cands.index("int8")


def test_engine_layers_link_to_layerwise_rows_and_build_log_layers_and_back(linked_run: Path):
    """The perf stage's engines are hand-made exports named after the demo's ONNX nodes (conftest: no TensorRT
    engine can be built or run here); the layerwise and buildlog stages are the demo's own."""
    results, names, fp16, int8 = _linked(linked_run)
    perf = results["stages"][names.index("perf")]
    assert [e["name"] for e in perf["engines"]] == ["fp16", "int8"]
    log = results["stages"][names.index("buildlog")]["logs"][0]
    log_layers = [layer["name"] for layer in log["layers"]]
    links = perf_links(typed(results).stages)
    int8_rows = [r["name"] for r in perf["engines"][1]["audit"]["rows"]]
    # an INT8 engine layer named like the log's: its node's row, the log layer of that name and the one sharing it
    k = int8_rows.index("/features/block2/conv/Conv_myl0_6")
    eid = engine_layer_id(1, k)
    assert links.to_rows[eid] == [Link(row_id(int8, 3), "int8 #3 Conv")]
    same_node = [i for i, layer in enumerate(log["layers"]) if "/features/block2/conv/Conv" in layer["onnx_nodes"]]
    assert log_layers.index("/features/block2/conv/Conv_myl0_6") in same_node
    assert [link.id for link in links.to_log[eid]] == [layer_id(0, i) for i in same_node]
    label = "int8: /features/block2/conv/Conv_myl0_6"
    assert Link(eid, label) in links.back[row_id(int8, 3)]
    assert all(Link(eid, label) in links.back[layer_id(0, i)] for i in same_node)
    # a Myelin layer fused over Conv + Relu: both rows, and the log's layer of the same name
    k = int8_rows.index("__myl_MulAddMoveReluMulMinMaxRounCastMoveMove_myl0_2")
    eid = engine_layer_id(1, k)
    assert [link.id for link in links.to_rows[eid]] == [row_id(int8, 0), row_id(int8, 1)]
    assert layer_id(0, log_layers.index("__myl_MulAddMoveReluMulMinMaxRounCastMoveMove_myl0_2")) in {
        link.id for link in links.to_log[eid]
    }
    # the FP16 engine links to the fp16 candidate's rows, and not to the INT8 build's log
    eid = engine_layer_id(0, 0)  # /features/block1/conv/Conv + /features/block1/relu/Relu
    assert links.to_rows[eid] == [Link(row_id(fp16, 0), "fp16 #0 Conv"), Link(row_id(fp16, 1), "fp16 #1 Relu")]
    assert not any(k.startswith("pf-e0-") for k in links.to_log)
    assert not any(
        link.id.startswith("pf-e0-") for rid, ls in links.back.items() if rid.startswith("bl-") for link in ls
    )


def test_engine_links_resolve_in_the_report(linked_run: Path):
    results, _, fp16, int8 = _linked(linked_run)
    html = (linked_run / "report.html").read_text(encoding="utf-8")
    ids = set(re.findall(r'\bid="([^"]+)"', html))
    targets = set(re.findall(r'href="#([^"]+)"', html))
    assert targets <= ids, targets - ids
    assert {t for t in targets if t.startswith("pf-e")} >= {"pf-e0-l0", "pf-e1-l4"}

    def row(element_id: str) -> str:
        m = re.search(rf'<tr id="{re.escape(element_id)}"[^>]*>(.*?)</tr>', html, re.S)
        assert m, element_id
        return m.group(1)

    # engine layer -> layerwise row and build-log layer, and back from both
    assert f'href="#lw-c{int8}-t3"' in row("pf-e1-l4") and 'href="#bl-l0-6"' in row("pf-e1-l4")
    assert 'href="#pf-e1-l4"' in row(f"lw-c{int8}-t3") and 'href="#bl-l0-6"' in row(f"lw-c{int8}-t3")
    assert 'href="#pf-e1-l4"' in row("bl-l0-6")
    assert 'href="#pf-e0-l0"' in row(f"lw-c{fp16}-t0") and 'href="#pf-e1-' not in row(f"lw-c{fp16}-t0")
