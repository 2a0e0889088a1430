"""Stage `layerwise` on real models in ONNX Runtime: planted faults must come out as root cause number one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.conftest import DATA, ROOT, as_json, run_cli, write_suite
from trtverify.cli.run import run_and_record
from trtverify.config.loader import load_suite
from trtverify.report.html import write_report

DEMO = ROOT / "demo" / "fashion_mnist"
ENCODER = DATA / "encoder" / "encoder.onnx"


def to_fp16(src: Path, dst: Path, **kw) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True, **kw)
    onnx.save(model, str(dst))


def plant(src: Path, dst: Path, node_name: str, factor: float = 1.05) -> None:
    """Scale the weight initializer of one node (Conv: input 1; MatMul: whichever input is an initializer)."""
    model = onnx.load(str(src))
    node = next(n for n in model.graph.node if n.name == node_name)
    inits = {i.name: i for i in model.graph.initializer}
    weight = next(i for i in node.input[1:] + node.input[:1] if i in inits)
    arr = numpy_helper.to_array(inits[weight])
    inits[weight].CopyFrom(numpy_helper.from_array((arr * factor).astype(arr.dtype), weight))
    onnx.save(model, str(dst))


def suite_text(reference: str, candidates: dict[str, str], inputs: str, extra: str = "") -> str:
    cands = "".join(f"    {k}: {v}\n" for k, v in candidates.items())
    return (
        f"name: lw\nreference_dir: refs\nmodels:\n  reference: {reference}\n  candidates:\n{cands}"
        f"inputs:\n{inputs}stages:\n  layerwise:\n    samples: 2\n{extra}"
    )


CNN_INPUTS = "  samples: 2\n  generate:\n    input: {shape: [8, 1, 28, 28], range: [0, 1]}\n"
ENC_INPUTS = "  samples: 2\n  generate:\n    hidden: {shape: [2, 16, 64], range: [-2, 2]}\n"


def run_layerwise(folder: Path, text: str) -> dict:
    loaded = load_suite(write_suite(folder, text))
    results = run_and_record(loaded, folder / "out")
    write_report(results, folder / "out" / "report.html")
    return as_json(results)["stages"][0]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_planted_conv_fault_is_root_cause_one(tmp_path: Path, precision: str):
    shutil.copy(DEMO / "fashion_cnn_fp32.onnx", tmp_path / "ref.onnx")
    fault = "/features/block3/conv/Conv"
    plant(tmp_path / "ref.onnx", tmp_path / "cand.onnx", fault)
    if precision == "fp16":
        to_fp16(tmp_path / "cand.onnx", tmp_path / "cand.onnx")
    # a 5 % scale error is a rel_l2 fault cosine cannot see; FP16's default (0.1) leaves room for deep models'
    # rounding, so this small model's check is written out, as a user with a small model would
    checks = "    checks: [{metric: rel_l2, max: 0.01}, {metric: cosine, min: 0.999}]\n"
    stage = run_layerwise(tmp_path, suite_text("ref.onnx", {"cand": "cand.onnx"}, CNN_INPUTS, checks))
    cand = stage["candidates"][0]
    top = cand["root_causes"][0]
    assert top["node"] == fault and top["op_type"] == "Conv" and top["rank"] == 1
    assert 0.04 < top["local"]["rel_l2"] < 0.06  # the node's own error: its 5 %
    assert cand["root_cause_method"] == "isolate"
    # the fault is inherited downstream but not blamed there: the runner-up is far behind
    assert cand["root_causes"][1]["score"] < top["score"] / 5
    first = cand["first_divergence"]
    assert first["node"] == fault and first["tensor"] == "/features/block3/conv/Conv_output_0"
    assert stage["status"] == "failed"
    # the suspects' error histograms: the faulty tensor first, with both reasons, and its errors
    # are about 5 % of the tensor's values, far above FP16 rounding
    hist = cand["histograms"][0]
    assert hist["tensor"] == first["tensor"] and hist["reason"] == "first divergence, root cause #1"
    assert (
        len(cand["histograms"]) == 3
        and sum(hist["counts"]) + hist["exact"] + hist["nonfinite"] == hist["sampled"] <= hist["total"]
    )
    mode = hist["log10_edges"][int(np.argmax(hist["counts"]))]
    assert mode > -4, hist


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_planted_matmul_fault_in_encoder_is_root_cause_one(tmp_path: Path, precision: str):
    shutil.copy(ENCODER, tmp_path / "ref.onnx")
    fault = "/layers.1/ff1/MatMul"
    plant(tmp_path / "ref.onnx", tmp_path / "cand.onnx", fault)
    if precision == "fp16":
        to_fp16(tmp_path / "cand.onnx", tmp_path / "cand.onnx")
    stage = run_layerwise(
        tmp_path,
        suite_text("ref.onnx", {"cand": "cand.onnx"}, ENC_INPUTS, "    checks: [{metric: cosine, min: 0.9999}]\n"),
    )
    cand = stage["candidates"][0]
    top = cand["root_causes"][0]
    assert top["node"] == fault and top["op_type"] == "MatMul", cand["root_causes"][:3]
    assert cand["root_causes"][1]["score"] < top["score"] / 3
    # shape arithmetic is not compared
    assert not any(r["op_type"] in ("Shape", "Gather", "Unsqueeze", "Concat") for r in cand["rows"])
    assert len(cand["rows"]) == 66


def test_amplification_ranking_finds_the_fault_without_isolation(tmp_path: Path):
    shutil.copy(DEMO / "fashion_cnn_fp32.onnx", tmp_path / "ref.onnx")
    plant(tmp_path / "ref.onnx", tmp_path / "cand.onnx", "/features/block2/conv/Conv")
    to_fp16(tmp_path / "cand.onnx", tmp_path / "cand.onnx")
    stage = run_layerwise(
        tmp_path, suite_text("ref.onnx", {"cand": "cand.onnx"}, CNN_INPUTS, "    root_cause_method: amplification\n")
    )
    cand = stage["candidates"][0]
    assert cand["root_cause_method"] == "amplification"
    top = cand["root_causes"][0]
    assert top["node"] == "/features/block2/conv/Conv" and top["added_rel_l2"] > 0.04
    assert top["amplification"] > 10


def test_identical_candidate_passes_with_zero_error(tmp_path: Path):
    shutil.copy(DEMO / "fashion_cnn_fp32.onnx", tmp_path / "ref.onnx")
    shutil.copy(DEMO / "fashion_cnn_fp32.onnx", tmp_path / "cand.onnx")
    stage = run_layerwise(tmp_path, suite_text("ref.onnx", {"same": "cand.onnx"}, CNN_INPUTS))
    cand = stage["candidates"][0]
    assert stage["status"] == "passed" and cand["first_divergence"] is None
    assert all(r["metrics"]["max_abs"] == 0 for r in cand["rows"])
    assert all(rc["local"]["max_abs"] == 0 for rc in cand["root_causes"])
    assert cand["histograms"] and all(h["counts"] == [] and h["exact"] == h["sampled"] for h in cand["histograms"])


def test_unmatched_tensors_are_listed_and_classified(tmp_path: Path):
    text = suite_text(
        str(DEMO / "fashion_cnn_fp32.onnx"),
        {"fp16": str(DEMO / "fashion_cnn_fp16.onnx"), "int8": str(DEMO / "fashion_cnn_int8_qdq.onnx")},
        CNN_INPUTS,
        "    candidate_checks: {int8: [{metric: cosine, min: 0.99}]}\n",
    )
    stage = run_layerwise(tmp_path, text)
    fp16, int8 = stage["candidates"]
    assert len(fp16["rows"]) == len(int8["rows"]) == 15
    assert fp16["unmatched"]["candidate_only"]["cast"] and not fp16["unmatched"]["candidate_only"]["qdq"]
    assert len(int8["unmatched"]["candidate_only"]["qdq"]) == 12 and not int8["unmatched"]["reference_only"]
    assert {r["candidate_dtype"] for r in fp16["rows"][:-1]} == {"float16"} and fp16["rows"][-1][
        "candidate_dtype"
    ] == "float32"
    # INT8 quantisation error is the nodes' own: every isolated Conv/Gemm shows it
    assert {rc["op_type"] for rc in int8["root_causes"]} <= {"Conv", "Gemm"}


def test_mixed_precision_candidate(tmp_path: Path):
    """FP16 everywhere but the Gemms (kept FP32): exposure must not declare wrong dtypes."""
    to_fp16(DEMO / "fashion_cnn_fp32.onnx", tmp_path / "mixed.onnx", op_block_list=["Gemm"])
    stage = run_layerwise(
        tmp_path, suite_text(str(DEMO / "fashion_cnn_fp32.onnx"), {"mixed": "mixed.onnx"}, CNN_INPUTS)
    )
    cand = stage["candidates"][0]
    rows = {r["op_type"] + str(r["topo_index"]): r["candidate_dtype"] for r in cand["rows"]}
    # the converter runs blocked Gemms in FP32 between casts and gives the original names to the FP16 casts
    assert rows["Conv0"] == "float16" and rows["Gemm12"] == "float16" and rows["Gemm14"] == "float32"
    only = cand["unmatched"]["candidate_only"]
    assert sorted(only["cast"]) == [
        "/classifier/flatten/Flatten_output_0_cast_to_fp32",
        "/classifier/relu/Relu_output_0_cast_to_fp32",
        "graph_input_cast_0",
        "graph_output_cast_0",
    ]
    assert sorted(only["renamed"]) == ["/classifier/fc1/Gemm_output_0_cast_to_fp16", "graph_output_cast_0_cast_to_fp16"]
    assert only["other"] == [] and only["qdq"] == []
    # the Gemm is isolated together with the casts around it
    assert any(rc["op_type"] == "Gemm" for rc in cand["root_causes"]) and not cand["not_isolated"]
    assert stage["status"] == "passed"


def test_chunked_path_equals_one_shot(tmp_path: Path):
    text = suite_text(
        str(DEMO / "fashion_cnn_fp32.onnx"),
        {"int8": str(DEMO / "fashion_cnn_int8_qdq.onnx")},
        CNN_INPUTS,
        "    checks: [{metric: cosine, min: 0.9999}]\n",
    )
    one = run_layerwise(tmp_path / "a" if (tmp_path / "a").mkdir() is None else tmp_path, text)
    # 0.05 MB: every tensor gets a chunk of its own, and the reference goes to disk
    small = text + "    memory_budget_mb: 0.05\n"
    (tmp_path / "b").mkdir()
    chunked = run_layerwise(tmp_path / "b", small)
    assert one["reference"]["store"] == "memory" and one["reference"]["chunks"] == 1
    assert chunked["reference"]["store"] == "disk (memory-mapped)" and chunked["reference"]["chunks"] >= 10
    a, b = one["candidates"][0], chunked["candidates"][0]
    assert b["chunks"] >= 10
    assert a["rows"] == b["rows"]
    assert a["first_divergence"] == b["first_divergence"]
    assert a["root_causes"] == b["root_causes"]


def rename_outputs(src: Path, dst: Path, nodes_too: bool) -> None:
    """Every tensor but logits renamed x_<name> (and every node, with `nodes_too`)."""
    model = onnx.load(str(src))
    rename = {}
    for n in model.graph.node:
        if nodes_too:
            n.name = "x_" + n.name
        for i, o in enumerate(n.output):
            if o != "logits":
                rename[o] = "x_" + o
                n.output[i] = rename[o]
        for i, x in enumerate(n.input):
            n.input[i] = rename.get(x, x)
    model.graph.output[0].name = "logits"
    onnx.save(model, str(dst))


def test_zero_pairs_fails(tmp_path: Path):
    rename_outputs(DEMO / "fashion_cnn_fp32.onnx", tmp_path / "renamed.onnx", nodes_too=True)
    extra = "    ignore: [logits]\n    pair_by_structure: false\n"
    text = suite_text(str(DEMO / "fashion_cnn_fp32.onnx"), {"r": "renamed.onnx"}, CNN_INPUTS, extra)
    stage = run_layerwise(tmp_path, text)
    cand = stage["candidates"][0]
    assert stage["status"] == "failed" and cand["rows"] == []
    assert len(cand["unmatched"]["reference_only"]) == 14 and len(cand["unmatched"]["candidate_only"]["other"]) == 14
    assert next(c for c in stage["checks"] if c["name"] == "r: tensors compared")["passed"] is False
    paired = next(c for c in stage["checks"] if c["name"] == "r: tensors paired")
    assert paired["passed"] is False and paired["value"] == 0 and paired["threshold"] == 7  # half of 14
    assert "pair_by_structure on" in paired["detail"]["reason"]


def test_renamed_tensors_and_nodes_pair_by_structure(tmp_path: Path):
    """Every tensor and node renamed: names pair nothing; structure pairs every tensor with its exact twin."""
    rename_outputs(DEMO / "fashion_cnn_fp32.onnx", tmp_path / "renamed.onnx", nodes_too=True)
    text = suite_text(str(DEMO / "fashion_cnn_fp32.onnx"), {"r": "renamed.onnx"}, CNN_INPUTS)
    stage = run_layerwise(tmp_path, text)
    cand = stage["candidates"][0]
    assert stage["status"] == "passed" and len(cand["rows"]) == 15
    assert cand["paired"] == {
        "reference_tensors": 15, "paired": 15, "with_counterpart": 15, "required": 8, "min_paired": 0.5,
        "by": {"structure": 14, "name": 1}, "passed": True,
    }  # fmt: skip
    structural = [r for r in cand["rows"] if r["tensor"] != "logits"]
    assert all(r["pairing"]["how"] == "structure" and r["candidate_tensor"] == "x_" + r["tensor"] for r in structural)
    assert all(r["metrics"]["max_abs"] == 0 for r in cand["rows"])


def test_renamed_outputs_pair_through_their_node(tmp_path: Path):
    """A converter that renames outputs but keeps node names: each tensor pairs with the same node's output."""
    rename_outputs(DEMO / "fashion_cnn_fp32.onnx", tmp_path / "renamed.onnx", nodes_too=False)
    text = suite_text(str(DEMO / "fashion_cnn_fp32.onnx"), {"r": "renamed.onnx"}, CNN_INPUTS)
    stage = run_layerwise(tmp_path, text)
    cand = stage["candidates"][0]
    assert stage["status"] == "passed" and len(cand["rows"]) == 15
    renamed = [r for r in cand["rows"] if r["tensor"] != "logits"]
    assert all(r["pairing"]["how"] == "renamed_output" and r["candidate_tensor"] == "x_" + r["tensor"] for r in renamed)
    assert all(r["metrics"]["max_abs"] == 0 for r in cand["rows"])
    assert not cand["unmatched"]["reference_only"] and not any(cand["unmatched"]["candidate_only"].values())


def test_demo_suite_layerwise_reports_both_candidates(tmp_path: Path):
    r = run_cli(
        "run", str(ROOT / "suites" / "fashion_mnist.yaml"), "--stage", "layerwise", "--out", str(tmp_path / "o")
    )
    assert r.code == 0, r.out + r.err
    stage = json.loads((tmp_path / "o" / "results.json").read_text())["stages"][0]
    assert [c["name"] for c in stage["candidates"]] == ["fp16", "int8"]
    for c in stage["candidates"]:
        assert len(c["rows"]) == 15 and c["root_causes"] and "lint" in c
        assert [r["topo_index"] for r in c["rows"]] == sorted(r["topo_index"] for r in c["rows"])


def test_confirm_top_suspects_in_isolation_on_the_candidates_backend(tmp_path: Path):
    """The TensorRT path (amplification, then confirm the top suspects with one isolated build),
    exercised with ONNX Runtime as the candidate's backend, since TensorRT cannot execute here."""
    shutil.copy(DEMO / "fashion_cnn_fp32.onnx", tmp_path / "ref.onnx")
    plant(tmp_path / "ref.onnx", tmp_path / "cand.onnx", "/features/block2/conv/Conv")
    to_fp16(tmp_path / "cand.onnx", tmp_path / "cand.onnx")
    extra = "    root_cause_method: amplification\n    confirm_top: 3\n"
    cand = run_layerwise(tmp_path, suite_text("ref.onnx", {"cand": "cand.onnx"}, CNN_INPUTS, extra))["candidates"][0]
    top = cand["root_causes"][:3]
    assert top[0]["node"] == "/features/block2/conv/Conv"
    assert 0.04 < top[0]["confirmed_local"]["rel_l2"] < 0.08  # weights x1.05, bias untouched
    assert all(rc["confirmed_local"]["rel_l2"] < 0.01 for rc in top[1:])
    assert "confirmed_local" not in cand["root_causes"][3]
